"""One throughput, one definition (``contract.throughput``): every view of a run shows the same
images/s. The ranks' own summary (``workloads.launch.summary``), ``collector runs``, ``collector
report --findings`` and ``collector scaling`` (JSON and tables), the dashboard's run header,
runs list and scaling page all format the value ``collector.analysis.throughput`` computes, and the
per-epoch ``*`` rows are the same rule over one epoch."""

from __future__ import annotations

import json

import pytest

from collector.arguments import build_parser
from collector.queries.query import runs_summary, scaling_table
from collector.queries.questions import answer
from collector.views.printers import render
from contract.throughput import TimedWork, images_per_second
from dashboard.columns import format_value
from dashboard.pages import run_header, runs_table, scaling_page
from tests.support.run_builder import NS, T0_NS, RunBuilder
from workloads.launch.summary import format_run_rate, run_images_per_second

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture


def cli(store, *argv: str) -> str:
    return render(build_parser().parse_args(list(argv)), store)


def text_of(component) -> str:
    """Every string in a Dash component tree."""
    if isinstance(component, str | int | float):
        return str(component)
    children = getattr(component, "children", None)
    if children is None:
        return ""
    if not isinstance(children, list | tuple):
        children = [children]
    return " ".join(text_of(child) for child in children)


def two_runs(target_top1: float | None = None) -> tuple[RunBuilder, RunBuilder]:
    """A 1-rank baseline and a 4-rank run on 2 hosts, 3 epochs, 2 warm-up steps whose steps
    are slower (graph building): epoch images / epoch seconds is NOT the timed rate. With
    ``target_top1`` 0.75: the 1-rank run reaches it in epoch 3 (40 s), the 4-rank run in
    epoch 2 (30 s)."""
    one = RunBuilder("one", steps_per_epoch=8, warmup_steps=2, write_samples=False,
                     target_top1=target_top1)  # fmt: skip
    four = RunBuilder(
        "four",
        hosts=("a", "b"),
        ranks_per_host=2,
        steps_per_epoch=8,
        warmup_steps=2,
        t0_ns=T0_NS + 86_400 * NS,
        write_samples=False,
        target_top1=target_top1,
    )
    curves = {"one": (0.5, 0.7, 0.76), "four": (0.6, 0.8, 0.85)}
    for run, images in ((one, 800), (four, 760)):
        top1 = curves[run.run_id] if target_top1 is not None else (None, None, None)
        # warm-up: 2 slow steps
        run.epoch(20, images, step_pattern=(6, 6, 1, 1, 1, 1, 1, 1), top1=top1[0])
        run.epoch(10, images, top1=top1[1])
        run.epoch(10, images, top1=top1[2])
    return one, four


def test_every_view_shows_the_same_run_throughput(make_store):
    one, four = two_runs()
    store = make_store(one.points() + four.points())

    # the rule by hand, for the 4-rank run: each rank trained 760 images per epoch in
    # 8 steps of 95; epoch 1's steps weigh 6, 6, 1 x 6 (18) over 20 s, so its 2 warm-up
    # steps took 40/3 s and its 6 timed steps (570 images) 20/3 s; epochs 2 and 3: 760
    # images in 10 s each
    timed = TimedWork(570 + 760 + 760, 6 * 20 / 18 + 10 + 10)
    expected = images_per_second((rank, timed) for rank in range(4))
    assert expected == pytest.approx(4 * 2090 / (20 / 3 + 20))  # 313.5 img/s

    # the ranks' own summary, from their events (no collector)
    assert run_images_per_second(four.event_points()) == pytest.approx(expected)
    assert f"{expected:,.1f} images/s" in format_run_rate(expected)

    # collector: runs, report --findings, scaling (JSON carries full precision)
    runs = {r["run_id"]: r for r in json.loads(cli(store, "runs", "--format", "json"))}
    assert runs["four"]["images_per_second"] == pytest.approx(expected, rel=1e-12)
    report = json.loads(cli(store, "report", "four", "--format", "json", "--findings"))
    assert report["throughput"]["images_per_second"] == runs["four"]["images_per_second"]
    scaling = {r["run_id"]: r for r in json.loads(cli(store, "scaling", "--format", "json"))}
    assert scaling["four"]["images_per_second"] == runs["four"]["images_per_second"]
    baseline = scaling["one"]["images_per_second"]
    assert scaling["four"]["efficiency_percent"] == pytest.approx(100 * expected / (4 * baseline))

    # start-up: the warm-up steps' 40/3 s, shown beside the rate and not averaged into it
    assert runs["four"]["startup_seconds"] == pytest.approx(40 / 3)

    # the tables print the same value, rounded
    shown = f"{expected:,.1f}"
    assert shown in cli(store, "runs")
    assert shown in cli(store, "scaling")

    # the dashboard: run header, runs list and scaling page format the same value
    summaries = {s.run_id: s.to_dict() for s in runs_summary(store)}
    assert summaries["four"]["images_per_second"] == runs["four"]["images_per_second"]
    dashboard_text = format_value(expected, "rate")
    assert dashboard_text in text_of(run_header(summaries["four"], live=False, poll_ms=1000))
    assert dashboard_text in text_of(runs_table(list(summaries.values())))
    assert dashboard_text in text_of(scaling_page(scaling_table(store)))


def test_epoch_rows_use_the_same_rule_per_epoch(make_store):
    _, four = two_runs()
    store = make_store(four.points())
    rows = json.loads(cli(store, "report", "four", "--format", "json"))["rows"]
    totals = {r["epoch"]: r["images_per_second"] for r in rows if r["host"] == "*"}
    hosts = {(r["host"], r["epoch"]): r["images_per_second"] for r in rows if r["host"] != "*"}
    # epoch 1: 570 timed images in 20/3 s per rank; epochs 2, 3: 760 in 10 s; x 4 ranks
    assert totals == {
        1: pytest.approx(4 * 570 / (20 / 3), abs=0.01),
        2: pytest.approx(304.0),
        3: pytest.approx(304.0),
    }
    assert hosts[("a", 2)] == pytest.approx(152.0)  # the host's two ranks
    # images / window seconds would say 4 x 760 / 20 = 152 for epoch 1: not the rule
    assert totals[1] != pytest.approx(152.0)


def test_every_view_shows_the_same_time_to_target_speedup(make_store):
    """``collector.analysis.target_scaling`` computes it once: ``collector scaling`` (JSON and
    table), the read API's scaling answer and the dashboard's scaling page format it."""
    one, four = two_runs(target_top1=0.75)
    store = make_store(one.points() + four.points())
    scaling = {r["run_id"]: r for r in json.loads(cli(store, "scaling", "--format", "json"))}
    assert (scaling["one"]["seconds_to_target"], scaling["four"]["seconds_to_target"]) == (40, 30)
    speedup = scaling["four"]["time_to_target_speedup"]
    assert speedup == pytest.approx(40 / 30)
    assert scaling["four"]["time_to_target_baseline"] == "one"
    api = {r["run_id"]: r for r in answer(store, "scaling", {})}
    assert api["four"]["time_to_target_speedup"] == speedup
    assert f"{speedup:.2f}x" in cli(store, "scaling")
    assert format_value(speedup, "ratio2") in text_of(scaling_page(scaling_table(store)))
