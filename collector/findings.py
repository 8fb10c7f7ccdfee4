"""Findings: a small rule engine that reads a run's per-epoch view and says what it shows.

Each rule is a function ``rule(context) -> list[Finding]`` over a ``RunContext`` (the run,
its events, its per-epoch report, and the store for rules that compare runs). The rules
encode what the published studies found by hand:

``cache_warmup``
    Storage reads (disk plus NFS server) are high in epoch 1 and fall to at most
    ``SETTLED_READ_FRACTION`` of that afterwards: later epochs are served from the page
    cache. Warning when the data set is smaller than ``MLPERF_STORAGE_RAM_MULTIPLE`` x RAM,
    since those later epochs then measure memory, not storage.
``dataset_fits_in_memory``
    From the run's configuration alone: a data set below 5 x a host's RAM cannot measure
    storage past the first epoch (MLPerf Storage's rule); warning when it fits outright.
``fabric_carries_storage``
    Receive minus send on the fabric (InfiniBand, else the NICs) is within
    ``FABRIC_MATCH_TOLERANCE`` of the NFS read rate: gradients are sent and received in equal
    amounts, so the surplus received is the data set crossing the same fabric.
``storage_bound``
    Epochs with high iowait, unstable step throughput (coefficient of variation of the
    steps' images/s) and high storage reads at once: training waits on storage
    (the Caffe2 behaviour while uncached).
``input_bound``
    CPU saturated while the GPUs are mostly idle: the input pipeline (decoding,
    augmentation) cannot feed the GPUs.
``scaling_loss``
    Scaling efficiency below ``SCALING_EFFICIENCY_FLOOR`` against the group's 1-GPU
    baseline, with the resources that changed against a run on fewer nodes: fabric bytes
    per image, storage reads per node, CPU and GPU utilisation.
``precision_read_demand``
    The run reads storage in its first epoch at least ``PRECISION_READ_RATIO`` times as
    fast as the same training (framework, model, data format, GPUs, nodes) at another
    precision: FP16 needs faster storage than FP32 (study 003: 1.5 to 2x).

Every finding carries ``evidence``, the numbers behind it, and ``chart``, the report column
(and dashboard chart) that shows it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from agent.schema import Event, RunState, Workload
from collector.columns import BY_NAME
from collector.epochs import (
    ALL_HOSTS,
    BYTES_PER_MB,
    EPOCH_KINDS,
    EpochAmounts,
    EpochReport,
    EpochRow,
    assign_epochs,
    build_report,
    run_events,
)
from collector.scaling import GroupKey, RunFacts, format_efficiency, run_facts, scaling_groups
from collector.store_api import ReadStore, RunInfo, StepTable, WorkloadEvent

INFO, WARNING, CRITICAL = "info", "warning", "critical"
SEVERITY_ORDER = {CRITICAL: 0, WARNING: 1, INFO: 2}

# cache warm-up
# judged against the data set's size when the run reports it: epoch 1 read at least a quarter of
# the data set from storage, later epochs at most a tenth of it
FIRST_EPOCH_DATASET_SHARE = 0.25
SETTLED_READ_FRACTION = 0.10
# without the data set's size: epoch 1 read at least this much, later epochs a tenth of it
MIN_FIRST_EPOCH_READ_BYTES = 100 * BYTES_PER_MB
MLPERF_STORAGE_RAM_MULTIPLE = 5  # data set >= 5 x RAM to measure storage
# fabric carries storage
FABRIC_MATCH_TOLERANCE = 0.10
MIN_NETWORK_STORAGE_MBPS = 5.0
# storage bound
IOWAIT_HIGH_PERCENT = 5.0
STEP_CV_UNSTABLE = 0.20
MIN_STEPS_FOR_CV = 4
STORAGE_HIGH_SHARE_OF_PEAK = 0.25
MIN_STORAGE_MBPS = 5.0
# input bound
CPU_SATURATED_PERCENT = 85.0
GPU_LOW_PERCENT = 70.0
# scaling loss
SCALING_EFFICIENCY_FLOOR = 90
SCALING_EFFICIENCY_CRITICAL = 75
RESOURCE_CHANGE_RATIO = 1.25  # a per-image or per-node resource changed by 25% or more
# precision read demand
PRECISION_READ_RATIO = 1.25  # study 003: FP16 read 550 MB/s where FP32 read 430 (1.28x)
UTILISATION_CHANGE_POINTS = 10.0

GB = 1e9


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str  # info | warning | critical
    title: str
    explanation: str
    evidence: dict[str, Any] = field(default_factory=dict)
    chart: str = ""  # the report column (collector.columns) that shows it, or ""

    def __post_init__(self) -> None:
        if self.chart and self.chart not in BY_NAME:
            raise ValueError(f"finding {self.rule}: chart {self.chart!r} is no report column")
        if self.severity not in SEVERITY_ORDER:
            raise ValueError(f"finding {self.rule}: unknown severity {self.severity!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunContext:
    """What the rules read. ``report`` is built once and shared by every rule."""

    store: ReadStore
    run: RunInfo
    events: list[WorkloadEvent]  # run and epoch events (steps are read on demand)
    report: EpochReport
    # another run's report, for the rules that compare runs: the caller's kept ones
    # (collector.query) or, by default, built here
    reports: Callable[[str], EpochReport] | None = None

    @property
    def config(self) -> dict[str, Any]:
        return self.run.config

    def report_of(self, run_id: str) -> EpochReport:
        """The per-epoch report of ``run_id`` (this run's own, or a compared run's)."""
        if run_id == self.run.run_id:
            return self.report
        if self.reports is not None:
            return self.reports(run_id)
        return build_report(self.store, run_id)

    def steps(self, since_ns: int | None = None) -> StepTable:
        """The run's steps (after ``since_ns``); ``step_epochs`` finds their epochs from
        ``events``."""
        return self.store.steps(self.run.run_id, since_ns)

    def totals(self) -> list[EpochRow]:
        """``*`` rows of complete epochs, in epoch order."""
        complete = self._complete_epochs()
        return [r for r in self.report.total_rows() if r.epoch in complete]

    def hosts_rows(self) -> list[tuple[EpochRow, EpochAmounts]]:
        complete = self._complete_epochs()
        return [
            (row, amounts)
            for row, amounts in zip(self.report.rows, self.report.amounts, strict=True)
            if row.host != ALL_HOSTS and row.epoch in complete
        ]

    def _complete_epochs(self) -> set[int]:
        incomplete = {w.epoch for w in self.report.windows if not w.complete}
        return {w.epoch for w in self.report.windows} - incomplete


def _gb(value: float | None) -> str:
    """Bytes as GB, or as MB below 1 GB (a small data set is not "0.0 GB")."""
    if value is None:
        return "n/a"
    if abs(value) < GB:
        return f"{value / 1e6:,.1f} MB"
    return f"{value / GB:,.1f} GB"


def _config_number(config: dict[str, Any], name: str) -> float | None:
    value = config.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value > 0 else None


# --------------------------------------------------------------------------------------
# cache warm-up and data set size
# --------------------------------------------------------------------------------------


def _memory_fit(config: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    dataset = _config_number(config, Workload.DATASET_BYTES)
    memory = _config_number(config, Workload.HOST_MEMORY_BYTES)
    ratio = dataset / memory if dataset and memory else None
    return dataset, memory, ratio


def cache_warmup(context: RunContext) -> list[Finding]:
    totals = [r for r in context.totals() if r.storage_read_bytes is not None]
    if len(totals) < 2:
        return []
    first, later = totals[0], totals[1:]
    first_bytes = first.storage_read_bytes or 0
    dataset, memory, ratio = _memory_fit(context.config)
    if dataset:
        if first_bytes <= 0 or first_bytes < FIRST_EPOCH_DATASET_SHARE * dataset:
            return []
        settled_limit = SETTLED_READ_FRACTION * min(dataset, first_bytes)
    else:
        if first_bytes < MIN_FIRST_EPOCH_READ_BYTES:
            return []
        settled_limit = SETTLED_READ_FRACTION * first_bytes
    settled = later[len(later) // 2 :]  # the second half of the later epochs
    settled_mean = float(np.mean([r.storage_read_bytes for r in settled]))
    if settled_mean > settled_limit:
        return []
    settled_epoch = next(r.epoch for r in later if r.storage_read_bytes <= settled_limit)
    hosts = max(1, len(context.run.hosts))
    cache_growth = first.page_cache_delta_bytes
    measures_memory = ratio is not None and ratio < MLPERF_STORAGE_RAM_MULTIPLE
    evidence = {
        "first_epoch": first.epoch,
        "first_epoch_storage_read_bytes": first_bytes,
        "first_epoch_storage_read_mbps": first.storage_read_mbps,
        "settled_from_epoch": settled_epoch,
        "settled_storage_read_bytes_mean": round(settled_mean),
        "settled_to_first_ratio": round(settled_mean / first_bytes, 4),
        "first_epoch_read_to_dataset_ratio": round(first_bytes / dataset, 3) if dataset else None,
        "storage_read_bytes_by_epoch": {r.epoch: r.storage_read_bytes for r in totals[:10]},
        "first_epoch_page_cache_growth_bytes_per_host": (
            round(cache_growth / hosts) if cache_growth is not None else None
        ),
        "page_cache_growth_to_dataset_ratio": (
            round(cache_growth / hosts / dataset, 3)
            if cache_growth is not None and dataset
            else None
        ),
        "dataset_bytes": dataset,
        "host_memory_bytes": memory,
        "dataset_to_memory_ratio": round(ratio, 3) if ratio is not None else None,
    }
    of_what = f"of the data set ({_gb(dataset)})" if dataset else "of that"
    explanation = (
        f"Epoch {first.epoch} read {_gb(first_bytes)} from storage (disk and NFS server) at "
        f"{first.storage_read_mbps:,.1f} MB/s; by epoch {settled_epoch} reads had fallen "
        f"below {SETTLED_READ_FRACTION:.0%} {of_what}, and the last epochs read "
        f"{_gb(settled_mean)} on average. The data set is being served from the page cache "
        "after the first pass."
    )
    if cache_growth is not None and cache_growth > 0:
        explanation += (
            f" The page cache grew by {_gb(cache_growth / hosts)} per host during epoch "
            f"{first.epoch}" + (f" (data set: {_gb(dataset)})." if dataset else ".")
        )
    if measures_memory:
        explanation += (
            f" With a {_gb(dataset)} data set and {_gb(memory)} of RAM per host, the epochs "
            "after the first measure memory, not storage: to measure storage the data set "
            f"must be at least {MLPERF_STORAGE_RAM_MULTIPLE}x RAM (MLPerf Storage), or the "
            "caches must be dropped before every epoch."
        )
    return [
        Finding(
            rule="cache_warmup",
            severity=WARNING if measures_memory else INFO,
            title=f"Storage reads stop after epoch {first.epoch}: later epochs run from cache",
            explanation=explanation,
            evidence=evidence,
            chart="disk_read_mbps",
        )
    ]


def dataset_fits_in_memory(context: RunContext) -> list[Finding]:
    dataset, memory, ratio = _memory_fit(context.config)
    if ratio is None or ratio >= MLPERF_STORAGE_RAM_MULTIPLE:
        return []
    fits = ratio <= 1.0
    title = (
        "The data set fits in a host's RAM"
        if fits
        else f"The data set is less than {MLPERF_STORAGE_RAM_MULTIPLE}x a host's RAM"
    )
    explanation = (
        f"The data set is {_gb(dataset)} and each host has {_gb(memory)} of RAM "
        f"({ratio:.2g}x). "
        + (
            "After the first epoch the page cache can hold all of it, so throughput measures "
            "memory, not storage. "
            if fits
            else "A large part of it stays in the page cache between epochs. "
        )
        + f"MLPerf Storage requires a data set of at least {MLPERF_STORAGE_RAM_MULTIPLE}x "
        "RAM to measure storage."
    )
    return [
        Finding(
            rule="dataset_fits_in_memory",
            severity=WARNING if fits else INFO,
            title=title,
            explanation=explanation,
            evidence={
                "dataset_bytes": dataset,
                "host_memory_bytes": memory,
                "dataset_to_memory_ratio": round(ratio, 3),
                "required_ratio": MLPERF_STORAGE_RAM_MULTIPLE,
            },
            chart="page_cache_delta_bytes",
        )
    ]


# --------------------------------------------------------------------------------------
# fabric carries storage
# --------------------------------------------------------------------------------------


def fabric_carries_storage(context: RunContext) -> list[Finding]:
    matches, compared = [], 0
    for row, amounts in context.hosts_rows():
        storage = row.nfs_server_read_mbps
        surplus = row.rx_minus_tx_mbps
        if storage is None or surplus is None or storage < MIN_NETWORK_STORAGE_MBPS:
            continue
        compared += 1
        difference = abs(surplus - storage) / storage
        if difference <= FABRIC_MATCH_TOLERANCE:
            matches.append((row, amounts, difference))
    if not matches:
        return []
    row, amounts, difference = max(matches, key=lambda m: m[0].nfs_server_read_mbps)
    fabric = "InfiniBand" if amounts.fabric == "ib" else "the NICs"
    rcv, xmit = (
        (row.ib_rcv_mbps, row.ib_xmit_mbps)
        if amounts.fabric == "ib"
        else (_mbps(row.net_rx_bytes, row.seconds), _mbps(row.net_tx_bytes, row.seconds))
    )
    return [
        Finding(
            rule="fabric_carries_storage",
            severity=INFO,
            title="The fabric carries the storage reads: receive minus send = storage read rate",
            explanation=(
                f"On {row.host} in epoch {row.epoch}, {fabric} received {rcv:,.0f} MB/s and "
                f"sent {xmit:,.0f} MB/s. The {row.rx_minus_tx_mbps:,.0f} MB/s surplus matches "
                f"the NFS read rate of {row.nfs_server_read_mbps:,.0f} MB/s within "
                f"{difference:.0%}. Gradients are sent and received in equal amounts, so the "
                "surplus is the data set: storage traffic shares the fabric with the "
                f"all-reduce ({len(matches)} of {compared} host-epochs with NFS reads match)."
            ),
            evidence={
                "host": row.host,
                "epoch": row.epoch,
                "fabric": amounts.fabric,
                "rcv_mbps": rcv,
                "xmit_mbps": xmit,
                "rx_minus_tx_mbps": row.rx_minus_tx_mbps,
                "nfs_server_read_mbps": row.nfs_server_read_mbps,
                "relative_difference": round(difference, 4),
                "matching_host_epochs": len(matches),
                "compared_host_epochs": compared,
            },
            chart="rx_minus_tx_mbps",
        )
    ]


def _mbps(value: int | None, seconds: float) -> float | None:
    if value is None or not seconds:
        return None
    return round(value / seconds / BYTES_PER_MB, 3)


# --------------------------------------------------------------------------------------
# storage bound and input bound
# --------------------------------------------------------------------------------------


def step_epochs(steps: StepTable, events: list[WorkloadEvent]) -> np.ndarray:
    """Each step's epoch (float64, NaN for none), as ``collector.epochs.assign_epochs``
    gives it: its own ``epoch`` field, else the epoch of its (host, rank)'s latest
    ``epoch_start`` at or before it (``events``: the run's epoch events)."""
    epochs = np.trunc(steps.epoch)  # assign_epochs takes int(epoch)
    missing = np.flatnonzero(np.isnan(epochs))
    if not missing.size:
        return epochs
    starts: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for event, epoch in assign_epochs(events):
        if event.event == Event.EPOCH_START:
            starts[(event.host, event.rank)].append((event.time_ns, epoch))
    hosts = steps.host_names()
    for key, marks in starts.items():
        marks.sort(key=lambda mark: mark[0])  # stable: of two at one time, the later wins
        rows = missing[(hosts[missing] == key[0]) & (steps.rank[missing] == key[1])]
        times = np.array([time_ns for time_ns, _ in marks], dtype=np.int64)
        numbers = np.array([float(epoch) for _, epoch in marks] + [math.nan])
        latest = np.searchsorted(times, steps.time_ns[rows], side="right") - 1
        epochs[rows] = numbers[latest]  # -1 (none yet) picks the NaN at the end
    return epochs


def step_rates(
    steps: StepTable, events: list[WorkloadEvent], warmup_steps: int
) -> dict[tuple[str, int], list[float]]:
    """Images/s of every step after each rank's warm-up, per (host, epoch): the steps that
    find an epoch (``step_epochs``) count towards their rank's warm-up; those with a
    numeric ``images`` and a positive ``seconds`` give a rate. Rates are in step order."""
    epochs = step_epochs(steps, events)
    rows = np.flatnonzero(~np.isnan(epochs))
    if not rows.size:
        return {}
    # each step's place among its (host, rank)'s steps with an epoch, from 0
    order, starts = _stable_groups(steps.host_index[rows], steps.rank[rows])
    place = np.empty(rows.size, dtype=np.int64)
    place[order] = np.arange(rows.size) - np.repeat(starts, np.diff(starts, append=rows.size))
    rows = rows[place >= warmup_steps]
    with np.errstate(invalid="ignore"):
        rows = rows[~np.isnan(steps.images[rows]) & (steps.seconds[rows] > 0)]
    if not rows.size:
        return {}
    with np.errstate(over="ignore"):  # (a step of 1e-300 s: inf, as Python's division gives)
        rates = steps.images[rows] / steps.seconds[rows]
    order, starts = _stable_groups(steps.host_index[rows], epochs[rows])
    return {
        (steps.hosts[steps.host_index[rows[first]]], int(epochs[rows[first]])): group.tolist()
        for first, group in zip(order[starts], np.split(rates[order], starts[1:]), strict=True)
    }


def _stable_groups(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows grouped by equal keys: the order that puts each group's rows together (keeping
    their order within it), and where each group starts in that order."""
    group = np.zeros(keys[0].size, dtype=np.int64)
    for key in keys:  # a number per distinct combination (at most rows**2 of them)
        values, code = np.unique(key, return_inverse=True)
        group = group * values.size + code
    order = np.argsort(group, kind="stable")
    starts = np.flatnonzero(np.diff(group[order], prepend=-1))
    return order, starts


def coefficient_of_variation(values: list[float]) -> float | None:
    if len(values) < MIN_STEPS_FOR_CV:
        return None
    array = np.asarray(values, dtype=float)
    mean = array.mean()
    return float(array.std() / mean) if mean > 0 else None


def storage_bound(context: RunContext) -> list[Finding]:
    rows = [row for row, _ in context.hosts_rows()]
    storage = [r.storage_read_mbps for r in rows if r.storage_read_mbps is not None]
    if not storage:
        return []
    peak = max(storage)

    def reading(row: EpochRow) -> bool:
        return (
            row.storage_read_mbps is not None
            and row.storage_read_mbps >= MIN_STORAGE_MBPS
            and row.storage_read_mbps >= STORAGE_HIGH_SHARE_OF_PEAK * peak
        )

    candidates = [
        row
        for row in rows
        if reading(row)
        and row.iowait_percent is not None
        and row.iowait_percent >= IOWAIT_HIGH_PERCENT
    ]
    if not candidates:  # no step event is read for a run that never waited on storage
        return []
    candidate_keys = {(row.host, row.epoch) for row in candidates}
    warmup = int(_config_number(context.config, Workload.WARMUP_STEPS) or 0)
    rates = step_rates(context.steps(), context.events, warmup)
    bound, calm = [], []
    for row in rows:
        cv = coefficient_of_variation(rates.get((row.host, row.epoch), []))
        if cv is None:
            continue
        if (row.host, row.epoch) in candidate_keys and cv >= STEP_CV_UNSTABLE:
            bound.append((row, cv))
        elif not reading(row):
            calm.append(cv)
    if not bound:
        return []
    epochs = sorted({row.epoch for row, _ in bound})
    worst_row, worst_cv = max(bound, key=lambda b: b[1])
    calm_cv = float(np.mean(calm)) if calm else None
    explanation = (
        f"In epoch{'s' if len(epochs) > 1 else ''} {_epoch_list(epochs)}, step throughput "
        f"was unstable (coefficient of variation up to {worst_cv:.2f} on {worst_row.host}) "
        f"while CPUs waited on I/O ({worst_row.iowait_percent:.0f}% iowait) and storage was "
        f"read at {worst_row.storage_read_mbps:,.0f} MB/s: training waited on storage."
    )
    if calm_cv is not None:
        explanation += (
            f" In epochs without storage reads the variation was {calm_cv:.2f}: once the "
            "data is cached, throughput is steady."
        )
    return [
        Finding(
            rule="storage_bound",
            severity=WARNING,
            title=f"Storage-bound epoch{'s' if len(epochs) > 1 else ''} {_epoch_list(epochs)}",
            explanation=explanation,
            evidence={
                "epochs": epochs,
                "host_epochs": [
                    {
                        "host": row.host,
                        "epoch": row.epoch,
                        "iowait_percent": row.iowait_percent,
                        "step_images_per_second_cv": round(cv, 4),
                        "storage_read_mbps": row.storage_read_mbps,
                    }
                    for row, cv in bound[:20]
                ],
                "cv_without_storage_reads": round(calm_cv, 4) if calm_cv is not None else None,
                "thresholds": {
                    "iowait_percent": IOWAIT_HIGH_PERCENT,
                    "step_cv": STEP_CV_UNSTABLE,
                    "storage_share_of_peak": STORAGE_HIGH_SHARE_OF_PEAK,
                },
            },
            chart="images_per_second",
        )
    ]


def _epoch_list(epochs: list[int]) -> str:
    if len(epochs) > 6:
        return f"{', '.join(map(str, epochs[:5]))}, ... {epochs[-1]}"
    return ", ".join(map(str, epochs))


def input_bound(context: RunContext) -> list[Finding]:
    hits = [
        row
        for row, _ in context.hosts_rows()
        if row.cpu_util_percent is not None
        and row.gpu_util_percent is not None
        and row.cpu_util_percent >= CPU_SATURATED_PERCENT
        and row.gpu_util_percent <= GPU_LOW_PERCENT
    ]
    if not hits:
        return []
    epochs = sorted({row.epoch for row in hits})
    hosts = sorted({row.host for row in hits})
    cpu = float(np.mean([row.cpu_util_percent for row in hits]))
    gpu = float(np.mean([row.gpu_util_percent for row in hits]))
    return [
        Finding(
            rule="input_bound",
            severity=WARNING,
            title="Input-bound: CPUs saturated while GPUs wait",
            explanation=(
                f"On {', '.join(hosts)} in epoch{'s' if len(epochs) > 1 else ''} "
                f"{_epoch_list(epochs)}, CPUs were {cpu:.0f}% busy while GPUs ran kernels "
                f"{gpu:.0f}% of the time. The input pipeline (JPEG decoding, augmentation) "
                "cannot feed the GPUs: more decoding threads, a faster CPU, GPU decoding or "
                "pre-processed records would raise throughput."
            ),
            evidence={
                "hosts": hosts,
                "epochs": epochs,
                "cpu_util_percent_mean": round(cpu, 2),
                "gpu_util_percent_mean": round(gpu, 2),
                "host_epochs": [
                    {
                        "host": r.host,
                        "epoch": r.epoch,
                        "cpu_util_percent": r.cpu_util_percent,
                        "gpu_util_percent": r.gpu_util_percent,
                    }
                    for r in hits[:20]
                ],
                "thresholds": {
                    "cpu_util_percent": CPU_SATURATED_PERCENT,
                    "gpu_util_percent": GPU_LOW_PERCENT,
                },
            },
            chart="cpu_util_percent",
        )
    ]


# --------------------------------------------------------------------------------------
# scaling loss
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResourceUse:
    """Per-run resource figures compared across node counts."""

    fabric_bytes_per_image: float | None
    storage_read_mbps_per_node: float | None
    cpu_util_percent: float | None
    gpu_util_percent: float | None


def resource_use(report: EpochReport, nodes: int) -> ResourceUse:
    complete = {w.epoch for w in report.windows} - {
        w.epoch for w in report.windows if not w.complete
    }
    fabric_bytes = images = 0.0
    fabric_seen = False
    for row, amounts in zip(report.rows, report.amounts, strict=True):
        if row.host == ALL_HOSTS or row.epoch not in complete:
            continue
        images += amounts.images
        if amounts.fabric:
            rx, tx = ("ib_rcv", "ib_xmit") if amounts.fabric == "ib" else ("net_rx", "net_tx")
            moved = amounts.values.get(rx, math.nan) + amounts.values.get(tx, math.nan)
            if not math.isnan(moved):
                fabric_bytes += moved
                fabric_seen = True
    totals = [r for r in report.total_rows() if r.epoch in complete]
    seconds = sum(r.seconds for r in totals)
    storage = [r.storage_read_bytes for r in totals if r.storage_read_bytes is not None]

    def weighted(column: str) -> float | None:
        pairs = [(getattr(r, column), r.seconds) for r in totals if getattr(r, column) is not None]
        weight = sum(s for _, s in pairs)
        return round(sum(v * s for v, s in pairs) / weight, 2) if weight else None

    return ResourceUse(
        fabric_bytes_per_image=round(fabric_bytes / images, 1) if fabric_seen and images else None,
        storage_read_mbps_per_node=round(sum(storage) / seconds / BYTES_PER_MB / nodes, 3)
        if storage and seconds and nodes
        else None,
        cpu_util_percent=weighted("cpu_util_percent"),
        gpu_util_percent=weighted("gpu_util_percent"),
    )


def _changes(reference: ResourceUse, current: ResourceUse) -> list[dict[str, Any]]:
    """The resources whose use *grew* from the reference run to this one: only those can
    explain a loss of throughput (one that fell, e.g. storage reads per node once more nodes
    cache the data set, is not a cause)."""
    changes = []
    for name in ("fabric_bytes_per_image", "storage_read_mbps_per_node"):
        before, after = getattr(reference, name), getattr(current, name)
        if before is None or after is None:
            continue
        if before == 0:
            grew = after > 0
            ratio = None
        else:
            ratio = after / before
            grew = ratio >= RESOURCE_CHANGE_RATIO
        if grew:
            changes.append(
                {
                    "resource": name,
                    "reference": before,
                    "run": after,
                    "ratio": round(ratio, 2) if ratio else None,
                }
            )
    for name in ("cpu_util_percent", "gpu_util_percent"):
        before, after = getattr(reference, name), getattr(current, name)
        if before is None or after is None:
            continue
        if after - before >= UTILISATION_CHANGE_POINTS:
            changes.append(
                {
                    "resource": name,
                    "reference": before,
                    "run": after,
                    "change_points": round(after - before, 2),
                }
            )
    return changes


RESOURCE_LABELS = {
    "fabric_bytes_per_image": "network bytes per image",
    "storage_read_mbps_per_node": "storage reads per node (MB/s)",
    "cpu_util_percent": "CPU utilisation (%)",
    "gpu_util_percent": "GPU utilisation (%)",
}


def _nodes(count: int | None) -> str:
    return f"{count} node{'s' if count != 1 else ''}"


def _ranks(count: int, on_gpus: bool) -> str:
    """``4 GPUs`` for a run whose hosts showed GPUs, else ``4 ranks`` (CPU processes)."""
    noun = "GPU" if on_gpus else "rank"
    return f"{count} {noun}{'s' if count != 1 else ''}"


def _describe(change: dict[str, Any]) -> str:
    label = RESOURCE_LABELS[change["resource"]]
    if change.get("ratio"):
        how = f"{change['ratio']:.2f}x"
    elif "change_points" in change:
        how = f"{change['change_points']:+.0f} points"
    else:
        how = "from zero"
    return f"{label}: {change['reference']:,.0f} -> {change['run']:,.0f} ({how})"


def scaling_loss(context: RunContext) -> list[Finding]:
    key = GroupKey.of(context.run)
    group_runs = [
        r for r in context.store.runs() if r.state != RunState.FAILED and GroupKey.of(r) == key
    ]
    if context.run.run_id not in {r.run_id for r in group_runs}:
        group_runs.append(context.run)
    facts = {r.run_id: run_facts(context.store, r) for r in group_runs}
    table = scaling_groups(context.store, list(facts.values())).get(key, [])
    me = next((m for m in table if m.run_id == context.run.run_id), None)
    if me is None or me.row.efficiency_percent is None or me.row.gpus <= 1:
        return []
    if me.row.efficiency_percent >= SCALING_EFFICIENCY_FLOOR:
        return []
    mine = facts[context.run.run_id]
    reference = _reference_run(mine, list(facts.values()))
    mine_use = resource_use(context.report, mine.nodes)
    on_gpus = mine_use.gpu_util_percent is not None
    efficiency = format_efficiency(me.row.efficiency_percent)
    evidence: dict[str, Any] = {
        "gpus": me.row.gpus,
        "nodes": me.row.nodes,
        "images_per_second": me.row.images_per_second,
        "ideal": me.row.ideal,
        "efficiency_percent": me.row.efficiency_percent,
        "scope": me.row.scope,
    }
    explanation = (
        f"{_ranks(me.row.gpus, on_gpus)} on {_nodes(me.row.nodes)} reached "
        f"{me.row.images_per_second:,.0f} images/s of an ideal {me.row.ideal:,.0f} "
        f"(1 x {me.row.gpus}): {efficiency} efficiency."
    )
    changes: list[dict[str, Any]] = []
    if reference is not None:
        ref_report = context.report_of(reference.run.run_id)
        ref_use = resource_use(ref_report, reference.nodes)
        changes = _changes(ref_use, mine_use)
        evidence |= {
            "reference_run": reference.run.run_id,
            "reference_gpus": reference.gpus,
            "reference_nodes": reference.nodes,
            "reference_resources": asdict(ref_use),
            "run_resources": asdict(mine_use),
            "changed": changes,
        }
        against = (
            f"{reference.run.run_id} ({_ranks(reference.gpus, on_gpus)} on "
            f"{_nodes(reference.nodes)})"
        )
        if changes:
            explanation += (
                f" Grew against {against}: " + "; ".join(_describe(c) for c in changes) + "."
            )
        else:
            explanation += (
                f" No measured resource grew by {RESOURCE_CHANGE_RATIO:.2f}x against {against}."
            )
    title = f"Scaling efficiency {efficiency} on {_ranks(me.row.gpus, on_gpus)}"
    if changes:
        grew_with = (
            "node count"
            if reference is not None and reference.nodes != mine.nodes
            else "rank count"
        )
        title += f": {RESOURCE_LABELS[changes[0]['resource']]} grew with {grew_with}"
    return [
        Finding(
            rule="scaling_loss",
            severity=CRITICAL
            if me.row.efficiency_percent < SCALING_EFFICIENCY_CRITICAL
            else WARNING,
            title=title,
            explanation=explanation,
            evidence=evidence,
            chart="rx_minus_tx_mbps" if changes and "fabric" in changes[0]["resource"] else "",
        )
    ]


def _reference_run(mine: RunFacts, facts: list[RunFacts]) -> RunFacts | None:
    """A run of the group on fewer nodes to compare resources with: the single-node run
    with the most GPUs for a multi-node run, else the 1-GPU run."""
    usable = [f for f in facts if f.run.run_id != mine.run.run_id and f.throughput.source]
    if mine.nodes > 1:
        fewer = [f for f in usable if f.nodes < mine.nodes]
        if fewer:
            return max(fewer, key=lambda f: (-f.nodes, f.gpus, f.run.start_ns))
    single = [f for f in usable if f.gpus == 1]
    return max(single, key=lambda f: f.run.start_ns) if single else None


# --------------------------------------------------------------------------------------
# precision and read demand
# --------------------------------------------------------------------------------------


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.1f}"


def _first_epoch_storage(report: EpochReport) -> EpochRow | None:
    totals = [r for r in report.total_rows() if r.storage_read_mbps is not None]
    return totals[0] if totals else None


def like_for_precision(run: RunInfo) -> tuple:
    """What must be equal for two runs' read rates to be compared across precisions: model,
    framework, data format, data set (bytes and images), batch per rank, image size, world
    size and node count. A missing value never matches (None is not equal to a number)."""
    key = GroupKey.of(run)
    config = run.config
    return (
        key.framework,
        key.model,
        key.data_format,
        _config_number(config, Workload.DATASET_BYTES) or object(),
        _config_number(config, Workload.DATASET_IMAGES) or object(),
        key.batch_size or object(),
        _config_number(config, Workload.IMAGE_SIZE) or object(),
        run.world_size or object(),
        len(run.hosts),
    )


def precision_read_demand(context: RunContext) -> list[Finding]:
    """This run reads storage much faster in epoch 1 than a like run at another precision:
    the same training in every other respect (``like_for_precision``)."""
    mine = context.run
    shape = like_for_precision
    my_precision = GroupKey.of(mine).precision
    others = [
        r
        for r in context.store.runs()
        if r.run_id != mine.run_id
        and r.state != RunState.FAILED
        and shape(r) == shape(mine)
        and GroupKey.of(r).precision not in ("", my_precision)
    ]
    first = _first_epoch_storage(context.report)
    if not others or first is None or first.storage_read_mbps < MIN_STORAGE_MBPS:
        return []
    other = max(others, key=lambda r: r.start_ns)
    their_first = _first_epoch_storage(context.report_of(other.run_id))
    if their_first is None or not their_first.storage_read_mbps:
        return []
    ratio = first.storage_read_mbps / their_first.storage_read_mbps
    if ratio < PRECISION_READ_RATIO:
        return []
    their_precision = GroupKey.of(other).precision
    chart = (
        "nfs_server_read_mbps"
        if (first.nfs_server_read_mbps or 0) >= (first.disk_read_mbps or 0)
        else "disk_read_mbps"
    )
    return [
        Finding(
            rule="precision_read_demand",
            severity=INFO,
            title=(
                f"{my_precision.upper()} reads storage {ratio:.1f}x as fast as "
                f"{their_precision.upper()}"
            ),
            explanation=(
                f"In epoch {first.epoch} this {my_precision} run read storage at "
                f"{first.storage_read_mbps:,.1f} MB/s and trained "
                f"{_rate(first.images_per_second)} images/s; the {their_precision} run "
                f"{other.run_id}, the same training otherwise (model, data set, batch per "
                f"rank, image size, ranks and nodes), read {their_first.storage_read_mbps:,.1f}"
                f" MB/s at {_rate(their_first.images_per_second)} images/s. A run that "
                "trains faster pulls images from storage faster: storage sized for the "
                "slower precision can hold the faster one back until the data set is cached."
            ),
            evidence={
                "precision": my_precision,
                "other_run": other.run_id,
                "other_precision": their_precision,
                "batch_size": mine.config.get(Workload.BATCH_SIZE),
                "other_batch_size": other.config.get(Workload.BATCH_SIZE),
                "storage_read_mbps": first.storage_read_mbps,
                "other_storage_read_mbps": their_first.storage_read_mbps,
                "images_per_second": first.images_per_second,
                "other_images_per_second": their_first.images_per_second,
                "ratio": round(ratio, 3),
            },
            chart=chart,
        )
    ]


# --------------------------------------------------------------------------------------
# engine
# --------------------------------------------------------------------------------------

Rule = Callable[[RunContext], list[Finding]]
RULES: tuple[Rule, ...] = (
    cache_warmup,
    dataset_fits_in_memory,
    fabric_carries_storage,
    storage_bound,
    input_bound,
    scaling_loss,
    precision_read_demand,
)


def run_context(
    store: ReadStore,
    run_id: str,
    report: EpochReport | None = None,
    reports: Callable[[str], EpochReport] | None = None,
) -> RunContext:
    run = store.run(run_id)
    if run is None:
        raise KeyError(run_id)
    events = run_events(store, run_id, EPOCH_KINDS)
    return RunContext(
        store=store,
        run=run,
        events=events,
        report=report if report is not None else build_report(store, run_id),
        reports=reports,
    )


def all_rules() -> tuple[Rule, ...]:
    """These rules and the step-anatomy rules (their module builds on this one's types)."""
    from collector.anatomy_findings import ANATOMY_RULES

    return (*RULES, *ANATOMY_RULES)


def evaluate(context: RunContext, rules: tuple[Rule, ...] | None = None) -> list[Finding]:
    rules = all_rules() if rules is None else rules
    findings = [finding for rule in rules for finding in rule(context)]
    return sorted(findings, key=lambda f: SEVERITY_ORDER[f.severity])


def run_findings(
    store: ReadStore,
    run_id: str,
    report: EpochReport | None = None,
    reports: Callable[[str], EpochReport] | None = None,
) -> list[Finding]:
    """Every rule's findings for a run, most severe first. ``report`` is the run's own
    report and ``reports`` gives other runs' (both built here when not given)."""
    return evaluate(run_context(store, run_id, report, reports))
