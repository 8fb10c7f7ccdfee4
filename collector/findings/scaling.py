"""Findings about scaling: the efficiency lost against the group's reference run, attributed
to the parts of the step that grew, and the extra epochs a larger run takes to its target.

``scaling_loss``
    Scaling efficiency below ``SCALING_EFFICIENCY_FLOOR`` against the group's 1-GPU
    baseline, or, when both this run and the reference run (a run on fewer nodes, else the
    1-GPU run) have a step anatomy, each rank at least ``SCALING_LOSS_MIN_FRACTION`` slower
    than the reference's. Explained by the step anatomy when both have one
    (``scaling_attribution`` below: the images/s lost, the scaling
    table's ideal - actual, split into more all-reduce, more input wait, slower compute and
    the rest, with the fabric's bytes per step), else by the resources that *grew* against
    the reference run: fabric bytes per image, storage reads per node (judged as
    ``cache_warmup`` does, the same reads for both runs), CPU and GPU utilisation. Runs
    compare only within one scaling group (framework, model, precision, batch per rank,
    data format, image size). A run (or reference) with a single complete epoch is not
    explained as scaling: its only epoch carries the start-up (graph building, compilation,
    first reads), which the step anatomy would put on the parts of the step, so the anatomy
    neither splits the loss nor makes the rule fire (the 1-vs-2-process pair of
    docs/usage.md with one epoch said "mostly the rest of the step", with two "mostly
    all-reduce"); the efficiency floor still fires, worded with what a run of two or more
    epochs would give (``start_up_only``).

The scaling loss, attributed (``scaling_attribution``: the evidence the ``scaling_loss``
rule of ``collector.findings.engine`` takes as its explanation when both runs have an anatomy)
    Against the group's reference run (fewer nodes, else 1 GPU) this run's ranks each train
    fewer images/s in the settled epochs. The images/s lost to scaling, the scaling
    table's ideal - actual over the whole run (``collector.analysis.scaling.lost_to_scaling``,
    the one figure), are split over the parts whose time per step grew (communication,
    input wait, compute, the rest) in proportion to that growth, so that the parts add up
    to it; a part that shrank offsets. The fabric's bytes per step per node stand beside
    it. The finding fires when a rank's images/s is at least
    ``SCALING_LOSS_MIN_FRACTION`` below the reference's (or the efficiency is below the
    floor).

The ``extra_epochs_to_target`` rule: a run of a scaling group needed more epochs to reach
its target top-1 than the group's smallest run that reached it, so its time-to-accuracy
speed-up is below its throughput speed-up; says how much of that gap the extra epochs
explain (``collector.analysis.target_scaling`` defines every figure: the scaling table,
its JSON, the read API and the dashboard show the same ``time_to_target_speedup``).

Fires when this run reached the target, is not its own baseline, has more GPUs than the
baseline and needed more epochs (``epochs_to_target``) than it. It cannot tell why the
larger run needed more epochs (the larger global batch, the learning rate scaled with
it, a warm-up too short): it measures how much they cost.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field, replace

import numpy as np

from collector.analysis.anatomy import RankEpoch, rank_epochs
from collector.analysis.epochs import EpochReport, EpochRow, fabric_ceiling_percent
from collector.analysis.run import RunModel
from collector.analysis.scaling import GroupKey, RunFacts, scaling_groups
from collector.findings.base import (
    BYTES_PER_MB,
    CEILING_BOUND_SHARE,
    COMMUNICATION,
    COMPUTE,
    CRITICAL,
    HIDDEN,
    IF_KNOWN,
    INFO,
    INPUT_WAIT,
    PART_LABELS,
    PARTS,
    READS_TEXT,
    RX_MINUS_TX,
    SEVERITY_ORDER,
    WARNING,
    Finding,
    StepProfile,
    StorageReads,
    _complete,
    _complete_in,
    _mbps_text,
    _measured_bytes,
    _ms,
    _read_bytes,
    digits,
    evidence_json,
    judged_reads,
    settled,
    step_profile,
    words,
)
from collector.findings.contention import threads_per_rank
from collector.findings.context import RunContext, complete_epochs
from contract.markers import ALL_HOSTS
from contract.units import format_efficiency, format_fraction

# scaling loss
SCALING_EFFICIENCY_FLOOR = 90


SCALING_EFFICIENCY_CRITICAL = 75


RESOURCE_CHANGE_RATIO = 1.25  # a per-image or per-node resource changed by 25% or more


UTILISATION_CHANGE_POINTS = 10.0


# scaling loss with the step anatomy (``scaling_attribution``): a rank trains at least 5%
# fewer images/s than in the reference run; 10% a warning, 25% critical
SCALING_LOSS_MIN_FRACTION = 0.05


SCALING_WARNING_FRACTION = 0.10


SCALING_CRITICAL_FRACTION = 0.25


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
    # True: this run or the reference had one complete epoch, start-up included: the
    # anatomy is not used to attribute the loss, nor the resources' growth to explain it
    start_up_only: bool | None = field(default=None, metadata=IF_KNOWN)

    @property
    def below_floor(self) -> bool:
        return self.efficiency_percent is not None and (
            self.efficiency_percent < SCALING_EFFICIENCY_FLOOR
        )


def resource_use(report: EpochReport, nodes: int, reads: StorageReads) -> ResourceUse:
    """A run's fabric bytes per image, storage reads per node (``reads``: the training's own
    or the hosts'), CPU and GPU utilisation over its complete epochs."""
    complete = complete_epochs(report)
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
    storage = [_read_bytes(r, reads) for r in totals if _read_bytes(r, reads) is not None]

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


def grown(reference: ResourceUse, current: ResourceUse) -> list[RateGrowth | UtilisationGrowth]:
    """The resources whose use *grew* from the reference run to this one: only those can
    explain a loss of throughput (one that fell, e.g. storage reads per node once more nodes
    cache the data set, is not a cause)."""
    changes: list[RateGrowth | UtilisationGrowth] = []
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
            changes.append(RateGrowth(name, before, after, ratio or None))
    for name in ("cpu_util_percent", "gpu_util_percent"):
        before, after = getattr(reference, name), getattr(current, name)
        if before is None or after is None:
            continue
        if after - before >= UTILISATION_CHANGE_POINTS:
            changes.append(UtilisationGrowth(name, before, after, after - before))
    return changes


def detect_scaling_loss(context: RunContext) -> ScalingLoss | None:
    """Throughput lost to scaling, explained by the step anatomy when this run and its
    reference run both have one, else by the resources that grew."""
    key = GroupKey.of(context.run)
    facts = context.group_facts()
    table = scaling_groups(context.store, list(facts.values())).get(key, [])
    me = next((m for m in table if m.run_id == context.run.run_id), None)
    if me is None or me.row.gpus <= 1 or not me.row.images_per_second:
        return None
    mine = facts[context.run.run_id]
    found = ScalingLoss(
        gpus=me.row.gpus,
        nodes=me.row.nodes,
        images_per_second=me.row.images_per_second,
        ideal=me.row.ideal,
        efficiency_percent=me.row.efficiency_percent,
        scope=me.row.scope,
        lost_images_per_second=me.row.lost_images_per_second,
        on_gpus=resource_use(context.report, mine.nodes, StorageReads.HOSTS).gpu_util_percent
        is not None,
    )
    reference = _reference_run(mine, list(facts.values()))
    attribution = None
    if reference is not None:
        attribution = scaling_attribution(context, reference, me.row.lost_images_per_second)
    start_up_only = attribution is not None and attribution.start_up_included
    if start_up_only:  # one epoch, start-up included: not an account of scaling
        attribution = None
    slower = attribution is not None and (
        attribution.lost_fraction_per_rank >= SCALING_LOSS_MIN_FRACTION
    )
    if not found.below_floor and not slower:
        return None
    if reference is None:
        return found
    found = replace(
        found,
        reference_run=reference.run.run_id,
        reference_gpus=reference.gpus,
        reference_nodes=reference.nodes,
        across_nodes=reference.nodes != mine.nodes,
        start_up_only=True if start_up_only else None,
    )
    if start_up_only:
        return found
    if attribution is not None:  # measured: the resources' growth is no explanation beside it
        return replace(found, attribution=attribution)
    ref_report = context.report_of(reference.run.run_id)
    reads = judged_reads(context.report, ref_report)
    ref_use = resource_use(ref_report, reference.nodes, reads)
    mine_use = resource_use(context.report, mine.nodes, reads)
    return replace(
        found,
        reads_judged=reads,
        reference_resources=ref_use,
        run_resources=mine_use,
        changed=grown(ref_use, mine_use),
    )


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


def allreduce_against_ceiling(
    report_rows: list[EpochRow],
    rows: list[RankEpoch],
    communication_per_step: float,
    compute_per_step: float = 0.0,
) -> dict[str, float]:
    """The all-reduce's rate per node while the ranks waited on it, the fabric's ceiling
    and the share (``fabric_ceiling_percent``, the report column's definition), over the
    settled epochs of ``rows``; empty without a ceiling, fabric bytes or an all-reduce wait.
    The least share is the rate had the all-reduce also run behind the whole of compute
    (what it ran behind backward is not measured; it cannot have been more).

    Gradient bytes are the fabric's smaller direction (a ring all-reduce sends and receives
    the same; storage on the fabric adds to the received side only)."""
    epochs = {r.epoch for r in rows}
    hosts = [r for r in report_rows if r.host != ALL_HOSTS and r.epoch in epochs]
    ceilings = [r.fabric_ceiling_mbps for r in hosts if r.fabric_ceiling_mbps]
    gradient_bytes = []
    for row in hosts:
        ib = (row.ib_rcv_bytes, row.ib_xmit_bytes)
        net = (row.net_rx_bytes, row.net_tx_bytes)
        chosen = ib if None not in ib and sum(ib) > 0 else net  # type: ignore[arg-type]
        if None not in chosen:
            gradient_bytes.append(min(chosen))  # type: ignore[type-var]
    per_rank = defaultdict(int)
    for r in rows:
        per_rank[(r.host, r.rank)] += r.steps
    steps = max(per_rank.values(), default=0)
    nodes = len({row.host for row in hosts})
    if not ceilings or not gradient_bytes or steps <= 0 or communication_per_step <= 0:
        return {}
    per_step = sum(gradient_bytes) / nodes / steps
    rate = per_step / communication_per_step
    ceiling = sum(ceilings) / len(ceilings) * BYTES_PER_MB
    share = float(fabric_ceiling_percent(np.array([rate]), np.array([ceiling]))[0])
    least = share * communication_per_step / (communication_per_step + max(compute_per_step, 0.0))
    # judged (link_verdict) as shown: to the evidence's one decimal, so a least share that
    # reads 80.0 is at the 80% bound (79.96 was judged "not shown" beside an 80.0 shown)
    return {
        "allreduce_bytes_per_second": rate,
        "fabric_ceiling_bytes_per_second": ceiling,
        "allreduce_ceiling_percent": round(share, 1),
        "allreduce_seconds_at_ceiling": per_step / ceiling,
        "allreduce_ceiling_least_percent": round(least, 1),
    }


def attribute_scaling_loss(
    reference: StepProfile,
    run: StepProfile,
    lost: float | None,
) -> list[PartChange]:
    """Each part's share of the loss: its growth per step over the growth of the whole step
    (the parts add up to the step, so the shares to 1 when the step grew), and that share
    of ``lost``, the scaling table's images/s lost (``lost_to_scaling``)."""
    growth = run.seconds - reference.seconds
    parts = []
    for name in PARTS:
        delta = run.part(name) - reference.part(name)
        share = delta / growth if growth > 0 else 0.0
        parts.append(
            PartChange(
                name,
                reference.part(name),
                run.part(name),
                share,
                lost * share if lost is not None else None,
            )
        )
    parts.sort(key=lambda p: -p.loss_share)
    return parts


def scaling_attribution(
    context: RunContext, reference: RunFacts, lost: float | None
) -> ScalingAttribution | None:
    """This run's step anatomy against ``reference``'s (the ``scaling_loss`` rule's reference
    run) over each run's settled complete epochs, splitting ``lost`` (the scaling table's
    images/s lost, ``collector.analysis.scaling.lost_to_scaling``) over the parts of the
    step; None unless both runs' ranks sent the anatomy and the reference has fewer
    ranks."""
    mine = _complete(context, rank_epochs(context.model))
    ranks = len({(r.host, r.rank) for r in mine})
    if ranks <= 1:
        return None
    ref_report = context.report_of(reference.run.run_id)
    ref_all = _complete_in(ref_report, rank_epochs(reference.model))
    ref_rows, run_rows = settled(ref_all), settled(mine)
    one_epoch = any(len({r.epoch for r in rows}) < 2 for rows in (ref_all, mine))
    ref_profile, run_profile = step_profile(ref_rows), step_profile(run_rows)
    if ref_profile is None or run_profile is None:
        return None
    ref_ranks = len({(r.host, r.rank) for r in ref_rows})
    if ref_ranks >= ranks:
        return None
    ref_rate = ref_profile.images_per_second_per_rank
    return ScalingAttribution(
        reference_run=reference.run.run_id,
        reference_ranks=ref_ranks,
        ranks=ranks,
        epochs=sorted({r.epoch for r in run_rows}),
        reference_epochs=sorted({r.epoch for r in ref_rows}),
        reference_images_per_second_per_rank=ref_rate,
        images_per_second_per_rank=run_profile.images_per_second_per_rank,
        lost_images_per_second=lost,
        lost_fraction_per_rank=1 - run_profile.images_per_second_per_rank / ref_rate
        if ref_rate > 0
        else 0.0,
        reference_seconds_per_step=ref_profile.seconds,
        seconds_per_step=run_profile.seconds,
        parts=attribute_scaling_loss(ref_profile, run_profile, lost),
        reference_fabric_bytes_per_step=_fabric_bytes_per_step(ref_report.rows, ref_rows),
        fabric_bytes_per_step=_fabric_bytes_per_step(context.report.rows, run_rows),
        start_up_included=one_epoch,
        **_threads(context.model, reference.model),
        **allreduce_against_ceiling(
            context.report.rows, run_rows, run_profile.communication, run_profile.compute
        ),
    )


def _threads(model: RunModel, reference: RunModel) -> dict[str, object]:
    """Both runs' compute threads per rank (``threads_per_rank``), as the attribution's
    fields; empty unless both runs' ranks said."""
    mine, theirs = threads_per_rank(model), threads_per_rank(reference)
    if mine is None or theirs is None:
        return {}
    return {
        "threads_per_rank": mine[0],
        "threads_source": mine[1],
        "reference_threads_per_rank": theirs[0],
        "reference_threads_source": theirs[1],
    }


# the extra epochs explain at least half of a gap of at least 10 % of the throughput
# speed-up: a warning (the epochs are the main cost); otherwise information
GAP_WARNING_SHARE = 0.10


@dataclass(frozen=True)
class ExtraEpochsToTarget:
    """See ``collector.analysis.target_scaling`` for each figure's definition."""

    gpus: int
    baseline_run: str
    baseline_gpus: int
    target_top1: float = field(metadata=digits(4))
    epochs: int
    baseline_epochs: int
    time_to_target_speedup_ratio: float = field(metadata=digits(3))
    throughput_speedup_ratio: float = field(metadata=digits(3))
    expected_speedup_ratio: float = field(metadata=digits(3))  # S_thr x E_B / E_L
    gap_ratio: float = field(metadata=digits(3))  # S_thr - S_tta
    explained_by_epochs_ratio: float = field(metadata=digits(3))  # S_thr - expected
    explained_share: float | None = field(metadata=digits(4))  # None: no gap


def detect_extra_epochs_to_target(context: RunContext) -> ExtraEpochsToTarget | None:
    key = GroupKey.of(context.run)
    this_run = context.run.run_id
    facts = list(context.group_facts().values())
    table = scaling_groups(context.store, facts).get(key, [])
    me = next((m for m in table if m.run_id == this_run), None)
    target = me.target if me is not None else None
    if (
        me is None
        or target is None
        or target.baseline_run_id == this_run
        or me.row.gpus <= target.baseline_gpus
        or target.epochs is None
        or target.baseline_epochs is None
        or target.epochs <= target.baseline_epochs
        or target.throughput_speedup is None
        or target.expected_speedup is None
        or target.gap is None
        or target.explained_by_epochs is None
    ):
        return None
    return ExtraEpochsToTarget(
        gpus=me.row.gpus,
        baseline_run=target.baseline_run_id,
        baseline_gpus=target.baseline_gpus,
        target_top1=target.target_top1,
        epochs=target.epochs,
        baseline_epochs=target.baseline_epochs,
        time_to_target_speedup_ratio=target.time_to_target_speedup,
        throughput_speedup_ratio=target.throughput_speedup,
        expected_speedup_ratio=target.expected_speedup,
        gap_ratio=target.gap,
        explained_by_epochs_ratio=target.explained_by_epochs,
        explained_share=target.explained_share,
    )


@words.register
def word_extra_epochs_to_target(found: ExtraEpochsToTarget) -> Finding:
    extra = found.epochs - found.baseline_epochs
    share = found.explained_share
    if share is None:
        explained = (
            f"Its time to target is no further below its throughput than the extra epochs "
            f"alone would make it ({found.expected_speedup_ratio:.2f}x): the rest of its "
            "time to target scaled better than its throughput"
        )
    else:
        rest = found.gap_ratio - found.explained_by_epochs_ratio
        explained = (
            f"Of the {found.gap_ratio:.2f}x gap between its throughput speed-up and its "
            f"time-to-target speed-up, the extra epochs explain "
            f"{found.explained_by_epochs_ratio:.2f}x ({format_fraction(share)}): "
            f"at its throughput, {found.epochs} epochs against {found.baseline_epochs} give "
            f"{found.throughput_speedup_ratio:.2f}x x {found.baseline_epochs}/{found.epochs} "
            f"= {found.expected_speedup_ratio:.2f}x. "
            + (
                f"The other {rest:.2f}x is time to target the throughput does not count "
                "(start-up, validation, epochs slower than the timed steps)"
                if rest > 0
                else "The rest of its time to target scaled better than its throughput"
            )
        )
    large_gap = found.gap_ratio >= GAP_WARNING_SHARE * found.throughput_speedup_ratio
    severity = WARNING if large_gap and (share or 0) >= 0.5 else INFO
    return Finding(
        rule="extra_epochs_to_target",
        severity=severity,
        title=(
            f"{found.epochs} epochs to reach top-1 {format_fraction(found.target_top1)} "
            f"against {found.baseline_epochs} on {found.baseline_gpus} GPU"
            f"{'s' if found.baseline_gpus != 1 else ''}: time-to-accuracy speed-up "
            f"{found.time_to_target_speedup_ratio:.2f}x, throughput "
            f"{found.throughput_speedup_ratio:.2f}x"
        ),
        explanation=(
            f"On {found.gpus} GPUs this run needed {extra} more epoch"
            f"{'s' if extra != 1 else ''} than {found.baseline_run} (the group's smallest run "
            f"that reached the target, {found.baseline_gpus} GPU"
            f"{'s' if found.baseline_gpus != 1 else ''}) to reach top-1 "
            f"{format_fraction(found.target_top1)}. {explained}. A larger global batch "
            "usually needs more epochs: a learning-rate warm-up or schedule tuned for it "
            "(LARS/LAMB at very large batches) wins some back."
        ),
        evidence=evidence_json(found),
    )


RESOURCE_LABELS = {
    "fabric_bytes_per_image": "network bytes per image",
    "storage_read_mbps_per_node": "storage reads per node (MB/s)",
    "cpu_util_percent": "CPU utilisation (%)",
    "gpu_util_percent": "GPU utilisation (%)",
}


def nodes_text(count: int | None) -> str:
    return f"{count} node{'s' if count != 1 else ''}"


def ranks_text(count: int, on_gpus: bool) -> str:
    """``4 GPUs`` for a run whose hosts showed GPUs, else ``4 ranks`` (CPU processes)."""
    noun = "GPU" if on_gpus else "rank"
    return f"{count} {noun}{'s' if count != 1 else ''}"


def growth_text(change: RateGrowth | UtilisationGrowth) -> str:
    label = RESOURCE_LABELS[change.resource]
    if isinstance(change, UtilisationGrowth):
        how = f"{change.change_points:+.0f} points"
    elif change.ratio:
        how = f"{change.ratio:.2f}x"
    else:
        how = "from zero"
    return f"{label}: {change.reference:,.0f} -> {change.run:,.0f} ({how})"


CHART_BY_PART = {
    "communication": COMMUNICATION,
    "input_wait": INPUT_WAIT,
    "compute": COMPUTE,
    "other": COMPUTE,
}


def _images(rate: float) -> str:
    """Images/s whole from 100 on, else to one decimal (a CPU run's 4.5 is not "4")."""
    return f"{rate:,.0f}" if abs(rate) >= 100 else f"{rate:,.1f}"


def part_change_text(change: PartChange) -> str:
    lost = change.lost_images_per_second
    share = (
        f"{abs(lost):,.1f} images/s"
        if lost is not None
        else f"{format_fraction(abs(change.loss_share))} of the loss"
    )
    return (
        f"{PART_LABELS[change.part]} {_ms(change.reference_seconds)} -> "
        f"{_ms(change.run_seconds)} ms/step: {share}"
    )


NOTHING_GREW = "no part of the step (input wait, compute, all-reduce, the rest) grew"


def _epochs_text(epochs: list[int]) -> str:
    if not epochs:
        return "no epoch"
    if len(epochs) == 1:
        return f"epoch {epochs[0]}"
    if epochs == list(range(epochs[0], epochs[-1] + 1)):
        return f"epochs {epochs[0]}-{epochs[-1]}"
    return "epochs " + ", ".join(map(str, epochs))


def attribution_text(found: ScalingAttribution, against: str) -> str:
    """The step anatomy's account of a scaling loss: where the lost images/s went."""
    over = (
        "with epoch 1's start-up included (a run of one epoch has no later epoch to compare)"
        if found.start_up_included
        else "over the epochs after the first"
    )
    text = (
        f" Against {against}, measured by the step anatomy {over} "
        f"({_epochs_text(found.epochs)}; the reference's {_epochs_text(found.reference_epochs)}), "
        f"each of the {found.ranks} ranks trained "
        f"{found.images_per_second_per_rank:,.1f} images/s against "
        f"{found.reference_images_per_second_per_rank:,.1f} per rank "
    )
    if found.lost_fraction_per_rank <= 0:
        return text + (
            f"(no fewer), a step taking {_ms(found.seconds_per_step)} ms against "
            f"{_ms(found.reference_seconds_per_step)}: {NOTHING_GREW}; the images/s were "
            "lost outside those steps (epoch 1's start-up), or were lost already in the "
            "reference run."
        )
    lost = found.lost_images_per_second
    text += (
        f"({format_fraction(found.lost_fraction_per_rank)} fewer), a step taking "
        f"{_ms(found.seconds_per_step)} ms instead of {_ms(found.reference_seconds_per_step)}."
    )
    if found.grown:
        split = (
            f" The {lost:,.1f} images/s lost over the run (ideal - actual, as the scaling "
            "table gives it) split by each part's share of that slower step: "
            if lost is not None
            else " With no 1-GPU run to give the images/s lost, each part's share of that "
            "slower step: "
        )
        text += split + "; ".join(map(part_change_text, found.grown)) + "."
        text += threads_text(found)
        offsets = [
            p
            for p in found.shrunk
            if (-p.lost_images_per_second >= 0.05 if lost is not None else -p.loss_share >= 1e-3)
        ]  # shows as 0.1 images/s, or 0.1 %
        if offsets:
            text += " Offset by: " + "; ".join(map(part_change_text, offsets)) + "."
    else:
        text += f" But {NOTHING_GREW}: the images/s were lost outside the timed steps."
    reference, run = found.reference_fabric_bytes_per_step, found.fabric_bytes_per_step
    return (
        text
        + (
            f" Fabric traffic per step per node: {_measured_bytes(reference)} -> "
            f"{_measured_bytes(run)}."
        )
        + allreduce_ceiling_text(found)
    )


def _bytes_rate(bytes_per_second: float) -> str:
    if bytes_per_second >= 1e9:
        return f"{bytes_per_second / 1e9:,.1f} GB/s"
    return f"{_mbps_text(bytes_per_second / 1e6)} MB/s"


OVER_CEILING = 1.10  # above it a rate is more than the link carries, not a noisy reading


def allreduce_ceiling_text(found: ScalingAttribution) -> str:
    """The all-reduce's rate against the fabric's measured ceiling, with the rule for
    "bandwidth-bound" (``link_verdict``); "" without a ceiling."""
    rate, ceiling = found.allreduce_bytes_per_second, found.fabric_ceiling_bytes_per_second
    share = found.allreduce_ceiling_percent
    if rate is None or ceiling is None or share is None:
        return ""
    text = (
        f" While the ranks waited on it, the all-reduce moved {_bytes_rate(rate)} per node, "
        f"{share:.0f}% of the fabric's measured {_bytes_rate(ceiling)} (agent ceilings)"
    )
    verdict = link_verdict(share, found.allreduce_ceiling_least_percent)
    if verdict == "under":
        return text + (
            f", under the {100 * CEILING_BOUND_SHARE:.0f}% that would mean bandwidth: not "
            "bandwidth; latency (many small tensors: fusion helps) or waiting for slower "
            "ranks, or too little overlap with backward."
        )
    helps = "a faster link or fewer gradient bytes (fp16, compression) would help."
    unsure = (
        "Had it run behind the whole of compute too (what ran behind backward is not "
        f"measured), it would have run at {found.allreduce_ceiling_least_percent or 0:.0f}% "
        "of the link: overlap, not only bandwidth, may explain the share; the link is not "
        "shown to bound the all-reduce."
    )
    least = found.allreduce_seconds_at_ceiling
    if share > 100 * OVER_CEILING and least is not None:
        text += (
            f": more than the link carries, so the wait was not the whole transfer. At the "
            f"link's rate the gradients need at least {_ms(least)} ms per step"
        )
        if verdict == "not_shown":
            return f"{text}. {unsure}"
        return text + (
            "; the rest ran behind backward, in compute's time: the link bounds the "
            f"all-reduce (bandwidth-bound); {helps}"
        )
    if verdict == "not_shown":
        return text + (
            f", at or above the {100 * CEILING_BOUND_SHARE:.0f}% that would mean "
            f"bandwidth if the wait were the whole transfer. {unsure}"
        )
    return text + f": bandwidth-bound; {helps}"


def threads_text(found: ScalingAttribution) -> str:
    """Why compute grew, when the ranks computed with fewer threads than the reference's."""
    mine, theirs = found.threads_per_rank, found.reference_threads_per_rank
    if mine is None or theirs is None or mine >= theirs:
        return ""
    if not any(p.part == "compute" for p in found.grown):
        return ""

    def said(threads: int, source: str | None) -> str:
        return f"{threads} thread{'' if threads == 1 else 's'}" + (f" ({source})" if source else "")

    return (
        f" Compute grew as each rank computed with {said(mine, found.threads_source)} "
        f"where the reference's ranks had {said(theirs, found.reference_threads_source)}: "
        "the ranks divided the cores (see cpu_oversubscription)."
    )


def attribution_severity(found: ScalingAttribution) -> str:
    fraction = found.lost_fraction_per_rank
    if fraction >= SCALING_CRITICAL_FRACTION:
        return CRITICAL
    return WARNING if fraction >= SCALING_WARNING_FRACTION else INFO


@words.register
def word_scaling_loss(found: ScalingLoss) -> Finding:
    ranks = ranks_text(found.gpus, found.on_gpus)
    efficiency = (
        format_efficiency(found.efficiency_percent)
        if found.efficiency_percent is not None
        else None
    )
    if efficiency is not None:
        explanation = (
            f"{ranks} on {nodes_text(found.nodes)} reached {_images(found.images_per_second)} "
            f"images/s of an ideal {_images(found.ideal)} (1 x {found.gpus}): {efficiency} "
            "efficiency"
            + (
                f", {_images(found.lost_images_per_second)} images/s lost."
                if found.lost_images_per_second and found.lost_images_per_second > 0
                else "."
            )
        )
        title = f"Scaling efficiency {efficiency} on {ranks}"
    else:
        explanation = (
            f"{ranks} on {nodes_text(found.nodes)} reached {_images(found.images_per_second)} "
            "images/s (no 1-GPU run of this training to give its efficiency)."
        )
        title = f"Scaling loss on {ranks}"
    severities = []
    if found.below_floor:
        critical = found.efficiency_percent < SCALING_EFFICIENCY_CRITICAL
        severities.append(CRITICAL if critical else WARNING)
    against = (
        f"{found.reference_run} ({ranks_text(found.reference_gpus or 0, found.on_gpus)} "
        f"on {nodes_text(found.reference_nodes)})"
    )
    chart = ""
    attribution = found.attribution
    changed = found.changed or []
    if attribution is not None:
        explanation += attribution_text(attribution, against)
        if attribution.lost_fraction_per_rank >= SCALING_LOSS_MIN_FRACTION:
            severities.append(attribution_severity(attribution))
        lost = attribution.lost_images_per_second
        if attribution.lost_fraction_per_rank > 0 and attribution.grown:
            top = attribution.grown[0]
            how_much = (
                f"{lost:,.1f} images/s lost to scaling"
                if lost is not None and lost > 0
                else f"{format_fraction(attribution.lost_fraction_per_rank)} fewer images/s "
                "per rank"
            )
            title += f": {how_much}, mostly {PART_LABELS[top.part]}"
            chart = CHART_BY_PART[top.part].name
        else:
            title += f": no part of the step grew against {found.reference_run}"
    elif found.start_up_only:
        explanation += (
            f" Not attributed against {against}: a run of one epoch (this one or the "
            "reference) has only the epoch that carries its start-up (graph building, "
            "compilation, first reads), so the loss includes start-up and the step anatomy "
            "would put it on scaling. Run both for 2 epochs or more to attribute it to "
            "all-reduce, input wait, compute and the rest."
        )
        title += ": one epoch, start-up included, not attributed"
    elif found.reference_run is not None:
        storage_compared = any("storage" in c.resource for c in changed)
        reads = (
            f" (storage: {READS_TEXT[found.reads_judged]})"
            if found.reads_judged and storage_compared
            else ""
        )
        if changed:
            explanation += (
                f" Grew against {against}: "
                + "; ".join(growth_text(c) for c in changed)
                + f".{reads}"
            )
            grew_with = "node count" if found.across_nodes else "rank count"
            title += f": {RESOURCE_LABELS[changed[0].resource]} grew with {grew_with}"
            chart = RX_MINUS_TX.name if "fabric" in changed[0].resource else ""
        else:
            explanation += (
                f" No measured resource grew by {RESOURCE_CHANGE_RATIO:.2f}x against "
                f"{against}{reads}."
            )
    return Finding(
        rule="scaling_loss",
        severity=min(severities, key=SEVERITY_ORDER.__getitem__) if severities else INFO,
        title=title,
        explanation=explanation,
        evidence=evidence_json(found),
        chart=chart,
    )
