"""The memory a run's ranks may use on each host: the one definition the report and the
findings read ("fits in the host's RAM but not in the run's 1.0 GB memory limit").

Each rank sends ``memory_limit_bytes`` in its ``run_start`` (``contract.procfs``: the
smallest limit its memory cgroup or an ancestor sets; a container's, a pod's, a Slurm
job's). A host's limit is the smallest of its ranks' (ranks of one job or pod usually share
one group; where they do not, the tightest is the one that fails first). A host none of
whose ranks sent one (no limit, or an older recorder) has no entry.
"""

from __future__ import annotations

from collector.analysis.run import RunModel
from collector.store.api import event_number
from contract.schema import Event, Workload


def host_memory_limits(model: RunModel) -> dict[str, int]:
    """``{host: bytes}``: the smallest memory cgroup limit a rank on the host reported."""
    limits: dict[str, int] = {}
    for event in model.epoch_events:
        if event.event != Event.RUN_START:
            continue
        limit = event_number(event, Workload.MEMORY_LIMIT_BYTES)
        if limit is not None and limit > 0:
            limits[event.host] = min(limits.get(event.host, int(limit)), int(limit))
    return limits


def run_memory_limit(model: RunModel) -> int | None:
    """The tightest of the run's hosts' limits (``host_memory_limits``), None where no rank
    sent one: the memory the run's data set and processes must fit in on every host."""
    limits = host_memory_limits(model)
    return min(limits.values()) if limits else None


def usable_memory(host_memory_bytes: float | None, limit_bytes: float | None) -> float | None:
    """What a run may fill with its processes and page cache on a host: the smaller of its
    RAM and the run's own memory limit (whichever is known)."""
    known = [value for value in (host_memory_bytes, limit_bytes) if value]
    return min(known) if known else None
