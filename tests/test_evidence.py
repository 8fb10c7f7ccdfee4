"""Findings' evidence as labelled values with units (collector.evidence), on the evidence
the real rules return for scenario runs stored through the write path."""

from __future__ import annotations

from collector.evidence import evidence_lines
from collector.findings import run_findings
from tests.test_findings_scenarios import scaling_pair, small_dataset_run, stored

pytest_plugins = ["tests.analysis_stores"]  # the make_store fixture

MB = 1e6


def test_cache_warmup_evidence_of_the_demo_in_units(make_store):
    store = stored(make_store, small_dataset_run(first_mb=64, later_mb=0))
    (finding,) = [f for f in run_findings(store, "small") if f.rule == "cache_warmup"]
    lines = dict(evidence_lines(finding.evidence))
    assert lines["first epoch storage read"] == "64.0 MB"
    assert lines["first epoch storage read rate"] == "3.2 MB/s"  # 64 MB in 20 s
    assert lines["dataset"] == "45.0 MB"
    assert lines["storage read by epoch"].startswith("1: 64.0 MB, 2: 0 B")
    assert lines["first epoch read to dataset"] == "1.422"
    assert all("None" not in value and value for value in lines.values())


def test_unmeasured_evidence_is_left_out():
    lines = evidence_lines(
        {
            "gpu_util_percent": None,
            "cpu_util_percent": 50.0,
            "run_resources": {"gpu_util_percent": None, "storage_read_mbps_per_node": 6.0},
            "reference_resources": {"gpu_util_percent": None},
            "efficiency_percent": 97.08,
            "images_per_second": 1099.0,
            "gpus": 4,
        }
    )
    assert lines == [
        ("cpu util", "50.0 %"),
        ("run resources", "storage read rate: 6.0 MB/s per node"),
        ("efficiency", "97.1 %"),
        ("images", "1,099.0 images/s"),
        ("gpus", "4"),
    ]


def test_scaling_loss_evidence_names_the_resource_that_grew(make_store):
    # storage reads per node fell (6 -> 2 MB/s), fabric use grew: only the fabric is shown
    runs = scaling_pair(2, 2, 20_000, disk_read=2 * MB, ib_rcv=500 * MB, ib_xmit=500 * MB)
    store = stored(make_store, *runs)
    (finding,) = [f for f in run_findings(store, "many") if f.rule == "scaling_loss"]
    lines = dict(evidence_lines(finding.evidence))
    assert lines["efficiency"] == "70.7 %"  # 800 of 4 x 283 images/s
    assert lines["images"] == "800.0 images/s"
    # 2 MB/s / 283 images/s on one node; 2 x 1000 MB/s of InfiniBand / 800 images/s
    assert lines["changed"] == "fabric 7.1 kB/image -> 2.5 MB/image (353.75x)"
    assert "storage read" not in lines["changed"]
    assert all("None" not in value for value in lines.values())


def test_collector_report_prints_the_evidence_in_units(make_store):
    from tests.test_reports_cli import cli

    store = make_store(small_dataset_run(first_mb=64, later_mb=0).points())
    text = cli(store, "report", "small", "--findings")
    assert "    first epoch storage read: 64.0 MB" in text
    assert "    dataset: 45.0 MB" in text
    assert "None" not in text
