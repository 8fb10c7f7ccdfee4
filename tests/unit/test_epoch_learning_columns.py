"""Loss and top-1 per epoch in the per-epoch report (issue 45, item 3): `collector report
--columns loss,top1` (text, JSON) and the dashboard's epoch table show the run's learning
curve (``collector.analysis.learning``) from the ranks' epoch_end events."""

from __future__ import annotations

import json

from collector.arguments import build_parser
from collector.views.printers import render
from dashboard.pages import epoch_table_columns
from tests.support.run_builder import RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture


def learning_run() -> RunBuilder:
    run = RunBuilder("learns", hosts=("a", "b"), steps_per_epoch=4, write_samples=False)
    run.epoch(20, 400, loss=2.1, top1=0.3)
    run.epoch(20, 400, loss=0.9, top1=0.65)
    run.epoch(20, 400)  # no loss, no validation: nothing shown, not zero
    return run


def report(store, *argv: str) -> str:
    return render(build_parser().parse_args(["report", "learns", *argv]), store)


def test_loss_and_top1_per_epoch_in_every_view(make_store):
    store = make_store(learning_run().points())
    rows = json.loads(report(store, "--columns", "loss,top1", "--format", "json"))["rows"]
    by_epoch = {(row["host"], row["epoch"]): (row["loss"], row["top1"]) for row in rows}
    for host in ("a", "b", "*"):
        assert by_epoch[(host, 1)] == (2.1, 0.3)
        assert by_epoch[(host, 2)] == (0.9, 0.65)
        assert by_epoch[(host, 3)] == (None, None)

    text = report(store, "--columns", "loss,top1")
    header = next(line for line in text.splitlines() if "loss" in line)
    assert "top-1" in header
    assert "2.1" in text and "0.65" in text

    # the dashboard's epoch table: the same rows, its columns from the same spec
    shown = [column.key for column in epoch_table_columns(rows)]
    assert {"loss", "top1"} <= set(shown)
    without = [{k: v for k, v in row.items() if k not in ("loss", "top1")} for row in rows]
    assert not {"loss", "top1"} & {column.key for column in epoch_table_columns(without)}
