"""What the findings rules measure: a ``Finding``, each rule's thresholds, and each rule's
typed evidence.

A rule first *detects* (``collector.findings``: a pure function of the run's report and
runs, returning one of the evidence types below or None), and its evidence is then *worded*
(``collector.findings_words``: title, explanation, severity and chart, a pure function of
the evidence). The evidence holds the values as measured; ``evidence_json`` is the
finding's ``evidence`` mapping (JSON, the read API), rounded where a field declares
``digits``.

Units are declared once, by a field's name: its suffix (``_bytes``, ``_mbps``,
``_percent``, ``_ratio``, ``_seconds``, ``images_per_second``) is what
``collector.evidence`` turns into the unit shown beside the value; a field without one is
a count, an epoch, a host or a name.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from enum import StrEnum
from typing import Any

from collector.columns import BY_NAME, ReportColumn

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
# precision read demand
PRECISION_READ_RATIO = 1.25  # study 003: FP16 read 550 MB/s where FP32 read 430 (1.28x)
# inference (collector.inference)
INT8_TOP1_LOSS_LIMIT = 0.01  # a fraction: one percentage point of top-1
SATURATION_GAIN = 0.10  # a larger batch giving < 10 % more images/s adds nothing


@dataclass(frozen=True)
class Finding:
    """``chart`` is the report column (``collector.columns``) that shows the finding, given
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

    # the training's own: its ranks' /proc/<pid>/io read_bytes (collector.anatomy.epoch_reads),
    # judged when every rank of every host sent them in every epoch judged
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

    @property
    def measures_memory(self) -> bool:
        """Later epochs measure memory: the data set is below MLPerf Storage's 5 x RAM."""
        ratio = self.dataset_to_memory_ratio
        return ratio is not None and ratio < MLPERF_STORAGE_RAM_MULTIPLE


@dataclass(frozen=True)
class DatasetFitsInMemory:
    """The data set is below ``MLPERF_STORAGE_RAM_MULTIPLE`` x a host's RAM."""

    dataset_bytes: float
    host_memory_bytes: float
    dataset_to_memory_ratio: float = field(metadata=digits(3))
    required_ratio: int = MLPERF_STORAGE_RAM_MULTIPLE

    @property
    def fits(self) -> bool:
        return self.dataset_to_memory_ratio <= 1.0


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


@dataclass(frozen=True)
class StorageBound:
    """Host-epochs with high iowait, high storage reads and unstable step throughput."""

    epochs: list[int]
    host_epochs: list[UnstableHostEpoch]  # the first 20
    worst: UnstableHostEpoch = field(
        default=None, metadata=HIDDEN
    )  # of all of them, the highest variation
    cv_without_storage_reads: float | None = field(default=None, metadata=digits(4))
    thresholds: dict[str, float] = field(
        default_factory=lambda: {
            "iowait_percent": IOWAIT_HIGH_PERCENT,
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


@dataclass(frozen=True)
class ScalingLoss:
    """Scaling efficiency below the floor, with the resources that grew against a run on
    fewer nodes (or 1 GPU)."""

    gpus: int  # ranks: GPUs, or CPU processes when ``on_gpus`` is False
    nodes: int
    images_per_second: float
    ideal: float
    efficiency_percent: float
    scope: str
    # against the reference run, when the group has one
    reference_run: str | None = field(default=None, metadata=IF_KNOWN)
    reference_gpus: int | None = field(default=None, metadata=IF_KNOWN)
    reference_nodes: int | None = field(default=None, metadata=IF_KNOWN)
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
    epoch: int = field(default=1, metadata=HIDDEN)  # this run's first epoch with storage reads
    nfs_read_most: bool = field(
        default=False, metadata=HIDDEN
    )  # NFS reads at least the local disks'


# --------------------------------------------------------------------------------------
# inference runs' evidence (detected by collector.inference on an InferenceReport)
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
