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


def test_every_forecast_view_carries_its_label_and_its_validated_error(db, capsys):
    """The table's label line, the JSON's label and forecast_error, the CSV's error columns:
    each the error measured on real runs forecasting from a run of that size (run a is on
    1 node: collector.analysis.forecast.VALIDATION_FROM_ONE_NODE)."""
    from collector.analysis.forecast import VALIDATION_FROM_ONE_NODE as validated

    args = ["forecast", "a", "--db", db, "--nodes", "2", "--gradient-mb", "25", "--link-gbps", "10"]
    assert main([*args, "--format", "json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["forecast_error"]["median_percent"] == validated.median_percent
    assert validated.text() in view["label"]
    assert main(args) == 0
    label = [line for line in capsys.readouterr().out.splitlines() if "FORECAST" in line]
    assert label == [view["label"]]
    assert f"from 1 node with the link given: median {validated.median_percent:.1f}%" in label[0]
    assert main([*args, "--format", "csv"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    columns = dict(zip(header.split(","), row.split(","), strict=True))
    assert columns["forecast"] == "True"
    assert float(columns["forecast_error_worst_percent"]) == validated.worst_percent


def test_validation_figures_are_the_latest_netns_bench_results():
    """The validated errors are what bench/forecast/netns.py last wrote (its results are
    committed), from the 1-host runs and from the 2-host runs apart."""
    import statistics
    from pathlib import Path

    from collector.analysis.forecast import validation_for

    results = Path(__file__).resolve().parents[2] / "bench/forecast/results/netns.json"
    forecasts = json.loads(results.read_text())["forecasts"]
    for source in (1, 2):
        rows = [row for row in forecasts if row["source_hosts"] == source]
        errors = [100 * abs(row["images_per_second_error"]) for row in rows]
        points = [abs(row["efficiency_error_points"]) for row in rows]
        validated = validation_for(source)
        assert validated.median_percent == pytest.approx(statistics.median(errors), abs=0.05)
        assert validated.worst_percent == pytest.approx(max(errors), abs=0.05)
        assert validated.efficiency_median_points == pytest.approx(
            statistics.median(points), abs=0.05
        )
        assert validated.efficiency_worst_points == pytest.approx(max(points), abs=0.05)
        assert validated.cases == len(rows)


def test_the_data_set_is_judged_against_the_runs_memory_limit_under_the_nodes_ram():
    run = _one_node_run(
        25 * MB, dataset_bytes=1000 * MB, dataset_images=10_000, host_memory_bytes=64_000 * MB
    )
    fits = requirements(run, forecast(run, [2]))[-1]
    assert fits == (
        "The data set (1.00 GB) fits in a node's RAM (64.00 GB): it stays cached after epoch 1"
        " at every size."
    )
    limited = _one_node_run(
        25 * MB,
        dataset_bytes=1000 * MB,
        dataset_images=10_000,
        host_memory_bytes=64_000 * MB,
        memory_limit_bytes=500 * MB,
    )
    assert requirements(limited, forecast(limited, [2]))[-1] == (
        "The data set (1.00 GB) does not fit in the run's memory limit (500.0 MB), under the"
        " node's RAM (64.00 GB): every epoch reads it from storage, at epoch 1's rate."
    )


def storage_over_network_run(run_id: str) -> RunBuilder:
    """Two hosts, 2 epochs of 10 s, 640 images per rank each. Both hosts send and receive
    20 MB/s of gradients; in epoch 1 each also receives 6.4 MB/s of data set reads over the
    same NIC: 2 x 64 MB for 1,280 images, 100 kB an image (the data set's size per image),
    and the ranks run under a 500 MB memory limit."""
    builder = RunBuilder(
        run_id,
        hosts=("node1", "node2"),
        write_samples=True,
        steps_per_epoch=4,
        dataset_images=10_000,
        dataset_bytes=1000 * MB,
        nfs=False,
        run_start_fields={"memory_limit_bytes": 500 * MB},
    )
    builder.epoch(10.0, 640, shares=(0.0, 0.8, 0.1), net_tx=20 * MB, net_rx=26.4 * MB)
    builder.epoch(10.0, 640, shares=(0.0, 0.8, 0.1), net_tx=20 * MB, net_rx=20 * MB)
    return builder


def test_storage_read_over_the_gradients_fabric_adds_to_epoch_ones_receive_rate(tmp_path, capsys):
    path = tmp_path / "net.sqlite"
    sqlite_store_with(storage_over_network_run("net").points(), path).close()
    args = ["forecast", "net", "--db", str(path), "--nodes", "2,4", "--format", "json"]
    assert main(args) == 0
    view = json.loads(capsys.readouterr().out)
    measured = view["measured"]
    assert measured["memory_limit_bytes"] == 500 * MB
    # epoch 1's rx - tx over its images: 128 MB / 1,280 images
    assert measured["storage_fabric_bytes_per_image"] == pytest.approx(100_000, rel=0.02)
    two, four = view["forecast"]
    # 2 nodes, as measured: 20 MB/s of gradients each way and 64 images/s x 100 kB of reads
    assert two["fabric_gradient_bytes_per_second"] == pytest.approx(20 * MB, rel=0.02)
    assert two["fabric_epoch1_receive_bytes_per_second"] == pytest.approx(26.4 * MB, rel=0.02)
    assert four["fabric_epoch1_receive_bytes_per_second"] > four["fabric_gradient_bytes_per_second"]
    sentences = view["requirements"]
    assert any(
        s.startswith("4 nodes receive") and "cross the same fabric" in s and "kB per image" in s
        for s in sentences
    ), sentences
    assert "does not fit in the run's memory limit (500.0 MB)" in sentences[-1]


def test_traffic_that_is_not_the_data_set_is_not_taken_for_storage(tmp_path, capsys):
    """rx above tx by less than a tenth of the data set's bytes per image (an agent's or a
    launcher's traffic) is not storage over the fabric."""
    builder = RunBuilder(
        "small", hosts=("node1", "node2"), steps_per_epoch=4, dataset_images=10_000,
        dataset_bytes=1000 * MB, nfs=False,
    )  # fmt: skip
    for _ in range(2):
        builder.epoch(10.0, 640, shares=(0.0, 0.8, 0.1), net_tx=20 * MB, net_rx=20.5 * MB)
    path = tmp_path / "small.sqlite"
    sqlite_store_with(builder.points(), path).close()
    assert main(["forecast", "small", "--db", str(path), "--nodes", "4", "--format", "json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["measured"]["storage_fabric_bytes_per_image"] is None
    assert not any("cross the same fabric" in s for s in view["requirements"])


def test_the_dashboards_question_answers_the_forecast_the_command_prints(tmp_path, capsys):
    """The scaling page asks ``forecast`` (locally through dashboard.source, remotely through
    the read API's dashboard questions): the command's JSON at 2, 4, 8 and 16 nodes; a run
    that cannot be forecast says why, an unknown one is null."""
    from collector.queries.forecast import dashboard_forecast
    from collector.queries.questions import answer
    from collector.store import SqliteStore

    path = tmp_path / "net.sqlite"
    points = storage_over_network_run("net").points() + _run("one", 10.0, (0.0, 0.9, 0.0)).points()
    sqlite_store_with(points, path).close()
    store = SqliteStore(str(path))
    try:
        assert main(["forecast", "net", "--db", str(path), "--format", "json"]) == 0
        printed = json.loads(capsys.readouterr().out)
        asked = answer(store, "forecast", {"run_id": "net"})
        assert asked == json.loads(json.dumps(printed))
        assert [row["nodes"] for row in asked["forecast"]] == [2, 4, 8, 16]
        cannot = dashboard_forecast(store, "one")
        assert cannot["label"].startswith("FORECAST") and "--gradient-mb" in cannot["error"]
        assert dashboard_forecast(store, "nothing") is None
    finally:
        store.close()
