"""Findings about feeding the steps: the input pipeline saturating the CPUs, input wait and
its cause, the accelerators' utilisation (MLPerf Storage's AU), what restarts with every
epoch, and epoch 1's start-up.

``input_bound``
    CPU saturated while the GPUs are mostly idle: the input pipeline (decoding,
    augmentation) cannot feed the GPUs.

``input_wait``
    Input wait is at least ``INPUT_WAIT_SHARE`` of the step time on a host in settled epochs, or
    in epoch 1 alone where that wait was the data set's first reads from storage beyond the
    settled epochs' wait (a cold run on slow storage). Storage-bound when the training's own
    reads came from storage (``read_bytes`` at least ``STORAGE_READ_SHARE`` of ``rchar`` or of
    the data set's bytes per image trained, a loader re-reading its files through the page cache
    dilutes the first; and per image trained at least ``DATASET_READ_SHARE`` of the data set's
    bytes per image, else ``MIN_READ_BYTES_PER_IMAGE``: a few MB of libraries is no data set) or
    iowait is high; decode-bound, for a data set of pictures only (``DECODED_FORMATS``: JPEG
    files or records of them), when a CPU quota held the ranks or their loaders back (their most
    throttled quota group ran out in at least ``THROTTLED_BOUND_SHARE`` of its scheduling
    periods, ``cpu_throttled_share``), or the epochs' images/s reached ``DECODE_BOUND_SHARE`` of
    the host's decode ceiling (JPEG data sets with a measured decode rate per core,
    ``decode_ceiling_percent``: a cgroup quota's cores are saturated while the host's CPUs are
    not) or, unless the input came faster than decoding allows, the training's own processes
    saturated the CPUs (``training_cpu_percent``; the host's CPUs where not sent); others when
    the host's CPUs were saturated by other processes than the training's (``contention`` names
    them); else undetermined: not known from what the run sent (the finding names what was
    measured and what was missing, the loader's worker count among them). Before all these: the
    epoch's start, when at least ``EPOCH_START_WAIT_SHARE`` of the wait fell in the epochs'
    first steps (a profiled rank's, which AU leaves out): what restarts with each epoch held the
    first batch back, and more workers would only start more. The share of the decode ceiling is
    stated beside it where measured. Epoch 1, which the settled epochs leave out as start-up, is
    judged on its own where no settled epoch put the host's wait on storage: its wait is
    storage-bound when what it waited beyond the settled epochs' share is at least
    ``INPUT_WAIT_SHARE`` of its steps, the wait is not held in their first, and the ranks' own
    storage reads in it were the data set (a cold run on slow storage waits in epoch 1 only); a
    loader starting or graph building, which read no data set, stays ``startup``'s.

``epoch_restart``
    In epochs after the first, an epoch's first timed step takes at least
    ``EPOCH_RESTART_RATIO`` times the median of the epoch's other timed steps and its extra
    time is at least ``EPOCH_RESTART_SHARE`` of the epoch (the stored step events, per
    rank): something restarts with every epoch, in PyTorch the DataLoader's worker
    processes unless ``persistent_workers=True``. A profiled PyTorch rank sends the worker
    processes its training loader started at each epoch's start (``loader_workers_started``):
    none started in the epochs found means the workers were kept and the longer first step was
    the new pass's empty prefetch queue, not reported; workers started although the run keeps
    them means the DataLoader is made anew each epoch, which the finding says. Where only the
    run's ``persistent_workers=True`` is known, the restart is ruled out: the finding says what
    was seen at info, and advises nothing.

``startup``
    Epoch 1's time per step is at least ``STARTUP_RATIO`` times the settled epochs'.
    Its extra time is split: input wait (first reads; with the training's own storage
    reads of epoch 1 against later ones) versus compute and the rest: the framework's own
    warm-up, worded from the run's framework (TensorFlow's graph building and XLA
    compilation, MXNet's hybridize, an eager PyTorch loop's loader workers starting,
    first-batch allocation and cudnn autotune).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from collector.analysis.anatomy import (
    PROCESS_RCHAR,
    PROCESS_READ,
    RankEpoch,
    epoch_reads,
    rank_epochs,
    share_percent,
)
from collector.analysis.decode import JPEG, run_host_cores
from collector.findings.base import (
    ACCELERATOR_UTIL,
    COMPUTE,
    CPU_SATURATED_PERCENT,
    CPU_UTIL,
    IF_KNOWN,
    IMAGES_PER_SECOND,
    INFO,
    INPUT_WAIT,
    INPUT_WAIT_SHARE,
    IOWAIT_HIGH_PERCENT,
    PART_LABELS,
    WARNING,
    Finding,
    _bytes,
    _complete,
    _config_number,
    _mean,
    _measured_bytes,
    _plural,
    _stable_groups,
    _worded,
    digits,
    epoch_list,
    evidence_json,
    framework_kind,
    settled,
    step_epochs,
    step_profile,
    timed_step_rows,
    words,
)
from collector.findings.context import RunContext, complete_epochs
from collector.store.api import WorkloadEvent, event_number
from contract.markers import ALL_HOSTS
from contract.schema import Event, Workload
from contract.units import format_fraction

GPU_LOW_PERCENT = 70.0


# The wait is the epoch's start when at least this share of it fell in the steps AU leaves
# out (a profiled epoch's first): what restarts with each epoch held the first batch back
EPOCH_START_WAIT_SHARE = 2 / 3


# Decoding against the decode ceiling (a host's measured JPEG rate per core x its cores).
# The ceiling is a bare decode loop over one picture held in memory; a real Dataset also
# reads each file, converts it to a tensor, collates batches and steps (about 10-15% more
# CPU per picture), and a shared or virtual machine's rate per core moves by 15-20% within
# a minute (131-235 pictures per CPU second measured here). A pipeline decoding with all
# its cores so lands at 68-113% of the ceiling (tests/scenarios/test_decode_bound.py), not
# at the disk's 80%: from 60% decoding took most of the cores' time, "CPU-bound input".
# Past twice the ceiling the pictures cannot have been decoded one by one at that rate
# (decoded beforehand and kept as tensors, or much smaller pictures): not the limit.
DECODE_BOUND_SHARE = 0.60


DECODE_PAST_SHARE = 2.0


def decode_verdict(percent: float) -> str:
    """What a share of the decode ceiling (percent) says: "bound" (CPU-bound input),
    "under" (the cores did other work too) or "past" (the input was not decoded here)."""
    if percent >= 100 * DECODE_PAST_SHARE:
        return "past"
    return "bound" if percent >= 100 * DECODE_BOUND_SHARE else "under"


# A CPU quota held the input back when the most throttled quota group of the ranks or their
# loaders (``epoch_end`` ``cpu_throttled_share``: cpu.stat) ran out of quota in at least this
# share of its scheduling periods: its processes wanted more CPU than the quota gives most of
# the time (a process spinning under 0.25 CPUs is throttled in >= 80% of them,
# tests/integration/test_rank_cputime.py; a loader that sleeps or waits is rarely throttled).
# On a decoded format that is decode-bound whatever the host's other CPUs did.
THROTTLED_BOUND_SHARE = 0.5


STORAGE_READ_SHARE = 0.5  # read_bytes / rchar: the training's reads came from storage


# The training's storage reads are its data set only when they are a real part of what it
# trained: per image trained, at least this share of the data set's bytes per image (its
# run_start's dataset_bytes / dataset_images), else at least MIN_READ_BYTES_PER_IMAGE (a
# 28x28 grey picture is 784 bytes). A loader over tensors in memory still reads a few MB
# (Python modules, shared libraries): 2.8 MB over thousands of images is not a data set.
DATASET_READ_SHARE = 0.05


MIN_READ_BYTES_PER_IMAGE = 1024.0


# The data formats whose pictures the loader decodes: JPEG files, and the bundled trainings'
# TFRecord and RecordIO files, whose records hold the JPEG bytes (workloads/train/datasets.py).
# Synthetic data, tensors in memory or a format not sent are never "decode-bound".
DECODED_FORMATS = frozenset({JPEG, "tfrecord", "recordio"})


# MLPerf Storage's pass mark for ResNet-50 (and UNet3D): accelerator utilisation >= 90%
AU_PASS = 0.90


STARTUP_RATIO = 1.5


# epoch restart: an epoch's first timed step takes 3x the median of its others, and the
# extra time is at least 5% of the epoch
EPOCH_RESTART_RATIO = 3.0


EPOCH_RESTART_SHARE = 0.05


MIN_STEPS_FOR_RESTART = 3  # other timed steps in the epoch to take their median


@dataclass(frozen=True)
class BusyHostEpoch:
    host: str
    epoch: int
    cpu_util_percent: float
    gpu_util_percent: float


@dataclass(frozen=True)
class InputBound:
    """Host-epochs with saturated CPUs and mostly idle GPUs."""

    hosts: list[str]
    epochs: list[int]
    cpu_util_percent_mean: float = field(metadata=digits(2))
    gpu_util_percent_mean: float = field(metadata=digits(2))
    host_epochs: list[BusyHostEpoch] = field(default_factory=list)  # the first 20
    thresholds: dict[str, float] = field(
        default_factory=lambda: {
            "cpu_util_percent": CPU_SATURATED_PERCENT,
            "gpu_util_percent": GPU_LOW_PERCENT,
        }
    )


@dataclass(frozen=True)
class RestartEpoch:
    """One epoch after the first, on one rank (the median rank's figures when several):
    its first timed step against the median of its other timed steps."""

    epoch: int
    first_step_seconds: float
    other_steps_median_seconds: float
    extra_seconds: float  # first step - the others' median
    epoch_seconds: float  # the rank's timed steps in the epoch, the first included
    extra_share: float = field(metadata=digits(4))  # of epoch_seconds


@dataclass(frozen=True)
class EpochRestart:
    """In epochs after the first, the first timed step took at least
    ``EPOCH_RESTART_RATIO`` times the median of the epoch's other steps, and its extra time
    was at least ``EPOCH_RESTART_SHARE`` of the epoch: something restarts with every epoch
    (a PyTorch DataLoader's worker processes, without ``persistent_workers=True``)."""

    epochs: list[RestartEpoch]  # the epochs it was found in
    epochs_checked: int  # epochs after the first with enough timed steps
    extra_seconds_mean: float  # per epoch found, over them
    extra_share_mean: float = field(metadata=digits(4))
    framework: str = ""  # the run's framework tag: what the restart is worded as
    threshold_ratio: float = EPOCH_RESTART_RATIO
    threshold_share: float = EPOCH_RESTART_SHARE
    # the run's loader, as its run_start gave it (workloads/record/cpus.py)
    loader_workers: int | None = field(default=None, metadata=IF_KNOWN)
    persistent_workers: bool | None = field(default=None, metadata=IF_KNOWN)
    # worker processes the ranks' training loaders started at those epochs' starts, summed
    # (``loader_workers_started``: a profiled PyTorch rank's); None where not sent
    loader_workers_started: int | None = field(default=None, metadata=IF_KNOWN)


def epoch_ends(
    context: RunContext, epochs: list[int], host: str | None = None
) -> Iterator[WorkloadEvent]:
    """The ranks' ``epoch_end`` events of ``epochs`` (on ``host``, or every host)."""
    wanted = set(epochs)
    for event in context.model.epoch_events:
        if event.event != Event.EPOCH_END or (host is not None and event.host != host):
            continue
        if event_number(event, Workload.EPOCH) in wanted:
            yield event


def workers_started(context: RunContext, epochs: list[int]) -> int | None:
    """Loader worker processes the ranks started at the starts of ``epochs`` (their
    ``epoch_end``s' ``loader_workers_started``); None unless every such epoch_end sent it."""
    total, seen = 0, False
    for event in epoch_ends(context, epochs):
        started = event_number(event, Workload.LOADER_WORKERS_STARTED)
        if started is None:
            return None
        total, seen = total + int(started), True
    return total if seen else None


@dataclass(frozen=True)
class InputWaitHost:
    """A host whose ranks waited for input at least ``INPUT_WAIT_SHARE`` of their step time in
    the settled epochs, with what tells storage from decoding."""

    host: str
    epochs: list[int]
    input_wait_share: float
    cause: str  # epoch_start | storage | decode | others | undetermined
    cpu_util_percent: float | None
    iowait_percent: float | None
    training_read_bytes: float | None
    training_rchar_bytes: float | None
    storage_read_mbps: float | None
    threshold_share: float = INPUT_WAIT_SHARE
    accelerator_utilisation: float | None = field(default=None, metadata=digits(4))
    # images/s over the decode ceiling (measured rate per core x the ranks' cores), mean
    # over the epochs; None: not a JPEG run, or no ceiling or CPU list measured
    decode_ceiling_percent: float | None = field(default=None, metadata=digits(1))
    decode_cores: float | None = field(default=None, metadata=digits(2))
    # the training's own processes' share of the host's CPU time (``training_cpu_percent``)
    training_cpu_percent: float | None = field(default=None, metadata=digits(1))
    # the share of the wait in each epoch's first step (the steps AU leaves out); None where
    # the ranks sent no AU terms or AU is over every step
    first_step_wait_share: float | None = field(default=None, metadata=digits(3))
    epoch_start_threshold_share: float = field(default=EPOCH_START_WAIT_SHARE, metadata=digits(3))
    # the training's storage reads per image trained (None: its reads not sent)
    read_bytes_per_image: float | None = field(default=None, metadata={**IF_KNOWN, **digits(0)})
    data_format: str | None = field(default=None, metadata=IF_KNOWN)  # run_start's
    loader_workers: int | None = field(default=None, metadata=IF_KNOWN)  # run_start's
    # True: epoch 1 alone, its wait the data set's first reads from storage (a cold run on
    # slow storage), which the settled epochs leave out; else not in the evidence
    cold_first_epoch: bool | None = field(default=None, metadata=IF_KNOWN)
    # the ranks' most throttled CPU quota group over the epochs (``QuotaThrottling``)
    cpu_throttled_share: float | None = field(default=None, metadata={**IF_KNOWN, **digits(3)})
    throttled_quota_cpus: float | None = field(default=None, metadata={**IF_KNOWN, **digits(3)})
    throttled_group_holds: str | None = field(default=None, metadata=IF_KNOWN)  # rank | loaders


@dataclass(frozen=True)
class RankUtilisation:
    host: str
    rank: int
    accelerator_utilisation: float = field(metadata=digits(4))


@dataclass(frozen=True)
class AcceleratorUtilisation:
    """A host whose ranks' AU over the settled epochs' timed steps is under MLPerf
    Storage's pass mark while their input wait stays under the input_wait rule's."""

    host: str
    epochs: list[int]
    accelerator_utilisation: float = field(metadata=digits(4))
    input_wait_share: float = field(metadata=digits(4))
    ranks: list[RankUtilisation] = field(default_factory=list)
    pass_mark: float = AU_PASS


@dataclass(frozen=True)
class Startup:
    """Epoch 1 took ``STARTUP_RATIO`` times as long per step as the settled epochs."""

    first_seconds_per_step: float
    settled_seconds_per_step: float
    extra_seconds: float  # per rank, over epoch 1's steps
    extra_seconds_by_part: dict[str, float]  # per rank, seconds
    # build (the framework's warm-up: compute and the rest) | reads (input wait while the
    # training read storage) | input_start (input wait, the reads from the page cache: the
    # input pipeline starting) | mixed
    cause: str
    first_read_bytes: float | None  # the training's storage reads in epoch 1 (all ranks)
    settled_read_bytes: float | None  # per settled epoch
    threshold_ratio: float = STARTUP_RATIO
    framework: str = ""  # the run's framework tag: what its warm-up is worded as


def detect_input_bound(context: RunContext) -> InputBound | None:
    hits = [
        row
        for row, _ in context.hosts_rows()
        if row.cpu_util_percent is not None
        and row.gpu_util_percent is not None
        and row.cpu_util_percent >= CPU_SATURATED_PERCENT
        and row.gpu_util_percent <= GPU_LOW_PERCENT
    ]
    if not hits:
        return None
    return InputBound(
        hosts=sorted({row.host for row in hits}),
        epochs=sorted({row.epoch for row in hits}),
        cpu_util_percent_mean=float(np.mean([row.cpu_util_percent for row in hits])),
        gpu_util_percent_mean=float(np.mean([row.gpu_util_percent for row in hits])),
        host_epochs=[
            BusyHostEpoch(r.host, r.epoch, r.cpu_util_percent, r.gpu_util_percent)
            for r in hits[:20]
        ],
    )


def _restart_on_rank(epoch: int, seconds: np.ndarray) -> RestartEpoch | None:
    """A rank's timed steps of one epoch, in order: the first against the others' median."""
    if seconds.size < 1 + MIN_STEPS_FOR_RESTART:
        return None
    first, median = float(seconds[0]), float(np.median(seconds[1:]))
    total = float(seconds.sum())
    if median <= 0 or total <= 0:
        return None
    extra = first - median
    return RestartEpoch(epoch, first, median, extra, total, extra / total)


def detect_epoch_restart(context: RunContext) -> EpochRestart | None:
    """In epochs after the first, each epoch's first timed step (after the run's warm-up
    steps) against the median of the epoch's other timed steps, per rank from the stored
    step events; per epoch the median rank's. Found where the first step takes at least
    ``EPOCH_RESTART_RATIO`` times the median and its extra time is at least
    ``EPOCH_RESTART_SHARE`` of the epoch's timed steps."""
    complete = complete_epochs(context.report)
    if len(complete) < 2:
        return None
    steps = context.steps()
    epochs = step_epochs(steps, context.model)
    warmup = int(_config_number(context.config, Workload.WARMUP_STEPS) or 0)
    rows = timed_step_rows(steps, epochs, warmup)
    with np.errstate(invalid="ignore"):
        rows = rows[steps.seconds[rows] > 0]
    first_epoch = min(complete)
    rows = rows[np.isin(epochs[rows], [e for e in complete if e != first_epoch])]
    if not rows.size:
        return None
    # in time order within each (host, rank, epoch)
    rows = rows[np.argsort(steps.time_ns[rows], kind="stable")]
    order, starts = _stable_groups(steps.host_index[rows], steps.rank[rows], epochs[rows])
    by_epoch: dict[int, list[RestartEpoch]] = {}
    for group in np.split(rows[order], starts[1:]):
        epoch = int(epochs[group[0]])
        found = _restart_on_rank(epoch, steps.seconds[group])
        if found is not None:
            by_epoch.setdefault(epoch, []).append(found)
    hits = []
    for epoch in sorted(by_epoch):
        ranks = sorted(by_epoch[epoch], key=lambda r: r.extra_share)
        middle = ranks[len(ranks) // 2]  # the median rank (the upper one of two)
        if (
            middle.first_step_seconds >= EPOCH_RESTART_RATIO * middle.other_steps_median_seconds
            and middle.extra_share >= EPOCH_RESTART_SHARE
        ):
            hits.append(middle)
    if not hits:
        return None
    started = workers_started(context, [h.epoch for h in hits])
    if started == 0:  # measured: the loaders kept their workers; an empty queue is no restart
        return None
    return EpochRestart(
        epochs=hits,
        epochs_checked=len(by_epoch),
        extra_seconds_mean=float(np.mean([h.extra_seconds for h in hits])),
        extra_share_mean=float(np.mean([h.extra_share for h in hits])),
        framework=context.run.framework,
        loader_workers=_config_int(context.config, Workload.LOADER_WORKERS),
        persistent_workers=_config_flag(context.config, Workload.PERSISTENT_WORKERS),
        loader_workers_started=started,
    )


def _config_count(config: dict[str, Any], name: str) -> float | None:
    """A count or flag of the run's configuration, 0 included; None when not sent."""
    value = config.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _config_int(config: dict[str, Any], name: str) -> int | None:
    value = _config_count(config, name)
    return None if value is None else int(value)


def _config_flag(config: dict[str, Any], name: str) -> bool | None:
    value = _config_count(config, name)
    return None if value is None else bool(value)


Reads = dict[tuple[str, int], dict[str, float]]  # collector.analysis.anatomy.epoch_reads


def training_reads(reads: Reads, rows: list[RankEpoch], key: str = PROCESS_READ) -> float | None:
    """The training's own reads (``epoch_reads``: ``PROCESS_READ`` or ``PROCESS_RCHAR``) over
    the (host, epoch)s of ``rows``; None unless every one of them has its ranks' reads."""
    keys = {(r.host, r.epoch) for r in rows}
    if not keys or any(k not in reads for k in keys):
        return None
    return sum(reads[k][key] for k in keys)


def _decode_bound(
    decode_ceiling_percent: float | None, own_cpu: float | None, cpu_util_percent: float | None
) -> bool:
    """Decoding at the decode ceiling's bound (the quota's cores full, whatever the host's
    CPUs did); else, unless the input came faster than decoding allows ("past": not decoded
    here), the CPUs saturated by the training's own processes (ranks and loaders; the host's
    CPUs where the training's share was not sent): others filling them is ``others``."""
    verdict = None if decode_ceiling_percent is None else decode_verdict(decode_ceiling_percent)
    if verdict in ("bound", "past"):
        return verdict == "bound"
    busy = own_cpu if own_cpu is not None else cpu_util_percent
    return busy is not None and busy >= CPU_SATURATED_PERCENT


@dataclass(frozen=True)
class QuotaThrottling:
    """A host's ranks' most throttled CPU quota groups over some epochs (their ``epoch_end``s'
    ``cpu_throttled_share``, mean; the smallest quota; "loaders" when every such group held
    only loaders, else "rank")."""

    share: float
    quota_cpus: float
    holds: str


def quota_throttling(context: RunContext, host: str, epochs: list[int]) -> QuotaThrottling | None:
    """The host's ranks' quota throttling over ``epochs``; None where none was sent."""
    shares, quotas, holds = [], [], set()
    for event in epoch_ends(context, epochs, host):
        share = event_number(event, Workload.CPU_THROTTLED_SHARE)
        quota = event_number(event, Workload.THROTTLED_QUOTA_CPUS)
        if share is None or quota is None:
            continue
        shares.append(share)
        quotas.append(quota)
        holds.add(event.fields.get(Workload.THROTTLED_GROUP_HOLDS))
    if not shares:
        return None
    return QuotaThrottling(
        sum(shares) / len(shares), min(quotas), "loaders" if holds == {"loaders"} else "rank"
    )


def _others_saturate(own_cpu: float | None, cpu_util_percent: float | None) -> bool:
    """The host's CPUs saturated while the training's own processes used less than that:
    its loaders waited for CPU that other processes had."""
    return (
        own_cpu is not None
        and cpu_util_percent is not None
        and cpu_util_percent >= CPU_SATURATED_PERCENT
        and own_cpu < CPU_SATURATED_PERCENT
    )


def detect_input_wait(
    context: RunContext, mine: list[RankEpoch], reads: Reads
) -> list[InputWaitHost]:
    """Per host over the settled epochs; and epoch 1 on its own where its wait was the data
    set's first reads from storage (``_cold_first_epoch``), which leaving out the first epoch
    as start-up would hide: a cold run whose storage is slow waits in epoch 1 only."""
    report_rows = {
        (row.host, row.epoch): row for row in context.report.rows if row.host != ALL_HOSTS
    }
    found = []
    later = _by_host(settled(mine))
    for host, members in later.items():
        hit = _input_wait_host(context, host, members, reads, report_rows)
        if hit is not None:
            found.append(hit)
    epochs = sorted({r.epoch for r in mine})
    if len(epochs) >= 2:
        storage_hosts = {f.host for f in found if f.cause == "storage"}
        first = [r for r in mine if r.epoch == epochs[0]]
        for host, members in _by_host(first).items():
            if host in storage_hosts:
                continue  # the settled epochs' finding already puts the wait on storage
            hit = _input_wait_host(context, host, members, reads, report_rows)
            settled_share = _wait_share(later.get(host, []))
            if hit is not None and _cold_first_epoch(context, hit, members, reads, settled_share):
                found.append(replace(hit, cold_first_epoch=True))
    return sorted(found, key=lambda f: (f.host, f.epochs))


def _by_host(rows: list[RankEpoch]) -> dict[str, list[RankEpoch]]:
    by_host: dict[str, list[RankEpoch]] = defaultdict(list)
    for r in rows:
        by_host[r.host].append(r)
    return dict(sorted(by_host.items()))


def _wait_share(members: list[RankEpoch]) -> float:
    seconds = sum(r.seconds for r in members)
    return sum(r.input_wait for r in members) / seconds if seconds > 0 else 0.0


def _cold_first_epoch(
    context: RunContext,
    hit: InputWaitHost,
    members: list[RankEpoch],
    reads: Reads,
    settled_share: float,
) -> bool:
    """Epoch 1's wait was its reads from storage: the ranks' own storage reads were the data
    set (``_reads_are_the_data_set``, not iowait, which a framework's imports also make), the
    wait was spread over the epoch's steps, not held in its first (a loader starting is the
    ``startup`` rule's, as graph building, which waits on no loader, is), and what it waited
    beyond the settled epochs' share (the same loader over the cached set) is itself at least
    ``INPUT_WAIT_SHARE`` of its steps: a loader that waits as long over the cached set was not
    held back by the reads."""
    if hit.cause != "storage" or hit.input_wait_share - settled_share < INPUT_WAIT_SHARE:
        return False
    read_bytes = training_reads(reads, members)
    rchar_bytes = training_reads(reads, members, PROCESS_RCHAR)
    images = sum(r.images for r in members)
    per_image = read_bytes / images if read_bytes is not None and images > 0 else None
    return _reads_are_the_data_set(
        read_bytes, rchar_bytes, per_image, dataset_bytes_per_image(context.config)
    )


def _input_wait_host(
    context: RunContext,
    host: str,
    members: list[RankEpoch],
    reads: Reads,
    report_rows: dict[tuple[str, int], Any],
) -> InputWaitHost | None:
    """The host's input wait over ``members`` (its rows of some epochs) and its cause; None
    under ``INPUT_WAIT_SHARE`` of the step time."""
    cores = run_host_cores(context.model)
    data_format = context.config.get(Workload.DATA_FORMAT)
    decodes = str(data_format or "").lower() in DECODED_FORMATS
    seconds = sum(r.seconds for r in members)
    if seconds <= 0:
        return None
    share = sum(r.input_wait for r in members) / seconds
    if share < INPUT_WAIT_SHARE:
        return None
    epochs = sorted({r.epoch for r in members})
    host_rows = [report_rows[(host, e)] for e in epochs if (host, e) in report_rows]
    cpu = _mean([r.cpu_util_percent for r in host_rows if r.cpu_util_percent is not None])
    own = _mean([r.training_cpu_percent for r in host_rows if r.training_cpu_percent is not None])
    iowait = _mean([r.iowait_percent for r in host_rows if r.iowait_percent is not None])
    storage = _mean([r.storage_read_mbps for r in host_rows if r.storage_read_mbps is not None])
    decoding = _mean(
        [r.decode_ceiling_percent for r in host_rows if r.decode_ceiling_percent is not None]
    )
    read_bytes = training_reads(reads, members)
    rchar_bytes = training_reads(reads, members, PROCESS_RCHAR)
    images = sum(r.images for r in members)
    per_image = read_bytes / images if read_bytes is not None and images > 0 else None
    from_storage = _reads_are_the_data_set(
        read_bytes, rchar_bytes, per_image, dataset_bytes_per_image(context.config)
    )
    first_step = first_step_wait_share(members)
    throttling = quota_throttling(context, host, epochs)
    quota_bound = throttling is not None and throttling.share >= THROTTLED_BOUND_SHARE
    if first_step is not None and first_step >= EPOCH_START_WAIT_SHARE:
        cause = "epoch_start"
    elif from_storage or (iowait is not None and iowait >= IOWAIT_HIGH_PERCENT):
        cause = "storage"
    elif decodes and (quota_bound or _decode_bound(decoding, own, cpu)):
        cause = "decode"
    elif _others_saturate(own, cpu):
        cause = "others"
    else:
        cause = "undetermined"
    return InputWaitHost(
        host, epochs, share, cause, cpu, iowait, read_bytes, rchar_bytes, storage,
        accelerator_utilisation=pooled_utilisation(members),
        decode_ceiling_percent=decoding,
        decode_cores=cores.get(host, (None, ""))[0] if decoding is not None else None,
        training_cpu_percent=own,
        first_step_wait_share=first_step,
        read_bytes_per_image=per_image,
        data_format=str(data_format) if data_format not in (None, "") else None,
        loader_workers=_config_int(context.config, Workload.LOADER_WORKERS),
        cpu_throttled_share=None if throttling is None else throttling.share,
        throttled_quota_cpus=None if throttling is None else throttling.quota_cpus,
        throttled_group_holds=None if throttling is None else throttling.holds,
    )  # fmt: skip


def dataset_bytes_per_image(config: dict[str, Any]) -> float | None:
    """The data set's bytes per image from the run's configuration; None where not sent."""
    data_bytes = _config_count(config, Workload.DATASET_BYTES)
    data_images = _config_count(config, Workload.DATASET_IMAGES)
    if not data_bytes or not data_images or data_bytes <= 0 or data_images <= 0:
        return None
    return data_bytes / data_images


def _reads_are_the_data_set(
    read_bytes: float | None,
    rchar_bytes: float | None,
    per_image: float | None,
    data_set_per_image: float | None,
) -> bool:
    """The training's storage reads were its input: at least ``STORAGE_READ_SHARE`` of all
    it read, and per image trained enough to be the data set, not its libraries."""
    if read_bytes is None or not rchar_bytes or read_bytes <= 0 or per_image is None:
        return False
    if read_bytes / rchar_bytes < STORAGE_READ_SHARE and not _storage_delivered_the_data_set(
        per_image, data_set_per_image
    ):
        return False
    floor = (
        DATASET_READ_SHARE * data_set_per_image
        if data_set_per_image is not None
        else MIN_READ_BYTES_PER_IMAGE
    )
    return per_image >= floor


def _storage_delivered_the_data_set(
    per_image: float | None, data_set_per_image: float | None
) -> bool:
    """Storage gave at least ``STORAGE_READ_SHARE`` of the data set's own bytes per image
    trained: the data set came from storage, whatever share of ``rchar`` that is. A loader
    that reads each file twice (the second time from the page cache) has its storage reads
    at half its rchar even when the whole set came from storage: the matrix's cold throttled
    loop device read 40.1 MB of its 40 MB set from storage in epoch 1, 48% of rchar."""
    if per_image is None or data_set_per_image is None:
        return False
    return per_image >= STORAGE_READ_SHARE * data_set_per_image


def first_step_wait_share(members: list[RankEpoch]) -> float | None:
    """The share of ``members``' input wait outside AU's steps: in a profiled rank's
    epochs, their first steps (``au_steps``). None unless every member sent AU's terms and
    AU leaves some step out. An emulated accelerator's idle time is more than its input
    wait, which leaves nothing outside."""
    if not members or any(r.timed_busy is None or not r.au_seconds for r in members):
        return None
    if sum(r.seconds - (r.au_seconds or 0.0) for r in members) <= 0:
        return None
    wait = sum(r.input_wait for r in members)
    if wait <= 0:
        return None
    au_idle = sum((r.au_seconds or 0.0) - (r.timed_busy or 0.0) for r in members)
    return max(0.0, wait - au_idle) / wait


def pooled_utilisation(members: list[RankEpoch]) -> float | None:
    """AU over ``members``' timed steps, pooled as the per-epoch column pools it (their
    busy seconds over their timed seconds); None unless every one of them sent it."""
    if not members or any(r.timed_busy is None or not r.au_seconds for r in members):
        return None
    busy = sum(r.timed_busy or 0.0 for r in members)
    return float(share_percent(busy, sum(r.au_seconds or 0.0 for r in members))) / 100


def detect_accelerator_utilisation(mine: list[RankEpoch]) -> list[AcceleratorUtilisation]:
    """Per host, over the settled epochs: AU under ``AU_PASS`` while the input wait of the
    steps stays under ``INPUT_WAIT_SHARE`` (above it the input_wait finding, which states
    the AU too, is the one to read)."""
    by_host: dict[str, list[RankEpoch]] = defaultdict(list)
    for r in settled(mine):
        by_host[r.host].append(r)
    found = []
    for host, members in sorted(by_host.items()):
        utilisation = pooled_utilisation(members)
        seconds = sum(r.seconds for r in members)
        if utilisation is None or utilisation >= AU_PASS or seconds <= 0:
            continue
        share = sum(r.input_wait for r in members) / seconds
        if share >= INPUT_WAIT_SHARE:
            continue
        ranks = defaultdict(list)
        for r in members:
            ranks[r.rank].append(r)
        found.append(
            AcceleratorUtilisation(
                host=host,
                epochs=sorted({r.epoch for r in members}),
                accelerator_utilisation=utilisation,
                input_wait_share=share,
                ranks=[
                    RankUtilisation(host, rank, pooled_utilisation(rows) or 0.0)
                    for rank, rows in sorted(ranks.items())
                ],
            )
        )
    return found


def detect_startup(
    mine: list[RankEpoch],
    reads: Reads,
    framework: str = "",
    data_set_per_image: float | None = None,
) -> Startup | None:
    epochs = sorted({r.epoch for r in mine})
    if len(epochs) < 2:
        return None
    first_rows = [r for r in mine if r.epoch == epochs[0]]
    later = [r for r in mine if r.epoch != epochs[0]]
    first, rest = step_profile(first_rows), step_profile(later)
    if first is None or rest is None or rest.seconds <= 0:
        return None
    if first.seconds < STARTUP_RATIO * rest.seconds:
        return None
    ranks = len({(r.host, r.rank) for r in first_rows})
    steps_per_rank = first.steps / ranks
    extra = {
        part: max(0.0, (first.part(part) - rest.part(part)) * steps_per_rank)
        for part in ("input_wait", "compute", "communication", "other")
    }
    reads_extra = extra["input_wait"]
    build_extra = extra["compute"] + extra["other"]
    total = sum(extra.values())
    first_reads = training_reads(reads, first_rows)
    if reads_extra >= 2 * build_extra:
        first_rchar = training_reads(reads, first_rows, PROCESS_RCHAR)
        first_images = sum(r.images for r in first_rows)
        per_image = first_reads / first_images if first_reads and first_images > 0 else None
        cached = first_reads is not None and (
            first_reads == 0
            or bool(
                first_rchar
                and first_reads < STORAGE_READ_SHARE * first_rchar
                and not _storage_delivered_the_data_set(per_image, data_set_per_image)
            )
        )
        cause = "input_start" if cached else "reads"
    elif build_extra >= 2 * reads_extra:
        cause = "build"
    else:
        cause = "mixed"
    later_reads = training_reads(reads, later)
    later_epochs = len({r.epoch for r in later})
    return Startup(
        first_seconds_per_step=first.seconds,
        settled_seconds_per_step=rest.seconds,
        extra_seconds=total,
        extra_seconds_by_part=extra,
        cause=cause,
        first_read_bytes=first_reads,
        settled_read_bytes=later_reads / later_epochs if later_reads is not None else None,
        framework=framework,
    )


def input_wait(context: RunContext) -> list[Finding]:
    rows = _complete(context, rank_epochs(context.model))
    reads = epoch_reads(context.model)
    return [words(found) for found in detect_input_wait(context, rows, reads)]


def accelerator_utilisation(context: RunContext) -> list[Finding]:
    rows = _complete(context, rank_epochs(context.model))
    return [words(found) for found in detect_accelerator_utilisation(rows)]


def startup(context: RunContext) -> list[Finding]:
    rows = _complete(context, rank_epochs(context.model))
    return _worded(
        detect_startup(
            rows,
            epoch_reads(context.model),
            context.run.framework,
            dataset_bytes_per_image(context.config),
        )
    )


@words.register
def word_input_bound(found: InputBound) -> Finding:
    return Finding(
        rule="input_bound",
        severity=WARNING,
        title="Input-bound: CPUs saturated while GPUs wait",
        explanation=(
            f"On {', '.join(found.hosts)} in epoch{_plural(found.epochs)} "
            f"{epoch_list(found.epochs)}, CPUs were {found.cpu_util_percent_mean:.0f}% busy "
            f"while GPUs ran kernels {found.gpu_util_percent_mean:.0f}% of the time. The input "
            "pipeline (JPEG decoding, augmentation) cannot feed the GPUs: more decoding "
            "threads, a faster CPU, GPU decoding or pre-processed records would raise "
            "throughput."
        ),
        evidence=evidence_json(found),
        chart=CPU_UTIL,
    )


# what restarts with every epoch, and what keeps it, per framework (framework_kind)
RESTART_WORDS = {
    "pytorch": (
        "DataLoader worker start-up",
        "the DataLoader's worker processes start again at every epoch (each new iterator "
        "forks num_workers processes, which import, open the data set and fill their "
        "prefetch queues before the first batch). Create the DataLoader with "
        "persistent_workers=True (and num_workers > 0) to keep them across epochs",
    ),
    "tensorflow": (
        "input pipeline restart",
        "the input pipeline starts again at every epoch (a new tf.data iterator fills its "
        "shuffle and prefetch buffers before the first batch). Iterate one repeated data "
        "set across epochs to keep it",
    ),
    "mxnet": (
        "data loader restart",
        "the data loader starts again at every epoch (its workers and prefetch before the "
        "first batch). Keep one loader's workers across epochs to avoid it",
    ),
    "unknown": (
        "input restart",
        "something starts again at every epoch, most often the input pipeline's workers "
        "or iterator (for a PyTorch DataLoader: persistent_workers=True keeps them)",
    ),
}


def restart_text(hit: RestartEpoch) -> str:
    return (
        f"epoch {hit.epoch}: {hit.first_step_seconds:,.2f} s against "
        f"{hit.other_steps_median_seconds:,.2f} s ({format_fraction(hit.extra_share)} of the "
        "epoch)"
    )


def loader_text(found: EpochRestart) -> str:
    """What the run's ranks said of their loader (``run_start``), when they did."""
    if found.loader_workers is None:
        return ""
    text = f" The training's loader: {found.loader_workers} workers"
    if found.persistent_workers is None:
        return text + "."
    return text + f", persistent_workers={found.persistent_workers}."


def workers_kept(found: EpochRestart) -> bool:
    """The run said its loader keeps its worker processes across epochs, and no measured
    worker start says otherwise."""
    if found.loader_workers_started:
        return False
    return bool(found.persistent_workers) and bool(found.loader_workers)


def started_text(found: EpochRestart) -> str:
    """Worker starts measured at those epochs' starts (a profiled PyTorch rank's)."""
    started = found.loader_workers_started
    if not started:
        return ""
    text = (
        f" {started} loader worker process{'' if started == 1 else 'es'} started at those "
        "epochs' starts (seen at each DataLoader pass)"
    )
    if found.persistent_workers:
        text += (
            ", although persistent_workers=True: the DataLoader is made anew each epoch, and"
            " a new DataLoader starts its own workers; make it once, outside the epoch loop"
        )
    return text + "."


# A loader that keeps its workers still starts each epoch with an empty prefetch queue: its
# first batch waits for a worker to load it, which is no restart (measured on the matrix's
# healthy PyTorch script: 2.2-3.1x the epoch's other steps, every run)
KEPT_WORKERS_TEXT = (
    "persistent_workers=True: its workers were not started again. A kept loader's new "
    "iterator still begins with an empty prefetch queue, so the epoch's first batch waits "
    "for a worker to load it; a loader or sampler made anew every epoch would add to that. "
    "Which of these it was is not known from what the run sent; the loader's own start-up "
    "is ruled out"
)


@words.register
def word_epoch_restart(found: EpochRestart) -> Finding:
    short, long = RESTART_WORDS[framework_kind(found.framework)]
    worst = max(found.epochs, key=lambda h: h.first_step_seconds / h.other_steps_median_seconds)
    ratio = worst.first_step_seconds / worst.other_steps_median_seconds
    listing = "; ".join(restart_text(h) for h in found.epochs[:6])
    more = f" and {len(found.epochs) - 6} more" if len(found.epochs) > 6 else ""
    severity = WARNING if found.extra_share_mean >= 2 * EPOCH_RESTART_SHARE else INFO
    cause = f"Most likely {long}.{loader_text(found)}{started_text(found)}"
    if workers_kept(found):  # the stated cause is ruled out: what was seen, not a guess
        short = "the first batch is loaded again"
        cause = f"The training's loader: {found.loader_workers} workers, {KEPT_WORKERS_TEXT}."
        severity = INFO
    return Finding(
        rule="epoch_restart",
        severity=severity,
        title=f"An epoch's first step took up to {ratio:.1f}x its others: {short}",
        explanation=(
            f"In {len(found.epochs)} of {found.epochs_checked} epochs after the first, the "
            f"first timed step took at least {found.threshold_ratio:.0f}x the median of the "
            f"epoch's other steps, {found.extra_seconds_mean:,.2f} s extra per epoch "
            f"({format_fraction(found.extra_share_mean)} of it): {listing}{more}. {cause}"
        ),
        evidence=evidence_json(found),
        chart=IMAGES_PER_SECOND,
    )


CAUSE_TEXT = {
    "epoch_start": "The wait was the epochs' start: what starts again with every epoch (a"
    " DataLoader's worker processes without persistent_workers=True, an input iterator made"
    " per epoch) held each epoch's first batch back; persistent workers or longer epochs"
    " would help, more workers would not",
    "storage": "Storage-bound: the training's reads came from storage"
    " (or the CPUs sat in iowait); a faster file system, more read-ahead or caching the data"
    " set would help",
    "decode": "Decode-bound: decoding and augmenting took all the CPU the input pipeline may"
    " use (the host's cores, or a CPU quota's); more"
    " or faster cores, GPU decoding (DALI) or pre-processed records would help",
    "others": "The node's CPUs were saturated by other processes than the training's: its"
    " loaders waited for CPU (the contention finding names who else ran); fewer neighbours,"
    " a CPU reservation or pre-processed records would help",
    "undetermined": "What held the input back is not known from what the run sent: neither"
    " storage nor decoding nor other processes were shown to be the limit",
}


@words.register
def word_input_wait_host(found: InputWaitHost) -> Finding:
    def number(value: float | None, unit: str, digits: int = 0) -> str:
        return "not measured" if value is None else f"{value:,.{digits}f}{unit}"

    return Finding(
        rule="input_wait",
        severity=WARNING if found.input_wait_share >= 2 * INPUT_WAIT_SHARE else INFO,
        title=(
            f"Input-bound on {found.host}: {format_fraction(found.input_wait_share)} of step time "
            f"waiting for data ({found.cause.replace('_', ' ')})"
        ),
        explanation=(
            f"In epoch{'s' if len(found.epochs) > 1 else ''} "
            f"{', '.join(map(str, found.epochs))} the ranks on {found.host} waited for their "
            f"next batch {format_fraction(found.input_wait_share)} of the step time. CPU "
            f"{number(found.cpu_util_percent, '%')} busy, iowait "
            f"{number(found.iowait_percent, '%', 1)}, storage "
            f"{number(found.storage_read_mbps, ' MB/s', 1)}; the training itself read "
            f"{_measured_bytes(found.training_read_bytes)} from storage of "
            f"{_measured_bytes(found.training_rchar_bytes)} read in all. "
            + CAUSE_TEXT[found.cause]
            + "."
            + cold_sentence(found)
            + first_step_sentence(found)
            + unknown_sentence(found)
            + throttled_sentence(found)
            + decode_sentence(found.decode_ceiling_percent, found.decode_cores)
            + au_sentence(found.accelerator_utilisation)
        ),
        evidence=evidence_json(found),
        chart=INPUT_WAIT,
    )


def cold_sentence(found: InputWaitHost) -> str:
    """Epoch 1 alone: its wait was the data set's first reads from storage."""
    if not found.cold_first_epoch:
        return ""
    return (
        " Only the first epoch waited: the data set was read from storage then (cold), and the"
        " later epochs found it in the page cache; a cold start (a new node, a new job, a"
        " data set larger than memory) waits like this on this storage."
    )


def first_step_sentence(found: InputWaitHost) -> str:
    """How much of the wait fell in the epochs' first steps, where that decided the cause."""
    if found.cause != "epoch_start" or found.first_step_wait_share is None:
        return ""
    return (
        f" {format_fraction(found.first_step_wait_share)} of the wait fell in the epochs'"
        " first steps."
    )


def unknown_sentence(found: InputWaitHost) -> str:
    """For a cause not known: what was measured against what would tell, and what was not
    sent (the loader's worker count, the data format, the training's reads and CPU)."""
    if found.cause != "undetermined":
        return ""
    seen = []
    if found.read_bytes_per_image is not None:
        seen.append(
            f"the training's storage reads were {_bytes(found.read_bytes_per_image)} per image "
            "trained, too few to be its data set"
        )
    if found.data_format is not None and found.data_format.lower() not in DECODED_FORMATS:
        seen.append(f"its data format is {found.data_format}, not pictures it decodes")
    if found.loader_workers is not None:
        seen.append(f"its loader ran {found.loader_workers} worker processes")
    missing = []
    if found.loader_workers is None:
        missing.append("the loader's worker count")
    if found.data_format is None:
        missing.append("the data format")
    if found.training_read_bytes is None:
        missing.append("the training's own reads")
    if found.training_cpu_percent is None:
        missing.append("the training's own CPU time")
    text = f" Measured: {'; '.join(seen)}." if seen else ""
    if missing:
        text += f" Not sent: {', '.join(missing)}."
    return (
        text + " A loader that sleeps or waits on something else (a slow transform, a remote"
        " service, too few workers) looks like this; profile one loader worker to find it."
    )


def throttled_sentence(found: InputWaitHost) -> str:
    """What the ranks' or loaders' CPU quota did (empty where no quota group was read)."""
    share, quota = found.cpu_throttled_share, found.throttled_quota_cpus
    if share is None or quota is None:
        return ""
    whose = "loader workers'" if found.throttled_group_holds == "loaders" else "training's"
    ran_out = (
        f"The {whose} cgroup CPU quota of {quota:g} CPUs ran out in "
        f"{format_fraction(share)} of its scheduling periods (cpu.stat)"
    )
    if share >= THROTTLED_BOUND_SHARE:
        return (
            f" {ran_out}: they wanted more CPU than the quota gives, so the input could come "
            "no faster; a larger quota (or fewer, lighter transforms per picture) would help."
        )
    return f" {ran_out}, under the {format_fraction(THROTTLED_BOUND_SHARE)} of a limit."


def decode_sentence(percent: float | None, cores: float | None) -> str:
    """The input's images/s against the decode ceiling, with the rule for "CPU-bound
    input" (``decode_verdict``; empty when not measured)."""
    if percent is None or cores is None:
        return ""
    of = f"the measured decode rate of {cores:g} core{'' if cores == 1 else 's'}"
    verdict = decode_verdict(percent)
    if verdict == "bound":
        return f" Input decoding at {percent:.0f}% of {of}: CPU-bound input."
    if verdict == "past":
        return (
            f" Input at {percent:.0f}% of {of}, past {100 * DECODE_PAST_SHARE:.0f}%: the "
            "pictures were not decoded one by one at this rate (decoded beforehand and kept "
            "as tensors, or much smaller than the 500x375 measured), so decoding was not "
            "the limit."
        )
    return (
        f" Input decoding at {percent:.0f}% of {of}, under the "
        f"{100 * DECODE_BOUND_SHARE:.0f}% that would mean the cores could decode no faster: "
        "the cores were also busy with other work (the training's own compute on CPU-only "
        "ranks, other processes) or the loader's workers were too few."
    )


def au_sentence(utilisation: float | None) -> str:
    """The AU the MLPerf Storage way, against its pass mark (empty when not measured)."""
    if utilisation is None:
        return ""
    verdict = "under" if utilisation < AU_PASS else "at or over"
    return (
        f" Accelerator utilisation (AU, the MLPerf Storage way: timed step time not "
        f"waiting for input) was {format_fraction(utilisation)}, {verdict} the "
        f"{format_fraction(AU_PASS)} MLPerf Storage requires for ResNet-50."
    )


@words.register
def word_accelerator_utilisation(found: AcceleratorUtilisation) -> Finding:
    ranks = ", ".join(
        f"rank {r.rank} {format_fraction(r.accelerator_utilisation)}" for r in found.ranks
    )
    return Finding(
        rule="accelerator_utilisation",
        severity=INFO,
        title=(
            f"AU {format_fraction(found.accelerator_utilisation)} on {found.host}: under "
            f"MLPerf Storage's {format_fraction(found.pass_mark)} for ResNet-50"
        ),
        explanation=(
            f"In epoch{'s' if len(found.epochs) > 1 else ''} "
            f"{', '.join(map(str, found.epochs))} the ranks on {found.host} spent "
            f"{format_fraction(found.accelerator_utilisation)} of their timed step time "
            f"computing (forward, backward, all-reduce, optimizer) and the rest waiting for "
            f"their next batch ({ranks}). The wait is "
            f"{format_fraction(found.input_wait_share)} of step time, under the "
            f"{format_fraction(INPUT_WAIT_SHARE)} that makes it input-bound, but a storage "
            "system MLPerf Storage would pass keeps the accelerators busy "
            f"{format_fraction(found.pass_mark)} of the time or more."
        ),
        evidence=evidence_json(found),
        chart=ACCELERATOR_UTIL,
    )


def startup_reads_text(found: Startup) -> str:
    if found.first_read_bytes is None and found.settled_read_bytes is None:
        return "The training's own reads were not measured (its ranks sent none). "
    return (
        f"The training read {_measured_bytes(found.first_read_bytes)} from storage in epoch 1 and "
        f"{_measured_bytes(found.settled_read_bytes)} per later epoch. "
    )


# what a framework does in its first steps besides reading: (short, with its parts)
WARMUP_WORDS = {
    "tensorflow": ("graph building and XLA compilation", "graph building and XLA compilation"),
    "mxnet": ("hybridize and graph building", "hybridize (building the symbolic graph)"),
    "pytorch": (
        "eager start-up",
        "the eager loop's start-up: data loader workers starting, first-batch allocation, "
        "cudnn autotune",
    ),
    "unknown": ("warm-up", "warm-up"),
}


@words.register
def word_startup(found: Startup) -> Finding:
    ratio = found.first_seconds_per_step / found.settled_seconds_per_step
    parts = ", ".join(
        f"{PART_LABELS[p]} +{s:,.1f} s" for p, s in found.extra_seconds_by_part.items() if s > 0.05
    )
    short, long = WARMUP_WORDS[framework_kind(found.framework)]
    title_cause, cause = {
        "build": (short, f"{long} (compute and the rest of the step), not storage"),
        "reads": (
            "the first reads of the data set",
            "the first reads of the data set (input wait)",
        ),
        "input_start": (
            "the input pipeline's start-up",
            "the input pipeline's start-up (input wait), not storage: its loader workers"
            " starting (with the spawn start method each imports the framework afresh) and"
            " filling their first batches",
        ),
        "mixed": (f"both {short} and first reads", f"both {long}; and first reads"),
    }[found.cause]
    return Finding(
        rule="startup",
        severity=INFO,
        title=f"Epoch 1 took {ratio:.1f}x as long per step: {title_cause}",
        explanation=(
            f"Epoch 1 ran {found.first_seconds_per_step * 1000:,.0f} ms per step against "
            f"{found.settled_seconds_per_step * 1000:,.0f} later: {found.extra_seconds:,.1f} s "
            f"extra per rank ({parts}). Mostly {cause}. {startup_reads_text(found)}"
            "Throughput figures leave the warm-up steps out for this reason."
        ),
        evidence=evidence_json(found),
        chart=INPUT_WAIT if found.cause in ("reads", "input_start") else COMPUTE,
    )
