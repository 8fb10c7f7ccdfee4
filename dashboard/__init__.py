"""epochscope dashboard: a Dash app over the collector's query layer."""
