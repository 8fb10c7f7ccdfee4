"""A finding's evidence shown as labelled values with units, what was not measured left out
(collector.views.evidence: the dashboard's finding cards and `collector report --findings`)."""

from __future__ import annotations

from collector.findings.engine import run_findings
from collector.views.evidence import evidence_items
from tests.integration.test_findings_scenarios import own_reads_run

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture


def test_units_from_the_keys_and_unmeasured_values_left_out():
    items = dict(
        evidence_items(
            {
                "first_epoch_storage_read_bytes": 64_000_000,
                "first_epoch_storage_read_mbps": 3.2,
                "gpu_util_percent": None,  # no GPU: not "None"
                "dataset_to_memory_ratio": 0.0001875,  # not "0"
                "images_per_second": 720.0,
                "fabric_bytes_per_image": 1819.8,
                "changed": [],
                "settled_from_epoch": 2,
                "run_resources": {"cpu_util_percent": 99.5, "gpu_util_percent": None},
            }
        )
    )
    assert items == {
        "first epoch storage read": "64.0 MB",
        "first epoch storage read rate": "3.2 MB/s",
        "dataset to memory": "0.000188",
        "images per second": "720 images/s",
        "fabric per image": "1,820 B",
        "settled from epoch": "2",
        "run resources": "cpu util: 99.5%",
    }


def test_per_step_per_rank_shares_and_mappings_by_something_carry_units():
    items = dict(
        evidence_items(
            {
                "first_seconds_per_step": 21.263,
                "fabric_bytes_per_step": 2_500_000,
                "images_per_second_per_rank": 52.04,
                "input_wait_share": 0.352,
                "extra_seconds_by_part": {"input_wait": 0.352, "other": 56.2, "compute": None},
                "storage_read_bytes_by_epoch": {1: 67_400_000, 2: 16_000, 3: 4_000},
            }
        )
    )
    assert items == {
        "first time per step": "21.26 s",
        "fabric per step": "2.5 MB",
        "images per second per rank": "52.04 images/s per rank",
        "input wait share": "35.2%",
        "extra by part": "input wait: 0.352 s; other: 56.2 s",
        "storage read by epoch": "1: 67.4 MB; 2: 16.0 kB; 3: 4.0 kB",
    }


def test_the_anatomy_findings_evidence_in_units(make_store):
    # epoch 1: 60 s over 4 steps, later 20 s; input wait 70% of every step; the ranks read
    # 67.4 MB in epoch 1
    run = own_reads_run((67.4, 0.016, 0.004), (300, 320, 310), 60, shares=(0.7, 0.2, 0.0))
    findings = run_findings(make_store(run.points()), "own")
    found = {f.rule: dict(evidence_items(f.evidence)) for f in findings}
    startup = found["startup"]
    assert startup["first time per step"] == "15 s"
    assert startup["settled time per step"] == "5 s"
    # per rank: input wait (10.5 - 3.5) s x 4 steps, compute 0.2 x 10 x 4, other 0.1 x 10 x 4
    assert (
        startup["extra by part"] == "input wait: 28 s; compute: 8 s; communication: 0 s; other: 4 s"
    )
    assert startup["first read"] == "67.4 MB"
    assert found["input_wait"]["input wait share"] == "70%"
    assert found["cache_warmup"]["storage read by epoch"] == "1: 67.4 MB; 2: 16.0 kB; 3: 4.0 kB"
