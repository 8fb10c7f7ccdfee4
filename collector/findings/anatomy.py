"""Findings from the step anatomy: why a run scaled as it did, measured per rank.

Each rule first *detects* (a pure function of the run's ``RankEpoch`` rows and report rows,
returning typed evidence of ``collector.findings.evidence``, or None) and is then *worded*
by ``collector.findings.words``, like every other rule. Per-step figures are averages over
ranks: a part's sum over the ranks' epochs divided by their step count. *Settled* epochs
are every epoch after the first when a run has two or more (epoch 1 carries start-up),
else all.

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
``input_wait``
    Input wait is at least ``INPUT_WAIT_SHARE`` of the step time on a host in settled
    epochs. Storage-bound when the training's own reads came from storage (``read_bytes``
    at least half of ``rchar``) or iowait is high; decode-bound when the epochs' images/s
    reached ``DECODE_BOUND_SHARE`` of the host's decode ceiling (JPEG data sets with a
    measured decode rate per core, ``decode_ceiling_percent``: a cgroup quota's cores are
    saturated while the host's CPUs are not) or, unless the input came faster than decoding
    allows, the training's own processes saturated the CPUs (``training_cpu_percent``; the
    host's CPUs where not sent); others when the host's CPUs were saturated by other
    processes than the training's (``contention`` names them); else undetermined (too few
    loader workers is the usual cause). Before all these: the epoch's start, when at least
    ``EPOCH_START_WAIT_SHARE`` of the wait fell in the epochs' first steps (a profiled
    rank's, which AU leaves out): what restarts with each epoch held the first batch back,
    and more workers would only start more. The share of the decode ceiling is stated beside it
    where measured.
``straggler``
    In an epoch, one part of a rank's step (input wait, compute, all-reduce, the rest) runs
    longer than the other ranks' median of that part by at least ``STRAGGLER_PART_SHARE``
    of the step. Every rank's *wall* time is the same (the others wait for the slowest),
    and where that wait lands depends on the framework (the all-reduce, DDP's buffer
    broadcast at the start of forward, a barrier, a collective in the loss), so the ranks
    are compared part by part and the rank whose extra part is its own work is named, with
    the part, its milliseconds and where the others' wait landed
    (``straggler_in_epoch``). Says whether the same rank straggles in every epoch (a slow
    node or device) or a different one (data loading, noise).
``startup``
    Epoch 1's time per step is at least ``STARTUP_RATIO`` times the settled epochs'.
    Its extra time is split: input wait (first reads; with the training's own storage
    reads of epoch 1 against later ones) versus compute and the rest: the framework's own
    warm-up, worded from the run's framework (TensorFlow's graph building and XLA
    compilation, MXNet's hybridize, an eager PyTorch loop's loader workers starting,
    first-batch allocation and cudnn autotune).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from collector.analysis.anatomy import (
    PROCESS_RCHAR,
    PROCESS_READ,
    RankEpoch,
    epoch_reads,
    rank_epochs,
    share_percent,
)
from collector.analysis.decode import run_host_cores
from collector.analysis.epochs import EpochRow, fabric_ceiling_percent
from collector.analysis.run import RunModel
from collector.analysis.scaling import RunFacts
from collector.findings.causes import threads_per_rank
from collector.findings.context import RunContext
from collector.findings.evidence import (
    AU_PASS,
    BYTES_PER_MB,
    CPU_SATURATED_PERCENT,
    EPOCH_START_WAIT_SHARE,
    INPUT_WAIT_SHARE,
    IOWAIT_HIGH_PERCENT,
    STARTUP_RATIO,
    STEP_PARTS,
    STORAGE_READ_SHARE,
    STRAGGLER_MIN_SECONDS,
    STRAGGLER_PART_SHARE,
    AcceleratorUtilisation,
    Finding,
    InputWaitHost,
    PartChange,
    RankUtilisation,
    RankWait,
    ScalingAttribution,
    Startup,
    StragglerEpoch,
    Stragglers,
    decode_verdict,
)
from collector.findings.words import words
from contract.markers import ALL_HOSTS

PARTS = STEP_PARTS


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
    return {
        "allreduce_bytes_per_second": rate,
        "fabric_ceiling_bytes_per_second": ceiling,
        "allreduce_ceiling_percent": share,
        "allreduce_seconds_at_ceiling": per_step / ceiling,
        "allreduce_ceiling_least_percent": share
        * communication_per_step
        / (communication_per_step + max(compute_per_step, 0.0)),
    }


Reads = dict[tuple[str, int], dict[str, float]]  # collector.analysis.anatomy.epoch_reads


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


# --------------------------------------------------------------------------------------
# input wait
# --------------------------------------------------------------------------------------


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


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
    rows = settled(mine)
    by_host: dict[str, list[RankEpoch]] = defaultdict(list)
    for r in rows:
        by_host[r.host].append(r)
    report_rows = {
        (row.host, row.epoch): row for row in context.report.rows if row.host != ALL_HOSTS
    }
    cores = run_host_cores(context.model)
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
        own = _mean(
            [r.training_cpu_percent for r in host_rows if r.training_cpu_percent is not None]
        )
        iowait = _mean([r.iowait_percent for r in host_rows if r.iowait_percent is not None])
        storage = _mean([r.storage_read_mbps for r in host_rows if r.storage_read_mbps is not None])
        decoding = _mean(
            [r.decode_ceiling_percent for r in host_rows if r.decode_ceiling_percent is not None]
        )
        read_bytes = training_reads(reads, members)
        rchar_bytes = training_reads(reads, members, PROCESS_RCHAR)
        from_storage = (
            read_bytes is not None
            and rchar_bytes
            and read_bytes / rchar_bytes >= STORAGE_READ_SHARE
            and read_bytes > 0
        )
        first_step = first_step_wait_share(members)
        if first_step is not None and first_step >= EPOCH_START_WAIT_SHARE:
            cause = "epoch_start"
        elif from_storage or (iowait is not None and iowait >= IOWAIT_HIGH_PERCENT):
            cause = "storage"
        elif _decode_bound(decoding, own, cpu):
            cause = "decode"
        elif _others_saturate(own, cpu):
            cause = "others"
        else:
            cause = "undetermined"
        found.append(
            InputWaitHost(
                host, epochs, share, cause, cpu, iowait, read_bytes, rchar_bytes, storage,
                accelerator_utilisation=pooled_utilisation(members),
                decode_ceiling_percent=decoding,
                decode_cores=cores.get(host, (None, ""))[0] if decoding is not None else None,
                training_cpu_percent=own,
                first_step_wait_share=first_step,
            )
        )  # fmt: skip
    return found


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


# --------------------------------------------------------------------------------------
# accelerator utilisation (AU, the MLPerf Storage way)
# --------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------
# stragglers
# --------------------------------------------------------------------------------------


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


def detect_stragglers(mine: list[RankEpoch]) -> Stragglers | None:
    by_epoch: dict[int, list[RankEpoch]] = defaultdict(list)
    for r in mine:
        if r.steps > 0 and r.seconds > 0:
            by_epoch[r.epoch].append(r)
    hits = []
    checked = 0
    for epoch, members in sorted(by_epoch.items()):
        if len(members) < 2:
            continue
        checked += 1
        found = straggler_in_epoch(epoch, members)
        if found is not None:
            hits.append(found)
    if not hits:
        return None
    same = len({(h.host, h.rank) for h in hits}) == 1
    return Stragglers(hits, same, checked)


# --------------------------------------------------------------------------------------
# start-up
# --------------------------------------------------------------------------------------


def detect_startup(mine: list[RankEpoch], reads: Reads, framework: str = "") -> Startup | None:
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
        cached = first_reads is not None and (
            first_reads == 0 or bool(first_rchar and first_reads < STORAGE_READ_SHARE * first_rchar)
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


# --------------------------------------------------------------------------------------
# the rules
# --------------------------------------------------------------------------------------


def _complete_in(report, rows: list[RankEpoch]) -> list[RankEpoch]:
    incomplete = {w.epoch for w in report.windows if not w.complete}
    return [r for r in rows if r.epoch not in incomplete]


def _complete(context: RunContext, rows: list[RankEpoch]) -> list[RankEpoch]:
    return _complete_in(context.report, rows)


def _worded(found: object | None) -> list[Finding]:
    return [] if found is None else [words(found)]


def input_wait(context: RunContext) -> list[Finding]:
    rows = _complete(context, rank_epochs(context.model))
    reads = epoch_reads(context.model)
    return [words(found) for found in detect_input_wait(context, rows, reads)]


def accelerator_utilisation(context: RunContext) -> list[Finding]:
    rows = _complete(context, rank_epochs(context.model))
    return [words(found) for found in detect_accelerator_utilisation(rows)]


def straggler(context: RunContext) -> list[Finding]:
    return _worded(detect_stragglers(_complete(context, rank_epochs(context.model))))


def startup(context: RunContext) -> list[Finding]:
    rows = _complete(context, rank_epochs(context.model))
    return _worded(detect_startup(rows, epoch_reads(context.model), context.run.framework))


# the scaling loss is the scaling_loss rule's (collector.findings.engine), explained by
# scaling_attribution when both runs have an anatomy
ANATOMY_RULES = (input_wait, accelerator_utilisation, straggler, startup)
