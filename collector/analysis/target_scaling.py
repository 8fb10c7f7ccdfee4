"""Time-to-accuracy scaling: each run's speed-up in the time to reach its target top-1 over
the smallest run of its scaling group that reached the same target, and how much of the
gap to its throughput speed-up the extra epochs it needed explain.

The published studies compare 1 to 8 nodes by the time to reach a target top-1 against
their *smallest configuration* (not necessarily one GPU), and explain a speed-up below the
throughput's by the extra epochs a larger global batch needs. For a run L against the
baseline B (the group's run with the fewest GPUs that reached the same ``target_top1``;
of several, the newest finished one):

=========================  ===========================================================
time_to_target_speedup     S_tta = B's seconds to target / L's
throughput_speedup         S_thr = L's images/s / B's (the scaling table's throughput)
epochs_ratio               E_B / E_L, the epochs to target (below 1: L needed more)
expected_speedup           S_thr x E_B / E_L: what S_tta would be if each run's time to
                           target were its epochs at its throughput
gap                        S_thr - S_tta, in "x"
explained_by_epochs        S_thr - expected_speedup = S_thr x (1 - E_B / E_L)
explained_share            explained_by_epochs / gap (1: the extra epochs are the whole
                           gap; above 1: the rest made up for some of them); None when
                           there is no gap
=========================  ===========================================================

The rest of the gap (gap - explained_by_epochs) is time to target that the throughput
does not count: start-up and warm-up steps, validation, and epochs that ran slower than
the run's timed steps.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True)
class TargetRun:
    """What the comparison needs of one run of a scaling group."""

    run_id: str
    gpus: int
    start_ns: int
    finished: bool
    images_per_second: float | None
    target_top1: float | None
    epochs_to_target: int | None
    seconds_to_target: float | None

    @property
    def reached(self) -> bool:
        return self.seconds_to_target is not None and self.seconds_to_target > 0


@dataclass(frozen=True)
class TargetSpeedup:
    """One run against its group's time-to-target baseline (see the module's table)."""

    baseline_run_id: str
    baseline_gpus: int
    target_top1: float
    time_to_target_speedup: float
    throughput_speedup: float | None
    baseline_epochs: int | None
    epochs: int | None

    @property
    def epochs_ratio(self) -> float | None:
        if not self.baseline_epochs or not self.epochs:
            return None
        return self.baseline_epochs / self.epochs

    @property
    def expected_speedup(self) -> float | None:
        if self.throughput_speedup is None or self.epochs_ratio is None:
            return None
        return self.throughput_speedup * self.epochs_ratio

    @property
    def gap(self) -> float | None:
        if self.throughput_speedup is None:
            return None
        return self.throughput_speedup - self.time_to_target_speedup

    @property
    def explained_by_epochs(self) -> float | None:
        if self.throughput_speedup is None or self.expected_speedup is None:
            return None
        return self.throughput_speedup - self.expected_speedup

    @property
    def explained_share(self) -> float | None:
        gap, explained = self.gap, self.explained_by_epochs
        if gap is None or explained is None or gap <= 0:
            return None
        return explained / gap


def _baseline(candidates: list[TargetRun]) -> TargetRun | None:
    """The run with the fewest GPUs that reached the target: the newest finished one."""
    reached = [c for c in candidates if c.reached]
    if not reached:
        return None
    fewest = min(c.gpus for c in reached)
    smallest = [c for c in reached if c.gpus == fewest]
    return max(smallest, key=lambda c: (c.finished, c.start_ns))


def target_speedups(group: list[TargetRun]) -> dict[str, TargetSpeedup]:
    """Each run of one scaling group that reached its target, by run id, against the
    group's baseline for that target (the baseline itself included: 1.0x)."""
    by_target: dict[float, list[TargetRun]] = defaultdict(list)
    for run in group:
        if run.target_top1 is not None:
            by_target[run.target_top1].append(run)
    out: dict[str, TargetSpeedup] = {}
    for target, runs in by_target.items():
        baseline = _baseline(runs)
        if baseline is None or baseline.seconds_to_target is None:
            continue
        for run in runs:
            if not run.reached or run.seconds_to_target is None:
                continue
            throughput = None
            if run.images_per_second and baseline.images_per_second:
                throughput = run.images_per_second / baseline.images_per_second
            out[run.run_id] = TargetSpeedup(
                baseline_run_id=baseline.run_id,
                baseline_gpus=baseline.gpus,
                target_top1=target,
                time_to_target_speedup=baseline.seconds_to_target / run.seconds_to_target,
                throughput_speedup=throughput,
                baseline_epochs=baseline.epochs_to_target,
                epochs=run.epochs_to_target,
            )
    return out
