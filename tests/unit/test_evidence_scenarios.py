"""The evidence the real rules return for scenario runs stored through the write path, as
the CLI and the dashboard show it (collector.views.evidence): labelled values in units, nothing
unmeasured, only the resource that grew."""

from __future__ import annotations

from collector.findings.engine import run_findings
from collector.views.evidence import evidence_items
from tests.integration.test_findings_scenarios import scaling_pair, small_dataset_run, stored
from tests.integration.test_reports_cli import cli

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

MB = 1e6


def test_cache_warmup_evidence_of_the_demo_in_units(make_store):
    store = stored(make_store, small_dataset_run(first_mb=64, later_mb=0))
    (finding,) = [f for f in run_findings(store, "small") if f.rule == "cache_warmup"]
    items = dict(evidence_items(finding.evidence))
    assert items["first epoch storage read"] == "64.0 MB"
    assert items["first epoch storage read rate"] == "3.2 MB/s"  # 64 MB in 20 s
    assert items["dataset"] == "45.0 MB"
    assert all("None" not in text and text for text in items.values())


def test_scaling_loss_evidence_shows_only_what_was_measured(make_store):
    # storage reads per node fell (6 -> 2 MB/s), fabric use grew; CPU-only ranks: no GPU
    runs = scaling_pair(
        2, 2, 20_000, gpus=False, disk_read=2 * MB, ib_rcv=500 * MB, ib_xmit=500 * MB
    )
    (finding,) = [
        f for f in run_findings(stored(make_store, *runs), "many") if f.rule == "scaling_loss"
    ]
    items = dict(evidence_items(finding.evidence))
    assert items["efficiency"] == "70.67%"  # 800 of 4 x 283 images/s
    assert items["images per second"] == "800 images/s"
    assert "storage_read" not in items["changed"]
    assert "fabric" in items["changed"]
    assert all("None" not in text and "gpu" not in text for text in items.values())


def test_collector_report_prints_the_evidence_in_units(make_store):
    store = make_store(small_dataset_run(first_mb=64, later_mb=0).points())
    text = cli(store, "report", "small", "--findings")
    assert "first epoch storage read: 64.0 MB" in text
    assert "dataset: 45.0 MB" in text
    assert "None" not in text
