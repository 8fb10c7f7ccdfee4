"""Findings about storage and the fabric: training waiting on storage while uncached, the
fabric carrying the data set beside the gradients, and read demand by precision.

``fabric_carries_storage``
    Receive minus send on the fabric (InfiniBand, else the NICs) is within
    ``FABRIC_MATCH_TOLERANCE`` of the NFS read rate: gradients are sent and received in equal
    amounts, so the surplus received is the data set crossing the same fabric.

``storage_bound``
    Epochs with high iowait (or the ranks waiting for input at least ``INPUT_WAIT_SHARE``
    of their step time: on a shared node others' work hides iowait), unstable step
    throughput (coefficient of variation of the steps' images/s) and high storage reads at
    once (at least ``MIN_STORAGE_MBPS``, or however slow where the epoch brought a quarter
    of the data set into the page cache, measured, or read it again, ``dataset_evicted``):
    training waits on storage (the Caffe2 behaviour while uncached). Storage reads judged as
    ``cache_warmup`` does. Not where the host's ranks waited for input no longer in the
    epoch than in its epochs without storage reads (the same loader over cached data): the
    reads did not hold the steps back.
    A host-epoch whose data set was measured at least ``CACHED_PERCENT`` cached at its start
    and end, and that did not read it again, read none of it from storage, and is never one.
    And whatever else the epoch did: a host-epoch whose data device read at least
    ``CEILING_BOUND_SHARE`` of its measured ceiling over the epoch (the devices with a
    ceiling against their ceilings, or the NFS mounts' where NFS brought most) while its
    ranks waited for input at least ``INPUT_WAIT_SHARE`` of their step time is one, however
    slow or steady its reads.

``precision_read_demand``
    The run reads storage in its first epoch at least ``PRECISION_READ_RATIO`` times as
    fast as a like run at another precision (``like_for_precision``: model, framework,
    data set, batch per rank, image size, world size and nodes), whichever precision is
    the faster reader (study 003: FP16 read 1.28x as fast as FP32). The reads compared
    are the training's own when both runs' ranks sent them, else the hosts'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collector.analysis.epochs import EpochReport, EpochRow
from collector.analysis.run import RunModel
from collector.analysis.scaling import GroupKey
from collector.findings.base import (
    CACHED_PERCENT,
    CEILING_BOUND_SHARE,
    DISK_READ,
    FIRST_EPOCH_DATASET_SHARE,
    HIDDEN,
    IF_KNOWN,
    IMAGES_PER_SECOND,
    INFO,
    INPUT_WAIT_SHARE,
    IOWAIT_HIGH_PERCENT,
    NFS_SERVER_READ,
    READER,
    READS_TEXT,
    RX_MINUS_TX,
    TRAINING_READ,
    WARNING,
    Finding,
    StorageReads,
    _config_number,
    _mbps,
    _mbps_text,
    _percent,
    _plural,
    _read_mbps,
    _stable_groups,
    digits,
    epoch_list,
    evidence_json,
    judged_reads,
    step_epochs,
    timed_step_rows,
    words,
)
from collector.findings.cache import evicted_epochs
from collector.findings.context import RunContext, complete_epochs
from collector.store.api import RunInfo, StepTable
from contract.schema import RunState, Workload
from contract.units import format_fraction

# fabric carries storage
FABRIC_MATCH_TOLERANCE = 0.10


MIN_NETWORK_STORAGE_MBPS = 5.0


STEP_CV_UNSTABLE = 0.20


MIN_STEPS_FOR_CV = 4


STORAGE_HIGH_SHARE_OF_PEAK = 0.25


MIN_STORAGE_MBPS = 5.0


# precision read demand
PRECISION_READ_RATIO = 1.25  # study 003: FP16 read 550 MB/s where FP32 read 430 (1.28x)


@dataclass(frozen=True)
class FabricCarriesStorage:
    """On the strongest NFS reader's host-epoch, receive minus send on the fabric matched the
    NFS read rate."""

    host: str
    epoch: int
    fabric: str  # ib | net
    rcv_mbps: float | None
    xmit_mbps: float | None
    rx_minus_tx_mbps: float
    nfs_server_read_mbps: float
    relative_difference: float = field(metadata=digits(4))  # |surplus - NFS| / NFS
    matching_host_epochs: int = 0
    compared_host_epochs: int = 0  # host-epochs with NFS reads of at least 5 MB/s


@dataclass(frozen=True)
class UnstableHostEpoch:
    host: str
    epoch: int
    iowait_percent: float | None
    # None: too few timed steps to tell (a host-epoch at its storage ceiling needs none)
    step_images_per_second_cv: float | None = field(metadata=digits(4))
    storage_read_mbps: float | None = None
    # the data set's share in the host's page cache as the epoch began (None: not measured)
    dataset_cached_start_percent: float | None = field(
        default=None, metadata={**IF_KNOWN, **digits(1)}
    )
    dataset_cached_end_percent: float | None = field(
        default=None, metadata={**IF_KNOWN, **digits(1)}
    )
    input_wait_percent: float | None = field(default=None, metadata={**IF_KNOWN, **digits(1)})
    # the disk reads as a share of the host's measured ceiling (agent ceilings)
    disk_read_ceiling_percent: float | None = field(
        default=None, metadata={**IF_KNOWN, **digits(1)}
    )
    # the NFS server reads as a share of the host's measured NFS read ceiling: only where
    # they were most of the host-epoch's storage reads (the data set sits on NFS)
    nfs_read_ceiling_percent: float | None = field(default=None, metadata={**IF_KNOWN, **digits(1)})
    # True: the data device read at its measured ceiling while the ranks waited for input
    at_ceiling: bool | None = field(default=None, metadata=IF_KNOWN)


@dataclass(frozen=True)
class StorageBound:
    """Host-epochs with high iowait, high storage reads and unstable step throughput. The
    ``storage_read`` figures are the reads named by ``reads_judged``."""

    epochs: list[int]
    host_epochs: list[UnstableHostEpoch]  # the first 20
    worst: UnstableHostEpoch = field(
        default=None, metadata=HIDDEN
    )  # of all of them, the highest variation
    cv_without_storage_reads: float | None = field(default=None, metadata=digits(4))
    reads_judged: StorageReads = StorageReads.HOSTS
    thresholds: dict[str, float] = field(
        default_factory=lambda: {
            "iowait_percent": IOWAIT_HIGH_PERCENT,
            "input_wait_percent": 100 * INPUT_WAIT_SHARE,
            "step_cv": STEP_CV_UNSTABLE,
            "storage_share_of_peak": STORAGE_HIGH_SHARE_OF_PEAK,
        }
    )


@dataclass(frozen=True)
class PrecisionReadDemand:
    """In epoch 1 this run read storage ``ratio`` times as fast as the like run at another
    precision."""

    precision: str
    other_run: str
    other_precision: str
    batch_size: Any
    other_batch_size: Any
    storage_read_mbps: float
    other_storage_read_mbps: float
    images_per_second: float | None
    other_images_per_second: float | None
    ratio: float = field(metadata=digits(3))
    reads_judged: StorageReads = StorageReads.HOSTS  # the storage reads compared
    epoch: int = field(default=1, metadata=HIDDEN)  # this run's first epoch with storage reads
    nfs_read_most: bool = field(
        default=False, metadata=HIDDEN
    )  # NFS reads at least the local disks'


def detect_fabric_carries_storage(context: RunContext) -> FabricCarriesStorage | None:
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
        return None
    row, amounts, difference = max(matches, key=lambda m: m[0].nfs_server_read_mbps)
    rcv, xmit = (
        (row.ib_rcv_mbps, row.ib_xmit_mbps)
        if amounts.fabric == "ib"
        else (_mbps(row.net_rx_bytes, row.seconds), _mbps(row.net_tx_bytes, row.seconds))
    )
    return FabricCarriesStorage(
        host=row.host,
        epoch=row.epoch,
        fabric=amounts.fabric,
        rcv_mbps=rcv,
        xmit_mbps=xmit,
        rx_minus_tx_mbps=row.rx_minus_tx_mbps,
        nfs_server_read_mbps=row.nfs_server_read_mbps,
        relative_difference=difference,
        matching_host_epochs=len(matches),
        compared_host_epochs=compared,
    )


def step_rates(
    steps: StepTable, model: RunModel, warmup_steps: int
) -> dict[tuple[str, int], list[float]]:
    """Images/s of every step after each rank's warm-up, per (host, epoch): the steps that
    find an epoch (``step_epochs``) count towards their rank's warm-up; those with a
    numeric ``images`` and a positive ``seconds`` give a rate. Rates are in step order."""
    epochs = step_epochs(steps, model)
    rows = timed_step_rows(steps, epochs, warmup_steps)
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


def coefficient_of_variation(values: list[float]) -> float | None:
    if len(values) < MIN_STEPS_FOR_CV:
        return None
    array = np.asarray(values, dtype=float)
    mean = array.mean()
    return float(array.std() / mean) if mean > 0 else None


def _dataset_stayed_cached(row: EpochRow, evicted: set[tuple[str, int]]) -> bool:
    """The data set was measured in the host's page cache at the epoch's start and end, and
    the epoch did not read it again (``evicted``: host-epochs that did): it read none of it
    from storage."""
    start, end = row.dataset_cached_start_percent, row.dataset_cached_end_percent
    if (row.host, row.epoch) in evicted:
        return False
    return start is not None and end is not None and min(start, end) >= CACHED_PERCENT


def _dataset_came_in(row: EpochRow) -> bool:
    """The epoch brought at least ``FIRST_EPOCH_DATASET_SHARE`` of the data set into the
    host's page cache (measured): it read that much of it from storage, however slowly."""
    start, end = row.dataset_cached_start_percent, row.dataset_cached_end_percent
    return start is not None and end is not None and end - start >= 100 * FIRST_EPOCH_DATASET_SHARE


def _waited(row: EpochRow) -> bool:
    """The host's CPUs waited on I/O, or its ranks waited for input: on a shared node other
    processes' work fills the idle time iowait would show, the ranks' own input wait not."""
    iowait, input_wait = row.iowait_percent, row.input_wait_percent
    return (iowait is not None and iowait >= IOWAIT_HIGH_PERCENT) or (
        input_wait is not None and input_wait >= 100 * INPUT_WAIT_SHARE
    )


def _nfs_ceiling_percent(row: EpochRow) -> float | None:
    """The NFS server reads' share of the measured NFS ceiling where NFS brought more
    than the local disks (the data set is on an NFS mount), else None: then the disk's
    ceiling is the one the reads are judged against."""
    nfs, disk = row.nfs_server_read_bytes, row.disk_read_bytes or 0
    if nfs is None or nfs <= disk:
        return None
    return row.nfs_read_ceiling_percent


def _ceiling_share(row: EpochRow) -> float | None:
    """The data device's reads as a share of its measured ceiling (percent): the NFS
    mounts' where NFS brought most of the reads, else the disks' with a ceiling."""
    nfs = _nfs_ceiling_percent(row)
    return nfs if nfs is not None else row.disk_read_ceiling_percent


def _at_ceiling_while_waiting(row: EpochRow) -> bool:
    """The data device read at ``CEILING_BOUND_SHARE`` or more of its measured ceiling over
    the epoch while the ranks waited for input ``INPUT_WAIT_SHARE`` of their step time: the
    device's bandwidth held the training back, however steady the steps."""
    share, input_wait = _ceiling_share(row), row.input_wait_percent
    return (
        share is not None
        and share >= 100 * CEILING_BOUND_SHARE
        and input_wait is not None
        and input_wait >= 100 * INPUT_WAIT_SHARE
    )


def _calm_input_wait(calm: list[EpochRow]) -> dict[str, float]:
    """Per host, the ranks' input wait (percent of step time, the epochs' mean) in its
    epochs without storage reads of the kind judged: the same loader over cached data."""
    by_host: dict[str, list[float]] = {}
    for row in calm:
        if row.input_wait_percent is not None:
            by_host.setdefault(row.host, []).append(row.input_wait_percent)
    return {host: float(np.mean(waits)) for host, waits in by_host.items()}


def _waited_as_long_without_reads(row: EpochRow, calm_wait: dict[str, float]) -> bool:
    """The host's ranks waited for input no longer in this epoch, which read storage, than
    in its epochs that did not: the reads did not hold the steps back, whatever iowait and
    the steps' variation said (a cold control over a fast disk: 18.8% input wait while
    reading the data set at 54 MB/s, 24.5% with it cached). Not known (kept) where either
    wait was not measured."""
    calm = calm_wait.get(row.host)
    return (
        calm is not None and row.input_wait_percent is not None and (row.input_wait_percent <= calm)
    )


def detect_storage_bound(context: RunContext) -> StorageBound | None:
    """Storage reads (``judged_reads``) high, iowait high and step throughput unstable in the
    same host-epochs; or the data device at its measured ceiling while the ranks waited
    for input (``_at_ceiling_while_waiting``)."""
    reads = judged_reads(context.report)
    rows = [row for row, _ in context.hosts_rows()]
    rates = {(r.host, r.epoch): _read_mbps(r, reads) for r in rows}
    storage = [rate for rate in rates.values() if rate is not None]
    at_ceiling = {(row.host, row.epoch) for row in rows if _at_ceiling_while_waiting(row)}
    if not storage and not at_ceiling:
        return None
    peak = max(storage, default=0.0)
    evicted = evicted_epochs(context)

    def reading(row: EpochRow) -> bool:
        rate = rates[(row.host, row.epoch)]
        if rate is None or rate < STORAGE_HIGH_SHARE_OF_PEAK * peak:
            return False
        came_in = _dataset_came_in(row) or (row.host, row.epoch) in evicted
        return rate >= MIN_STORAGE_MBPS or came_in

    calm_wait = _calm_input_wait([row for row in rows if not reading(row)])
    candidates = [
        row
        for row in rows
        if reading(row)
        and _waited(row)
        and not _dataset_stayed_cached(row, evicted)
        and not _waited_as_long_without_reads(row, calm_wait)
    ]
    if not candidates and not at_ceiling:  # no step event is read for a run that never waited
        return None
    candidate_keys = {(row.host, row.epoch) for row in candidates}
    warmup = int(_config_number(context.config, Workload.WARMUP_STEPS) or 0)
    step_images = step_rates(context.steps(), context.model, warmup)
    bound: list[UnstableHostEpoch] = []
    calm: list[float] = []
    for row in rows:
        key = (row.host, row.epoch)
        cv = coefficient_of_variation(step_images.get(key, []))
        if cv is None and key not in at_ceiling:
            continue
        unstable = key in candidate_keys and cv is not None and cv >= STEP_CV_UNSTABLE
        if unstable or key in at_ceiling:
            bound.append(
                UnstableHostEpoch(
                    host=row.host,
                    epoch=row.epoch,
                    iowait_percent=row.iowait_percent,
                    step_images_per_second_cv=cv,
                    storage_read_mbps=rates[(row.host, row.epoch)],
                    dataset_cached_start_percent=row.dataset_cached_start_percent,
                    dataset_cached_end_percent=row.dataset_cached_end_percent,
                    input_wait_percent=row.input_wait_percent,
                    disk_read_ceiling_percent=row.disk_read_ceiling_percent,
                    nfs_read_ceiling_percent=_nfs_ceiling_percent(row),
                    at_ceiling=True if key in at_ceiling else None,
                )
            )
        elif cv is not None and not reading(row):
            calm.append(cv)
    if not bound:
        return None
    return StorageBound(
        epochs=sorted({b.epoch for b in bound}),
        host_epochs=bound[:20],
        worst=max(bound, key=_unsteadiness),
        cv_without_storage_reads=float(np.mean(calm)) if calm else None,
        reads_judged=reads,
    )


def _unsteadiness(host_epoch: UnstableHostEpoch) -> tuple[bool, float]:
    """What picks the host-epoch a storage_bound finding describes: the most unstable of
    those unstable; a host-epoch at its ceiling (steady or not) where none was."""
    cv = host_epoch.step_images_per_second_cv
    unstable = cv is not None and cv >= STEP_CV_UNSTABLE
    return unstable, cv if cv is not None else -1.0


def _first_epoch_storage(report: EpochReport, reads: StorageReads) -> EpochRow | None:
    """The first complete epoch's ``*`` row that has storage reads of the kind judged."""
    complete = complete_epochs(report)
    totals = [
        r for r in report.total_rows() if r.epoch in complete and _read_mbps(r, reads) is not None
    ]
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


def detect_precision_read_demand(context: RunContext) -> PrecisionReadDemand | None:
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
    if not others:
        return None
    other = max(others, key=lambda r: r.start_ns)
    their_report = context.report_of(other.run_id)
    reads = judged_reads(context.report, their_report)
    first = _first_epoch_storage(context.report, reads)
    their_first = _first_epoch_storage(their_report, reads)
    if first is None or their_first is None:
        return None
    mbps, their_mbps = _read_mbps(first, reads), _read_mbps(their_first, reads)
    if mbps < MIN_STORAGE_MBPS or not their_mbps:
        return None
    ratio = mbps / their_mbps
    if ratio < PRECISION_READ_RATIO:
        return None
    return PrecisionReadDemand(
        precision=my_precision,
        other_run=other.run_id,
        other_precision=GroupKey.of(other).precision,
        batch_size=mine.config.get(Workload.BATCH_SIZE),
        other_batch_size=other.config.get(Workload.BATCH_SIZE),
        storage_read_mbps=mbps,
        other_storage_read_mbps=their_mbps,
        images_per_second=first.images_per_second,
        other_images_per_second=their_first.images_per_second,
        ratio=ratio,
        reads_judged=reads,
        epoch=first.epoch,
        nfs_read_most=(first.nfs_server_read_mbps or 0) >= (first.disk_read_mbps or 0),
    )


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.1f}"


@words.register
def word_fabric_carries_storage(found: FabricCarriesStorage) -> Finding:
    fabric = "InfiniBand" if found.fabric == "ib" else "the NICs"
    return Finding(
        rule="fabric_carries_storage",
        severity=INFO,
        title="The fabric carries the storage reads: receive minus send = storage read rate",
        explanation=(
            f"On {found.host} in epoch {found.epoch}, {fabric} received "
            f"{found.rcv_mbps:,.0f} MB/s and sent {found.xmit_mbps:,.0f} MB/s. The "
            f"{found.rx_minus_tx_mbps:,.0f} MB/s surplus matches the NFS read rate of "
            f"{found.nfs_server_read_mbps:,.0f} MB/s within "
            f"{format_fraction(found.relative_difference)}. "
            "Gradients are sent and received in equal amounts, so the surplus is the data "
            "set: storage traffic shares the fabric with the all-reduce "
            f"({found.matching_host_epochs} of {found.compared_host_epochs} host-epochs with "
            "NFS reads match)."
        ),
        evidence=evidence_json(found),
        chart=RX_MINUS_TX,
    )


def ceiling_sentence(host: str, percent: float, nfs: bool = False) -> str:
    """Storage reads against the host's measured ceiling (its disks', or its NFS mounts'
    where the reads came from NFS), with the rule for "at its limit"."""
    ceiling = "NFS read ceiling" if nfs else "disk read ceiling"
    if percent >= 100 * CEILING_BOUND_SHARE:
        limit = (
            "the NFS mount was at its measured limit (the server or the path to it)"
            if nfs
            else "the disk was at its limit"
        )
        return (
            f"That is {percent:.0f}% of {host}'s measured {ceiling} (agent ceilings): "
            f"{limit}; faster storage, or the data set cached or local, would help."
        )
    return (
        f"That is {percent:.0f}% of {host}'s measured {ceiling} (agent ceilings), "
        f"under the {100 * CEILING_BOUND_SHARE:.0f}% that would mean bandwidth: reads too "
        "small or too few at a time (latency), or a limit set elsewhere (a cgroup, a shared "
        "device)."
    )


@words.register
def word_storage_bound(found: StorageBound) -> Finding:
    worst = found.worst
    epochs = epoch_list(found.epochs)
    iowait = worst.iowait_percent
    if iowait is not None and iowait >= IOWAIT_HIGH_PERCENT:
        waited = f"CPUs waited on I/O ({iowait:.0f}% iowait)"
    else:
        waited = (
            f"the ranks waited for input {_percent(worst.input_wait_percent)} of their step time"
        )
    cv = worst.step_images_per_second_cv
    if cv is not None and cv >= STEP_CV_UNSTABLE:
        steps = (
            f"step throughput was unstable (coefficient of variation up to {cv:.2f} on "
            f"{worst.host}) while {waited} and"
        )
    else:
        steps = f"{worst.host}'s data device read at its measured ceiling while {waited}, and"
    explanation = (
        f"In epoch{_plural(found.epochs)} {epochs}, {steps} "
        f"{READER[found.reads_judged]} read storage at {_mbps_text(worst.storage_read_mbps)} "
        "MB/s: "
        "training waited on storage."
    )
    if worst.nfs_read_ceiling_percent is not None:
        explanation += " " + ceiling_sentence(worst.host, worst.nfs_read_ceiling_percent, nfs=True)
    elif worst.disk_read_ceiling_percent is not None:
        explanation += " " + ceiling_sentence(worst.host, worst.disk_read_ceiling_percent)
    if worst.dataset_cached_start_percent is not None:
        explanation += (
            f" The data set was {_percent(worst.dataset_cached_start_percent)} in "
            f"{worst.host}'s page cache as epoch {worst.epoch} began and "
            f"{_percent(worst.dataset_cached_end_percent)} as it ended (measured with "
            "mincore): the epoch read it from storage."
        )
    if found.cv_without_storage_reads is not None:
        explanation += (
            f" In epochs without storage reads the variation was "
            f"{found.cv_without_storage_reads:.2f}: "
            + (
                "once the data is cached, throughput is steady."
                if found.cv_without_storage_reads < STEP_CV_UNSTABLE
                else "unsteady too, so part of the variation is not storage's."
            )
        )
    return Finding(
        rule="storage_bound",
        severity=WARNING,
        title=f"Storage-bound epoch{_plural(found.epochs)} {epochs}",
        explanation=explanation,
        evidence=evidence_json(found),
        chart=IMAGES_PER_SECOND,
    )


@words.register
def word_precision_read_demand(found: PrecisionReadDemand) -> Finding:
    mine, theirs = found.precision, found.other_precision
    return Finding(
        rule="precision_read_demand",
        severity=INFO,
        title=f"{mine.upper()} reads storage {found.ratio:.1f}x as fast as {theirs.upper()}",
        explanation=(
            f"In epoch {found.epoch} this {mine} run read storage at "
            f"{found.storage_read_mbps:,.1f} MB/s ({READS_TEXT[found.reads_judged]}, "
            "in both runs) and trained "
            f"{_rate(found.images_per_second)} images/s; the {theirs} run "
            f"{found.other_run}, the same training otherwise (model, data set, batch per "
            f"rank, image size, ranks and nodes), read {found.other_storage_read_mbps:,.1f}"
            f" MB/s at {_rate(found.other_images_per_second)} images/s. A run that "
            "trains faster pulls images from storage faster: storage sized for the "
            "slower precision can hold the faster one back until the data set is cached."
        ),
        evidence=evidence_json(found),
        chart=(
            TRAINING_READ
            if found.reads_judged == StorageReads.TRAINING
            else NFS_SERVER_READ
            if found.nfs_read_most
            else DISK_READ
        ),
    )
