"""The contention rule and its columns on a synthetic run worked out by hand (the real
runs are tests/scenarios/test_contention.py): a 2-CPU host 95% busy, the training's ranks
counting 40% of its CPU time, a hog in a Slurm job, the rank's own loader worker and an
idle-ish shell among the agent's busiest processes."""

from __future__ import annotations

import argparse
import io
import json
import math

import pytest

from collector.analysis.epochs import build_report
from collector.findings.engine import run_findings
from collector.views.reports import print_report
from contract.point import Point
from contract.schema import Event, Process, Tag, Workload
from tests.support.run_builder import RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

RANK_PID, LOADER_PID, HOG_PID, SHELL_PID = 4000, 4001, 5000, 6000
EPOCH_SECONDS = 20.0
NS = 1_000_000_000


def contended_run(
    training_share: float = 0.40,
    busy: float = 0.95,
    epoch_seconds: tuple[float, ...] = (EPOCH_SECONDS, EPOCH_SECONDS),
) -> list[Point]:
    run = RunBuilder("crowded", cpus=2, gpus=False, nfs=False, steps_per_epoch=4)
    for seconds in epoch_seconds:
        run.epoch(seconds, 160, cpu_busy=busy)
    points = []
    for point in run.points():
        event = point.fields.get(Workload.EVENT)
        if event == Event.RUN_START:
            point.fields[Workload.PID] = RANK_PID
        elif event == Event.EPOCH_END:
            seconds = epoch_seconds[int(point.fields[Workload.EPOCH]) - 1]
            point.fields[Workload.CPU_SECONDS] = training_share * 2 * seconds
        points.append(point)
    start, end = run.t0_ns - 5 * NS, run.end_true_ns() + 5 * NS

    def process(pid: int, ppid: int, command: str, rate: float, **tags: str) -> list[Point]:
        return [
            Point(
                Process.NAME,
                {
                    Tag.HOST: "node1",
                    Tag.PID: str(pid),
                    Tag.COMMAND: command,
                    Tag.USER: "bob",
                    **tags,
                },
                {
                    Process.CPU_SECONDS: rate * (t - start) / NS,
                    Process.PPID: float(ppid),
                    Process.READ_BYTES: int(1e6 * (t - start) / NS),
                },
                t,
            )
            for t in range(start, end, NS)
        ]

    points += process(HOG_PID, 1, "es-hog", 0.9, **{Tag.JOB_ID: "77"})
    points += process(LOADER_PID, RANK_PID, "python", 0.3)  # the rank's own loader
    points += process(SHELL_PID, 1, "bash", 0.01)
    return points


def test_columns_set_the_training_against_everything_else(make_store):
    report = build_report(make_store(contended_run()), "crowded")
    for row in report.host_rows():
        assert row.training_cpu_percent == pytest.approx(40.0, abs=0.01)
        assert row.other_cpu_percent == pytest.approx(55.0, abs=0.5)  # 95 busy - 40
        assert row.cpu_util_percent == pytest.approx(95.0, abs=0.5)


def test_contention_names_the_hog_its_job_and_the_likely_cost(make_store):
    store = make_store(contended_run())
    (found,) = [f for f in run_findings(store, "crowded") if f.rule == "contention"]
    evidence = found.evidence
    pids = [p["pid"] for p in evidence["processes"]]
    assert pids == [HOG_PID, SHELL_PID]  # busiest first; the rank's loader is its own
    hog = evidence["processes"][0]
    assert (hog["command"], hog["user"], hog["job_id"]) == ("es-hog", "bob", "77")
    assert hog["cpu_share"] == pytest.approx(0.45, abs=0.01)  # 0.9 of 2 CPUs
    assert hog["read_bytes"] == pytest.approx(2 * EPOCH_SECONDS * 1e6, rel=0.05)
    assert evidence["cpu_share_by_job"] == {"77": pytest.approx(0.45, abs=0.01)}
    # images/s x others / training: the upper bound the words state
    rate = evidence["images_per_second"]
    assert evidence["lost_images_per_second"] == pytest.approx(rate * 55 / 40, rel=0.02)
    assert "es-hog (pid 5000, user bob, job 77)" in found.explanation
    assert "upper bound" in found.explanation and found.chart == "other_cpu_percent"


@pytest.mark.parametrize(
    ("training_share", "busy"),
    [(0.80, 0.95), (0.10, 0.50)],  # others 15 % of saturated CPUs; others 40 %, idle CPUs
)
def test_no_contention_below_either_threshold(make_store, training_share, busy):
    store = make_store(contended_run(training_share, busy))
    assert "contention" not in {f.rule for f in run_findings(store, "crowded")}


def test_a_rank_that_sends_no_cpu_seconds_gets_no_columns_and_no_finding(make_store):
    points = contended_run()
    for point in points:
        if point.measurement == Workload.NAME:
            point.fields.pop(Workload.CPU_SECONDS, None)
    store = make_store(points)
    rows = build_report(store, "crowded").host_rows()
    assert all(r.training_cpu_percent is None and r.other_cpu_percent is None for r in rows)
    assert not math.isnan(rows[0].cpu_util_percent or math.nan)
    assert "contention" not in {f.rule for f in run_findings(store, "crowded")}


def test_the_rate_it_states_is_the_run_lines(make_store):
    # issue 42 item 7: "instead of 87.7" beside "run: 85.9" in one output; the finding's
    # images/s is now the run's throughput (contract.throughput) over the contended epochs,
    # here every epoch, so the two figures of `collector report --findings` are one
    # epochs of 20 s and 40 s: 8 and 4 images/s, whose mean (6.0) is not the run's 5.33
    store = make_store(contended_run(epoch_seconds=(EPOCH_SECONDS, 2 * EPOCH_SECONDS)))
    args = argparse.Namespace(run_id="crowded", format="json", findings=True, columns=None)
    out = io.StringIO()
    assert print_report(store, args, out) == 0
    document = json.loads(out.getvalue())
    run_line = document["throughput"]["images_per_second"]
    assert run_line == pytest.approx(320 / 60, rel=0.02)
    (found,) = [f for f in document["findings"] if f["rule"] == "contention"]
    assert found["evidence"]["all_epochs_contended"] is True
    assert found["evidence"]["images_per_second"] == round(run_line, 2)
    others_over_training = (
        found["evidence"]["other_cpu_percent_mean"]
        / (found["evidence"]["training_cpu_percent_mean"])
    )
    potential = run_line * (1 + others_over_training)
    assert (
        f"instead of {run_line:,.1f} (its throughput, as the run line counts it)"
        in (found["explanation"])
    )
    assert found["evidence"]["lost_images_per_second"] == pytest.approx(
        potential - run_line, rel=0.02
    )
