"""The per-epoch report's columns are declared once (``contract.columns``): the rows, the
JSON keys, the text table, the dashboard's table and the manual's column table
(docs/usage.md) all come from that spec."""

from __future__ import annotations

import dataclasses
import json

import pytest

from collector.analysis.epochs import COLUMNS, EpochRow, build_report
from collector.arguments import build_parser
from collector.views.printers import render
from contract import columns
from dashboard.columns import EPOCH_COLUMNS
from tests.conftest import REPO_ROOT
from tests.support.run_builder import RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture


def cli(store, *argv: str) -> str:
    return render(build_parser().parse_args(list(argv)), store)


def one_host_run() -> RunBuilder:
    run = RunBuilder("solo", steps_per_epoch=4)
    run.epoch(20, 400, disk_read=5e6)
    run.epoch(20, 400)
    return run


def test_rows_json_and_the_manual_follow_the_spec(make_store):
    assert COLUMNS == columns.REPORT_COLUMN_NAMES
    fields = [f.name for f in dataclasses.fields(EpochRow)]
    # start and end are the ISO forms of start_ns and end_ns
    assert [n for n in fields if n not in ("start_ns", "end_ns")] == [
        n for n in COLUMNS if n not in ("start", "end")
    ]
    store = make_store(one_host_run().points())
    rows = json.loads(cli(store, "report", "solo", "--format", "json"))["rows"]
    assert all(list(row) == list(COLUMNS) for row in rows)
    manual = (REPO_ROOT / "docs" / "usage.md").read_text()
    assert columns.markdown_table() in manual


def test_json_is_rounded_to_the_declared_digits(make_store):
    store = make_store(one_host_run().points())
    for row in build_report(store, "solo").rows:
        for column in columns.REPORT_COLUMNS:
            value = getattr(row, column.name)
            if isinstance(value, float) and column.digits is not None:
                assert round(value, column.digits) == value, column.name


def test_default_table_is_readable_and_has_no_star_row_for_one_host(make_store):
    store = make_store(one_host_run().points())
    text = cli(store, "report", "solo")
    header = text.splitlines()[1]
    assert "img/s" in header and "disk read" in header and "CPU %" in header
    assert max(len(line) for line in text.splitlines()) < 200
    assert not any(line.startswith("*") for line in text.splitlines())
    everything = cli(store, "report", "solo", "--columns", "all").splitlines()[1]
    for column in columns.REPORT_COLUMNS:
        assert column.heading in everything
    chosen = cli(store, "report", "solo", "--columns", "storage,gpu_util_percent")
    assert chosen.splitlines()[1].split(" │ ")[-1].strip() == "GPU %"
    assert "disk write" in chosen and "CPU %" not in chosen


def test_default_table_leaves_out_what_no_host_measured(make_store):
    run = RunBuilder("events-only", write_samples=False)  # no agent: no node samples
    run.epoch(20, 400)
    header = cli(make_store(run.points()), "report", "events-only").splitlines()[1]
    assert [cell.strip() for cell in header.split(" │ ")] == [
        "host",
        "epoch",
        "s",
        "images",
        "img/s",
    ]


def test_an_unknown_group_is_refused_naming_the_groups(make_store):
    store = make_store(one_host_run().points())
    with pytest.raises(Exception, match="unknown column or group 'disks'"):
        cli(store, "report", "solo", "--columns", "disks")


def test_dashboard_labels_and_tooltips_come_from_the_spec():
    for column in EPOCH_COLUMNS:
        spec = columns.BY_NAME[column.key]
        assert column.label == spec.label
        assert column.help.startswith(spec.help)


def test_a_value_that_rounds_to_zero_has_no_sign():
    """-0.004 MB/s of receive minus send on a host with no fabric traffic is "0.0"."""
    column = columns.BY_NAME["rx_minus_tx_mbps"]
    assert [columns.format_cell(column, v) for v in (-0.004, -0.0, -0.06)] == ["0.0", "0.0", "-0.1"]
