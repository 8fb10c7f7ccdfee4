"""bench/findings/evaluate.py's arithmetic on hand-made results: recall, false alarms (where a
label forbids a rule, and warning/critical findings on controls), right cause, and the
held-out split that the seed keeps stable."""

from __future__ import annotations

import pytest

from bench.findings.evaluate import Fired, RunResult, fired_from_report, markdown_table, score
from bench.findings.matrix import CASES, HELD_OUT, Case, Expect, held_out_draw

STORAGE = Expect("input_wait", "cause", frozenset({"storage"}))


def fired(rule: str, severity: str = "warning", **evidence) -> Fired:
    return Fired(rule, severity, f"{rule} title", evidence)


STORAGE_WAIT = fired("input_wait", cause="storage")


@pytest.fixture
def cases(monkeypatch) -> dict[str, Case]:
    made = {
        "throttled": Case("throttled", "pytorch", "cold_throttled_root",
                          must_fire=(Expect("storage_bound"), STORAGE),
                          must_not=("dataset_cached_before_run",)),
        "control": Case("control", "pytorch", "none", must_not=("divergence",)),
        "held": Case("held", "pytorch", "cpu_hog", must_fire=(Expect("contention"),)),
    }  # fmt: skip
    monkeypatch.setattr("bench.findings.matrix.HELD_OUT", frozenset({"held"}))
    return made


def by_rule(scores, split: str):
    return {s.rule: s for s in scores[split]}


def test_recall_false_alarms_and_right_cause_per_rule(cases):
    results = [
        # 3 throttled runs: storage_bound fired in 2; input_wait in all 3, the right cause in 2
        RunResult("throttled", 1, "ok", (fired("storage_bound"), STORAGE_WAIT)),
        RunResult("throttled", 2, "ok", (fired("input_wait", cause="decode"),)),
        RunResult("throttled", 3, "ok", (fired("storage_bound"), STORAGE_WAIT,
                                         fired("dataset_cached_before_run", "info"))),
        # a control: divergence is forbidden; startup at info is no alarm, contention at
        # warning is one
        RunResult("control", 1, "ok", (fired("divergence", "critical"), fired("startup", "info"),
                                       fired("contention"))),
        RunResult("control", 2, "ok", ()),
        RunResult("control", 3, "failed", (fired("divergence"),), error="exit 1"),  # not scored
    ]  # fmt: skip
    fit = by_rule(score(results, cases), "fit")
    assert fit["storage_bound"].runs == 5
    assert (fit["storage_bound"].labelled_runs, fit["storage_bound"].hits) == (3, 2)
    assert fit["storage_bound"].recall == pytest.approx(2 / 3)
    assert fit["storage_bound"].right_cause is None  # no cause labelled
    assert fit["input_wait"].recall == 1.0
    assert (fit["input_wait"].right_causes, fit["input_wait"].cause_labelled_hits) == (2, 3)
    assert fit["input_wait"].right_cause == pytest.approx(2 / 3)
    # fired where forbidden: once in 3 labelled runs, a share of all 5 scored runs
    cached = fit["dataset_cached_before_run"]
    assert (cached.forbidden_runs, cached.fired_forbidden, cached.false_alarm_share) == (3, 1, 0.2)
    assert fit["divergence"].fired_forbidden == 1 and fit["divergence"].fired_on_controls == 0
    assert fit["contention"].fired_on_controls == 1
    assert fit["contention"].false_alarm_share == pytest.approx(1 / 5)
    assert fit["startup"].false_alarms == 0
    assert not fit["input_wait"].meets_goals()  # right cause 0.67 < 0.9
    assert fit["startup"].meets_goals()


def test_held_out_cases_are_scored_apart(cases):
    results = [
        RunResult("held", 1, "ok", (fired("contention"),)),
        RunResult("held", 2, "ok", ()),
        RunResult("control", 1, "ok", (fired("contention"),)),
    ]
    scores = score(results, cases)
    held = by_rule(scores, "held_out")["contention"]
    assert (held.runs, held.labelled_runs, held.hits, held.false_alarms) == (2, 2, 1, 0)
    fit = by_rule(scores, "fit")["contention"]
    assert (fit.runs, fit.labelled_runs, fit.fired_on_controls) == (1, 0, 1)
    assert fit.recall is None and fit.false_alarm_share == 1.0
    both = by_rule(scores, "all")["contention"]
    assert (both.runs, both.hits, both.false_alarms) == (3, 1, 1)
    table = markdown_table(scores["all"])
    assert "| contention | 2 | 0.50 (1/2) | 0 + 1 / 3 (33.3%) | - | MISSED |" in table


def test_a_wrong_cause_is_named_by_what_it_must_not_be():
    loader = Expect("input_wait", "cause", wrong_causes=frozenset({"storage", "decode"}))
    assert loader.cause_is_right("loader") and loader.cause_is_right("unknown")
    assert not loader.cause_is_right("storage")
    assert STORAGE.cause_is_right("storage") and not STORAGE.cause_is_right(None)


def test_a_cause_nested_in_the_evidence_is_read_under_a_dotted_key():
    report = {"findings": [{"rule": "dataset_evicted", "severity": "warning", "title": "t",
                            "evidence": {"epochs": [2], "worst": {"cause": "reclaim", "epoch": 2},
                                         "dataset_files_bytes": 1.5}}]}  # fmt: skip
    (found,) = fired_from_report(report)
    assert found.evidence == {"worst.cause": "reclaim", "worst.epoch": 2,
                              "dataset_files_bytes": 1.5}  # fmt: skip


def test_the_held_out_split_is_the_seeded_draw_and_stable():
    names = [case.name for case in CASES]
    assert held_out_draw(names) == HELD_OUT  # the recorded split is the draw
    assert held_out_draw(list(reversed(names))) == HELD_OUT  # whatever the order
    assert len(HELD_OUT) * 3 >= len(names)  # at least a third
    assert held_out_draw(names, seed=7) != HELD_OUT


def test_a_scaling_losss_link_verdict_is_the_rules_word_for_its_two_shares():
    """The report gives the all-reduce's share of the measured link and its least share;
    the evaluation reads the rule's word for them (bound only with both at 80%)."""

    def verdict(**attribution) -> str:
        report = {"findings": [{"rule": "scaling_loss", "severity": "warning", "title": "t",
                                "evidence": {"attribution": attribution}}]}  # fmt: skip
        (found,) = fired_from_report(report)
        return found.evidence["attribution.link_verdict"]

    assert verdict(allreduce_ceiling_percent=105.0, allreduce_ceiling_least_percent=95.0) == "bound"
    assert verdict(allreduce_ceiling_percent=133.0, allreduce_ceiling_least_percent=9.0) == (
        "not_shown"
    )
    assert verdict(allreduce_ceiling_percent=19.0, allreduce_ceiling_least_percent=2.0) == "under"
    (no_link,) = fired_from_report({"findings": [{"rule": "scaling_loss", "evidence": {}}]})
    assert "attribution.link_verdict" not in no_link.evidence


def test_a_rule_may_fire_where_only_a_cause_is_forbidden():
    """The open link: a scaling loss may be found, but calling it bandwidth-bound is a
    false alarm."""
    open_link = Case("open", "script", "netns_open_link",
                     must_not_cause=(Expect("scaling_loss", "attribution.link_verdict",
                                            wrong_causes=frozenset({"bound"})),))  # fmt: skip

    def stating(verdict: str) -> tuple[Fired, ...]:
        return (fired("scaling_loss", **{"attribution.link_verdict": verdict}),)

    results = [
        RunResult("open", 1, "ok", stating("under")),
        RunResult("open", 2, "ok", stating("bound")),
        RunResult("open", 3, "ok", ()),
    ]
    (scaling,) = score(results, {"open": open_link})["all"]
    assert (scaling.rule, scaling.forbidden_runs, scaling.fired_forbidden) == ("scaling_loss", 3, 1)
    assert scaling.labelled_runs == 0 and scaling.recall is None


def test_whether_the_data_set_fits_is_read_as_the_rule_reads_its_evidence():
    """The memory-limit case: dataset_fits_in_memory must say the set fits the host's RAM
    but not the run's limit; the evaluation asks the rule's own evidence class."""

    def fit(**evidence) -> str:
        base = {"dataset_bytes": 1.2e8, "host_memory_bytes": 2.5e10, "required_ratio": 5}
        report = {"findings": [{"rule": "dataset_fits_in_memory", "severity": "info",
                                "title": "t", "evidence": base | evidence}]}  # fmt: skip
        (found,) = fired_from_report(report)
        return found.evidence["fit"]

    assert fit(dataset_to_memory_ratio=0.005) == "fits"
    assert fit(dataset_to_memory_ratio=2.0) == "under_5x"
    limited = {"memory_limit_bytes": 948_000_000, "dataset_to_host_memory_ratio": 0.005}
    assert fit(dataset_to_memory_ratio=0.13, **limited) == "fits"
    evicted = {"evicted_by_limit_percent": 50.0, "evicted_by_limit_epoch": 2}
    assert fit(dataset_to_memory_ratio=0.13, **limited, **evicted) == "fits_host_memory_only"
