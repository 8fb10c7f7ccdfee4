"""collector.analysis.memory_limit: a host's limit is the smallest its ranks reported."""

from __future__ import annotations

from collector.analysis.memory_limit import host_memory_limits
from collector.analysis.run import run_model
from collector.store.api import WorkloadEvent
from contract.schema import Event, Workload


def _start(host: str, rank: int, limit: float | None) -> WorkloadEvent:
    fields: dict[str, float | int | str | bool] = {}
    if limit is not None:
        fields[Workload.MEMORY_LIMIT_BYTES] = limit
    return WorkloadEvent("r1", host, rank, "pytorch", Event.RUN_START, 10 + rank, fields)


def test_each_hosts_smallest_rank_limit_and_none_without():
    events = [
        _start("n1", 0, 2.0 * (1 << 30)),
        _start("n1", 1, float(1 << 30)),
        _start("n2", 2, None),  # no limit set: no entry
        _start("n3", 3, 1835008000.0),  # the captured Slurm v2 job's
    ]
    assert host_memory_limits(run_model(events)) == {"n1": 1 << 30, "n3": 1835008000}
