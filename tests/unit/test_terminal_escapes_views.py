"""Every table that shows text a run or a job sent prints it as visible escapes, never as
terminal controls or Rich markup, and cut to a bounded width (issue 44, item 5): the jobs
table and a job's view (user, account, partition), the scaling table (a run's model) and
the inference report (model, provider, weights). Real stores; ``collector runs`` is
covered by test_terminal_escapes.py."""

from __future__ import annotations

import dataclasses

from collector.arguments import build_parser
from collector.store import SqliteStore
from collector.views.printers import render
from contract.identifiers import MAX_STRING_FIELD_CHARS
from contract.schema import Workload
from tests.support.run_builder import RunBuilder
from tests.unit.test_inference_views import RATES, TOP1, inference_points

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

ESCAPES = "\x1b[2J\x1b]0;owned\x07\x1b[31m"
MARKUP = "[bold red]mallory[/bold red]"


def cli(store, *argv: str) -> str:
    return render(build_parser().parse_args(list(argv)), store)


def assert_shown_not_run(shown: str) -> None:
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown
    assert "\\x1b[2J" in shown


def hostile_job_run() -> RunBuilder:
    run = RunBuilder("run-a", hosts=("n1",))
    run.epoch(10, 640)
    run.job("77", seconds=20, cpus=2, cpus_busy=1.0, memory_limit_bytes=4e9,
            memory_peak_bytes=1e9, user=ESCAPES + "eve", account=MARKUP,
            partition="gpu\u202eupt", of_run=True)  # fmt: skip
    return run


def test_the_jobs_table_shows_a_users_escapes_and_markup_as_written(make_store):
    shown = cli(make_store(hostile_job_run().points()), "jobs")
    assert_shown_not_run(shown)
    assert "\\u202e" in shown
    assert "[bold red]" in shown  # before: read as markup, the brackets gone


def test_a_jobs_view_shows_them_as_written_too(make_store):
    shown = cli(make_store(hostile_job_run().points()), "job", "77")
    assert_shown_not_run(shown)
    assert MARKUP in shown


def test_the_scaling_table_shows_a_models_escapes_cut_to_a_bounded_width(make_store):
    runs = []
    for gpus, model in ((1, ESCAPES + "resnet\u202e50"), (2, "m" * MAX_STRING_FIELD_CHARS)):
        run = RunBuilder(f"r{gpus}", model=model, ranks_per_host=gpus, write_samples=False)
        runs += run.epoch(10, 640 * gpus).epoch(10, 640 * gpus).points()
    shown = cli(make_store(runs), "scaling")
    assert_shown_not_run(shown)
    assert "…" in shown and shown.count("m") < 200  # before: all 1,024, folded


def test_the_inference_report_shows_a_models_escapes(tmp_path):
    points = inference_points("infer-1", RATES, TOP1)
    index = next(i for i, p in enumerate(points) if Workload.MODEL in p.fields)
    hostile = {Workload.MODEL: ESCAPES + "resnet50", Workload.WEIGHTS: "w" * 1000}
    points[index] = dataclasses.replace(points[index], fields={**points[index].fields, **hostile})
    with SqliteStore(tmp_path / "s.sqlite") as store:
        store.write_points(points)
        shown = cli(store, "inference", "infer-1")
    assert_shown_not_run(shown)
    assert "w" * 119 + "…" in shown and "w" * 121 not in shown
