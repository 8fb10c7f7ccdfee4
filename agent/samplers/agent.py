"""The agent's own cost and health: what watching the node costs the node.

Measurement ``agent``, no tags beyond ``host``. Fields (see ``contract.schema.AgentSelf``):

=======================  =======  =======  ==============================================
field                    kind     unit     source
=======================  =======  =======  ==============================================
cpu_seconds              counter  seconds  ``os.times()`` user + system of this process
rss_bytes                gauge    bytes    ``/proc/self/statm`` resident pages x page size
sample_duration_seconds  gauge    seconds  ``AgentStats``: wall time of the last round
spool_bytes              gauge    bytes    ``AgentStats``: bytes waiting in the spool
spool_points             gauge    count    ``AgentStats``: points waiting in the spool
points_dropped           counter  count    ``AgentStats``: points lost to a full spool
spool_error              gauge    1        ``AgentStats``: 1 while the spool cannot be used
memory_points            gauge    count    ``AgentStats``: points held in memory meanwhile
edge_samples             counter  count    ``AgentStats``: edge samples taken (``POST /edge``)
gpus_hung                gauge    count    gpu sampler: GPUs with an NVML call past its timeout
gpus_failing             gauge    count    gpu sampler: GPUs whose last reading met an error
gpus_lost                gauge    count    gpu sampler: GPUs NVML declared lost
gpu_reading_age_seconds  gauge    seconds  gpu sampler: age of the oldest GPU reading
=======================  =======  =======  ==============================================

``cpu_seconds`` stays a float for the same reason as the ``cpu`` measurement: whole
seconds would quantise a small per-second cost to zero. It covers this process only
(threads included, children not). The last seven fields are copied from the
:class:`AgentStats` in the ``stats`` attribute, which the daemon replaces with the one
its shipper updates; until then they read zero. Always available: it reads the live
process, never the ``--proc-root`` tree. The four ``gpu*`` fields are written by the gpu
sampler into the same ``AgentStats`` and reported only on a host where it runs (the age
only once a GPU reading was reported).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from agent.samplers.base import PAGE_BYTES, ProcFile, Roots
from contract.point import Point
from contract.schema import AgentSelf


@dataclass
class AgentStats:
    """What the daemon and shipper know about themselves; copied into every sample."""

    sample_duration_seconds: float = 0.0
    spool_bytes: int = 0
    spool_points: int = 0
    points_dropped: int = 0
    spool_error: int = 0
    memory_points: int = 0
    edge_samples: int = 0  # counted by the daemon, this sample's own included
    # Set by the gpu sampler; None (not reported) on a host where it does not run.
    gpus_hung: int | None = None
    gpus_failing: int | None = None
    gpus_lost: int | None = None
    gpu_reading_age_seconds: float | None = None
    # Set by the OTLP export (agent.otlp); None where it is off.
    otlp_points_dropped: int | None = None


class AgentSampler:
    name = AgentSelf.NAME

    def __init__(self, roots: Roots, stats: AgentStats | None = None) -> None:
        self.stats = stats if stats is not None else AgentStats()

    def available(self) -> bool:
        return True

    def sample(self, now_ns: int) -> list[Point]:
        times = os.times()
        stats = self.stats
        fields: dict[str, int | float] = {
            AgentSelf.CPU_SECONDS: times.user + times.system,
            AgentSelf.RSS_BYTES: float(own_rss_bytes()),
            AgentSelf.SAMPLE_DURATION_SECONDS: float(stats.sample_duration_seconds),
            AgentSelf.SPOOL_BYTES: float(stats.spool_bytes),
            AgentSelf.SPOOL_POINTS: float(stats.spool_points),
            AgentSelf.POINTS_DROPPED: int(stats.points_dropped),
            AgentSelf.SPOOL_ERROR: float(stats.spool_error),
            AgentSelf.MEMORY_POINTS: float(stats.memory_points),
            AgentSelf.EDGE_SAMPLES: int(stats.edge_samples),
        }
        if stats.gpus_hung is not None:
            fields[AgentSelf.GPUS_HUNG] = float(stats.gpus_hung)
            fields[AgentSelf.GPUS_FAILING] = float(stats.gpus_failing or 0)
            fields[AgentSelf.GPUS_LOST] = float(stats.gpus_lost or 0)
        if stats.gpu_reading_age_seconds is not None:
            fields[AgentSelf.GPU_READING_AGE_SECONDS] = stats.gpu_reading_age_seconds
        if stats.otlp_points_dropped is not None:
            fields[AgentSelf.OTLP_POINTS_DROPPED] = int(stats.otlp_points_dropped)
        return [Point(AgentSelf.NAME, {}, fields, now_ns)]


_STATM = ProcFile(Path("/proc/self/statm"))  # kept open, re-read with pread each tick


def own_rss_bytes() -> int:
    """This process's resident set, as psutil computes it on Linux, without importing psutil
    (the agent's memory is a target: importing psutil here would cost about 1 MB)."""
    text = _STATM.read()
    if text is None:
        raise OSError("/proc/self/statm is not readable")
    return int(text.split()[1]) * PAGE_BYTES


SAMPLER = AgentSampler
