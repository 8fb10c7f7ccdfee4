"""The decode ceiling: the most pictures a run's input pipeline could decode per second on
a host, the node's measured JPEG decode rate per core (``agent ceilings``) times the cores
the run's ranks there may use.

A host's *cores* are the union of its ranks' allowed CPUs (``sched_getaffinity``, each
rank's ``run_start``), capped by their cgroup CPU quota when every rank sent one (the
ranks of one job share its cgroup: the largest quota is the job's). The same definition
serves the ``cpu_oversubscription`` finding (``collector.findings.contention``).

The per-epoch column ``decode_ceiling_percent`` is the epoch's images/s over that ceiling,
for runs whose data set is JPEG files (``data_format`` ``jpeg``): every trained picture
was decoded once. Records (TFRecord, RecordIO) hold JPEGs too, but their readers decode
in the framework's threads with other costs; synthetic data decodes nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from collector.analysis.run import RunModel
from contract.cpulist import parse_cpu_list
from contract.schema import Event, Workload

JPEG = "jpeg"
DECODE_CORES = "decode_cores"  # the amount key of the cores a host's ranks may use
DECODE_PER_CORE = "jpeg_decode_ceiling"  # the amount key of the measured rate per core
DECODE_CEILING = "decode_ceiling"  # per_core x cores: pictures/s (additive over hosts)


def host_cores(
    cpus_allowed: Sequence[str | None], quotas: Sequence[float | None]
) -> tuple[float, str] | None:
    """The cores a host's ranks may use (their ``cpus_allowed`` lists and cgroup quota
    CPUs, one of each per rank) and where that count came from; None when a rank did not
    say which CPUs it may use."""
    if not cpus_allowed or any(c is None for c in cpus_allowed):
        return None
    allowed: set[int] = set()
    for cpus in cpus_allowed:
        allowed |= parse_cpu_list(cpus or "")
    lists = ",".join(sorted({c or "" for c in cpus_allowed}))
    cores, source = float(len(allowed)), f"CPUs {lists} allowed (sched_getaffinity)"
    if quotas and all(q is not None for q in quotas):
        quota = max(q for q in quotas if q is not None)
        if quota < cores:
            cores, source = quota, f"a cgroup CPU quota of {quota:g} CPUs"
    return cores, source


def run_host_cores(model: RunModel) -> dict[str, tuple[float, str]]:
    """Each host's cores (``host_cores``) from its ranks' ``run_start`` events."""
    allowed: dict[str, list[str | None]] = defaultdict(list)
    quotas: dict[str, list[float | None]] = defaultdict(list)
    for event in model.epoch_events:
        if event.event != Event.RUN_START:
            continue
        cpus = event.fields.get(Workload.CPUS_ALLOWED)
        quota = event.fields.get(Workload.CPU_QUOTA_CPUS)
        allowed[event.host].append(cpus if isinstance(cpus, str) and cpus else None)
        number = quota if isinstance(quota, int | float) and not isinstance(quota, bool) else None
        quotas[event.host].append(None if number is None else float(number))
    out = {}
    for host in allowed:
        found = host_cores(allowed[host], quotas[host])
        if found is not None:
            out[host] = found
    return out


def decodes_jpeg(model: RunModel) -> bool:
    """The run trained on JPEG files (its configuration's ``data_format``)."""
    config = model.run.config if model.run is not None else {}
    return str(config.get(Workload.DATA_FORMAT, "")).lower() == JPEG


def epoch_decode_cores(
    model: RunModel, epochs: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], dict[str, float]]:
    """``{(host, epoch): {DECODE_CORES: cores}}`` for the (host, epoch) pairs given, for a
    JPEG run whose host's ranks said which CPUs they may use; empty otherwise."""
    if not decodes_jpeg(model):
        return {}
    cores = run_host_cores(model)
    return {
        (host, epoch): {DECODE_CORES: cores[host][0]} for host, epoch in epochs if host in cores
    }
