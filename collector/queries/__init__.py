"""What the dashboard and the read API ask of a store: runs, per-epoch tables, time series
bucketed for a chart, findings, scaling, as plain JSON-ready values (``query``), the
finished runs kept computed (``run_cache``), the down-sampling (``timeseries``) and the
dashboard's questions as the read API answers them (``questions``). Rendering for people
(tables, CSV, JSON files) is ``collector.views``."""
