"""What every family of findings shares: ``Finding`` and the severities, evidence as JSON, the
report columns a finding points at, the one wording dispatch (``words``), and the small
formatting helpers and thresholds more than one family uses.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from enum import StrEnum
from functools import singledispatch
from typing import Any

import numpy as np

from collector.analysis.anatomy import RankEpoch
from collector.analysis.epochs import EpochReport, EpochRow
from collector.analysis.run import RunModel
from collector.findings.context import RunContext, complete_epochs
from collector.store.api import StepTable
from contract.columns import BY_NAME, ReportColumn
from contract.markers import ALL_HOSTS
from contract.units import human_bytes

INFO, WARNING, CRITICAL = "info", "warning", "critical"


SEVERITY_ORDER = {CRITICAL: 0, WARNING: 1, INFO: 2}


BYTES_PER_MB = 1_000_000


# cache warm-up
# judged against the data set's size when the run reports it: epoch 1 read at least a quarter of
# the data set from storage, later epochs at most a tenth of it
FIRST_EPOCH_DATASET_SHARE = 0.25


# the data set's measured page-cache residency (collector.analysis.residency): at least this
# share of its bytes cached is "in memory" (a few pages of a file may be out at any time)
CACHED_PERCENT = 95.0


# storage bound
IOWAIT_HIGH_PERCENT = 5.0


# input bound
CPU_SATURATED_PERCENT = 85.0


# input wait, stragglers and start-up (collector.findings.input, collector.findings.stragglers)
INPUT_WAIT_SHARE = 0.20


# reads at >= 80% of the disk's measured ceiling (agent ceilings) are at its limit
CEILING_BOUND_SHARE = 0.80


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


class StorageReads(StrEnum):
    """Which storage reads a rule judged."""

    # the training's own: its ranks' /proc/<pid>/io read_bytes
    # (collector.analysis.anatomy.epoch_reads), judged when every rank of every host sent
    # them in every epoch judged
    TRAINING = "training"
    # the hosts' disks and NFS servers: every process's reads, the training's among them
    HOSTS = "hosts"


STEP_PARTS = (
    "communication",
    "input_wait",
    "compute",
    "other",
)  # collector.analysis.anatomy's four


def _config_number(config: dict[str, Any], name: str) -> float | None:
    value = config.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value > 0 else None


def judged_reads(*reports: EpochReport) -> StorageReads:
    """Which storage reads the rules judge, decided here for all of them: the training's own
    (the report's ``training_read_bytes``, which is ``collector.analysis.anatomy.epoch_reads``) when
    every host's ranks sent them in every complete epoch of every report given (the run's,
    and the run it is compared with), else the hosts' disk and NFS-server reads. On a busy
    node other processes' reads hide the training's, which its own ``/proc/<pid>/io``
    counts alone; two runs are compared on the same kind of reads."""
    for report in reports:
        complete = complete_epochs(report)
        rows = [r for r in report.rows if r.host != ALL_HOSTS and r.epoch in complete]
        if not rows or any(row.training_read_bytes is None for row in rows):
            return StorageReads.HOSTS
    return StorageReads.TRAINING if reports else StorageReads.HOSTS


def _read_bytes(row: EpochRow, reads: StorageReads) -> int | None:
    if reads == StorageReads.TRAINING:
        return row.training_read_bytes
    return row.storage_read_bytes


def _read_mbps(row: EpochRow, reads: StorageReads) -> float | None:
    if reads == StorageReads.TRAINING:
        return _mbps(row.training_read_bytes, row.seconds)
    return row.storage_read_mbps


def _mbps(value: int | None, seconds: float) -> float | None:
    if value is None or not seconds:
        return None
    return round(value / seconds / BYTES_PER_MB, 3)


def step_epochs(steps: StepTable, model: RunModel) -> np.ndarray:
    """Each step's epoch (float64, NaN for none), as ``collector.analysis.run.assign_epochs``
    gives it: its own ``epoch`` field, else the epoch of its (host, rank)'s latest
    ``epoch_start`` at or before it (``model.epoch_starts``)."""
    epochs = np.trunc(steps.epoch)  # assign_epochs takes int(epoch)
    missing = np.flatnonzero(np.isnan(epochs))
    if not missing.size:
        return epochs
    hosts = steps.host_names()
    for key, in_order in model.epoch_starts.items():
        marks = sorted(in_order, key=lambda mark: mark[0])  # of two at one time, the later wins
        rows = missing[(hosts[missing] == key[0]) & (steps.rank[missing] == key[1])]
        times = np.array([time_ns for time_ns, _ in marks], dtype=np.int64)
        numbers = np.array([float(epoch) for _, epoch in marks] + [math.nan])
        latest = np.searchsorted(times, steps.time_ns[rows], side="right") - 1
        epochs[rows] = numbers[latest]  # -1 (none yet) picks the NaN at the end
    return epochs


def timed_step_rows(steps: StepTable, epochs: np.ndarray, warmup_steps: int) -> np.ndarray:
    """The rows of the steps that find an epoch (``epochs``: ``step_epochs``) after each
    rank's first ``warmup_steps`` of them, in table order."""
    rows = np.flatnonzero(~np.isnan(epochs))
    if not rows.size:
        return rows
    # each step's place among its (host, rank)'s steps with an epoch, from 0
    order, starts = _stable_groups(steps.host_index[rows], steps.rank[rows])
    place = np.empty(rows.size, dtype=np.int64)
    place[order] = np.arange(rows.size) - np.repeat(starts, np.diff(starts, append=rows.size))
    return rows[place >= warmup_steps]


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


PARTS = STEP_PARTS


@dataclass(frozen=True)
class StepProfile:
    """Mean seconds per step over some ranks' epochs, and their images/s per rank."""

    steps: int
    seconds: float
    input_wait: float
    compute: float
    communication: float
    other: float
    images_per_second_per_rank: float

    def part(self, name: str) -> float:
        return float(getattr(self, name))


def step_profile(rows: list[RankEpoch]) -> StepProfile | None:
    steps = sum(r.steps for r in rows)
    seconds = sum(r.seconds for r in rows)
    if steps <= 0 or seconds <= 0:
        return None
    return StepProfile(
        steps=steps,
        seconds=seconds / steps,
        input_wait=sum(r.input_wait for r in rows) / steps,
        compute=sum(r.compute for r in rows) / steps,
        communication=sum(r.communication for r in rows) / steps,
        other=sum(r.other for r in rows) / steps,
        images_per_second_per_rank=sum(r.images for r in rows) / seconds,
    )


def settled(rows: list[RankEpoch]) -> list[RankEpoch]:
    """Epochs after the first when there are two or more, else all."""
    epochs = {r.epoch for r in rows}
    if len(epochs) >= 2:
        first = min(epochs)
        return [r for r in rows if r.epoch != first]
    return rows


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _complete_in(report, rows: list[RankEpoch]) -> list[RankEpoch]:
    incomplete = {w.epoch for w in report.windows if not w.complete}
    return [r for r in rows if r.epoch not in incomplete]


def _complete(context: RunContext, rows: list[RankEpoch]) -> list[RankEpoch]:
    return _complete_in(context.report, rows)


def _worded(found: object | None) -> list[Finding]:
    return [] if found is None else [words(found)]


# the report columns the findings point at (a misspelt name fails here, on import)
DISK_READ = BY_NAME["disk_read_mbps"]


NFS_SERVER_READ = BY_NAME["nfs_server_read_mbps"]


PAGE_CACHE_DELTA = BY_NAME["page_cache_delta_bytes"]


RX_MINUS_TX = BY_NAME["rx_minus_tx_mbps"]


IMAGES_PER_SECOND = BY_NAME["images_per_second"]


ACCELERATOR_UTIL = BY_NAME["accelerator_util_percent"]


CPU_UTIL = BY_NAME["cpu_util_percent"]


INPUT_WAIT = BY_NAME["input_wait_percent"]


COMPUTE = BY_NAME["compute_percent"]


COMMUNICATION = BY_NAME["communication_percent"]


NO_REPORT_COLUMN = ""  # inference findings: no per-epoch column (see the module's note)


TRAINING_READ = BY_NAME["training_read_bytes"]


DATASET_CACHED = BY_NAME["dataset_cached_start_percent"]


@singledispatch
def words(evidence: object) -> Finding:
    """The finding a rule's evidence makes."""
    raise TypeError(f"no wording for {type(evidence).__name__}")


def _bytes(value: float | None, missing: str = "n/a") -> str:
    """Bytes as the evidence and the tables write them (``human_bytes``: 45.0 MB, 4.1 kB;
    a small data set is not "0.0 GB", a few kB read are not "0.0 MB")."""
    return missing if value is None else human_bytes(value)


def _measured_bytes(value: float | None) -> str:
    return _bytes(value, missing="not measured")


def epoch_list(epochs: list[int]) -> str:
    if len(epochs) > 6:
        return f"{', '.join(map(str, epochs[:5]))}, ... {epochs[-1]}"
    return ", ".join(map(str, epochs))


def _plural(items: list) -> str:
    return "s" if len(items) > 1 else ""


READS_TEXT = {
    StorageReads.TRAINING: "the training's own reads (its ranks' /proc/<pid>/io read_bytes)",
    StorageReads.HOSTS: "the hosts' storage reads (disks and NFS servers, every process)",
}


READER = {
    StorageReads.TRAINING: "the training's own processes",
    StorageReads.HOSTS: "the hosts (every process)",
}


def _mbps_text(rate: float) -> str:
    """A read rate: whole MB/s from 10 on (as the findings always wrote them), two
    significant digits below (a throttled 1.4 MB/s, not "1", nor 37 kB/s as "0.0")."""
    return f"{rate:,.0f}" if rate >= 10 else f"{rate:.2g}"


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}%"  # 99.6% is not rounded up to 100%


PART_LABELS = {
    "communication": "all-reduce (communication)",
    "input_wait": "input wait",
    "compute": "compute (forward + backward)",
    "other": "the rest of the step (update, callbacks)",
}


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f}"


def framework_kind(framework: str) -> str:
    """``tensorflow``, ``mxnet``, ``pytorch`` or ``unknown``, from a run's framework tag."""
    name = (framework or "").lower()
    if name in ("tensorflow", "tf", "keras") or name.startswith("tensorflow"):
        return "tensorflow"
    if name.startswith("mxnet"):
        return "mxnet"
    if name in ("pytorch", "torch", "lightning") or name.startswith("pytorch"):
        return "pytorch"
    return "unknown"
