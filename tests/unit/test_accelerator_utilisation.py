"""Accelerator utilisation (AU) the MLPerf Storage way: the share of the ranks' timed step
time not spent waiting for input, per epoch and host (the report's
``accelerator_util_percent``), per rank, and the finding against MLPerf Storage's 90% pass
mark for ResNet-50, from runs stored through the write path."""

from __future__ import annotations

import pytest

from collector.analysis.anatomy import rank_epochs
from collector.analysis.epochs import build_report
from collector.analysis.run import read_run
from collector.arguments import build_parser
from collector.findings.engine import run_findings
from collector.views.printers import render
from tests.support.run_builder import RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture


def waiting_run(run_id: str, input_wait: float, epochs: int = 3) -> RunBuilder:
    """Two ranks on each of two hosts; on n2 rank 3 waits twice as long as the others."""

    def shares(host: str, rank: int) -> tuple[float, float, float]:
        wait = 2 * input_wait if (host, rank) == ("n2", 3) else input_wait
        return (wait, 0.7 - wait, 0.1)

    run = RunBuilder(run_id, hosts=("n1", "n2"), ranks_per_host=2, warmup_steps=2)
    for _ in range(epochs):
        run.epoch(100, 6400, shares=shares)
    return run


def test_au_per_epoch_host_and_rank_and_every_view_agrees(make_store):
    store = make_store(waiting_run("au", 0.05).points())
    report = build_report(store, "au")
    rows = {(row.host, row.epoch): row for row in report.rows}
    # 1 - input wait share over the timed steps: n1's ranks 95%, n2's (95 + 90) / 2
    assert rows[("n1", 2)].accelerator_util_percent == pytest.approx(95.0)
    assert rows[("n2", 2)].accelerator_util_percent == pytest.approx(92.5)
    assert rows[("*", 2)].accelerator_util_percent == pytest.approx(93.75)
    ranks = {
        (r.host, r.rank): r.accelerator_utilisation
        for r in rank_epochs(read_run(store, "au"))
        if r.epoch == 2
    }
    assert ranks[("n2", 3)] == pytest.approx(0.90) and ranks[("n1", 0)] == pytest.approx(0.95)
    text = render(build_parser().parse_args(["report", "au", "--columns", "steps"]), store)
    assert "AU %" in text and "93.8" in text  # (one decimal in the text table)
    as_json = render(build_parser().parse_args(["report", "au", "--format", "json"]), store)
    assert '"accelerator_util_percent": 93.75' in as_json


def test_au_under_the_pass_mark_without_being_input_bound_is_its_own_finding(make_store):
    store = make_store(waiting_run("low", 0.12).points())  # input wait 12%, 24% on rank 3
    found = run_findings(store, "low")
    assert "input_wait" not in {f.rule for f in found}
    by_host = {f.evidence["host"]: f for f in found if f.rule == "accelerator_utilisation"}
    assert by_host["n1"].title == "AU 88% on n1: under MLPerf Storage's 90% for ResNet-50"
    assert by_host["n2"].title == "AU 82% on n2: under MLPerf Storage's 90% for ResNet-50"
    evidence = by_host["n2"].evidence
    assert evidence["pass_mark"] == 0.9 and evidence["epochs"] == [2, 3]
    assert [(r["rank"], r["accelerator_utilisation"]) for r in evidence["ranks"]] == [
        (2, 0.88),
        (3, 0.76),
    ]
    assert "rank 3 76%" in by_host["n2"].explanation
    assert by_host["n2"].chart == "accelerator_util_percent"


def test_an_input_bound_run_states_its_au_in_the_input_wait_finding(make_store):
    store = make_store(waiting_run("bound", 0.30).points())
    found = run_findings(store, "bound")
    rules = [f.rule for f in found]
    assert "accelerator_utilisation" not in rules  # one finding per cause
    input_wait = {f.evidence["host"]: f for f in found if f.rule == "input_wait"}
    assert input_wait["n1"].evidence["accelerator_utilisation"] == pytest.approx(0.70)
    assert input_wait["n2"].evidence["accelerator_utilisation"] == pytest.approx(0.55)
    assert "was 55%, under the 90% MLPerf Storage requires" in input_wait["n2"].explanation


def test_a_run_at_the_pass_mark_gets_no_au_finding(make_store):
    store = make_store(waiting_run("fine", 0.02).points())
    assert "accelerator_utilisation" not in {f.rule for f in run_findings(store, "fine")}
