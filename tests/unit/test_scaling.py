"""Scaling tables (collector.analysis.scaling, `collector scaling`): the published figures, and
stored runs grouped and compared against their 1-GPU baseline."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from collector.analysis.run import run_model
from collector.analysis.scaling import (
    parse_throughput,
    scaling_groups,
    scaling_rows,
    throughput_table,
    time_to_accuracy,
)
from collector.analysis.throughput import rank_epoch_work, run_throughput
from collector.cli import main as collector_main
from contract.point import Point
from contract.schema import Event, RunState, Tag, Workload
from contract.units import whole_percent
from tests.support.cli import Ran, run_main
from tests.support.memory_store import MemoryStore
from tests.support.run_builder import NS, T0_NS, RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture


@pytest.fixture
def collector(capsys) -> Callable[..., Ran]:
    """``collector ARGS`` run in this process (tests/support/cli.py): its status and output."""
    return lambda *args: run_main(collector_main, args, capsys)


def test_published_c4130_p100_figures_97_and_92_percent(collector):
    # 001 section 7.2.1: 1099 / (283 x 4) = 1099 / 1132 = 97.08% -> 97%
    #                    2075 / (283 x 8) = 2075 / 2264 = 91.65% -> 92%
    # JSON keeps full precision; only the table rounds
    result = collector(
        "scaling",
        "--throughput",
        "1:283,4:1099,8:2075",
        "--gpus-per-node",
        "4",
        "--format",
        "json",
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        {
            "gpus": 1,
            "nodes": 1,
            "images_per_second": 283.0,
            "ideal": 283.0,
            "efficiency_percent": 100.0,
            "speedup": 1.0,
        },
        {
            "gpus": 4,
            "nodes": 1,
            "images_per_second": 1099.0,
            "ideal": 1132.0,
            "efficiency_percent": pytest.approx(97.0848, abs=1e-4),
            "speedup": pytest.approx(3.8834, abs=1e-4),  # 1099 / 283
        },
        {
            "gpus": 8,
            "nodes": 2,
            "images_per_second": 2075.0,
            "ideal": 2264.0,
            "efficiency_percent": pytest.approx(91.6519, abs=1e-4),
            "speedup": pytest.approx(7.3322, abs=1e-4),  # 2075 / 283
        },
    ]


def test_published_c4140_v100_figures_97_and_90_percent():
    # 001 section 7.2.2: 2425 / 2504 = 96.85% -> 97%; 4500 / 5008 = 89.86% -> 90%
    rows = throughput_table(parse_throughput("1:626,4:2425,8:4500"), gpus_per_node=4)
    assert [
        (r.gpus, r.nodes, r.ideal, whole_percent(r.efficiency_percent / 100), r.scope) for r in rows
    ] == [
        (1, 1, 626.0, 100, "baseline"),
        (4, 1, 2504.0, 97, "intra-node"),
        (8, 2, 5008.0, 90, "inter-node"),
    ]


def test_table_format_names_intra_and_inter_node(collector):
    result = collector("scaling", "--throughput", "1:283,4:1099,8:2075", "--gpus-per-node", "4")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    row8 = next(line for line in lines if "2,075" in line)
    assert "92%" in row8 and "inter-node" in row8 and "7.33x" in row8
    assert "97%" in next(line for line in lines if "1,099" in line)


def test_bad_throughput_arguments_exit_2_with_a_clear_message(collector):
    result = collector("scaling", "--throughput", "4:1099,8:2075")
    assert result.returncode == 2
    assert "1-GPU throughput is needed" in result.stderr
    result = collector("scaling", "--throughput", "1:283,four:1099")
    assert result.returncode == 2
    assert "'four:1099' is not GPUS:IMAGES_PER_SECOND" in result.stderr


def test_whole_percent_rounds_half_up():
    assert whole_percent(0.915) == 92
    assert whole_percent(0.925) == 93  # Python's round(92.5) would give 92
    assert whole_percent(0.9149) == 91


def test_without_gpus_per_node_nodes_are_unknown():
    rows = throughput_table([(1, 100.0), (2, 190.0)])
    assert (rows[1].nodes, rows[1].scope, rows[1].efficiency_percent) == (None, "", 95.0)


# --------------------------------------------------------------------------------------
# stored runs
# --------------------------------------------------------------------------------------


def resnet_run(run_id: str, hosts: int, ranks: int, seconds: float, images: int, **kw):
    run = RunBuilder(
        run_id,
        hosts=tuple(f"n{i}" for i in range(1, hosts + 1)),
        ranks_per_host=ranks,
        steps_per_epoch=5,
        write_samples=False,
        **kw,
    )
    run.epoch(seconds, images)
    return run


def test_stored_runs_grouped_with_their_1_gpu_baseline(make_store):
    day = 86_400 * NS
    runs = [
        # per rank: 28300 images / 100 s = 283 img/s
        resnet_run("p1", 1, 1, 100, 28_300, t0_ns=T0_NS),
        # per rank: 27475 / 100 = 274.75; x 4 ranks = 1099 img/s
        resnet_run("p4", 1, 4, 100, 27_475, t0_ns=T0_NS + day),
        # per rank: 51875 / 200 = 259.375; x 8 ranks on 2 nodes = 2075 img/s
        resnet_run("p8", 2, 4, 200, 51_875, t0_ns=T0_NS + 2 * day),
        # another group (fp16): its own baseline, none here
        resnet_run("h4", 1, 4, 100, 40_000, t0_ns=T0_NS + 3 * day, precision="fp16"),
        # failed runs are left out
        resnet_run("broken", 1, 1, 100, 100, t0_ns=T0_NS + 4 * day, state=RunState.FAILED),
    ]
    store = make_store([p for run in runs for p in run.points()])
    groups = scaling_groups(store)
    assert [key.precision for key in groups] == ["fp16", "fp32"]
    fp32 = [
        (m.run_id, m.row.gpus, m.row.nodes, m.row.images_per_second)
        for m in groups[next(k for k in groups if k.precision == "fp32")]
    ]
    assert fp32 == [("p1", 1, 1, 283.0), ("p4", 4, 1, 1099.0), ("p8", 8, 2, 2075.0)]
    rows = {r["run_id"]: r for r in scaling_rows(store)}
    assert "broken" not in rows
    assert rows["p4"]["efficiency_percent"] == pytest.approx(100 * 1099 / 1132)  # 97.08
    assert rows["p4"]["scope"] == "intra-node"
    assert rows["p8"]["efficiency_percent"] == pytest.approx(100 * 2075 / 2264)  # 91.65
    assert rows["p8"]["speedup"] == pytest.approx(2075 / 283)
    assert rows["p8"]["scope"] == "inter-node"
    assert rows["p8"]["ideal"] == pytest.approx(2264.0)
    assert rows["p1"]["throughput_source"] == "epoch_end"
    # no 1-GPU fp16 run: throughput shown, efficiency unknown
    assert (rows["h4"]["images_per_second"], rows["h4"]["efficiency_percent"]) == (1600.0, None)


def rank_event(rank: int, host: str, t: float, kind: str, **fields) -> Point:
    tags = {Tag.HOST: host, Tag.RUN_ID: "hand", Tag.RANK: str(rank), Tag.FRAMEWORK: "pytorch"}
    return Point(Workload.NAME, tags, {Workload.EVENT: kind, **fields}, T0_NS + round(t * NS))


def throughput_of(store: MemoryStore):
    return run_throughput(rank_epoch_work(run_model(store.events("hand"))))


def test_throughput_sums_every_rank_never_rank0_times_n():
    store = MemoryStore()
    store.write(
        [
            rank_event(0, "a", 0, Event.RUN_START, world_size=2, warmup_steps=1),
            rank_event(0, "a", 0, Event.EPOCH_START, epoch=1),
            rank_event(1, "b", 0, Event.EPOCH_START, epoch=1),
            # ranks send step events for timed steps only (after their warm-up)
            # rank 0: 2 x 100 images in 1 s each -> 100 img/s
            rank_event(0, "a", 6, Event.STEP, epoch=1, step=2, images=100, seconds=1.0),
            rank_event(0, "a", 7, Event.STEP, epoch=1, step=3, images=100, seconds=1.0),
            # rank 1 is slower: 100 images in 2 s -> 50 img/s
            rank_event(1, "b", 7, Event.STEP, epoch=1, step=2, images=100, seconds=2.0),
            rank_event(1, "b", 9, Event.STEP, epoch=1, step=3, images=100, seconds=2.0),
            # a step without seconds is not timed: it counts nothing
            rank_event(1, "b", 9, Event.STEP, epoch=1, step=4, images=100),
        ]
    )
    result = throughput_of(store)
    # the epoch is still open: its steps stand in for the epoch_end
    assert (result.images_per_second, result.source) == (150.0, "steps")  # not 2 x 100


def test_throughput_from_the_ranks_timed_steps_in_epoch_end():
    store = MemoryStore()
    end = Event.EPOCH_END
    store.write(
        [
            rank_event(0, "a", 0, Event.EPOCH_START, epoch=1),
            # 10 s of steps, of which the last 8 s were timed (after the warm-up)
            rank_event(
                0,
                "a",
                10,
                end,
                epoch=1,
                images=1000,
                seconds=10.0,
                timed_images=800,
                timed_seconds=8.0,
            ),
            rank_event(1, "b", 3, Event.EPOCH_START, epoch=1),  # b's clock is 3 s ahead
            rank_event(
                1,
                "b",
                15,
                end,
                epoch=1,
                images=1000,
                seconds=12.0,
                timed_images=800,
                timed_seconds=10.0,
            ),
            rank_event(0, "a", 11, Event.EPOCH_START, epoch=2),
            rank_event(
                0,
                "a",
                21,
                end,
                epoch=2,
                images=1000,
                seconds=10.0,
                timed_images=1000,
                timed_seconds=10.0,
            ),
            rank_event(1, "b", 14, Event.EPOCH_START, epoch=2),
            rank_event(
                1,
                "b",
                24,
                end,
                epoch=2,
                images=1000,
                seconds=10.0,
                timed_images=1000,
                timed_seconds=10.0,
            ),
        ]
    )
    result = throughput_of(store)
    # rank 0: 1800 / 18 s = 100; rank 1: 1800 / 20 s = 90; summed, not over host spans
    assert result.images_per_second == pytest.approx(190.0)
    assert result.source == "epoch_end"
    # start-up: the slowest rank's untimed (warm-up) step time
    assert result.startup_seconds == pytest.approx(2.0)


def test_time_and_epochs_to_target_top1(make_store):
    run = RunBuilder("acc", target_top1=0.749, write_samples=False)
    for top1 in (0.30, 0.60, 0.751, 0.76):
        run.epoch(100, 1000, top1=top1)
    store = make_store(run.points())
    (info,) = store.runs()
    accuracy = time_to_accuracy(store.events("acc"), info.config)
    # the third epoch ends 300 s after run_start
    assert accuracy.epochs_to_target == 3
    assert accuracy.seconds_to_target == 300.0
    assert (accuracy.final_top1, accuracy.target_top1) == (0.76, 0.749)
    row = scaling_rows(store)[0]
    assert (row["epochs_to_target"], row["seconds_to_target"]) == (3, 300.0)


def test_target_never_reached():
    run = RunBuilder("acc", target_top1=0.9, write_samples=False)
    run.epoch(100, 1000, top1=0.5)
    store = MemoryStore()
    store.write(run.points())
    (info,) = store.runs()
    accuracy = time_to_accuracy(store.events("acc"), info.config)
    assert (accuracy.epochs_to_target, accuracy.seconds_to_target) == (None, None)
    assert accuracy.final_top1 == 0.5


def test_inference_runs_are_not_scaling_rows(make_store):
    """A `workloads infer` run has its own page: it is no group of the scaling table (it
    showed as a 1-GPU "single-gpu" group of dashes there)."""
    from collector.analysis.scaling import scaling_rows
    from tests.unit.test_inference_views import RATES, TOP1, inference_points

    training = RunBuilder("train-1", steps_per_epoch=4)
    training.epoch(10, 400)
    store = make_store(training.points() + inference_points("infer-1", RATES, TOP1))
    assert [row["run_id"] for row in scaling_rows(store)] == ["train-1"]
