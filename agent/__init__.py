"""epochscope node agent: samples a node and ships the samples."""
