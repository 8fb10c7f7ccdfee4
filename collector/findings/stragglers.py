"""Findings about stragglers: one rank's part of the step running longer than its peers'.

``straggler``
    In an epoch, one part of a rank's step (input wait, compute, all-reduce, the rest) runs
    longer than the other ranks' median of that part by at least ``STRAGGLER_PART_SHARE``
    of the step. Every rank's *wall* time is the same (the others wait for the slowest),
    and where that wait lands depends on the framework (the all-reduce, DDP's buffer
    broadcast at the start of forward, a barrier, a collective in the loss), so the ranks
    are compared part by part and the rank whose extra part is its own work is named, with
    the part, its milliseconds and where the others' wait landed
    (``straggler_in_epoch``). Says whether the same rank straggles in every epoch (a slow
    node or device) or a different one (data loading, noise). "Not chance" is said only
    where the run supports it: the same rank in at least ``SAME_RANK_MIN_EPOCHS`` epochs,
    and the chance of that by luck below ``SAME_RANK_MAX_CHANCE`` (``same_rank_chance``:
    binomial, each checked epoch's straggler that rank with probability 1/ranks); otherwise
    it says what was seen and that the epochs are too few (warning only when supported).
    A straggler sets every step's pace, so one found in half of the epochs checked or fewer
    was a transient (a cold first epoch on one host, a moment's noise): not reported.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

from collector.analysis.anatomy import RankEpoch, rank_epochs
from collector.findings.base import (
    COMMUNICATION,
    INFO,
    PART_LABELS,
    PARTS,
    WARNING,
    Finding,
    _complete,
    _ms,
    _worded,
    evidence_json,
    words,
)
from collector.findings.context import RunContext

# a straggler: one part of a rank's step runs longer than the other ranks' median of that
# part by 15% of the step (and 5 ms at least)
STRAGGLER_PART_SHARE = 0.15


STRAGGLER_MIN_SECONDS = 0.005


# "the same rank every time, not chance": seen in at least this many epochs, and that
# rank straggling so often by luck (binomial, 1/ranks per epoch) less likely than this
SAME_RANK_MIN_EPOCHS = 3


SAME_RANK_MAX_CHANCE = 0.05


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
    longer than the other ranks' median of that part (the step anatomy)."""

    epochs: list[StragglerEpoch]
    same_rank: bool  # the same rank in every epoch it was found in
    epochs_checked: int
    ranks: int = 0  # the most ranks compared in an epoch
    # the same rank straggling in len(epochs) of epochs_checked epochs by luck (binomial,
    # 1/ranks each): None where the ranks differ
    same_rank_chance: float | None = None
    not_chance: bool = False  # SAME_RANK_MIN_EPOCHS epochs and a chance below the maximum
    threshold_share: float = STRAGGLER_PART_SHARE
    threshold_same_rank_epochs: int = SAME_RANK_MIN_EPOCHS
    threshold_same_rank_chance: float = SAME_RANK_MAX_CHANCE


def _busy(r: RankEpoch) -> float:
    return (r.seconds - r.communication) / r.steps if r.steps else math.nan


def _per_step(r: RankEpoch, part: str) -> float:
    return float(getattr(r, part)) / r.steps


# How likely a part is to hold a rank's wait for the others: the all-reduce always (it is
# that wait); forward and backward often (DDP broadcasts buffers at the start of forward,
# overlaps its all-reduce with backward; SyncBN, a collective in the loss); input wait and
# the rest (the update, the loop's own code) only where the loop puts a collective there.
WAIT_LIKELIHOOD = {"communication": 2, "compute": 1, "input_wait": 0, "other": 0}


def straggler_in_epoch(epoch: int, members: list[RankEpoch]) -> StragglerEpoch | None:
    """The rank of ``members`` (one epoch's ranks) that made the others wait, or None.

    Each part per step of each rank is compared with the median of the other ranks' same
    part; a part that exceeds it by ``STRAGGLER_PART_SHARE`` of the median step (and
    ``STRAGGLER_MIN_SECONDS``) is extra time: the slow rank's own work, or a rank's wait
    for the slow one, which lands in whichever part holds the next collective. With three
    ranks or more the waiting ranks are alike and only the slow one stands out; with two,
    each shows an extra part, and the slow one is the rank whose extra part is the less
    likely to hold a wait (``WAIT_LIKELIHOOD``). A rank whose only extra part is the
    all-reduce is waiting, never the straggler."""
    median_step = statistics.median(r.seconds / r.steps for r in members)
    threshold = max(STRAGGLER_MIN_SECONDS, STRAGGLER_PART_SHARE * median_step)
    extra: dict[int, dict[str, float]] = {}
    for index, rank in enumerate(members):
        others = members[:index] + members[index + 1 :]
        extra[index] = {}
        for part in PARTS:
            gap = _per_step(rank, part) - statistics.median(_per_step(m, part) for m in others)
            if gap >= threshold:
                extra[index][part] = gap

    def own(index: int) -> dict[str, float]:
        return {p: v for p, v in extra[index].items() if WAIT_LIKELIHOOD[p] < 2}

    candidates = [index for index in extra if own(index)]
    if not candidates:
        return None

    def order(index: int) -> tuple[int, float]:
        parts = own(index)
        least = min(WAIT_LIKELIHOOD[p] for p in parts)
        return least, -sum(v for p, v in parts.items() if WAIT_LIKELIHOOD[p] == least)

    slow_index = min(candidates, key=order)
    slowest = members[slow_index]
    others = [m for i, m in enumerate(members) if i != slow_index]
    slow_part = max(own(slow_index).items(), key=lambda item: item[1])[0]
    waits = [
        RankWait(m.host, m.rank, part, gap)
        for i, m in enumerate(members)
        if i != slow_index and extra[i]
        for part, gap in [max(extra[i].items(), key=lambda item: item[1])]
    ]
    return StragglerEpoch(
        epoch=epoch,
        host=slowest.host,
        rank=slowest.rank,
        busy_seconds_per_step=_busy(slowest),
        others_median_seconds_per_step=statistics.median(_busy(m) for m in others),
        slow_part=slow_part,
        part_seconds_per_step=_per_step(slowest, slow_part),
        others_part_seconds_per_step=statistics.median(_per_step(m, slow_part) for m in others),
        waits=waits,
    )


def same_rank_chance(hits: int, epochs: int, ranks: int) -> float:
    """The chance that one given rank is the straggler in at least ``hits`` of ``epochs``
    epochs by luck, each epoch's being any of ``ranks`` ranks alike: the binomial tail."""
    if ranks < 2 or hits <= 0:
        return 1.0
    p = 1.0 / ranks
    return sum(
        math.comb(epochs, k) * p**k * (1 - p) ** (epochs - k) for k in range(hits, epochs + 1)
    )


def detect_stragglers(mine: list[RankEpoch]) -> Stragglers | None:
    by_epoch: dict[int, list[RankEpoch]] = defaultdict(list)
    for r in mine:
        if r.steps > 0 and r.seconds > 0:
            by_epoch[r.epoch].append(r)
    hits = []
    checked = 0
    ranks = 0
    for epoch, members in sorted(by_epoch.items()):
        if len(members) < 2:
            continue
        checked += 1
        ranks = max(ranks, len(members))
        found = straggler_in_epoch(epoch, members)
        if found is not None:
            hits.append(found)
    # a straggler sets every step's pace: one slow in a minority of the epochs checked was a
    # transient (eval-3's healthy torchrun pair: 1 of 2 epochs, +7 ms of the rest of a step)
    if 2 * len(hits) <= checked:
        return None
    same = len({(h.host, h.rank) for h in hits}) == 1
    chance = same_rank_chance(len(hits), checked, ranks) if same else None
    supported = (
        chance is not None and len(hits) >= SAME_RANK_MIN_EPOCHS and chance < SAME_RANK_MAX_CHANCE
    )
    return Stragglers(hits, same, checked, ranks, chance, supported)


def straggler(context: RunContext) -> list[Finding]:
    return _worded(detect_stragglers(_complete(context, rank_epochs(context.model))))


def straggler_epoch_text(hit: StragglerEpoch) -> str:
    waits = ", ".join(
        f"rank {w.rank} on {w.host} in its {PART_LABELS[w.part]} "
        f"(+{_ms(w.extra_seconds_per_step)} ms)"
        for w in hit.waits
    )
    waited = f"; the others' wait for it landed in: {waits}" if waits else ""
    return (
        f"epoch {hit.epoch}: rank {hit.rank} on {hit.host} spent "
        f"{_ms(hit.part_seconds_per_step)} ms/step in {PART_LABELS[hit.slow_part]} against "
        f"{_ms(hit.others_part_seconds_per_step)} on the other ranks (+"
        f"{_ms(hit.part_seconds_per_step - hit.others_part_seconds_per_step)} ms){waited}"
    )


def _chance(probability: float | None) -> str:
    return "n/a" if probability is None else f"{100 * probability:.2g}%"


@words.register
def word_stragglers(found: Stragglers) -> Finding:
    first = found.epochs[0]
    listing = "; ".join(straggler_epoch_text(h) for h in found.epochs)
    seen = len(found.epochs)
    chance = found.same_rank_chance
    if found.not_chance:
        verdict = (
            f"The same rank (rank {first.rank} on {first.host}) in {seen} of "
            f"{found.epochs_checked} epochs: by chance (1 in {found.ranks} ranks each epoch) "
            f"that has a probability of {_chance(chance)}, so a slow node, device or its "
            "data path, not chance."
        )
    elif found.same_rank and seen > 1:
        in_epochs = (
            "both epochs"
            if seen == found.epochs_checked == 2
            else (f"{seen} of {found.epochs_checked} epochs")
        )
        verdict = (
            f"Rank {first.rank} on {first.host} was the slowest in {in_epochs}; too few "
            f"epochs to say it is not chance (by luck, with {found.ranks} ranks: "
            f"{_chance(chance)}; {found.threshold_same_rank_epochs} epochs or more and under "
            f"{_chance(found.threshold_same_rank_chance)} are needed)."
        )
    elif found.same_rank:
        verdict = "Seen in one epoch only."
    else:
        verdict = (
            "A different rank from epoch to epoch: a moving straggler, typical of data "
            "loading (uneven shards, cache misses) or noisy neighbours rather than a slow node."
        )
    return Finding(
        rule="straggler",
        severity=WARNING if found.not_chance else INFO,
        title=(
            f"Straggler: rank {first.rank} on {first.host}, slow in {PART_LABELS[first.slow_part]}"
            if found.same_rank
            else "Stragglers move from rank to rank"
        ),
        explanation=(
            "The other ranks wait for the slowest at their next collective (the all-reduce, "
            "a buffer broadcast at the start of forward, a barrier), so one slow rank sets "
            f"everyone's step time. {listing}. {verdict}"
        ),
        evidence=evidence_json(found),
        chart=COMMUNICATION,
    )
