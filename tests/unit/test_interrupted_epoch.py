"""An epoch the run was stopped in is said to be interrupted, identically in every view
(issue #14): ``collector report`` (table and JSON), the ``--profile`` summary, and the
dashboard's per-epoch table and epoch labels all write the ``state`` that
``collector.analysis.epochs.epoch_state`` computes, instead of a bare "0.0 s, 0 images".

The runs are built by ``tests.support.run_builder`` and written through the stores' write path;
a real Horovod + TensorFlow run stopped by Ctrl-C is in ``tests/system/test_launcher.py``.
"""

from __future__ import annotations

import json

import pytest

from collector.analysis.epochs import epoch_state, worst_state
from collector.arguments import build_parser
from collector.queries import query
from collector.views.printers import render
from contract.columns import COMPLETE, INTERRUPTED, RUNNING
from contract.point import Point
from contract.schema import Event, RunState, Tag, Workload
from dashboard import figures, pages
from tests.support.run_builder import RunBuilder
from workloads.launch.summary import format_profile_table

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture


def cli(store, *argv: str) -> str:
    return render(build_parser().parse_args(list(argv)), store)


@pytest.fixture(autouse=True)
def fresh_cache():
    query.clear_cache()
    yield
    query.clear_cache()


def stopped_in_epoch_3(
    run_id: str, state: str, steps_kept: int, hosts: tuple[str, ...] = ("node1",)
) -> list[Point]:
    """A 3-epoch run whose ranks were stopped in epoch 3 after ``steps_kept`` of its steps:
    no ``epoch_end`` for epoch 3, and a ``run_end`` (failed) from every rank unless the run
    is still ``live``."""
    run = RunBuilder(run_id, hosts=hosts, steps_per_epoch=4, state=state)
    for _ in range(3):
        run.epoch(10, 400, disk_read=50e6)
    points, steps_in_3 = [], 0
    for point in run.points():
        fields = point.fields
        in_3 = point.measurement == Workload.NAME and fields.get(Workload.EPOCH) == 3
        if in_3 and fields.get(Workload.EVENT) == Event.EPOCH_END:
            continue
        if in_3 and fields.get(Workload.EVENT) == Event.STEP:
            steps_in_3 += 1
            if steps_in_3 > steps_kept * len(hosts):
                continue
        points.append(point)
    return points


def dashboard_labels(store, run_id: str) -> list[str]:
    boundaries = query.epoch_boundaries(store, run_id)
    _, labels = figures.epoch_shading(boundaries, sorted(boundaries))
    return [label["text"] for label in labels]


def dashboard_table(store, run_id: str) -> list[dict]:
    table = pages.epoch_table(query.epoch_table(store, run_id))
    assert "state" in [column["id"] for column in table.columns]
    return table.data


def test_the_state_is_defined_once():
    assert epoch_state(True, run_live=False) == COMPLETE
    assert epoch_state(False, run_live=True) == RUNNING
    assert epoch_state(False, run_live=False) == INTERRUPTED
    assert worst_state([COMPLETE, RUNNING, INTERRUPTED]) == INTERRUPTED
    assert worst_state([COMPLETE, RUNNING]) == RUNNING
    assert worst_state([COMPLETE]) == COMPLETE


@pytest.mark.parametrize("steps_kept", [0, 2], ids=["no-step", "two-steps"])
def test_a_stopped_runs_last_epoch_is_interrupted_in_every_view(make_store, steps_kept):
    """Stopped right after epoch 3 started (the "0.0 s, 0 images" row), or after two of its
    steps: table, JSON, --profile summary and dashboard all say interrupted."""
    store = make_store(stopped_in_epoch_3("stopped", RunState.FAILED, steps_kept))

    rows = json.loads(cli(store, "report", "stopped", "--format", "json"))["rows"]
    assert [(r["epoch"], r["state"]) for r in rows if r["host"] == "node1"] == [
        (1, COMPLETE),
        (2, COMPLETE),
        (3, INTERRUPTED),
    ]
    last = next(r for r in rows if r["host"] == "node1" and r["epoch"] == 3)
    assert last["images"] == 100 * steps_kept  # what was done before the stop, nothing more
    if steps_kept == 0:
        assert last["seconds"] == 0.0

    # --findings' JSON carries the same rows (what `workloads run --profile` prints from)
    with_findings = json.loads(cli(store, "report", "stopped", "--format", "json", "--findings"))
    assert with_findings["rows"] == rows

    table = cli(store, "report", "stopped")
    header, *lines = [line for line in table.splitlines() if "│" in line]
    assert "state" in header.split("│")[2]  # host, epoch, state, ...
    epoch_3 = next(line for line in lines if line.split("│")[1].strip() == "3")
    assert epoch_3.split("│")[2].strip() == INTERRUPTED
    assert "Epoch 3 interrupted: the run stopped in it" in table

    summary = format_profile_table(rows)
    assert summary.splitlines()[0].split()[:3] == ["epoch", "host", "state"]
    assert summary.splitlines()[3].split()[:3] == ["3", "node1", INTERRUPTED]
    assert "Epoch 3 interrupted: the run stopped in it" in summary

    assert dashboard_labels(store, "stopped") == ["epoch 1", "epoch 2", "epoch 3 (interrupted)"]
    data = dashboard_table(store, "stopped")
    assert [(row["epoch"], row["state"]) for row in data if row["host"] == "node1"] == [
        (1, COMPLETE),
        (2, COMPLETE),
        (3, INTERRUPTED),
    ]


def test_a_live_runs_open_epoch_is_running_in_every_view(make_store):
    store = make_store(stopped_in_epoch_3("live", RunState.LIVE, 2))
    rows = json.loads(cli(store, "report", "live", "--format", "json"))["rows"]
    assert [r["state"] for r in rows if r["host"] == "node1"] == [COMPLETE, COMPLETE, RUNNING]
    table = cli(store, "report", "live")
    assert "Epoch 3 still running" in table
    assert "Epoch 3 still running" in format_profile_table(rows)
    assert dashboard_labels(store, "live")[-1] == "epoch 3 (running)"
    assert dashboard_table(store, "live")[-1]["state"] == RUNNING


def test_a_finished_run_shows_no_state_column(make_store):
    run = RunBuilder("done", steps_per_epoch=4)
    for _ in range(2):
        run.epoch(10, 400)
    store = make_store(run.points())
    rows = json.loads(cli(store, "report", "done", "--format", "json"))["rows"]
    assert {r["state"] for r in rows} == {COMPLETE}
    assert "state" not in cli(store, "report", "done").splitlines()[1]
    assert "state" not in format_profile_table(rows).splitlines()[0]
    table = pages.epoch_table(query.epoch_table(store, "done"))
    assert "state" not in [column["id"] for column in table.columns]
    assert "state" in cli(store, "report", "done", "--columns", "all").splitlines()[1]


def test_a_killed_rank_closed_by_the_launcher_makes_its_hosts_epoch_interrupted(make_store):
    """Two hosts; host b's rank was killed in epoch 3 and the launcher wrote its run_end
    (failed), while host a's rank ended epoch 3 and has not ended its run: the run is
    failed, b's epoch 3 interrupted, and so is the epoch's all-hosts row."""
    run = RunBuilder("killed", hosts=("a", "b"), steps_per_epoch=4, state=RunState.LIVE)
    for _ in range(3):
        run.epoch(10, 400)
    points = []
    for point in run.points():
        fields = point.fields
        on_b = point.tags.get(Tag.HOST) == "b" and point.measurement == Workload.NAME
        if (
            on_b
            and fields.get(Workload.EPOCH) == 3
            and fields.get(Workload.EVENT)
            in (
                Event.EPOCH_END,
                Event.STEP,
            )
        ):
            continue
        points.append(point)
    b_tags = {Tag.HOST: "b", Tag.RUN_ID: "killed", Tag.RANK: "1", Tag.FRAMEWORK: "tensorflow"}
    closed = {Workload.EVENT: Event.RUN_END, Workload.STATE: RunState.FAILED}
    points.append(Point(Workload.NAME, b_tags, closed, run.end_true_ns()))
    store = make_store(points)
    rows = json.loads(cli(store, "report", "killed", "--format", "json"))["rows"]
    assert store.run("killed").state == RunState.FAILED
    states = {(r["host"], r["epoch"]): r["state"] for r in rows}
    assert states[("a", 3)] == COMPLETE
    assert states[("b", 3)] == INTERRUPTED
    assert states[("*", 3)] == INTERRUPTED
    assert states[("b", 2)] == COMPLETE
