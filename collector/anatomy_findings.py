"""Findings from the step anatomy: why a run scaled as it did, measured per rank.

Each rule first *detects* (a pure function of the run's ``RankEpoch`` rows and report rows,
returning typed evidence, or None) and is then *worded* (title and explanation from that
evidence). Per-step figures are averages over ranks: a part's sum over the ranks' epochs
divided by their step count. *Settled* epochs are every epoch after the first when a run
has two or more (epoch 1 carries start-up), else all.

``scaling_loss_attributed``
    Against the group's reference run (fewer nodes, else 1 GPU: the same choice as
    ``scaling_loss``) this run's ranks each train fewer images/s. The lost images/s are
    split over the parts whose time per step grew (communication, input wait, compute,
    the rest) in proportion to that growth; a part that shrank offsets. The fabric's bytes
    per step per node stand beside it. Fires when a rank's images/s is at least
    ``SCALING_LOSS_MIN_FRACTION`` below the reference's.
``input_wait``
    Input wait is at least ``INPUT_WAIT_SHARE`` of the step time on a host in settled
    epochs. Storage-bound when the training's own reads came from storage (``read_bytes``
    at least half of ``rchar``) or iowait is high; decode-bound when the host's CPUs were
    saturated; else undetermined (too few loader workers is the usual cause).
``straggler``
    In an epoch, a rank's busy time per step (the step minus its all-reduce wait: the
    others wait for the slowest in the all-reduce, so every rank's *wall* time is the same)
    is at least ``STRAGGLER_RATIO`` times the median of the other ranks'. Says whether the
    same rank straggles in every epoch (a slow node or device) or a different one (data
    loading, noise), and which part makes it slow.
``startup``
    Epoch 1's time per step is at least ``STARTUP_RATIO`` times the settled epochs'.
    Its extra time is split: input wait (first reads; with the training's own storage
    reads of epoch 1 against later ones) versus compute and the rest (graph building,
    compilation, allocator warm-up).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass

from agent.schema import RunState
from collector.anatomy import PROCESS_RCHAR, PROCESS_READ, RankEpoch, epoch_reads, rank_epochs
from collector.epochs import ALL_HOSTS, EPOCH_KINDS, EpochRow, run_events
from collector.findings import CRITICAL, INFO, WARNING, Finding, RunContext, _reference_run
from collector.findings_words import words
from collector.scaling import GroupKey, run_facts

PARTS = ("communication", "input_wait", "compute", "other")
PART_LABELS = {
    "communication": "all-reduce (communication)",
    "input_wait": "input wait",
    "compute": "compute (forward + backward)",
    "other": "the rest of the step (update, callbacks)",
}
SCALING_LOSS_MIN_FRACTION = 0.05
SCALING_WARNING_FRACTION = 0.10
SCALING_CRITICAL_FRACTION = 0.25
INPUT_WAIT_SHARE = 0.20
STORAGE_READ_SHARE = 0.5  # read_bytes / rchar: the training's reads came from storage
IOWAIT_HIGH_PERCENT = 5.0
CPU_SATURATED_PERCENT = 85.0
STRAGGLER_RATIO = 1.25
STARTUP_RATIO = 1.5


# --------------------------------------------------------------------------------------
# per-step figures
# --------------------------------------------------------------------------------------


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


def _fabric_bytes_per_step(report_rows: list[EpochRow], rows: list[RankEpoch]) -> float | None:
    """Fabric bytes (InfiniBand, else the NICs; both directions) per step per node over the
    settled epochs of ``rows``."""
    epochs = {r.epoch for r in rows}
    hosts = [r for r in report_rows if r.host != ALL_HOSTS and r.epoch in epochs]
    total = 0.0
    seen = False
    for row in hosts:
        ib = [v for v in (row.ib_rcv_bytes, row.ib_xmit_bytes) if v is not None]
        net = [v for v in (row.net_rx_bytes, row.net_tx_bytes) if v is not None]
        chosen = ib if ib and sum(ib) > 0 else net
        if chosen:
            total += sum(chosen)
            seen = True
    # steps per rank over those epochs (every rank does the same number)
    per_rank = defaultdict(int)
    for r in rows:
        per_rank[(r.host, r.rank)] += r.steps
    steps = max(per_rank.values(), default=0)
    nodes = len({row.host for row in hosts})
    if not seen or steps <= 0 or nodes == 0:
        return None
    return total / steps / nodes


Reads = dict[tuple[str, int], dict[str, float]]  # collector.anatomy.epoch_reads


def training_reads(reads: Reads, rows: list[RankEpoch], key: str = PROCESS_READ) -> float | None:
    """The training's own reads (``epoch_reads``: ``PROCESS_READ`` or ``PROCESS_RCHAR``) over
    the (host, epoch)s of ``rows``; None unless every one of them has its ranks' reads."""
    keys = {(r.host, r.epoch) for r in rows}
    if not keys or any(k not in reads for k in keys):
        return None
    return sum(reads[k][key] for k in keys)


# --------------------------------------------------------------------------------------
# scaling loss, attributed
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartChange:
    part: str
    reference_seconds: float  # per step
    run_seconds: float
    lost_images_per_second: float  # this part's share of the lost throughput (run total)


@dataclass(frozen=True)
class ScalingAttribution:
    reference_run: str
    reference_ranks: int
    ranks: int
    reference_images_per_second_per_rank: float
    images_per_second_per_rank: float
    lost_images_per_second: float  # over the whole run: ranks x per-rank loss
    reference_seconds_per_step: float
    seconds_per_step: float
    parts: list[PartChange]  # largest contribution first
    reference_fabric_bytes_per_step: float | None
    fabric_bytes_per_step: float | None


def attribute_scaling_loss(
    reference: StepProfile,
    run: StepProfile,
    ranks: int,
) -> tuple[float, list[PartChange]]:
    """(lost images/s over the run, each part's share of it). The per-step growth of each
    part, over the growth of the whole step, apportions the loss."""
    lost = ranks * (reference.images_per_second_per_rank - run.images_per_second_per_rank)
    growth = run.seconds - reference.seconds
    parts = []
    for name in PARTS:
        delta = run.part(name) - reference.part(name)
        share = delta / growth if growth > 0 else 0.0
        parts.append(PartChange(name, reference.part(name), run.part(name), lost * share))
    parts.sort(key=lambda p: -p.lost_images_per_second)
    return lost, parts


def detect_scaling_loss(context: RunContext, mine: list[RankEpoch]) -> ScalingAttribution | None:
    ranks = len({(r.host, r.rank) for r in mine})
    if ranks <= 1:
        return None
    key = GroupKey.of(context.run)
    group = [
        r
        for r in context.store.runs()
        if r.state != RunState.FAILED and GroupKey.of(r) == key and r.run_id != context.run.run_id
    ]
    if not group:
        return None
    facts = [run_facts(context.store, r) for r in group]
    reference = _reference_run(run_facts(context.store, context.run), facts)
    if reference is None:
        return None
    ref_events = run_events(context.store, reference.run.run_id, EPOCH_KINDS)
    ref_rows = settled(rank_epochs(ref_events))
    run_rows = settled(mine)
    ref_profile, run_profile = step_profile(ref_rows), step_profile(run_rows)
    if ref_profile is None or run_profile is None:
        return None
    ref_ranks = len({(r.host, r.rank) for r in ref_rows})
    if ref_ranks >= ranks:
        return None
    ref_rate = ref_profile.images_per_second_per_rank
    if run_profile.images_per_second_per_rank > ref_rate * (1 - SCALING_LOSS_MIN_FRACTION):
        return None
    lost, parts = attribute_scaling_loss(ref_profile, run_profile, ranks)
    ref_report = context.report_of(reference.run.run_id)
    return ScalingAttribution(
        reference_run=reference.run.run_id,
        reference_ranks=ref_ranks,
        ranks=ranks,
        reference_images_per_second_per_rank=ref_rate,
        images_per_second_per_rank=run_profile.images_per_second_per_rank,
        lost_images_per_second=lost,
        reference_seconds_per_step=ref_profile.seconds,
        seconds_per_step=run_profile.seconds,
        parts=parts,
        reference_fabric_bytes_per_step=_fabric_bytes_per_step(ref_report.rows, ref_rows),
        fabric_bytes_per_step=_fabric_bytes_per_step(context.report.rows, run_rows),
    )


def _mb(value: float | None) -> str:
    return "not measured" if value is None else f"{value / 1e6:,.1f} MB"


def word_scaling_loss(found: ScalingAttribution) -> Finding:
    fraction = 1 - found.images_per_second_per_rank / found.reference_images_per_second_per_rank
    severity = (
        CRITICAL
        if fraction >= SCALING_CRITICAL_FRACTION
        else WARNING
        if fraction >= SCALING_WARNING_FRACTION
        else INFO
    )
    top = found.parts[0]
    explained = [p for p in found.parts if p.lost_images_per_second > 0]
    pieces = "; ".join(
        f"{PART_LABELS[p.part]} {p.reference_seconds * 1000:,.0f} -> "
        f"{p.run_seconds * 1000:,.0f} ms/step: {p.lost_images_per_second:,.1f} images/s"
        for p in explained
    )
    fabric = (
        f" Fabric traffic per step per node: {_mb(found.reference_fabric_bytes_per_step)} -> "
        f"{_mb(found.fabric_bytes_per_step)}."
    )
    explanation = (
        f"Each of the {found.ranks} ranks trained {found.images_per_second_per_rank:,.1f} "
        f"images/s against {found.reference_images_per_second_per_rank:,.1f} per rank in "
        f"{found.reference_run} ({found.reference_ranks} rank"
        f"{'s' if found.reference_ranks > 1 else ''}): {found.lost_images_per_second:,.1f} "
        f"images/s lost over the run, a step taking {found.seconds_per_step * 1000:,.0f} ms "
        f"instead of {found.reference_seconds_per_step * 1000:,.0f}. Where the time went: "
        f"{pieces}." + fabric
    )
    return Finding(
        rule="scaling_loss_attributed",
        severity=severity,
        title=(
            f"{found.lost_images_per_second:,.1f} images/s lost to scaling, "
            f"mostly {PART_LABELS[top.part]}"
        ),
        explanation=explanation,
        evidence=asdict(found) | {"lost_fraction_per_rank": round(fraction, 4)},
        chart=CHART_BY_PART.get(top.part, "communication_percent"),
    )


CHART_BY_PART = {
    "communication": "communication_percent",
    "input_wait": "input_wait_percent",
    "compute": "compute_percent",
    "other": "compute_percent",
}


# --------------------------------------------------------------------------------------
# input wait
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputWaitHost:
    host: str
    epochs: list[int]
    input_wait_share: float
    cause: str  # storage | decode | undetermined
    cpu_util_percent: float | None
    iowait_percent: float | None
    training_read_bytes: float | None
    training_rchar_bytes: float | None
    storage_read_mbps: float | None


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def detect_input_wait(
    context: RunContext, mine: list[RankEpoch], reads: Reads
) -> list[InputWaitHost]:
    rows = settled(mine)
    by_host: dict[str, list[RankEpoch]] = defaultdict(list)
    for r in rows:
        by_host[r.host].append(r)
    report_rows = {
        (row.host, row.epoch): row for row in context.report.rows if row.host != ALL_HOSTS
    }
    found = []
    for host, members in sorted(by_host.items()):
        seconds = sum(r.seconds for r in members)
        if seconds <= 0:
            continue
        share = sum(r.input_wait for r in members) / seconds
        if share < INPUT_WAIT_SHARE:
            continue
        epochs = sorted({r.epoch for r in members})
        host_rows = [report_rows[(host, e)] for e in epochs if (host, e) in report_rows]
        cpu = _mean([r.cpu_util_percent for r in host_rows if r.cpu_util_percent is not None])
        iowait = _mean([r.iowait_percent for r in host_rows if r.iowait_percent is not None])
        storage = _mean([r.storage_read_mbps for r in host_rows if r.storage_read_mbps is not None])
        read_bytes = training_reads(reads, members)
        rchar_bytes = training_reads(reads, members, PROCESS_RCHAR)
        from_storage = (
            read_bytes is not None
            and rchar_bytes
            and read_bytes / rchar_bytes >= STORAGE_READ_SHARE
            and read_bytes > 0
        )
        if from_storage or (iowait is not None and iowait >= IOWAIT_HIGH_PERCENT):
            cause = "storage"
        elif cpu is not None and cpu >= CPU_SATURATED_PERCENT:
            cause = "decode"
        else:
            cause = "undetermined"
        found.append(
            InputWaitHost(host, epochs, share, cause, cpu, iowait, read_bytes, rchar_bytes, storage)
        )
    return found


CAUSE_TEXT = {
    "storage": "storage-bound: the training's reads came from storage"
    " (or the CPUs sat in iowait); a faster file system, more read-ahead or caching the data"
    " set would help",
    "decode": "decode-bound: the CPUs were saturated decoding and augmenting; more or faster"
    " cores, GPU decoding (DALI) or pre-processed records would help",
    "undetermined": "neither storage nor the CPUs were saturated: more loader workers or a"
    " deeper prefetch would help",
}


def word_input_wait(found: InputWaitHost) -> Finding:
    def number(value: float | None, unit: str, digits: int = 0) -> str:
        return "not measured" if value is None else f"{value:,.{digits}f}{unit}"

    return Finding(
        rule="input_wait",
        severity=WARNING if found.input_wait_share >= 2 * INPUT_WAIT_SHARE else INFO,
        title=(
            f"Input-bound on {found.host}: {100 * found.input_wait_share:.0f}% of step time "
            f"waiting for data ({found.cause})"
        ),
        explanation=(
            f"In epoch{'s' if len(found.epochs) > 1 else ''} "
            f"{', '.join(map(str, found.epochs))} the ranks on {found.host} waited for their "
            f"next batch {100 * found.input_wait_share:.1f}% of the step time. CPU "
            f"{number(found.cpu_util_percent, '%')} busy, iowait "
            f"{number(found.iowait_percent, '%', 1)}, storage "
            f"{number(found.storage_read_mbps, ' MB/s', 1)}; the training itself read "
            f"{_mb(found.training_read_bytes)} from storage of "
            f"{_mb(found.training_rchar_bytes)} read in all. " + CAUSE_TEXT[found.cause] + "."
        ),
        evidence=asdict(found) | {"threshold_share": INPUT_WAIT_SHARE},
        chart="input_wait_percent",
    )


# --------------------------------------------------------------------------------------
# stragglers
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StragglerEpoch:
    epoch: int
    host: str
    rank: int
    busy_seconds_per_step: float
    others_median_seconds_per_step: float
    slow_part: str  # input_wait | compute | other: what grew most against the others


@dataclass(frozen=True)
class Stragglers:
    epochs: list[StragglerEpoch]
    same_rank: bool  # the same rank in every epoch it was found in
    epochs_checked: int


def _busy(r: RankEpoch) -> float:
    return (r.seconds - r.communication) / r.steps if r.steps else math.nan


def detect_stragglers(mine: list[RankEpoch]) -> Stragglers | None:
    by_epoch: dict[int, list[RankEpoch]] = defaultdict(list)
    for r in mine:
        if r.steps > 0:
            by_epoch[r.epoch].append(r)
    hits = []
    checked = 0
    for epoch, members in sorted(by_epoch.items()):
        if len(members) < 2:
            continue
        checked += 1
        slowest = max(members, key=_busy)
        others = [m for m in members if m is not slowest]
        median = statistics.median(_busy(m) for m in others)
        if median <= 0 or _busy(slowest) < STRAGGLER_RATIO * median:
            continue

        def per_step(r: RankEpoch, part: str) -> float:
            return getattr(r, part) / r.steps

        slow_part = max(
            ("input_wait", "compute", "other"),
            key=lambda p: per_step(slowest, p) - statistics.median(per_step(m, p) for m in others),
        )
        hits.append(
            StragglerEpoch(epoch, slowest.host, slowest.rank, _busy(slowest), median, slow_part)
        )
    if not hits:
        return None
    same = len({(h.host, h.rank) for h in hits}) == 1
    return Stragglers(hits, same, checked)


def word_stragglers(found: Stragglers) -> Finding:
    first = found.epochs[0]
    listing = "; ".join(
        f"epoch {h.epoch}: rank {h.rank} on {h.host} busy {h.busy_seconds_per_step * 1000:,.0f}"
        f" ms/step against {h.others_median_seconds_per_step * 1000:,.0f} (slower in "
        f"{PART_LABELS[h.slow_part]})"
        for h in found.epochs
    )
    if found.same_rank and len(found.epochs) > 1:
        verdict = (
            f"The same rank (rank {first.rank} on {first.host}) every time: a slow node, "
            "device or its data path, not chance."
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
        severity=WARNING if found.same_rank and len(found.epochs) > 1 else INFO,
        title=(
            f"Straggler: rank {first.rank} on {first.host}"
            if found.same_rank
            else "Stragglers move from rank to rank"
        ),
        explanation=(
            "The other ranks wait for the slowest in every all-reduce, so one slow rank "
            f"sets everyone's step time. {listing}. {verdict}"
        ),
        evidence=asdict(found) | {"threshold_ratio": STRAGGLER_RATIO},
        chart="communication_percent",
    )


# --------------------------------------------------------------------------------------
# start-up
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Startup:
    first_seconds_per_step: float
    settled_seconds_per_step: float
    extra_seconds: float  # per rank, over epoch 1's steps
    extra_seconds_by_part: dict[str, float]  # per rank, seconds
    cause: str  # build (graph building / compilation) | reads (first reads) | mixed
    first_read_bytes: float | None  # the training's storage reads in epoch 1 (all ranks)
    settled_read_bytes: float | None  # per settled epoch


def detect_startup(mine: list[RankEpoch], reads: Reads) -> Startup | None:
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
    if reads_extra >= 2 * build_extra:
        cause = "reads"
    elif build_extra >= 2 * reads_extra:
        cause = "build"
    else:
        cause = "mixed"
    first_reads = training_reads(reads, first_rows)
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
    )


def word_startup(found: Startup) -> Finding:
    ratio = found.first_seconds_per_step / found.settled_seconds_per_step
    parts = ", ".join(
        f"{PART_LABELS[p]} +{s:,.1f} s" for p, s in found.extra_seconds_by_part.items() if s > 0.05
    )
    cause = {
        "build": "graph building, compilation and warm-up (compute and the rest of the "
        "step), not storage",
        "reads": "the first reads of the data set (input wait)",
        "mixed": "both graph building/compilation and first reads",
    }[found.cause]
    return Finding(
        rule="startup",
        severity=INFO,
        title=f"Epoch 1 took {ratio:.1f}x as long per step: {cause.split(' (')[0]}",
        explanation=(
            f"Epoch 1 ran {found.first_seconds_per_step * 1000:,.0f} ms per step against "
            f"{found.settled_seconds_per_step * 1000:,.0f} later: {found.extra_seconds:,.1f} s "
            f"extra per rank ({parts}). Mostly {cause}. The training read "
            f"{_mb(found.first_read_bytes)} from storage in epoch 1 and "
            f"{_mb(found.settled_read_bytes)} per later epoch. Throughput figures leave "
            "the warm-up steps out for this reason."
        ),
        evidence=asdict(found) | {"threshold_ratio": STARTUP_RATIO},
        chart="input_wait_percent" if found.cause == "reads" else "compute_percent",
    )


# --------------------------------------------------------------------------------------
# the rules
# --------------------------------------------------------------------------------------


def _complete(context: RunContext, rows: list[RankEpoch]) -> list[RankEpoch]:
    incomplete = {w.epoch for w in context.report.windows if not w.complete}
    return [r for r in rows if r.epoch not in incomplete]


def scaling_loss_attributed(context: RunContext) -> list[Finding]:
    found = detect_scaling_loss(context, _complete(context, rank_epochs(context.events)))
    return [word_scaling_loss(found)] if found else []


def input_wait(context: RunContext) -> list[Finding]:
    rows = _complete(context, rank_epochs(context.events))
    reads = epoch_reads(context.events)
    return [word_input_wait(found) for found in detect_input_wait(context, rows, reads)]


def straggler(context: RunContext) -> list[Finding]:
    found = detect_stragglers(_complete(context, rank_epochs(context.events)))
    return [word_stragglers(found)] if found else []


def startup(context: RunContext) -> list[Finding]:
    found = detect_startup(
        _complete(context, rank_epochs(context.events)), epoch_reads(context.events)
    )
    return [word_startup(found)] if found else []


ANATOMY_RULES = (scaling_loss_attributed, input_wait, straggler, startup)


# their evidence is worded through the one dispatch every rule's evidence goes through
for _evidence, _word in (
    (ScalingAttribution, word_scaling_loss),
    (InputWaitHost, word_input_wait),
    (Stragglers, word_stragglers),
    (Startup, word_startup),
):
    words.register(_evidence, _word)
