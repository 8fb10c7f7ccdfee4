"""Inference runs in the collector and the dashboard: one computation, every view.

Runs are written as `workloads infer` writes them (``EventWriter``, then a real SQLite
store); ``collector.analysis.inference`` computes images/s, the INT8 speed-up and the top-1 kept
once, and the CLI table, the JSON, the read API of a real ``collector serve`` and the
dashboard's figure and table must all show those values. The findings' scenarios each have
the effect present and absent, on both sides of the named thresholds.
"""

from __future__ import annotations

import argparse
import json
import math

import pytest

from collector.api.client import fetch_view
from collector.arguments import build_parser
from collector.findings.inference import INT8_TOP1_LOSS_LIMIT, MIN_TIMED_SECONDS, SATURATION_GAIN
from collector.store import SqliteStore
from collector.views.inference import (
    format_milliseconds,
    format_points,
    format_rate,
    format_speedup,
    format_spread,
    format_timed,
    format_top1,
    inference_report,
)
from collector.views.printers import render
from contract.schema import INFERENCE_FRAMEWORK, Event, RunState, Workload
from dashboard import figures, pages
from dashboard.source import DataSource
from workloads.launch.local_stack import start_collector, stop
from workloads.record.events import EventWriter, MemorySink

TIMED_BATCHES = 50  # the least; more where 50 batches take under MIN_TIMED_SECONDS
# images/s as measured on this machine's CPU (docs/performance.md), to full precision
RATES = {
    ("fp32", 1): 71.13456,
    ("int8", 1): 118.0921,
    ("fp32", 8): 113.8765,
    ("int8", 8): 163.9012,
    ("fp32", 32): 140.3333,
    ("int8", 32): 207.5432,
}
TOP1 = {"fp32": 0.8125, "int8": 0.8046875}  # 0.78 points lost: within the limit


def timed_batches(batch_size: int, rate: float) -> int:
    """Batches `workloads infer` times at ``rate``: 50, or as many as fill the least time."""
    return max(TIMED_BATCHES, math.ceil(MIN_TIMED_SECONDS * rate / batch_size))


def inference_points(
    run_id: str, rates, top1, start_ns: int = 10**18, batches=timed_batches, spread=1.2
):
    """A finished `workloads infer` run's points: run_start, one inference event per
    (precision, batch size) with ``batches(batch_size, rate)`` batches timed and the
    batches' p90/p10 ``spread`` (a number, or a mapping by (precision, batch size)),
    run_end."""
    sink = MemorySink()
    clock = iter(range(start_ns, start_ns + 10**12, 10**9))
    writer = EventWriter(sink, run_id, 0, INFERENCE_FRAMEWORK, host="node1",
                         clock_ns=lambda: next(clock))  # fmt: skip
    writer.emit(Event.RUN_START, {
        Workload.MODEL: "resnet50", Workload.BATCH_SIZE: 32, Workload.WORLD_SIZE: 1,
        Workload.IMAGE_SIZE: 224, Workload.PRECISION: "fp32,int8",
        Workload.EXECUTION_PROVIDER: "CPUExecutionProvider", Workload.INT8_FORMAT: "qdq",
        Workload.WEIGHTS: "runs/pt-1/checkpoint.pt (epoch 3)",
        Workload.VALIDATION_IMAGES: 64, Workload.CALIBRATION_IMAGES: 64,
    })  # fmt: skip
    for (precision, batch_size), rate in rates.items():
        count = batches(batch_size, rate)
        images = batch_size * count
        ratio = spread[(precision, batch_size)] if isinstance(spread, dict) else spread
        writer.emit(Event.INFERENCE, {
            Workload.PRECISION: precision, Workload.BATCH_SIZE: batch_size,
            Workload.TIMED_IMAGES: images, Workload.TIMED_SECONDS: images / rate,
            Workload.TIMED_BATCHES: count, Workload.MIN_TIMED_SECONDS: MIN_TIMED_SECONDS,
            Workload.LATENCY_P10_SECONDS: 0.9 * batch_size / rate,
            Workload.LATENCY_P50_SECONDS: batch_size / rate,
            Workload.LATENCY_P90_SECONDS: 0.9 * ratio * batch_size / rate,
            Workload.LATENCY_SPREAD: ratio,
            Workload.LATENCY_P99_SECONDS: 1.3 * batch_size / rate,
            Workload.TOP1: top1[precision],
        })  # fmt: skip
    writer.emit(Event.RUN_END, {Workload.STATE: RunState.FINISHED})
    return sink.points


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("inference") / "epochscope.sqlite"
    store = SqliteStore(path)
    store.write_points(inference_points("infer-1", RATES, TOP1))
    store.write_points(inference_points("infer-2", RATES, TOP1, start_ns=2 * 10**18))
    store.close()
    return path


@pytest.fixture(scope="module")
def store(db):
    opened = SqliteStore(db)
    yield opened
    opened.close()


def rendered(store, *argv: str) -> str:
    return render(build_parser().parse_args(["inference", *argv]), store)


def test_the_one_report(store):
    report = inference_report(store, "infer-1")
    assert report.execution_provider == "CPUExecutionProvider" and report.int8_format == "qdq"
    for m in report.measurements:  # contract.throughput's rule: timed images / timed seconds
        assert m.images_per_second == pytest.approx(RATES[(m.precision, m.batch_size)])
    assert [c.batch_size for c in report.comparisons] == [1, 8, 32]
    for c in report.comparisons:
        assert c.int8_speedup == pytest.approx(
            RATES[("int8", c.batch_size)] / RATES[("fp32", c.batch_size)]
        )
    assert report.top1_difference == pytest.approx(TOP1["int8"] - TOP1["fp32"])


def test_json_table_read_api_and_dashboard_agree(db, store):
    report = inference_report(store, "infer-1")
    # JSON: full precision, the report's own values
    data = json.loads(rendered(store, "infer-1", "--format", "json"))
    assert data == json.loads(json.dumps(report.to_json()))
    assert (
        data["comparisons"][0]["fp32_images_per_second"]
        == report.comparisons[0].fp32_images_per_second
    )
    # table: the same values, rounded by the one set of formatters
    table = rendered(store, "infer-1")
    for c in report.comparisons:
        line = next(x for x in table.splitlines() if x.split()[:1] == [str(c.batch_size)])
        assert line.split() == [str(c.batch_size), format_rate(c.fp32_images_per_second),
                                format_rate(c.int8_images_per_second),
                                format_speedup(c.int8_speedup)]  # fmt: skip
    assert format_points(report.top1_difference) in table
    assert format_top1(TOP1["fp32"]) in table and format_top1(TOP1["int8"]) in table
    # without RUN: the newest inference run
    assert rendered(store, "--format", "json") == rendered(store, "infer-2", "--format", "json")
    # the read API of a real collector answers exactly what the local command prints
    process, port = start_collector(db, db.parent / "collector.log")
    try:
        url = f"http://127.0.0.1:{port}"
        assert fetch_view(url, "inference", {"run_id": "infer-1", "format": "json"}, None) == (
            rendered(store, "infer-1", "--format", "json")
        )
        assert fetch_view(url, "inference", {"run_id": "infer-1", "format": "table"}, None) == (
            table
        )
    finally:
        stop(process)
    # the dashboard: bars carry the report's values, labels the table's speed-ups
    shown = DataSource(store).inference("infer-1")
    figure = figures.inference_figure(shown)
    bars = {trace["name"]: trace for trace in figure["data"]}
    assert bars["FP32"]["y"] == [c.fp32_images_per_second for c in report.comparisons]
    assert bars["INT8"]["y"] == [c.int8_images_per_second for c in report.comparisons]
    assert bars["INT8"]["text"] == [format_speedup(c.int8_speedup) for c in report.comparisons]
    assert bars["FP32"]["x"] == ["batch 1", "batch 8", "batch 32"]
    cells = [
        [cell.children for cell in row.children]
        for row in pages.inference_table(shown).children[1].children
    ]
    assert [row[:4] for row in cells] == [
        [str(c.batch_size), format_rate(c.fp32_images_per_second),
         format_rate(c.int8_images_per_second), format_speedup(c.int8_speedup)]
        for c in report.comparisons
    ]  # fmt: skip


def test_training_and_unknown_runs_are_refused_clearly(tmp_path):
    from tests.integration.test_read_api import train  # a training run through a real collector

    db = tmp_path / "c.sqlite"
    process, port = start_collector(db, tmp_path / "collector.log")
    try:
        train(f"http://127.0.0.1:{port}", "", tmp_path / "spool", "pt-run", "node1", 1)
    finally:
        stop(process)
    store = SqliteStore(db)
    try:
        args = build_parser().parse_args(["inference", "pt-run", "--db", str(db)])
        from collector.views.reports import CliError

        with pytest.raises(CliError, match="training run, not an inference run"):
            render(args, store)
        with pytest.raises(CliError, match="no run 'nope'"):
            render(argparse.Namespace(**{**vars(args), "run_id": "nope"}), store)
        with pytest.raises(CliError, match="no inference run in the store"):
            render(argparse.Namespace(**{**vars(args), "run_id": None}), store)
    finally:
        store.close()


# --- findings: each effect present and absent -------------------------------------------


def report_of(tmp_path, rates, top1, **timing):
    store = SqliteStore(tmp_path / "s.sqlite")
    try:
        store.write_points(inference_points("r", rates, top1, **timing))
        return inference_report(store, "r")
    finally:
        store.close()


def rules(report) -> list[str]:
    return [finding.rule for finding in report.findings]


@pytest.mark.parametrize(
    ("loss", "fires"),
    [
        (0.0, False),
        (INT8_TOP1_LOSS_LIMIT * 0.9, False),  # within the limit
        (INT8_TOP1_LOSS_LIMIT * 1.1, True),
        (0.05, True),
        (-0.02, False),  # INT8 better than FP32: nothing lost
    ],
)
def test_int8_accuracy_loss(tmp_path, loss, fires):
    growing = {("fp32", 1): 10.0, ("int8", 1): 20.0, ("fp32", 8): 40.0, ("int8", 8): 80.0}
    report = report_of(tmp_path, growing, {"fp32": 0.75, "int8": 0.75 - loss})
    assert ("int8_accuracy_loss" in rules(report)) is fires
    assert "throughput_saturated" not in rules(report)
    if fires:
        finding = report.findings[0]
        assert finding.evidence["top1_loss"] == pytest.approx(loss)
        assert f"{loss * 100:.2f} points" in finding.title


@pytest.mark.parametrize(
    ("fp32_rates", "saturated_at"),
    [
        ((50.0, 100.0, 200.0), None),  # grows all the way
        ((50.0, 100.0, 100.0 * (1 + SATURATION_GAIN) * 1.01), None),  # just over the gain
        ((50.0, 100.0, 100.0 * (1 + SATURATION_GAIN) * 0.99), 8),  # just under
        ((50.0, 100.0, 90.0), 8),  # falls past batch 8
        ((100.0, 104.0, 108.0), 1),  # flat from the start
        ((100.0, 50.0, 105.0), 1),  # a dip, then no gain over batch 1
    ],
)
def test_throughput_saturation(tmp_path, fp32_rates, saturated_at):
    rates = {("fp32", b): r for b, r in zip((1, 8, 32), fp32_rates, strict=True)}
    rates.update({("int8", b): 2 * r * b for b, r in zip((1, 8, 32), (10, 10, 10), strict=True)})
    report = report_of(tmp_path, rates, TOP1 | {"int8": TOP1["fp32"]})
    saturated = [f for f in report.findings if f.rule == "throughput_saturated"]
    if saturated_at is None:
        assert saturated == []
    else:
        assert [f.evidence["batch_size"] for f in saturated] == [saturated_at]
        assert saturated[0].evidence["precision"] == "fp32"
        assert f"batch size {saturated_at}" in saturated[0].title


def test_a_single_batch_size_says_nothing_about_saturation(tmp_path):
    report = report_of(tmp_path, {("fp32", 8): 100.0, ("int8", 8): 150.0}, TOP1)
    assert "throughput_saturated" not in rules(report)
    assert math.isclose(report.comparisons[0].int8_speedup, 1.5)


def test_the_table_and_json_show_each_measurements_spread(store):
    report = inference_report(store, "infer-1")
    data = json.loads(rendered(store, "infer-1", "--format", "json"))
    table = rendered(store, "infer-1")
    assert "p90/p10" in table and "timed s / batches" in table
    for m, shown in zip(report.measurements, data["measurements"], strict=True):
        rate = RATES[(m.precision, m.batch_size)]
        assert m.latency_spread == pytest.approx(1.2)
        assert m.timed_batches == timed_batches(m.batch_size, rate)
        assert m.timed_seconds >= MIN_TIMED_SECONDS
        assert shown["latency_spread"] == m.latency_spread
        assert shown["latency_p10_seconds"] == m.latency_p10_seconds
        assert shown["timed_batches"] == m.timed_batches
        line = next(
            x for x in table.splitlines() if x.split()[:2] == [str(m.batch_size), m.precision]
        )
        assert line.split()[2:] == [
            format_milliseconds(m.latency_p10_seconds),
            format_milliseconds(m.latency_p50_seconds),
            format_milliseconds(m.latency_p90_seconds),
            format_milliseconds(m.latency_p99_seconds),
            format_spread(m.latency_spread),
            *format_timed(m.timed_seconds, m.timed_batches).split(),
        ]
    assert "No findings." in table


def test_a_run_that_recorded_no_spread_gets_it_from_its_percentiles(tmp_path):
    points = inference_points("old", {("fp32", 8): 100.0}, TOP1)
    for point in points:  # as `workloads infer` wrote them before the spread was recorded
        point.fields.pop(Workload.LATENCY_SPREAD, None)
        point.fields.pop(Workload.TIMED_BATCHES, None)
    store = SqliteStore(tmp_path / "old.sqlite")
    try:
        store.write_points(points)
        (m,) = inference_report(store, "old").measurements
    finally:
        store.close()
    assert m.latency_spread == pytest.approx(1.2) and m.timed_batches is None
    assert format_timed(m.timed_seconds, m.timed_batches) == f"{m.timed_seconds:.2f} s"
