"""The matrix's runs scored per rule as a classifier is: recall (fired where a case's label
says it must), false alarms (fired where a label forbids it, or at warning/critical on a
control, as a share of all runs), and for each true positive whether the cause it stated is
the label's ("right cause"). Fit and held-out cases apart. Pure functions over the runs'
results (bench/findings/runner.py writes them), so the arithmetic is unit-tested."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from bench.findings.matrix import Case, split_of

RECALL_GOAL = 0.9
FALSE_ALARM_GOAL = 0.02  # of all runs
RIGHT_CAUSE_GOAL = 0.9
ALARMING = frozenset({"warning", "critical"})  # an info finding on a control is no alarm


@dataclass(frozen=True)
class Fired:
    """One finding a run's report gave: its rule, severity and its evidence's scalar values
    (where a rule states its cause: ``cause``, ``verdict``)."""

    rule: str
    severity: str
    title: str
    evidence: Mapping[str, Any]


@dataclass(frozen=True)
class RunResult:
    case: str
    repeat: int
    status: str  # ok | failed | skipped | not_injected (the cause did not take: not scored)
    fired: tuple[Fired, ...] = ()
    seconds: float = 0.0
    error: str = ""


def scalar_evidence(evidence: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A finding's evidence kept to its scalars (what a stated cause is written in), those
    of nested objects under dotted keys (``worst.cause``); lists left out."""
    kept: dict[str, Any] = {}
    for key, value in evidence.items():
        if isinstance(value, Mapping):
            kept.update(scalar_evidence(value, f"{prefix}{key}."))
        elif isinstance(value, (str, int, float, bool)) or value is None:
            kept[f"{prefix}{key}"] = value
    return kept


def with_link_verdict(evidence: dict[str, Any]) -> dict[str, Any]:
    """A scaling loss's all-reduce share of the measured link and its least share, as the
    rule words them (``collector.findings.scaling.link_verdict``: bound, not_shown, under),
    under ``attribution.link_verdict``; the report gives the two shares, not the word."""
    share = evidence.get("attribution.allreduce_ceiling_percent")
    if isinstance(share, (int, float)):
        from collector.findings.scaling import link_verdict

        least = evidence.get("attribution.allreduce_ceiling_least_percent")
        evidence["attribution.link_verdict"] = link_verdict(
            share, least if isinstance(least, (int, float)) else None
        )
    return evidence


def with_memory_fit(evidence: dict[str, Any]) -> dict[str, Any]:
    """``dataset_fits_in_memory``'s word for its evidence, as the rule's own evidence class
    reads it (``fits``, ``fits_host_memory_only``, else ``under_5x``), under ``fit``."""
    from dataclasses import fields

    from collector.findings.cache import DatasetFitsInMemory

    names = {f.name for f in fields(DatasetFitsInMemory)}
    try:
        found = DatasetFitsInMemory(**{k: v for k, v in evidence.items() if k in names})
    except TypeError:  # an older report without a field the class needs
        return evidence
    evidence["fit"] = (
        "fits" if found.fits else "fits_host_memory_only" if found.fits_host_memory_only
        else "under_5x"
    )  # fmt: skip
    return evidence


DERIVED = {"scaling_loss": with_link_verdict, "dataset_fits_in_memory": with_memory_fit}


def fired_from_report(report: Mapping[str, Any]) -> tuple[Fired, ...]:
    """The findings of ``collector report --format json --findings``."""
    return tuple(
        Fired(
            rule=finding["rule"],
            severity=finding.get("severity", ""),
            title=finding.get("title", ""),
            evidence=DERIVED.get(finding["rule"], dict)(
                scalar_evidence(finding.get("evidence") or {})
            ),
        )
        for finding in report.get("findings", [])
    )


@dataclass
class RuleScore:
    rule: str
    split: str
    labelled_runs: int = 0  # runs whose label says it must fire
    hits: int = 0
    cause_labelled_hits: int = 0  # true positives whose label names a cause
    right_causes: int = 0
    forbidden_runs: int = 0  # runs whose label forbids it
    fired_forbidden: int = 0
    fired_on_controls: int = 0  # warning/critical on a control not labelled otherwise
    runs: int = 0  # all scored runs of the split

    @property
    def recall(self) -> float | None:
        return self.hits / self.labelled_runs if self.labelled_runs else None

    @property
    def false_alarms(self) -> int:
        return self.fired_forbidden + self.fired_on_controls

    @property
    def false_alarm_share(self) -> float | None:
        return self.false_alarms / self.runs if self.runs else None

    @property
    def right_cause(self) -> float | None:
        return self.right_causes / self.cause_labelled_hits if self.cause_labelled_hits else None

    def meets_goals(self) -> bool:
        return (
            (self.recall is None or self.recall >= RECALL_GOAL)
            and (self.false_alarm_share is None or self.false_alarm_share <= FALSE_ALARM_GOAL)
            and (self.right_cause is None or self.right_cause >= RIGHT_CAUSE_GOAL)
        )


def score(results: Iterable[RunResult], cases: Mapping[str, Case]) -> dict[str, list[RuleScore]]:
    """Per split (``fit``, ``held_out``, ``all``), a score per rule that was labelled or
    fired, sorted by rule. Runs that failed or were skipped are not scored."""
    scored = [r for r in results if r.status == "ok" and r.case in cases]
    by_split: dict[str, dict[str, RuleScore]] = {"fit": {}, "held_out": {}, "all": {}}
    for result in scored:
        case = cases[result.case]
        for split in (split_of(case.name), "all"):
            table = by_split[split]
            fired_rules = {f.rule for f in result.fired}
            labelled = {expect.rule for expect in case.must_fire}
            cause_forbidden = {expect.rule for expect in case.must_not_cause}
            for rule in fired_rules | labelled | set(case.must_not) | cause_forbidden:
                table.setdefault(rule, RuleScore(rule, split))
    for split, table in by_split.items():
        runs = [r for r in scored if split in ("all", split_of(r.case))]
        for rule_score in table.values():
            rule_score.runs = len(runs)
        for result in runs:
            _count(result, cases[result.case], table)
    return {
        split: sorted(table.values(), key=lambda s: s.rule) for split, table in by_split.items()
    }


def _count(result: RunResult, case: Case, table: dict[str, RuleScore]) -> None:
    fired_by_rule: dict[str, list[Fired]] = {}
    for fired in result.fired:
        fired_by_rule.setdefault(fired.rule, []).append(fired)
    labelled = {expect.rule for expect in case.must_fire}
    for expect in case.must_fire:
        rule_score = table[expect.rule]
        found = fired_by_rule.get(expect.rule, [])
        rule_score.labelled_runs += 1
        if not found:
            continue
        rule_score.hits += 1
        if expect.cause_key is not None:
            rule_score.cause_labelled_hits += 1
            if any(expect.cause_is_right(f.evidence.get(expect.cause_key)) for f in found):
                rule_score.right_causes += 1
    for rule in case.must_not:
        table[rule].forbidden_runs += 1
        if rule in fired_by_rule:
            table[rule].fired_forbidden += 1
    for expect in case.must_not_cause:  # may fire, but not stating a wrong cause
        table[expect.rule].forbidden_runs += 1
        found = fired_by_rule.get(expect.rule, [])
        if found and not any(
            expect.cause_is_right(f.evidence.get(expect.cause_key)) for f in found
        ):
            table[expect.rule].fired_forbidden += 1
    if case.control:
        for rule, found in fired_by_rule.items():
            if rule in labelled or rule in case.must_not:
                continue
            if any(f.severity in ALARMING for f in found):
                table[rule].fired_on_controls += 1


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown_table(scores: list[RuleScore]) -> str:
    lines = [
        "| rule | runs labelled | recall | false alarms (forbidden + controls) / runs "
        "| right cause | goals |",
        "|---|---:|---:|---:|---:|:---:|",
    ]
    for s in scores:
        alarms = f"{s.fired_forbidden} + {s.fired_on_controls} / {s.runs}"
        share = s.false_alarm_share
        alarms += f" ({share:.1%})" if share is not None else ""
        cause = _ratio(s.right_cause)
        if s.cause_labelled_hits:
            cause += f" ({s.right_causes}/{s.cause_labelled_hits})"
        recall = _ratio(s.recall)
        if s.labelled_runs:
            recall += f" ({s.hits}/{s.labelled_runs})"
        lines.append(
            f"| {s.rule} | {s.labelled_runs} | {recall} | {alarms} | {cause} "
            f"| {'met' if s.meets_goals() else 'MISSED'} |"
        )
    return "\n".join(lines)


def scores_json(scores: dict[str, list[RuleScore]]) -> dict[str, list[dict[str, Any]]]:
    return {
        split: [
            {**asdict(s), "recall": s.recall, "false_alarm_share": s.false_alarm_share,
             "right_cause": s.right_cause, "meets_goals": s.meets_goals()}
            for s in table
        ]
        for split, table in scores.items()
    }  # fmt: skip
