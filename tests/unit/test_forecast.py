"""Issue 43: the forecast's arithmetic on hand-computed cases, its requirements and what-if
values, and ``collector forecast`` / ``collector compare`` run in-process on real SQLite
stores built with the run builder (JSON and the table show the same values)."""

from __future__ import annotations

import json

import pytest

from collector.analysis.forecast import (
    BOUND_ALLREDUCE,
    BOUND_COMPUTE,
    BOUND_STORAGE,
    MeasuredRun,
    StepParts,
    allreduce_seconds,
    forecast,
    requirements,
)
from collector.cli import main
from tests.support.analysis_stores import sqlite_store_with
from tests.support.run_builder import RunBuilder

MB = 1_000_000
TEN_GBPS = 10e9 / 8  # bytes/s


def test_ring_allreduce_time_is_two_n_minus_one_over_n_gradients_over_the_link():
    # 25 MB over 1.25 GB/s is 20 ms; the ring sends 1x, 1.5x, 1.75x of it at 2, 4, 8 nodes
    assert allreduce_seconds(1, 25 * MB, TEN_GBPS) == 0.0
    assert allreduce_seconds(2, 25 * MB, TEN_GBPS) == pytest.approx(0.020)
    assert allreduce_seconds(4, 25 * MB, TEN_GBPS) == pytest.approx(0.030)
    assert allreduce_seconds(8, 25 * MB, TEN_GBPS) == pytest.approx(0.035)


def _one_node_run(gradient_bytes: float, **overrides) -> MeasuredRun:
    """A measured 1-node, 1-rank run: 100 ms of compute per step of 64 images."""
    fields = dict(
        run_id="r",
        nodes=1,
        gpus_per_node=1,
        images_per_second=640.0,
        images_per_rank_step=64.0,
        step=StepParts(input_wait=0.0, compute=0.1, communication=0.0, other=0.0, hidden=0.0),
        overlap_measured=False,
        gradient_bytes=gradient_bytes,
        gradient_source="given",
        link_bytes_per_second=TEN_GBPS,
        link_source="given",
        storage_bytes_per_second=None,
        storage_source="",
        epoch1_storage_bytes_per_second=None,
        dataset_bytes=None,
        dataset_images=None,
        host_memory_bytes=None,
    )
    return MeasuredRun(**(fields | overrides))


def test_forecast_adds_the_exposed_allreduce_to_the_measured_step():
    rows = forecast(_one_node_run(25 * MB), [1, 2, 4, 8])
    assert [r.step_seconds for r in rows] == pytest.approx([0.100, 0.120, 0.130, 0.135])
    assert [r.images_per_second for r in rows] == pytest.approx(
        [640.0, 2 * 64 / 0.12, 4 * 64 / 0.13, 8 * 64 / 0.135]
    )
    assert [r.efficiency for r in rows] == pytest.approx([1.0, 0.1 / 0.12, 0.1 / 0.13, 0.1 / 0.135])
    assert {r.bound for r in rows} == {BOUND_COMPUTE}
    # per node, each way: 2(n-1)/n x 25 MB per step
    assert rows[1].fabric_gradient_bytes_per_second == pytest.approx(25 * MB / 0.12)


def test_the_bound_switches_from_compute_to_the_link_when_the_allreduce_outgrows_compute():
    # 100 MB: 80 ms at 2 nodes (< 100 ms of compute), 120 ms at 4, 140 ms at 8
    rows = forecast(_one_node_run(100 * MB), [2, 4, 8])
    assert [r.allreduce for r in rows] == pytest.approx([0.08, 0.12, 0.14])
    assert [r.bound for r in rows] == [BOUND_COMPUTE, BOUND_ALLREDUCE, BOUND_ALLREDUCE]


def test_measured_overlap_hides_that_share_of_the_extra_allreduce():
    # measured on 2 nodes: 20 ms of all-reduce of which 10 ms hidden under compute (50 %)
    run = _one_node_run(
        25 * MB,
        nodes=2,
        images_per_second=2 * 64 / 0.11,
        step=StepParts(0.0, 0.1, 0.01, 0.0, hidden=0.01),
        overlap_measured=True,
    )
    (four,) = forecast(run, [4])
    # 30 ms at 4 nodes: 10 ms more, half of it hidden: 15 ms exposed
    assert four.allreduce == pytest.approx(0.015)
    assert four.step_seconds == pytest.approx(0.115)


def test_storage_caps_epoch_one_and_the_requirement_names_the_nodes_it_holds():
    run = _one_node_run(
        25 * MB,
        storage_bytes_per_second=100 * MB,
        storage_source="given",
        dataset_bytes=1000 * MB,
        dataset_images=10_000,  # 100 kB a picture
        host_memory_bytes=64_000 * MB,
    )
    rows = forecast(run, [1, 2, 4])
    # 1 node reads 640 img/s x 100 kB = 64 MB/s; 4 nodes need 4 x 64 x 1e5 / 0.13
    assert rows[0].storage_need_bytes_per_second == pytest.approx(64 * MB)
    assert rows[2].epoch1_images_per_second == pytest.approx(1000.0)  # 100 MB/s / 100 kB
    assert rows[2].epoch1_bound == BOUND_STORAGE
    sentences = requirements(run, rows)
    need_four = 4 * 64 / 0.13 * 1e5 / 1e6
    assert f"4 nodes need {need_four:.1f} MB/s of reads in epoch 1 (forecast)" in sentences[-3]
    # 196.9 MB/s over 4 nodes is 49.2 MB/s a node: 100 MB/s holds 2 of them
    assert "the storage's given 100.0 MB/s holds 2 nodes at full speed" in sentences[-3]
    assert sentences[-1].startswith("The data set (1.00 GB) fits in a node's RAM (64.00 GB)")


def _run(run_id: str, seconds: float, shares: tuple[float, float, float], hosts=("node1",)):
    builder = RunBuilder(run_id, hosts=hosts, write_samples=False, steps_per_epoch=4)
    for _ in range(2):
        builder.epoch(seconds, 640, shares=shares)
    return builder


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "runs.sqlite"
    points = (
        _run("a", 10.0, (0.4, 0.5, 0.0)).points()
        + _run("b", 6.0, (0.0, 0.9, 0.0)).points()  # no input wait: 10/6 as fast
    )
    sqlite_store_with(points, path).close()
    return str(path)


def test_collector_forecast_json_and_table_show_the_same_values(db, capsys):
    args = ["forecast", "a", "--db", db, "--nodes", "1,2", "--gradient-mb", "25"]
    assert main([*args, "--link-gbps", "10", "--format", "json"]) == 0
    view = json.loads(capsys.readouterr().out)
    one, two = view["forecast"]
    assert view["label"].startswith("FORECAST")
    assert one["forecast"] is True
    # measured: 640 images in 10 s, 4 steps of 2.5 s: 1.0 s waiting, 1.25 s computing
    assert view["measured"]["images_per_second"] == pytest.approx(64.0)
    assert one["images_per_second"] == pytest.approx(64.0)
    assert two["step_seconds"] == pytest.approx(2.5 + 0.02)
    assert two["bound"] == "compute"
    assert main([*args, "--link-gbps", "10"]) == 0
    table = capsys.readouterr().out
    assert "FORECAST" in table
    assert f"{two['images_per_second']:.1f}" in table
    assert "no input wait: 106.7 images/s (1.67x)" in table  # 2.5 s less 1.0 s of waiting


def test_collector_forecast_of_a_one_node_run_without_gradients_says_what_to_give(db, capsys):
    assert main(["forecast", "a", "--db", db, "--nodes", "2"]) == 2
    assert "--gradient-mb" in capsys.readouterr().err


def test_collector_compare_says_what_moved_and_gates_on_slower(db, capsys):
    assert main(["compare", "a", "b", "--db", db]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "B is 1.67x A: input wait fell from 40% to 0% of the step"
    assert main(["compare", "b", "a", "--db", db, "--fail-if-slower", "5"]) == 1
    captured = capsys.readouterr()
    assert "B is 40.0% slower than A, more than --fail-if-slower 5%" in captured.err
    assert main(["compare", "b", "a", "--db", db, "--fail-if-slower", "50"]) == 0


def test_the_read_api_answers_forecast_and_compare_with_the_commands_json(db, capsys):
    from collector.api.server import answer
    from collector.store import SqliteStore

    store = SqliteStore(db)
    try:
        query = {"run_id": ["a"], "nodes": ["1,2"], "gradient_mb": ["25"], "link_gbps": ["10"]}
        found = answer("forecast", query, store)
        assert found.status == 200
        assert (
            main(
                [
                    "forecast",
                    "a",
                    "--db",
                    db,
                    "--nodes",
                    "1,2",
                    "--gradient-mb",
                    "25",
                    "--link-gbps",
                    "10",
                    "--format",
                    "json",
                ]
            )
            == 0
        )
        assert json.loads(found.body) == json.loads(capsys.readouterr().out)
        compared = json.loads(answer("compare", {"run_a": ["a"], "run_b": ["b"]}, store).body)
        assert compared["ratio"] == pytest.approx(10 / 6)
        assert answer("compare", {"run_a": ["a"]}, store).status == 400
        assert answer("forecast", {"run_id": ["nothing"]}, store).status == 404
    finally:
        store.close()


def test_compare_reads_run_b_from_its_own_file(db, tmp_path, capsys):
    other = tmp_path / "other.sqlite"
    sqlite_store_with(_run("c", 10.0, (0.4, 0.5, 0.0)).points(), other).close()
    assert main(["compare", "a", "c", "--db", db, "--db-b", str(other)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == "B is 1.00x A: no part of the step moved by half a percentage point"
