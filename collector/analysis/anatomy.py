"""Where each rank's step time went, per epoch: the ``epoch_end`` anatomy fields, gathered.

Every rank's ``epoch_end`` carries the sums over the epoch's steps of input wait, compute,
(exposed) communication and the rest, which add up to its ``seconds``, and the rank's own
reads (``/proc/<pid>/io`` of the rank and its data loaders). See ``workloads/record/anatomy.py``
for how the trainers measure them. They are decoded once, into the run model's records
(``collector.analysis.run``); this module reads those.

Per (host, epoch) and for all hosts (``*``) the *shares* are pooled over ranks: the sum of
a part over the ranks divided by the sum of their step seconds. Amounts are kept additive
(``AMOUNT_KEYS``) so the per-epoch report adds hosts up the way it adds every other amount.
Per step (``step_shares``: the ranks' sampled ``step`` events carry the same four parts)
the shares are pooled the same way over the host's ranks that sampled that step.
``share_percent`` is the one definition of a share, for both.

The training's reads: ``process_read_bytes`` is what the kernel fetched from storage for the
ranks (it also counts pages of mapped files, libraries included, faulted in while
training); ``rchar - read_bytes`` is what their reads got from the page cache (floored at
0: page faults of mapped files are in read_bytes, not rchar).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from collector.analysis.run import RankEpochRecord, RunModel
from collector.store.api import StepTable
from contract.columns import BY_NAME

# additive amounts per (host, epoch), summed over the host's ranks
INPUT_WAIT = "anatomy_input_wait"
COMPUTE = "anatomy_compute"
COMMUNICATION = "anatomy_communication"
OTHER = "anatomy_other"
STEP_SECONDS = "anatomy_step_seconds"  # the ranks' step seconds the parts add up to
STEPS = "anatomy_steps"  # the ranks' steps
OVERLAP = "anatomy_overlap"
# the accelerator utilisation's terms: AU's steps' wall time less their input wait, and that
# wall time (``au_steps``: the timed steps, or a profiled epoch's after its first), when
# every rank sent both
TIMED_BUSY = "anatomy_timed_busy"
TIMED_STEP_SECONDS = "anatomy_timed_step_seconds"
PROCESS_READ = "process_read"
PROCESS_RCHAR = "process_rchar"
AMOUNT_KEYS = (
    INPUT_WAIT,
    COMPUTE,
    COMMUNICATION,
    OTHER,
    STEP_SECONDS,
    STEPS,
    OVERLAP,
    TIMED_BUSY,
    TIMED_STEP_SECONDS,
)
IO_KEYS = (PROCESS_READ, PROCESS_RCHAR)


@dataclass(frozen=True)
class RankEpoch:
    """One rank's epoch: its step seconds and their four parts (seconds)."""

    host: str
    rank: int
    epoch: int
    steps: int
    seconds: float  # wall time of the epoch's steps
    input_wait: float
    compute: float
    communication: float
    other: float
    overlap: float | None
    images: float
    timed_images: float | None
    timed_seconds: float | None
    read_bytes: float | None
    rchar: float | None
    timed_busy: float | None = None  # AU's steps' wall time not waiting for input
    au_seconds: float | None = None  # AU's steps' wall time (``au_steps``)

    @property
    def accelerator_utilisation(self) -> float | None:
        """AU (0..1): AU's steps' wall time not spent waiting for input, over that wall
        time (``accelerator_util_percent``); None where the rank did not send it."""
        if self.timed_busy is None or not self.au_seconds:
            return None
        return self.timed_busy / self.au_seconds

    @property
    def seconds_per_step(self) -> float | None:
        return self.seconds / self.steps if self.steps else None

    def share(self, part: str) -> float | None:
        """A part's share (0..1) of the step seconds."""
        value = getattr(self, part)
        return value / self.seconds if self.seconds > 0 else None


def rank_epochs(model: RunModel) -> list[RankEpoch]:
    """Every rank's epoch whose ``epoch_end`` carries the anatomy (``RankEpochRecord``),
    sorted by epoch, host, rank.

    ``steps`` is the epoch's step count: the rank's global step at this epoch's end minus
    at the end of its previous epoch that carries the anatomy."""
    found = sorted(
        (record for record in model.records if record.ended and record.has_anatomy),
        key=lambda r: (r.host, r.rank, r.epoch),
    )
    out = []
    previous_step: dict[tuple[str, int], float] = {}
    for record in found:
        key = (record.host, record.rank)
        steps = 0
        if record.global_step is not None:
            steps = int(record.global_step - previous_step.get(key, 0.0))
            previous_step[key] = record.global_step
        out.append(
            RankEpoch(
                host=record.host,
                rank=record.rank,
                epoch=record.epoch,
                steps=steps,
                seconds=record.seconds or 0.0,
                input_wait=record.input_wait or 0.0,
                compute=record.compute or 0.0,
                communication=record.communication or 0.0,
                other=record.other or 0.0,
                overlap=record.overlap,
                images=record.images or 0.0,
                timed_images=record.timed_images,
                timed_seconds=record.timed_seconds,
                read_bytes=record.read_bytes,
                rchar=record.rchar,
                timed_busy=timed_busy(*au_steps(record)),
                au_seconds=au_steps(record)[0],
            )
        )
    out.sort(key=lambda r: (r.epoch, r.host, r.rank))
    return out


def au_steps(record: RankEpochRecord) -> tuple[float | None, float | None]:
    """(wall time, the accelerator's idle time) of the steps AU is over: the epoch's steps
    after its first where the rank sent them (a profiled rank, whose steps are all timed:
    MLPerf Storage's rule, DLIO's too; idle: their input wait, or for an emulated
    accelerator all but its emulated compute), else its timed steps (after the run's
    warm-up steps) and their input wait."""
    if record.au_seconds is not None and record.au_idle is not None:
        return record.au_seconds, record.au_idle
    return record.timed_seconds, record.timed_input_wait


def timed_busy(timed_seconds: float | None, timed_input_wait: float | None) -> float | None:
    """What AU counts as busy: every part of the timed steps but the input wait (forward,
    backward, all-reduce and the optimizer update: all the accelerator's work, as MLPerf
    Storage's "compute time" is everything between batches)."""
    if timed_seconds is None or timed_input_wait is None:
        return None
    return max(timed_seconds - timed_input_wait, 0.0)


def epoch_amounts(ranks: Iterable[RankEpoch]) -> dict[tuple[str, int], dict[str, float]]:
    """Additive amounts per (host, epoch): the parts, step seconds and overlap (when every
    rank measured it); the training's reads are ``epoch_reads``."""
    groups: dict[tuple[str, int], list[RankEpoch]] = defaultdict(list)
    for rank in ranks:
        groups[(rank.host, rank.epoch)].append(rank)
    out = {}
    for key, members in groups.items():
        values = {
            INPUT_WAIT: sum(r.input_wait for r in members),
            COMPUTE: sum(r.compute for r in members),
            COMMUNICATION: sum(r.communication for r in members),
            OTHER: sum(r.other for r in members),
            STEP_SECONDS: sum(r.seconds for r in members),
        }
        if all(r.steps > 0 for r in members):
            values[STEPS] = float(sum(r.steps for r in members))
        if all(r.overlap is not None for r in members):
            values[OVERLAP] = sum(r.overlap or 0.0 for r in members)
        if all(r.timed_busy is not None and r.au_seconds for r in members):
            values[TIMED_BUSY] = sum(r.timed_busy or 0.0 for r in members)
            values[TIMED_STEP_SECONDS] = sum(r.au_seconds or 0.0 for r in members)
        out[key] = values
    return out


def epoch_reads(model: RunModel) -> dict[tuple[str, int], dict[str, float]]:
    """The training's own reads per (host, epoch): the sums of its ranks' ``epoch_end``
    ``/proc/<pid>/io`` fields, when every rank of the host's epoch that ended it sent them,
    with or without the step anatomy (a Keras or ``workloads.track`` rank sends its reads
    only)."""
    groups: dict[tuple[str, int], list[tuple[float | None, float | None]]] = defaultdict(list)
    for record in model.records:
        if record.ended:
            groups[(record.host, record.epoch)].append((record.read_bytes, record.rchar))
    out = {}
    for key, reads in groups.items():
        if all(read is not None and rchar is not None for read, rchar in reads):
            out[key] = {PROCESS_READ: sum(read or 0.0 for read, _ in reads),
                        PROCESS_RCHAR: sum(rchar or 0.0 for _, rchar in reads)}  # fmt: skip
    return out


def cache_read_bytes(rchar: Any, read_bytes: Any) -> np.ndarray:
    """Bytes the training's reads got from the page cache (see the module's note); NaN
    where either was not measured."""
    rchar = np.asarray(rchar, dtype=np.float64)
    return np.maximum(rchar - np.asarray(read_bytes, dtype=np.float64), 0.0)


def share_percent(part: Any, seconds: Any) -> np.ndarray:
    """A part's share of step seconds, in percent: ``part`` and ``seconds`` summed over the
    same steps (a host's ranks' epoch, or one step of each of them). NaN where there are no
    seconds to share or the part was not measured."""
    seconds = np.asarray(seconds, dtype=np.float64)
    positive = np.where(seconds > 0, seconds, np.nan)
    return 100.0 * np.asarray(part, dtype=np.float64) / positive


# the three shares shown over time (column name, StepTable column); the rest is "other"
SHARE_COLUMNS = (
    ("input_wait_percent", "input_wait"),
    ("compute_percent", "compute"),
    ("communication_percent", "communication"),
)


def _rounded(values: np.ndarray, column: str) -> list[float | None]:
    digits = BY_NAME[column].digits
    return [None if math.isnan(v) else round(v, digits) for v in values.tolist()]


def step_shares(steps: StepTable, max_points: int | None = None) -> dict[str, list[dict[str, Any]]]:
    """The three shares of each sampled step, per host, in time order: one point per step
    number (the ranks sample the same steps), pooled over the host's ranks that sampled it
    (``share_percent`` of their summed parts and seconds, as the per-epoch shares pool),
    with each rank's own shares under ``ranks``. A step event without a step number is a
    point of its own. Steps without the anatomy (or without seconds) are left out. A host
    with more than ``max_points`` steps gets ``max_points`` points, each pooling a run of
    consecutive steps the same way.

    A point: ``time_ns`` (the last of its ranks' step ends), ``epoch`` and ``step`` (the
    last pooled; None where not known), ``steps`` (how many step numbers it pools), the
    ``SHARE_COLUMNS`` in percent (None: a part not measured), and ``ranks``:
    ``[{"rank": r, <share columns>}, ...]`` sorted by rank."""
    parts = [getattr(steps, name) for _, name in SHARE_COLUMNS]
    keep = (steps.seconds > 0) & ~np.all([np.isnan(p) for p in parts], axis=0)
    rows = np.flatnonzero(keep)
    if rows.size == 0:
        return {}
    host = steps.host_index[rows]
    step = steps.step[rows]
    # each row's step: its number, or a key of its own (ordered after the numbered ones)
    numbered = ~np.isnan(step)
    after = np.max(step[numbered], initial=0.0) + 1.0
    key = np.where(numbered, step, after + np.arange(rows.size))
    # the points: (host, step) pairs, consecutive ones pooled above max_points per host
    pairs, pair_of = np.unique(np.stack([host, key], axis=1), axis=0, return_inverse=True)
    pair_of = pair_of.reshape(-1)
    bucket = np.zeros(len(pairs), dtype=np.int64)
    for index in np.unique(pairs[:, 0]):
        mine = np.flatnonzero(pairs[:, 0] == index)  # sorted by step
        count = mine.size
        if max_points is not None and count > max_points:
            bucket[mine] = np.arange(count) * max_points // count
        else:
            bucket[mine] = np.arange(count)
    points, point_of = np.unique(
        np.stack([pairs[:, 0].astype(np.int64), bucket], axis=1), axis=0, return_inverse=True
    )
    group = point_of.reshape(-1)[pair_of]  # each row's point
    count = len(points)

    def pooled(group_of: np.ndarray, size: int) -> dict[str, list[float | None]]:
        seconds = np.bincount(group_of, weights=steps.seconds[rows], minlength=size)
        return {
            column: _rounded(
                share_percent(
                    np.bincount(group_of, weights=getattr(steps, name)[rows], minlength=size),
                    seconds,
                ),
                column,
            )
            for column, name in SHARE_COLUMNS
        }

    shares = pooled(group, count)
    rank = steps.rank[rows]
    ranks_of, rank_group = np.unique(np.stack([group, rank], axis=1), axis=0, return_inverse=True)
    own = pooled(rank_group.reshape(-1), len(ranks_of))
    ranks: list[list[dict[str, Any]]] = [[] for _ in range(count)]
    for index, (point, rank_number) in enumerate(ranks_of.tolist()):  # sorted by rank
        ranks[point].append({"rank": rank_number, **{c: own[c][index] for c in own}})
    last_ns = np.full(count, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last_ns, group, steps.time_ns[rows])
    epoch = np.full(count, np.nan)
    np.fmax.at(epoch, group, steps.epoch[rows])
    last_step = np.full(count, np.nan)
    np.fmax.at(last_step, group, np.where(numbered, step, np.nan))
    pooled_steps = np.bincount(point_of.reshape(-1), minlength=count)
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for point in np.argsort(last_ns, kind="stable").tolist():
        out[steps.hosts[int(points[point, 0])]].append(
            {
                "time_ns": int(last_ns[point]),
                "epoch": None if math.isnan(epoch[point]) else int(epoch[point]),
                "step": None if math.isnan(last_step[point]) else int(last_step[point]),
                "steps": int(pooled_steps[point]),
                **{column: values[point] for column, values in shares.items()},
                "ranks": ranks[point],
            }
        )
    return dict(out)
