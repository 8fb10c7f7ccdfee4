"""Where a rank sits in its run and what it may use: its place, its CPU threads, its
steps per epoch."""

from __future__ import annotations

import os
from dataclasses import dataclass

from workloads.record.spec import RunSpec


@dataclass(frozen=True)
class Placement:
    """Where this process sits in the run."""

    rank: int
    world_size: int
    local_rank: int
    local_size: int

    @property
    def is_chief(self) -> bool:
        return self.rank == 0


def host_memory_bytes() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def cpu_threads_per_rank(local_size: int) -> int:
    cpus = len(os.sched_getaffinity(0))
    return max(1, cpus // max(1, local_size))


def steps_per_epoch(spec: RunSpec, world_size: int) -> int:
    if spec.steps_per_epoch:
        return spec.steps_per_epoch
    if spec.dataset is None:
        return 100  # tf_cnn_benchmarks' default num_batches
    images = spec.dataset["train"]["images"]
    return max(1, images // (spec.batch_size * world_size))
