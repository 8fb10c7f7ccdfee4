"""epochscope collector: ingest, store, per-epoch views, scaling and findings."""
