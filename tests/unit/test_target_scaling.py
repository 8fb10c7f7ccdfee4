"""Time-to-accuracy scaling on runs stored through the write path: each run's speed-up in
the time to its target top-1 over the group's smallest run that reached it (here a 2-GPU
run: the group has no 1-GPU run, so the throughput table has no baseline while the
time-to-target comparison does), and the ``extra_epochs_to_target`` finding, with how much
of the gap to the throughput speed-up the extra epochs explain.

The runs, worked out by hand (every step timed unless said):
- ``two``: 2 ranks, 3 epochs of 100 s, 960 pictures per rank each: 19.2 images/s; top-1
  0.50, 0.70, 0.76 reaches the target 0.75 in epoch 3, after 300 s.
- ``eight``: 8 ranks on 2 hosts, 4 epochs of 30 s, 240 pictures per rank each (the same
  1920 per epoch): 64 images/s, throughput speed-up 10/3; target in epoch 4, after
  120 s: 2.5x. At its throughput 4 epochs against 3 give 10/3 x 3/4 = 2.5x: the extra
  epoch explains the whole 0.83x gap.
- ``eight-slow-start``: as ``eight`` but its first epoch is 60 s of warm-up (4 warm-up
  steps: not in the throughput): 150 s to target, 2.0x; the gap is 4/3x, of which the
  extra epoch explains 0.83x (62.5 %), the start-up the other 0.5x.
"""

from __future__ import annotations

import json

import pytest

from collector.analysis.target_scaling import TargetRun, target_speedups
from collector.arguments import build_parser
from collector.findings.engine import run_findings
from collector.views.printers import render
from tests.support.run_builder import NS, T0_NS, RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

TARGET = 0.75


def group(*, reach_in_eight: int = 4) -> list[RunBuilder]:
    two = RunBuilder("two", ranks_per_host=2, target_top1=TARGET, write_samples=False)
    for top1 in (0.50, 0.70, 0.76):
        two.epoch(100, 960, top1=top1)
    runs = [two]
    for offset, (run_id, first_seconds, warmup) in enumerate(
        (("eight", 30, 0), ("eight-slow-start", 60, 4)), start=1
    ):
        run = RunBuilder(run_id, hosts=("a", "b"), ranks_per_host=4, target_top1=TARGET,
                         warmup_steps=warmup, t0_ns=T0_NS + offset * 86_400 * NS,
                         write_samples=False)  # fmt: skip
        curve = [0.4, 0.6, 0.7, 0.76][4 - reach_in_eight :] if reach_in_eight < 4 else None
        for epoch, top1 in enumerate(curve or [0.4, 0.6, 0.7, 0.76], start=1):
            run.epoch(first_seconds if epoch == 1 else 30, 240, top1=top1)
        runs.append(run)
    return runs


def cli(store, *argv: str) -> str:
    return render(build_parser().parse_args(list(argv)), store)


def scaling_json(store) -> dict[str, dict]:
    return {r["run_id"]: r for r in json.loads(cli(store, "scaling", "--format", "json"))}


def test_speedup_over_the_groups_smallest_run_that_reached_the_target(make_store):
    store = make_store([p for run in group() for p in run.points()])
    rows = scaling_json(store)
    assert rows["two"]["speedup"] is None  # no 1-GPU run: no throughput baseline
    assert rows["two"]["seconds_to_target"] == 300.0
    assert rows["two"]["time_to_target_speedup"] == 1.0
    assert rows["two"]["time_to_target_baseline"] == "two"
    assert rows["eight"]["seconds_to_target"] == 120.0
    assert rows["eight"]["time_to_target_speedup"] == pytest.approx(2.5)
    assert rows["eight-slow-start"]["time_to_target_speedup"] == pytest.approx(2.0)
    assert {r["time_to_target_baseline"] for r in rows.values()} == {"two"}
    table = cli(store, "scaling")
    assert "2.50x" in table and "2.00x" in table


def test_extra_epochs_explain_the_gap(make_store):
    store = make_store([p for run in group() for p in run.points()])
    assert [f for f in run_findings(store, "two") if f.rule == "extra_epochs_to_target"] == []

    (whole,) = [f for f in run_findings(store, "eight") if f.rule == "extra_epochs_to_target"]
    evidence = whole.evidence
    assert (evidence["epochs"], evidence["baseline_epochs"]) == (4, 3)
    assert evidence["baseline_run"] == "two" and evidence["baseline_gpus"] == 2
    assert evidence["throughput_speedup_ratio"] == pytest.approx(10 / 3, abs=1e-3)
    assert evidence["time_to_target_speedup_ratio"] == pytest.approx(2.5)
    assert evidence["expected_speedup_ratio"] == pytest.approx(2.5)
    assert evidence["gap_ratio"] == pytest.approx(5 / 6, abs=1e-3)
    assert evidence["explained_share"] == pytest.approx(1.0)
    assert whole.severity == "warning"
    assert whole.title == (
        "4 epochs to reach top-1 75% against 3 on 2 GPUs: time-to-accuracy speed-up "
        "2.50x, throughput 3.33x"
    )

    (part,) = [
        f for f in run_findings(store, "eight-slow-start") if f.rule == "extra_epochs_to_target"
    ]
    evidence = part.evidence
    assert evidence["time_to_target_speedup_ratio"] == pytest.approx(2.0)
    assert evidence["throughput_speedup_ratio"] == pytest.approx(10 / 3, abs=1e-3)
    assert evidence["gap_ratio"] == pytest.approx(4 / 3, abs=1e-3)
    assert evidence["explained_by_epochs_ratio"] == pytest.approx(5 / 6, abs=1e-3)
    assert evidence["explained_share"] == pytest.approx(0.625)
    assert "the extra epochs explain 0.83x (62.5%)" in part.explanation
    assert "The other 0.50x is time to target the throughput does not count" in part.explanation


def test_no_finding_without_extra_epochs(make_store):
    # the 8-rank runs reach the target in 3 epochs too: their time-to-target speed-up is
    # below their throughput's only by their start-up, which is no extra epoch
    store = make_store([p for run in group(reach_in_eight=3) for p in run.points()])
    assert scaling_json(store)["eight"]["epochs_to_target"] == 3
    for run_id in ("eight", "eight-slow-start"):
        assert [f for f in run_findings(store, run_id) if f.rule == "extra_epochs_to_target"] == []


def test_runs_that_miss_the_target_or_aim_elsewhere_are_not_compared():
    def run(run_id, gpus, target, seconds, epochs=3):
        return TargetRun(run_id, gpus, 0, True, 10.0 * gpus, target, epochs, seconds)

    speedups = target_speedups(
        [
            run("one-missed", 1, 0.75, None, None),  # smallest, but never reached it
            run("two", 2, 0.75, 300.0),
            run("four", 4, 0.75, 200.0),
            run("four-other-target", 4, 0.5, 100.0),  # its own baseline: 1.0x
        ]
    )
    assert "one-missed" not in speedups
    assert speedups["four"].baseline_run_id == "two"
    assert speedups["four"].time_to_target_speedup == pytest.approx(1.5)
    assert speedups["four-other-target"].baseline_run_id == "four-other-target"
    assert speedups["four-other-target"].time_to_target_speedup == 1.0
