"""A finding's evidence shown as labelled values with units, what was not measured left out
(collector.evidence: the dashboard's finding cards and `collector report --findings`)."""

from __future__ import annotations

from collector.evidence import evidence_items


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
        "run resources": "cpu util: 99.5 %",
    }
