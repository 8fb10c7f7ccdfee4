"""The ``extra_epochs_to_target`` rule: a run of a scaling group needed more epochs to reach
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

from dataclasses import dataclass, field

from collector.analysis.scaling import GroupKey, scaling_groups
from collector.findings.context import RunContext
from collector.findings.evidence import INFO, WARNING, Finding, digits, evidence_json
from collector.findings.words import words
from contract.units import format_fraction

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
def _(found: ExtraEpochsToTarget) -> Finding:
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
