"""Scaling tables: throughput against the ideal of N x one GPU, as the published studies do.

For a group of runs that differ only in GPU count (same framework, model, precision,
per-GPU batch size and data format), the baseline is the group's 1-GPU run and, per run:

==================  ============================================================
gpus, nodes         ranks in the run, hosts that ran them
images_per_second   aggregate throughput of every rank (``collector.analysis.throughput``)
startup_seconds     the run's start-up: its warm-up steps' wall time, not in the rate
ideal               baseline images/s x gpus
efficiency_percent  images_per_second / ideal in percent, full precision (97.08 for
                    1099 / (283 x 4)); tables print it whole, half up, as the studies do
speedup             images_per_second / baseline images/s, full precision
scope               ``baseline`` (the 1-GPU run), ``intra-node`` (one node),
                    ``inter-node`` (several nodes)
==================  ============================================================

and ``lost_images_per_second``, ideal - images_per_second (``lost_to_scaling``): THE
images/s lost to scaling, the one figure the ``scaling_loss`` finding and its step-anatomy
split show too.

Runs that report top-1 accuracy also get the time and number of epochs to reach the run's
``target_top1`` (on the reporting rank's own clock, from its ``run_start``) and
``time_to_target_speedup``, that time's speed-up over ``time_to_target_baseline``, the
group's smallest run that reached the same target (``collector.analysis.target_scaling``).

Run throughput is the one definition of ``contract.throughput``: every rank's timed steps
(after the warm-up) over their seconds, summed over ranks, read from the ranks'
``epoch_end`` events (``collector.analysis.throughput``). The ranks' printed summary, the runs list,
this table and the per-epoch report all show that figure.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

from collector.analysis.run import RunModel, read_run
from collector.analysis.target_scaling import TargetRun, TargetSpeedup, target_speedups
from collector.analysis.throughput import RunThroughput, rank_epoch_work, run_throughput
from collector.store.api import ReadStore, RunInfo, WorkloadEvent, event_number
from contract.schema import INFERENCE_FRAMEWORK, Event, RunState, Workload

NS_PER_SECOND = 1_000_000_000

BASELINE, INTRA_NODE, INTER_NODE = "baseline", "intra-node", "inter-node"
THROUGHPUT_KEYS = ("gpus", "nodes", "images_per_second", "ideal", "efficiency_percent", "speedup")


def lost_to_scaling(images_per_second: float, ideal: float | None) -> float | None:
    """THE images/s lost to scaling: the ideal (baseline images/s x GPUs) minus the run's
    images/s, both over the whole run as ``contract.throughput`` counts them; None without
    a baseline. The scaling table, the dashboard and the ``scaling_loss`` finding all show
    this figure (negative: better than linear)."""
    return None if ideal is None else ideal - images_per_second


@dataclass(frozen=True)
class ScalingRow:
    gpus: int
    nodes: int | None
    images_per_second: float | None
    ideal: float | None
    efficiency_percent: float | None
    speedup: float | None
    scope: str
    lost_images_per_second: float | None = None  # lost_to_scaling

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def throughput_dict(self) -> dict[str, Any]:
        """The six keys of ``collector scaling --throughput --format json``."""
        return {key: getattr(self, key) for key in THROUGHPUT_KEYS}


def scope_of(gpus: int, nodes: int | None) -> str:
    if gpus == 1:
        return BASELINE
    if nodes is None:
        return ""
    return INTRA_NODE if nodes <= 1 else INTER_NODE


def scaling_row(
    gpus: int, nodes: int | None, images_per_second: float, baseline: float | None
) -> ScalingRow:
    if baseline is None or baseline <= 0:
        return ScalingRow(gpus, nodes, images_per_second, None, None, None, scope_of(gpus, nodes))
    ideal = baseline * gpus
    return ScalingRow(
        gpus=gpus,
        nodes=nodes,
        images_per_second=images_per_second,
        ideal=ideal,
        efficiency_percent=100.0 * images_per_second / ideal,
        speedup=images_per_second / baseline,
        scope=scope_of(gpus, nodes),
        lost_images_per_second=lost_to_scaling(images_per_second, ideal),
    )


def parse_throughput(text: str) -> list[tuple[int, float]]:
    """``"1:283,4:1099,8:2075"`` -> ``[(1, 283.0), (4, 1099.0), (8, 2075.0)]``."""
    pairs = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        gpus_text, sep, rate_text = item.partition(":")
        try:
            if not sep:
                raise ValueError
            gpus, rate = int(gpus_text), float(rate_text)
        except ValueError:
            raise ValueError(f"{item!r} is not GPUS:IMAGES_PER_SECOND (e.g. 4:1099)") from None
        if gpus < 1 or rate < 0:
            raise ValueError(f"{item!r}: GPUs must be >= 1 and images/s >= 0")
        pairs.append((gpus, rate))
    if not pairs:
        raise ValueError("no GPUS:IMAGES_PER_SECOND pairs given")
    return pairs


def throughput_table(
    pairs: list[tuple[int, float]], gpus_per_node: int | None = None
) -> list[ScalingRow]:
    """Scaling rows for given (gpus, images/s) pairs; the 1-GPU pair is the baseline."""
    baselines = [rate for gpus, rate in pairs if gpus == 1]
    if not baselines:
        raise ValueError("a 1-GPU throughput is needed as the baseline (e.g. 1:283)")
    if gpus_per_node is not None and gpus_per_node < 1:
        raise ValueError("--gpus-per-node must be >= 1")
    baseline = baselines[0]
    rows = []
    for gpus, rate in sorted(pairs):
        nodes = math.ceil(gpus / gpus_per_node) if gpus_per_node else None
        rows.append(scaling_row(gpus, nodes, rate, baseline))
    return rows


# --------------------------------------------------------------------------------------
# Stored runs
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Accuracy:
    final_top1: float | None
    target_top1: float | None
    epochs_to_target: int | None
    seconds_to_target: float | None


def time_to_accuracy(events: Iterable[WorkloadEvent], config: dict[str, Any]) -> Accuracy:
    """First epoch whose reported top-1 reaches ``target_top1``, and the time it took on
    the reporting rank's clock since that rank's ``run_start``."""
    target = config.get(Workload.TARGET_TOP1)
    target = float(target) if isinstance(target, int | float) else None
    run_start: dict[tuple[str, int], int] = {}
    final = None
    reached: tuple[int, float] | None = None
    for event in events:
        key = (event.host, event.rank)
        if event.event == Event.RUN_START:
            run_start.setdefault(key, event.time_ns)
            continue
        top1 = event_number(event, Workload.TOP1)
        if top1 is None:
            continue
        final = top1
        if reached is None and target is not None and top1 >= target:
            epoch = event_number(event, Workload.EPOCH)
            started = run_start.get(key)
            seconds = (event.time_ns - started) / NS_PER_SECOND if started is not None else None
            reached = (int(epoch) if epoch is not None else None, seconds)
    return Accuracy(
        final_top1=final,
        target_top1=target,
        epochs_to_target=reached[0] if reached else None,
        seconds_to_target=round(reached[1], 3) if reached and reached[1] is not None else None,
    )


@dataclass(frozen=True)
class GroupKey:
    framework: str
    model: str
    precision: str
    batch_size: int | None
    data_format: str
    image_size: int | None = None  # pixels: a 32-px and a 224-px run do not compare

    @classmethod
    def of(cls, run: RunInfo) -> GroupKey:
        batch = run.config.get(Workload.BATCH_SIZE)
        size = run.config.get(Workload.IMAGE_SIZE)
        return cls(
            framework=run.framework,
            model=str(run.config.get(Workload.MODEL, run.model) or ""),
            precision=str(run.config.get(Workload.PRECISION, "") or ""),
            batch_size=int(batch) if isinstance(batch, int | float) else None,
            data_format=str(run.config.get(Workload.DATA_FORMAT, "") or ""),
            image_size=int(size) if isinstance(size, int | float) and size > 0 else None,
        )

    def label(self) -> str:
        parts = [self.framework, self.model, self.precision, f"batch {self.batch_size}/GPU"]
        size = f"{self.image_size} px" if self.image_size else ""
        return " ".join(p for p in [*parts, self.data_format, size] if p)


@dataclass(frozen=True)
class RunScaling:
    """One stored run in its group's scaling table."""

    run_id: str
    group: GroupKey
    state: str
    start_ns: int
    row: ScalingRow
    throughput_source: str
    startup_seconds: float | None
    accuracy: Accuracy
    # against the group's smallest run that reached the same target
    # (collector.analysis.target_scaling); None when this run did not reach it
    target: TargetSpeedup | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            **asdict(self.group),
            "state": self.state,
            **self.row.to_dict(),
            "throughput_source": self.throughput_source,
            "startup_seconds": self.startup_seconds,
            "final_top1": self.accuracy.final_top1,
            "target_top1": self.accuracy.target_top1,
            "epochs_to_target": self.accuracy.epochs_to_target,
            "seconds_to_target": self.accuracy.seconds_to_target,
            **target_dict(self.target),
        }


def target_dict(target: TargetSpeedup | None) -> dict[str, Any]:
    """The time-to-target comparison's keys of a scaling row (None where not reached)."""
    return {
        "time_to_target_speedup": target.time_to_target_speedup if target else None,
        "time_to_target_baseline": target.baseline_run_id if target else None,
    }


@dataclass(frozen=True)
class RunFacts:
    """What scaling needs of one stored run."""

    run: RunInfo
    gpus: int
    nodes: int
    throughput: RunThroughput
    accuracy: Accuracy
    model: RunModel  # its events, as read once


def run_facts(store: ReadStore, run: RunInfo, model: RunModel | None = None) -> RunFacts:
    """What scaling needs of ``run``, from ``model`` (its events as read once) or, when not
    given, from its events read here."""
    if model is None:
        model = read_run(store, run)
    return RunFacts(
        run=run,
        gpus=run.world_size or len(model.ranks),
        nodes=len(run.hosts) or len({host for host, _ in model.ranks}),
        throughput=run_throughput(rank_epoch_work(model)),
        accuracy=time_to_accuracy(model.epoch_events, run.config),
        model=model,
    )


def _choose_baseline(candidates: list[RunFacts]) -> RunFacts | None:
    """The group's 1-GPU run: the newest finished one, else the newest."""
    usable = [c for c in candidates if c.gpus == 1 and c.throughput.images_per_second]
    finished = [c for c in usable if c.run.state == RunState.FINISHED]
    pool = finished or usable
    return max(pool, key=lambda c: c.run.start_ns) if pool else None


def scaling_groups(
    store: ReadStore, facts: list[RunFacts] | None = None
) -> dict[GroupKey, list[RunScaling]]:
    """Every stored training run (failed ones left out; inference runs, which have their own
    page, too) in its group, by GPUs then start time."""
    if facts is None:
        facts = [
            run_facts(store, run)
            for run in store.runs()
            if run.state != RunState.FAILED and run.framework != INFERENCE_FRAMEWORK
        ]
    groups: dict[GroupKey, list[RunFacts]] = defaultdict(list)
    for fact in facts:
        groups[GroupKey.of(fact.run)].append(fact)
    out: dict[GroupKey, list[RunScaling]] = {}
    for key in sorted(groups, key=lambda k: k.label()):
        members = sorted(groups[key], key=lambda f: (f.gpus, f.run.start_ns))
        baseline = _choose_baseline(members)
        base_rate = baseline.throughput.images_per_second if baseline else None
        rows = []
        for fact in members:
            rate = fact.throughput.images_per_second
            if rate is None:
                row = ScalingRow(fact.gpus, fact.nodes, None, None, None, None, "")
            else:
                row = scaling_row(fact.gpus, fact.nodes, rate, base_rate)
            if fact.gpus == 1 and fact is not baseline:
                row = ScalingRow(**{**asdict(row), "scope": "single-gpu"})
            rows.append(
                RunScaling(
                    run_id=fact.run.run_id,
                    group=key,
                    state=fact.run.state,
                    start_ns=fact.run.start_ns,
                    row=row,
                    throughput_source=fact.throughput.source,
                    startup_seconds=fact.throughput.startup_seconds,
                    accuracy=fact.accuracy,
                )
            )
        out[key] = with_target_speedups(rows)
    return out


def with_target_speedups(rows: list[RunScaling]) -> list[RunScaling]:
    """One group's rows, each with its time-to-target speed-up over the group's smallest
    run that reached the same target (``collector.analysis.target_scaling``)."""
    speedups = target_speedups(
        [
            TargetRun(
                run_id=row.run_id,
                gpus=row.row.gpus,
                start_ns=row.start_ns,
                finished=row.state == RunState.FINISHED,
                images_per_second=row.row.images_per_second,
                target_top1=row.accuracy.target_top1,
                epochs_to_target=row.accuracy.epochs_to_target,
                seconds_to_target=row.accuracy.seconds_to_target,
            )
            for row in rows
        ]
    )
    return [replace(row, target=speedups.get(row.run_id)) for row in rows]


def scaling_rows(store: ReadStore) -> list[dict[str, Any]]:
    """All groups' rows as plain dicts (JSON-ready; None where there is no data)."""
    return [member.to_dict() for members in scaling_groups(store).values() for member in members]
