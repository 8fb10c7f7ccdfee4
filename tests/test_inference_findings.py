"""The inference rules detect typed evidence (``collector.findings.evidence``) and are worded
by the one wording dispatch (``collector.findings.words.words``), as the training rules are.

Runs are written as ``workloads infer`` writes them and read back from a real SQLite store
(``tests.test_inference_views.report_of``); the rendered findings themselves are asserted
there.
"""

from __future__ import annotations

import pytest

from collector.findings.evidence import (
    INT8_TOP1_LOSS_LIMIT,
    Int8AccuracyLoss,
    ThroughputSaturated,
    evidence_json,
)
from collector.findings.inference import (
    INFERENCE_DETECTORS,
    detect_int8_accuracy_loss,
    detect_throughput_saturated,
)
from collector.findings.words import NO_REPORT_COLUMN, words
from tests.test_inference_views import report_of

approx = pytest.approx
# FP32 flat past batch 8 (104 < 1.1 x 100), INT8 flat from batch 1 (101, 103 < 110)
RATES = {
    ("fp32", 1): 50.0,
    ("int8", 1): 100.0,
    ("fp32", 8): 100.0,
    ("int8", 8): 101.0,
    ("fp32", 32): 104.0,
    ("int8", 32): 103.0,
}


def test_the_rules_return_typed_evidence(tmp_path):
    report = report_of(tmp_path, RATES, {"fp32": 0.75, "int8": 0.70})
    assert detect_int8_accuracy_loss(report) == [Int8AccuracyLoss(0.75, 0.70, approx(0.05))]
    assert detect_throughput_saturated(report) == [
        ThroughputSaturated("fp32", 8, 100.0, 32, 104.0),
        ThroughputSaturated("int8", 1, 100.0, 32, 103.0),
    ]


def test_no_evidence_where_no_effect(tmp_path):
    growing = {("fp32", 1): 10.0, ("int8", 1): 20.0, ("fp32", 8): 40.0, ("int8", 8): 80.0}
    loss = INT8_TOP1_LOSS_LIMIT * 0.9
    report = report_of(tmp_path, growing, {"fp32": 0.75, "int8": 0.75 - loss})
    assert [found for detect in INFERENCE_DETECTORS.values() for found in detect(report)] == []
    assert report.findings == ()


def test_the_reports_findings_are_the_evidence_worded(tmp_path):
    report = report_of(tmp_path, RATES, {"fp32": 0.75, "int8": 0.70})
    evidence = [found for detect in INFERENCE_DETECTORS.values() for found in detect(report)]
    assert list(report.findings) == [words(found) for found in evidence]
    assert [f.rule for f in report.findings] == [
        "int8_accuracy_loss",
        "throughput_saturated",
        "throughput_saturated",
    ]
    for finding, found in zip(report.findings, evidence, strict=True):
        assert finding.evidence == evidence_json(found)
        # an inference run has no epochs: no per-epoch report column shows it
        assert finding.chart == NO_REPORT_COLUMN == ""


def test_inference_wording_needs_no_store():
    loss = words(Int8AccuracyLoss(fp32_top1=0.8125, int8_top1=0.75, top1_loss=0.0625))
    assert (loss.rule, loss.severity) == ("int8_accuracy_loss", "warning")
    assert loss.title == "INT8 loses 6.25 points of top-1"
    assert "from 81.2% in FP32 to 75% in INT8" in loss.explanation
    assert loss.evidence == {"fp32_top1": 0.8125, "int8_top1": 0.75, "top1_loss": 0.0625}
    flat = words(ThroughputSaturated("int8", 8, 163.9012, 32, 170.5))
    assert (flat.rule, flat.severity) == ("throughput_saturated", "info")
    assert flat.title == "INT8 throughput stops growing at batch size 8"
    assert "163.9 images/s at batch 8 and 170.5 at batch 32: less than 10% more" in (
        flat.explanation
    )
