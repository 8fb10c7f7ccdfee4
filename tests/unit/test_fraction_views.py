"""A fraction (top-1, a share of the step, a lost fraction: 0..1) prints the same in every
view: ``contract.columns.format_fraction`` writes it in percent for people (the CLI's
tables, a finding's words and evidence items, the dashboard's tables and hovers, the
inference page), while JSON keeps the fraction itself."""

from __future__ import annotations

import json

import pytest

from collector.arguments import build_parser
from collector.findings.engine import run_findings
from collector.findings.storage import STORAGE_HIGH_SHARE_OF_PEAK
from collector.views.evidence import evidence_items
from collector.views.inference import format_top1
from collector.views.printers import render
from contract.units import FRACTION_DIGITS, format_fraction, format_points
from dashboard import columns as dashboard_columns
from dashboard import figures
from dashboard.pages import finding_card
from tests.integration.test_anatomy_findings import scaling_pair
from tests.support.run_builder import NS, RunBuilder
from tests.unit.test_findings import MB, storage_run

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

DAY = 86_400 * NS


def cli(store, *argv: str) -> str:
    return render(build_parser().parse_args(list(argv)), store)


def test_one_format_for_a_fraction():
    assert format_fraction(0.7491) == "74.9%"
    assert format_fraction(0.2) == "20%"  # a trailing zero dropped, as d3's ".1~%" does
    assert format_fraction(0.10004) == "10%"
    assert format_fraction(1234.5) == "123,450%"
    assert format_fraction(-0.00001) == "0%"  # no "-0%"
    assert format_points(-0.0123) == "-1.23 points"
    assert format_top1(0.7491) == format_fraction(0.7491)  # the inference views
    assert format_top1(None) == "-"


def test_top1_prints_the_same_in_every_view(make_store):
    runs = scaling_pair(125.0, (1.0, 17.0, 5.0))
    for run in runs:
        run.target_top1 = 0.749
        run.epochs[-1].top1 = 0.7491
    store = make_store([p for run in runs for p in run.points()])
    shown = format_fraction(0.7491)
    # the CLI's scaling table in percent, its JSON the fraction itself
    assert shown in cli(store, "scaling")
    rows = json.loads(cli(store, "scaling", "--format", "json"))
    assert {row["final_top1"] for row in rows} == {0.7491}
    assert {row["target_top1"] for row in rows} == {0.749}
    # the dashboard: its tables' cells and the browser's d3 format of the same column
    assert dashboard_columns.format_value(0.7491, "fraction") == shown
    column = next(c for c in dashboard_columns.SCALING_COLUMNS if c.key == "final_top1")
    spec = dashboard_columns.table_column(column)["format"].to_plotly_json()
    assert spec["specifier"] == f".{FRACTION_DIGITS}~%"  # d3: 0.7491 -> "74.9%", 0.2 "20%"
    # the time-to-target chart's hover says the target in the same format
    target = figures.time_to_target_figure(rows)
    assert f"{{customdata[1]:.{FRACTION_DIGITS}~%}}" in target["data"][0]["hovertemplate"]


def test_a_findings_fraction_prints_the_same_in_words_evidence_and_cli(make_store):
    runs = scaling_pair(125.0, (1.0, 17.0, 5.0))  # each rank 20% slower than the reference
    store = make_store([p for run in runs for p in run.points()])
    (finding,) = [f for f in run_findings(store, "two") if f.rule == "scaling_loss"]
    assert finding.evidence["attribution"]["lost_fraction_per_rank"] == 0.2  # JSON: raw
    shown = format_fraction(0.2)
    assert f"({shown} fewer)" in finding.explanation
    items = dict(evidence_items(finding.evidence["attribution"]))
    assert items["lost fraction per rank"] == shown
    report = cli(store, "report", "two", "--findings")
    assert f"({shown} fewer)" in report
    assert json.loads(cli(store, "report", "two", "--findings", "--format", "json"))


def test_the_fabric_findings_relative_difference_prints_the_same_in_every_view(make_store):
    run = RunBuilder("fabric", hosts=("n1", "n2"))
    # n2: 505 - 200 = 305 MB/s received beyond what it sent, against 320 MB/s from NFS
    run.epoch(
        100,
        10_000,
        nfs_server_read={"n1": 300 * MB, "n2": 320 * MB},
        nfs_app_read=320 * MB,
        ib_rcv={"n1": 500 * MB, "n2": 505 * MB},
        ib_xmit=200 * MB,
    )
    store = make_store(run.points())
    (finding,) = [f for f in run_findings(store, "fabric") if f.rule == "fabric_carries_storage"]
    difference = finding.evidence["relative_difference"]
    assert difference == pytest.approx(15 / 320, abs=1e-4)  # JSON: the fraction itself
    shown = format_fraction(difference)
    assert shown == "4.7%"
    assert f"within {shown}." in finding.explanation
    # the CLI's and the dashboard's evidence items (one function writes both)
    assert dict(evidence_items(finding.evidence))["relative difference"] == shown
    card = str(finding_card(finding.to_dict(), "fabric", same_page=True))
    assert shown in card and str(difference) not in card
    report = cli(store, "report", "fabric", "--findings")
    assert f"within {shown}." in report and f"relative difference: {shown}" in report
    (stored,) = [
        f
        for f in json.loads(cli(store, "report", "fabric", "--findings", "--format", "json"))[
            "findings"
        ]
        if f["rule"] == "fabric_carries_storage"
    ]
    assert stored["evidence"]["relative_difference"] == difference


def test_the_storage_bound_thresholds_share_of_peak_prints_as_a_fraction(make_store):
    store = make_store(storage_run("unstable", (1, 3)).points())
    (finding,) = [f for f in run_findings(store, "unstable") if f.rule == "storage_bound"]
    thresholds = finding.evidence["thresholds"]
    assert thresholds["storage_share_of_peak"] == STORAGE_HIGH_SHARE_OF_PEAK  # JSON: raw
    shown = format_fraction(STORAGE_HIGH_SHARE_OF_PEAK)
    assert shown == "25%"
    items = dict(evidence_items(finding.evidence))
    assert f"storage share of peak: {shown}" in items["thresholds"]
    assert "iowait: 5%" in items["thresholds"]  # a percent stays a percent
    report = cli(store, "report", "unstable", "--findings")
    assert f"storage share of peak: {shown}" in report
