"""A run's numbers: per-epoch windows, step anatomy, throughput, scaling, inference."""
