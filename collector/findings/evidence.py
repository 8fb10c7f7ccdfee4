"""What the findings rules measure: a ``Finding``, each rule's thresholds, and each rule's
typed evidence.

A rule first *detects* (``collector.findings.engine``: a pure function of the run's report and
runs, returning one of the evidence types below or None), and its evidence is then *worded*
(``collector.findings.words``: title, explanation, severity and chart, a pure function of
the evidence). The evidence holds the values as measured; ``evidence_json`` is the
finding's ``evidence`` mapping (JSON, the read API), rounded where a field declares
``digits``.

Units are declared once, by a field's name: its suffix (``_bytes``, ``_mbps``,
``_percent``, ``_ratio``, ``_seconds``, ``images_per_second``; a fraction's ``_share``,
``_fraction``, ``relative_difference``) is what ``collector.views.evidence`` turns into the unit
shown beside the value (a fraction in percent); a field without one is a count, an epoch, a
host or a name.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from enum import StrEnum
from typing import Any

from contract.columns import BY_NAME, ReportColumn

INFO, WARNING, CRITICAL = "info", "warning", "critical"
SEVERITY_ORDER = {CRITICAL: 0, WARNING: 1, INFO: 2}
BYTES_PER_MB = 1_000_000

# cache warm-up
# judged against the data set's size when the run reports it: epoch 1 read at least a quarter of
# the data set from storage, later epochs at most a tenth of it
FIRST_EPOCH_DATASET_SHARE = 0.25
SETTLED_READ_FRACTION = 0.10
# without the data set's size: epoch 1 read at least this much, later epochs a tenth of it
MIN_FIRST_EPOCH_READ_BYTES = 100 * BYTES_PER_MB
MLPERF_STORAGE_RAM_MULTIPLE = 5  # data set >= 5 x RAM to measure storage
# the data set's measured page-cache residency (collector.analysis.residency): at least this
# share of its bytes cached is "in memory" (a few pages of a file may be out at any time)
CACHED_PERCENT = 95.0
# the data set evicted: after the first epoch, a host-epoch's own reads brought in at least
# this share of the data set beyond what the cache kept (read + cached at start - cached at
# end), and at least MIN_EVICTED_BYTES: the pages of libraries a rank first touches after
# epoch 1 count in its reads too (1.7 MB in epoch 2 of a PyTorch run here)
EVICTED_SHARE = 0.25
MIN_EVICTED_BYTES = 20 * BYTES_PER_MB
# The kernel's reclaim evicted the data set when the file refaults over the epoch come to
# at least this share of what the ranks read (every page read back after reclaim is one;
# measured here 0.99-1.0 of the bytes read again). The run's own Slurm job's refaults where
# the agent sampled its cgroup, else the host's: those count every job's files, so others'
# refaults can add to an invalidation's (0.44 of the bytes read beside a pip install).
REFAULT_SHARE = 0.75
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
UTILISATION_CHANGE_POINTS = 10.0
# scaling loss with the step anatomy (collector.findings.anatomy): a rank trains at least 5%
# fewer images/s than in the reference run; 10% a warning, 25% critical
SCALING_LOSS_MIN_FRACTION = 0.05
SCALING_WARNING_FRACTION = 0.10
SCALING_CRITICAL_FRACTION = 0.25
# input wait, stragglers and start-up (collector.findings.anatomy)
INPUT_WAIT_SHARE = 0.20
# The wait is the epoch's start when at least this share of it fell in the steps AU leaves
# out (a profiled epoch's first): what restarts with each epoch held the first batch back
EPOCH_START_WAIT_SHARE = 2 / 3
# reads at >= 80% of the disk's measured ceiling (agent ceilings) are at its limit
CEILING_BOUND_SHARE = 0.80
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


def link_verdict(share: float, least_share: float | None) -> str:
    """What the all-reduce's share of the link says (percent: its bytes over the ranks'
    wait, an upper bound when it ran behind backward too), with the least share it can
    have had (``least_share``: over the wait and the whole of compute): "bound"
    (bandwidth-bound: both at ``CEILING_BOUND_SHARE``), "not_shown" (only the upper bound
    is) or "under" (not bandwidth)."""
    if share < 100 * CEILING_BOUND_SHARE:
        return "under"
    if least_share is not None and least_share < 100 * CEILING_BOUND_SHARE:
        return "not_shown"
    return "bound"


STORAGE_READ_SHARE = 0.5  # read_bytes / rchar: the training's reads came from storage
# MLPerf Storage's pass mark for ResNet-50 (and UNet3D): accelerator utilisation >= 90%
AU_PASS = 0.90
# a straggler: one part of a rank's step runs longer than the other ranks' median of that
# part by 15% of the step (and 5 ms at least)
STRAGGLER_PART_SHARE = 0.15
STRAGGLER_MIN_SECONDS = 0.005
STARTUP_RATIO = 1.5
# epoch restart: an epoch's first timed step takes 3x the median of its others, and the
# extra time is at least 5% of the epoch
EPOCH_RESTART_RATIO = 3.0
EPOCH_RESTART_SHARE = 0.05
MIN_STEPS_FOR_RESTART = 3  # other timed steps in the epoch to take their median
# precision read demand
PRECISION_READ_RATIO = 1.25  # study 003: FP16 read 550 MB/s where FP32 read 430 (1.28x)
# inference (collector.analysis.inference)
INT8_TOP1_LOSS_LIMIT = 0.01  # a fraction: one percentage point of top-1
SATURATION_GAIN = 0.10  # a larger batch giving < 10 % more images/s adds nothing
# a measurement to quote: at least 3 s of timed batches (20 batches of one picture, 0.07 s,
# gave INT8 speed-ups of 5.48x and 4.73x on two runs) and p90/p10 of its batches <= 1.5
MIN_TIMED_SECONDS = 3.0
SPREAD_LIMIT = 1.5
# INT8 under FP32's images/s at every batch size measured: no speed-up to quote
INT8_NO_FASTER = 1.0


@dataclass(frozen=True)
class Finding:
    """``chart`` is the report column (``contract.columns``) that shows the finding, given
    as the declared column or its name and kept as the name; "" for none."""

    rule: str
    severity: str  # info | warning | critical
    title: str
    explanation: str
    evidence: dict[str, Any] = field(default_factory=dict)
    chart: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.chart, ReportColumn):
            object.__setattr__(self, "chart", self.chart.name)
        if self.chart and self.chart not in BY_NAME:
            raise ValueError(f"finding {self.rule}: chart {self.chart!r} is no report column")
        if self.severity not in SEVERITY_ORDER:
            raise ValueError(f"finding {self.rule}: unknown severity {self.severity!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------
# evidence as JSON
# --------------------------------------------------------------------------------------


def digits(count: int) -> dict[str, int]:
    """Field metadata: the value is rounded to ``count`` digits in the finding's JSON (0: a
    whole number)."""
    return {"digits": count}


HIDDEN = {"hidden": True}  # a field the wording reads that is no evidence of its own
IF_KNOWN = {"if_known": True}  # left out of the JSON when None (e.g. no comparison made)


def _round(value: Any, digits: int | None) -> Any:
    if digits is None or value is None or isinstance(value, bool):
        return value
    if isinstance(value, float | int) and math.isfinite(value):
        return round(value) if digits == 0 else round(value, digits)
    return value


def evidence_json(evidence: Any) -> Any:
    """A rule's evidence as the finding's ``evidence``: a dataclass as a mapping of its
    fields in order (nested ones likewise), rounded where a field declares ``digits``;
    ``hidden`` fields, and ``if_known`` ones that are None, left out."""
    if is_dataclass(evidence) and not isinstance(evidence, type):
        return {
            f.name: _round(evidence_json(getattr(evidence, f.name)), f.metadata.get("digits"))
            for f in fields(evidence)
            if not f.metadata.get("hidden")
            and not (f.metadata.get("if_known") and getattr(evidence, f.name) is None)
        }
    if isinstance(evidence, list | tuple):
        return [evidence_json(item) for item in evidence]
    if isinstance(evidence, dict):
        return {key: evidence_json(value) for key, value in evidence.items()}
    return evidence


# --------------------------------------------------------------------------------------
# each rule's evidence
# --------------------------------------------------------------------------------------


class StorageReads(StrEnum):
    """Which storage reads a rule judged."""

    # the training's own: its ranks' /proc/<pid>/io read_bytes
    # (collector.analysis.anatomy.epoch_reads), judged when every rank of every host sent
    # them in every epoch judged
    TRAINING = "training"
    # the hosts' disks and NFS servers: every process's reads, the training's among them
    HOSTS = "hosts"


@dataclass(frozen=True)
class CacheWarmup:
    """Storage reads high in epoch 1, then fallen: later epochs read from the page cache.
    The ``*storage_read*`` fields are the reads named by ``reads_judged``."""

    reads_judged: StorageReads = field(default=StorageReads.HOSTS, kw_only=True)
    first_epoch: int
    first_epoch_storage_read_bytes: float
    first_epoch_storage_read_mbps: float | None
    settled_from_epoch: int  # the first later epoch that read at most the settled limit
    settled_storage_read_bytes_mean: float = field(
        metadata=digits(0)
    )  # the second half of later epochs
    settled_to_first_ratio: float = field(metadata=digits(4))
    first_epoch_read_to_dataset_ratio: float | None = field(default=None, metadata=digits(3))
    storage_read_bytes_by_epoch: dict[int, float] = field(default_factory=dict)  # first 10
    # the hosts' disk and NFS reads beside the training's own, when those were judged
    hosts_storage_read_bytes_by_epoch: dict[int, float | None] | None = field(
        default=None, metadata=IF_KNOWN
    )
    first_epoch_page_cache_growth_bytes_per_host: float | None = field(
        default=None, metadata=digits(0)
    )
    page_cache_growth_to_dataset_ratio: float | None = field(default=None, metadata=digits(3))
    dataset_bytes: float | None = None
    host_memory_bytes: float | None = None
    dataset_to_memory_ratio: float | None = field(default=None, metadata=digits(3))
    # measured (mincore): the data set's share in the page cache before the run, at the
    # end of the first epoch, and at the start of each epoch (the first 10); None: the
    # ranks did not measure it, and the reads alone decided
    dataset_cached_before_run_percent: float | None = field(
        default=None, metadata={**IF_KNOWN, **digits(1)}
    )
    dataset_cached_after_first_epoch_percent: float | None = field(
        default=None, metadata={**IF_KNOWN, **digits(1)}
    )
    dataset_cached_start_percent_by_epoch: dict[int, float] | None = field(
        default=None, metadata=IF_KNOWN
    )

    @property
    def measured(self) -> bool:
        """The data set's residency was measured (and decided the finding)."""
        return self.dataset_cached_before_run_percent is not None

    @property
    def measures_memory(self) -> bool:
        """Later epochs measure memory: the data set is below MLPerf Storage's 5 x RAM."""
        ratio = self.dataset_to_memory_ratio
        return ratio is not None and ratio < MLPERF_STORAGE_RAM_MULTIPLE


@dataclass(frozen=True)
class DatasetCachedBeforeRun:
    """At least ``CACHED_PERCENT`` of the data set sat in every host's page cache before the
    run (measured with mincore): epoch 1 read it from memory, and its storage reads were
    other files (the libraries the ranks loaded)."""

    dataset_cached_before_run_percent: float = field(metadata=digits(1))  # the least host's
    dataset_files_bytes: float  # the data set's files (train and val) on one host
    first_epoch: int
    # what the training (or the hosts) read from storage in that epoch: not the data set
    first_epoch_storage_read_bytes: float | None
    reads_judged: StorageReads = StorageReads.HOSTS
    dataset_cached_start_percent_by_epoch: dict[int, float] = field(default_factory=dict)
    hosts_cached_before_run_percent: dict[str, float] | None = field(
        default=None, metadata=IF_KNOWN
    )  # several hosts: each one's
    dataset_to_memory_ratio: float | None = field(default=None, metadata=digits(4))


@dataclass(frozen=True)
class DatasetFitsInMemory:
    """The data set is below ``MLPERF_STORAGE_RAM_MULTIPLE`` x a host's RAM."""

    dataset_bytes: float
    host_memory_bytes: float
    dataset_to_memory_ratio: float = field(metadata=digits(3))
    required_ratio: int = MLPERF_STORAGE_RAM_MULTIPLE
    # measured: the data set's share in the page cache at the end of the run's last epoch
    dataset_cached_at_end_percent: float | None = field(
        default=None, metadata={**IF_KNOWN, **digits(1)}
    )

    @property
    def fits(self) -> bool:
        return self.dataset_to_memory_ratio <= 1.0


@dataclass(frozen=True)
class EvictedHostEpoch:
    host: str
    epoch: int
    dataset_cached_start_percent: float = field(metadata=digits(1))
    dataset_cached_end_percent: float = field(metadata=digits(1))
    training_read_bytes: int  # the ranks' own reads from storage over the epoch
    # at least this much of the data set left the page cache during the epoch and was read
    # again: read + cached at the start - cached at the end
    evicted_bytes: float = field(metadata=digits(0))
    # of the data set's bytes: over 100 where pages left, were read and left again
    evicted_percent: float = field(metadata=digits(1))
    # the host's page cache over the epoch (every file's): a neighbour's memory shrinks it
    page_cache_delta_bytes: int | None = field(default=None, metadata=IF_KNOWN)
    # how the pages left (``eviction_cause``): drop_caches, reclaim, invalidated, or unknown
    # where the agent counted neither of the two below
    cause: str = "unknown"
    page_cache_drops: int | None = field(default=None, metadata=IF_KNOWN)
    file_refault_bytes: int | None = field(default=None, metadata=IF_KNOWN)  # the host's
    # the refaults judged against the reads: the run's own job's ("job") or the host's
    refaults_judged: str | None = field(default=None, metadata=IF_KNOWN)
    refault_bytes_judged: float | None = field(default=None, metadata=IF_KNOWN)
    # whose pages came back after reclaim: each Slurm job sampled on the host -> its file
    # refaults over the epoch, most first (collector.analysis.jobs.refaults_by_job); None
    # where no job was sampled
    refaults_by_job: dict[str, float] | None = field(default=None, metadata=IF_KNOWN)


@dataclass(frozen=True)
class DatasetEvicted:
    """After the first epoch, the data set left a host's page cache and the ranks read it
    from storage again."""

    epochs: list[int]
    host_epochs: list[EvictedHostEpoch]
    worst: EvictedHostEpoch
    dataset_files_bytes: float  # the data set's files on one host
    dataset_to_memory_ratio: float | None = field(default=None, metadata=digits(3))
    run_job_id: str | None = field(default=None, metadata=IF_KNOWN)  # the run's Slurm job


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
    step_images_per_second_cv: float = field(metadata=digits(4))
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
class ResourceUse:
    """Per-run resource figures compared across node counts."""

    fabric_bytes_per_image: float | None
    storage_read_mbps_per_node: float | None
    cpu_util_percent: float | None
    gpu_util_percent: float | None


@dataclass(frozen=True)
class RateGrowth:
    """A per-image or per-node resource that grew ``ratio`` times (None: from zero)."""

    resource: str  # a ResourceUse field
    reference: float
    run: float
    ratio: float | None = field(default=None, metadata=digits(2))


@dataclass(frozen=True)
class UtilisationGrowth:
    """A utilisation that rose by ``change_points`` percentage points."""

    resource: str  # a ResourceUse field
    reference: float
    run: float
    change_points: float = field(metadata=digits(2))


STEP_PARTS = (
    "communication",
    "input_wait",
    "compute",
    "other",
)  # collector.analysis.anatomy's four


@dataclass(frozen=True)
class PartChange:
    """One part of the step (``STEP_PARTS``) in the reference run and in this run, mean
    seconds per step, its share of the step's growth per step (negative: it shrank,
    offsetting) and that share of the images/s lost to scaling (the scaling table's)."""

    part: str
    reference_seconds: float  # per step
    run_seconds: float
    loss_share: float = field(metadata=digits(4))  # of the growth of the whole step
    # loss_share x the scaling table's images/s lost; None when the group has no 1-GPU run
    lost_images_per_second: float | None


@dataclass(frozen=True)
class ScalingAttribution:
    """The step anatomy of this run against the reference run's, over the settled epochs
    (every epoch after the first when there are two or more; ``epochs`` and
    ``reference_epochs`` name them): each rank's images/s there, and how the parts of the
    step that grew share the images/s lost to scaling. That loss is the scaling table's,
    ideal - actual over the whole run (``collector.analysis.scaling.lost_to_scaling``): the
    parts' shares of the per-rank slow-down measured in those epochs, applied to it, so
    that they add up to it. The fabric's bytes per step per node stand beside them."""

    reference_run: str
    reference_ranks: int
    ranks: int
    epochs: list[int]  # this run's epochs the split was measured on
    reference_epochs: list[int]  # the reference run's
    reference_images_per_second_per_rank: float
    images_per_second_per_rank: float
    # the scaling table's ideal - actual for this run; None: the group has no 1-GPU run
    lost_images_per_second: float | None
    lost_fraction_per_rank: float = field(metadata=digits(4))  # of the reference's per rank
    reference_seconds_per_step: float
    seconds_per_step: float
    parts: list[PartChange]  # largest share of the loss first
    reference_fabric_bytes_per_step: float | None
    fabric_bytes_per_step: float | None
    # a run with one epoch has no settled epochs: its epoch 1, start-up included, is compared
    start_up_included: bool = False
    # each rank's compute threads and where they came from (run_start), in both runs
    threads_per_rank: int | None = field(default=None, metadata=IF_KNOWN)
    threads_source: str | None = field(default=None, metadata=IF_KNOWN)
    reference_threads_per_rank: int | None = field(default=None, metadata=IF_KNOWN)
    reference_threads_source: str | None = field(default=None, metadata=IF_KNOWN)
    # the all-reduce against the fabric's measured ceiling (agent ceilings), per node: the
    # gradient bytes per step (the fabric's smaller direction: storage adds to one only)
    # over the ranks' all-reduce wait per step, an upper bound where the all-reduce also ran
    # behind backward (above 100%: it did); ``allreduce_ceiling_percent`` of
    # ``fabric_ceiling_bytes_per_second``
    allreduce_bytes_per_second: float | None = field(default=None, metadata=IF_KNOWN)
    fabric_ceiling_bytes_per_second: float | None = field(default=None, metadata=IF_KNOWN)
    allreduce_ceiling_percent: float | None = field(
        default=None, metadata={**IF_KNOWN, **digits(1)}
    )
    # the gradient bytes per step at the ceiling's rate: the least time the link needs
    allreduce_seconds_at_ceiling: float | None = field(default=None, metadata=IF_KNOWN)
    # the share had the all-reduce run behind the whole of compute too (bytes over wait +
    # compute): the least it can have been; "bandwidth-bound" needs it at the bound
    allreduce_ceiling_least_percent: float | None = field(
        default=None, metadata={**IF_KNOWN, **digits(1)}
    )

    @property
    def grown(self) -> list[PartChange]:
        """The parts that took longer per step and so explain some of the loss (a share
        below a millionth is rounding, not growth)."""
        return [p for p in self.parts if p.loss_share > 1e-6]

    @property
    def shrunk(self) -> list[PartChange]:
        return [p for p in self.parts if p.loss_share < -1e-6]


@dataclass(frozen=True)
class ScalingLoss:
    """A run that lost throughput to scaling: scaling efficiency below the floor against the
    group's 1-GPU baseline, or, with the step anatomy, each rank at least
    ``SCALING_LOSS_MIN_FRACTION`` slower than in the reference run (fewer nodes, else 1 GPU).
    Explained by the step anatomy (``attribution``) when both runs have one, else by the
    resources that grew against the reference run (``changed``)."""

    gpus: int  # ranks: GPUs, or CPU processes when ``on_gpus`` is False
    nodes: int
    images_per_second: float
    ideal: float | None  # None: the group has no 1-GPU baseline
    efficiency_percent: float | None
    scope: str
    # the scaling table's ideal - actual (collector.analysis.scaling.lost_to_scaling)
    lost_images_per_second: float | None
    # against the reference run, when the group has one
    reference_run: str | None = field(default=None, metadata=IF_KNOWN)
    reference_gpus: int | None = field(default=None, metadata=IF_KNOWN)
    reference_nodes: int | None = field(default=None, metadata=IF_KNOWN)
    # the step anatomy's account of the loss, when both runs' ranks sent one
    attribution: ScalingAttribution | None = field(default=None, metadata=IF_KNOWN)
    # else the resources compared (their storage reads: ``reads_judged``)
    reads_judged: StorageReads | None = field(default=None, metadata=IF_KNOWN)
    reference_resources: ResourceUse | None = field(default=None, metadata=IF_KNOWN)
    run_resources: ResourceUse | None = field(default=None, metadata=IF_KNOWN)
    changed: list[RateGrowth | UtilisationGrowth] | None = field(
        default=None, metadata=IF_KNOWN
    )  # ResourceUse order
    on_gpus: bool = field(
        default=True, metadata=HIDDEN
    )  # the hosts showed GPUs (else the ranks are CPU processes)
    across_nodes: bool = field(
        default=False, metadata=HIDDEN
    )  # the reference run had another node count

    @property
    def below_floor(self) -> bool:
        return self.efficiency_percent is not None and (
            self.efficiency_percent < SCALING_EFFICIENCY_FLOOR
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


# --------------------------------------------------------------------------------------
# the step anatomy's rules (collector.findings.anatomy)
# --------------------------------------------------------------------------------------


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
class RankWait:
    """Where another rank's wait for the straggler landed: its part that ran longest
    against the other ranks' median, and by how much (seconds per step)."""

    host: str
    rank: int
    part: str
    extra_seconds_per_step: float


@dataclass(frozen=True)
class StragglerEpoch:
    epoch: int
    host: str
    rank: int
    busy_seconds_per_step: float  # the step minus its all-reduce wait
    others_median_seconds_per_step: float  # the other ranks' median of the same
    slow_part: str  # input_wait | compute | other: the part it spent longest in
    part_seconds_per_step: float  # that part, this rank
    others_part_seconds_per_step: float  # that part, the other ranks' median
    waits: list[RankWait]  # where the other ranks' wait for it landed


@dataclass(frozen=True)
class Stragglers:
    """Epochs in which a part of a rank's step ran ``STRAGGLER_PART_SHARE`` of the step
    longer than the other ranks' median of that part (``collector.findings.anatomy``)."""

    epochs: list[StragglerEpoch]
    same_rank: bool  # the same rank in every epoch it was found in
    epochs_checked: int
    threshold_share: float = STRAGGLER_PART_SHARE


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


# --------------------------------------------------------------------------------------
# inference runs' evidence (detected by collector.analysis.inference on an InferenceReport)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Int8AccuracyLoss:
    """INT8 top-1 more than ``INT8_TOP1_LOSS_LIMIT`` below FP32's (top-1 as fractions)."""

    fp32_top1: float
    int8_top1: float
    top1_loss: float  # fp32 - int8


@dataclass(frozen=True)
class ThroughputSaturated:
    """From ``batch_size`` on, no larger batch size of ``precision`` gave
    ``SATURATION_GAIN`` more images/s."""

    precision: str
    batch_size: int
    images_per_second: float
    largest_batch_size: int
    largest_images_per_second: float
    execution_provider: str = ""  # whose compute is full: a GPU's, or the node's CPUs


@dataclass(frozen=True)
class Int8Slower:
    """INT8 below ``INT8_NO_FASTER`` x FP32's images/s at every batch size both were
    measured at, on ``execution_provider`` with INT8 encoded as ``int8_format``."""

    execution_provider: str
    int8_format: str
    speedups: dict[int, float] = field(metadata=digits(3))  # batch size -> int8 / fp32
    threshold: float = INT8_NO_FASTER


@dataclass(frozen=True)
class TimingUnsteady:
    """A measurement timed for under ``MIN_TIMED_SECONDS``, or whose batches' p90/p10 is
    over ``SPREAD_LIMIT``; ``int8_speedup`` is the speed-up at its batch size resting on it
    (None where one precision only was measured)."""

    precision: str
    batch_size: int
    timed_seconds: float
    timed_batches: int | None = field(metadata={"if_known": True})
    latency_spread: float | None = field(metadata=digits(3) | {"if_known": True})
    int8_speedup: float | None = field(metadata=digits(3) | {"if_known": True})
    too_short: bool
    too_spread: bool
    min_timed_seconds: float = MIN_TIMED_SECONDS
    spread_limit: float = SPREAD_LIMIT


# --------------------------------------------------------------------------------------
# Slurm jobs (collector.findings.jobs over collector.analysis.jobs)
# --------------------------------------------------------------------------------------

# CPUs allocated and unused: CPU seconds used below half of allocated CPUs x elapsed
JOB_CPU_EFFICIENCY_FLOOR = 0.5
# memory request far above use: the peak below a quarter of the limit
JOB_MEMORY_USE_FLOOR = 0.25


@dataclass(frozen=True)
class JobGpusWithoutProcess:
    """GPUs allocated to the job on which no process ran while it did (nodes whose agent
    lists GPU processes only)."""

    job_id: str
    allocated_gpus: int
    idle_gpus: int
    gpus_by_host: dict[str, list[str]]  # the idle ones
    gpu_util_percent: float | None = field(default=None, metadata=digits(1))


@dataclass(frozen=True)
class JobCpusUnused:
    """CPU seconds used below ``JOB_CPU_EFFICIENCY_FLOOR`` of the allocated CPU seconds."""

    job_id: str
    allocated_cpus: float
    elapsed_seconds: float = field(metadata=digits(1))
    cpu_seconds: float = field(metadata=digits(1))
    allocated_cpu_seconds: float = field(metadata=digits(1))
    cpu_efficiency_fraction: float = field(metadata=digits(4))
    floor_fraction: float = JOB_CPU_EFFICIENCY_FLOOR

    @property
    def cpus_used(self) -> float:
        """The CPUs the job kept busy on average."""
        return self.cpu_seconds / self.elapsed_seconds if self.elapsed_seconds else 0.0


@dataclass(frozen=True)
class JobMemoryOverRequested:
    """The memory peak below ``JOB_MEMORY_USE_FLOOR`` of the limit (on the node nearest it)."""

    job_id: str
    memory_peak_bytes: float
    allocated_memory_bytes: float
    memory_use_fraction: float = field(metadata=digits(4))
    floor_fraction: float = JOB_MEMORY_USE_FLOOR


@dataclass(frozen=True)
class JobSharedNode:
    """Other jobs were sampled on the job's nodes while it ran."""

    job_id: str
    other_jobs: list[str]
    hosts: list[str]
    overlap_seconds_by_job: dict[str, float]
    cpu_seconds_by_job: dict[str, float | None]
    other_cpu_seconds: float | None = field(default=None, metadata=digits(1))
    # their CPU seconds over the longest overlap: the CPUs they kept busy meanwhile
    other_cpus_mean: float | None = field(default=None, metadata=digits(2))
