"""The inference rules detect typed evidence (``collector.findings.inference``) and are worded
by the one wording dispatch (``collector.findings.base.words``), as the training rules are.

Runs are written as ``workloads infer`` writes them and read back from a real SQLite store
(``tests.unit.test_inference_views.report_of``); the rendered findings themselves are asserted
there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collector.findings.base import NO_REPORT_COLUMN, evidence_json, words
from collector.findings.inference import (
    INFERENCE_DETECTORS,
    INT8_TOP1_LOSS_LIMIT,
    MIN_TIMED_SECONDS,
    SPREAD_LIMIT,
    Int8AccuracyLoss,
    ThroughputSaturated,
    TimingUnsteady,
    detect_int8_accuracy_loss,
    detect_int8_slower,
    detect_throughput_saturated,
    detect_timing_unsteady,
)
from collector.queries.inference import inference_report
from collector.store import SqliteStore
from contract.schema import INFERENCE_FRAMEWORK
from tests.unit.test_inference_views import report_of
from workloads.record.events import EventWriter, MemorySink

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
        ThroughputSaturated("fp32", 8, 100.0, 32, 104.0, "CPUExecutionProvider"),
        ThroughputSaturated("int8", 1, 100.0, 32, 103.0, "CPUExecutionProvider"),
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


# --- timing_unsteady: a speed-up resting on too little time or too wide a spread ---------

SPEEDUP_RATES = {("fp32", 1): 20.0, ("int8", 1): 100.0, ("fp32", 8): 40.0, ("int8", 8): 200.0}
STEADY = {"fp32": 0.75, "int8": 0.75}


def unsteady(report):
    return [f for f in report.findings if f.rule == "timing_unsteady"]


def test_a_speed_up_timed_long_enough_and_steady_is_quoted(tmp_path):
    report = report_of(tmp_path, SPEEDUP_RATES, STEADY, spread=SPREAD_LIMIT)  # at the limit
    assert detect_timing_unsteady(report) == [] and unsteady(report) == []


def test_twenty_batches_of_one_picture_are_too_little_time(tmp_path):
    # the run: INT8 batch 1, 20 batches at ~280 images/s: 0.072 s timed
    rates = {("fp32", 1): 51.0, ("int8", 1): 280.0, ("fp32", 8): 60.0, ("int8", 8): 300.0}
    batches = {(1, 51.0): 200, (1, 280.0): 20, (8, 60.0): 50, (8, 300.0): 150}
    report = report_of(tmp_path, rates, STEADY, batches=lambda b, r: batches[(b, r)])
    found = detect_timing_unsteady(report)
    assert found == [
        TimingUnsteady("int8", 1, approx(20 / 280.0), 20, approx(1.2), approx(280 / 51),
                       too_short=True, too_spread=False)
    ]  # fmt: skip
    assert found[0].timed_seconds < MIN_TIMED_SECONDS
    (finding,) = unsteady(report)
    assert finding.severity == "warning"
    assert finding.title == "INT8 at batch size 1 rests on too little time to quote"
    assert "INT8 at batch 1 was timed for 0.0714 s over 20 batches, under the 3 s" in (
        finding.explanation
    )
    assert "the INT8 speed-up at batch 1 (5.49x)" in finding.explanation
    assert finding.evidence["timed_batches"] == 20 and finding.evidence["too_short"] is True


@pytest.mark.parametrize(
    ("spread", "fires"), [(1.2, False), (SPREAD_LIMIT, False), (SPREAD_LIMIT * 1.01, True)]
)
def test_too_wide_a_spread(tmp_path, spread, fires):
    spreads = {key: 1.1 for key in SPEEDUP_RATES} | {("fp32", 8): spread}
    report = report_of(tmp_path, SPEEDUP_RATES, STEADY, spread=spreads)
    found = unsteady(report)
    if not fires:
        assert found == []
        return
    (finding,) = found
    assert finding.evidence["precision"] == "fp32" and finding.evidence["batch_size"] == 8
    assert finding.evidence["latency_spread"] == round(spread, 3)
    assert finding.evidence["int8_speedup"] == 5.0
    assert finding.title == "FP32 at batch size 8 rests on too wide a spread to quote"
    assert f"its batches' p90/p10 is {spread:.2f}, over 1.5" in finding.explanation


def test_one_precision_only_names_its_images_per_second(tmp_path):
    report = report_of(tmp_path, {("fp32", 4): 100.0}, STEADY,
                       batches=lambda b, r: 10, spread=2.0)  # fmt: skip
    (finding,) = unsteady(report)
    assert "int8_speedup" not in finding.evidence
    assert finding.title == (
        "FP32 at batch size 4 rests on too little time, too widely spread to quote"
    )
    assert "its images/s at batch 4" in finding.explanation


RECORDED_H200 = Path(__file__).parents[1] / "support" / "recorded" / "h200-infer-2026-11-28.json"


def recorded_report(tmp_path, path: Path = RECORDED_H200):
    """A recorded run's events (as its collector stored them, at their own times) written
    again through the workloads' event writer into a fresh store, and its report read."""
    recorded = json.loads(path.read_text())
    events = recorded["events"]
    times = iter(event["time_ns"] for event in events)
    sink = MemorySink()
    writer = EventWriter(sink, recorded["run_id"], 0, INFERENCE_FRAMEWORK,
                         host=events[0]["host"], clock_ns=lambda: next(times))  # fmt: skip
    for event in events:
        writer.emit(event["event"], event["fields"])
    store = SqliteStore(tmp_path / "recorded.sqlite")
    try:
        store.write_points(sink.points)
        return inference_report(store, recorded["run_id"])
    finally:
        store.close()


def test_int8_slower_on_the_cuda_provider_of_a_real_h200(tmp_path):
    """Recorded on a lent H200 (bench/gpu_check/results/h200-2026-11-28.md): ONNX
    Runtime's CUDA provider ran the QDQ model at 0.53-0.73x FP32's images/s."""
    report = recorded_report(tmp_path)
    assert report.execution_provider == "CUDAExecutionProvider"
    speedups = {1: 0.528, 32: 0.714, 128: 0.731}
    (found,) = detect_int8_slower(report)
    assert (found.execution_provider, found.int8_format) == ("CUDAExecutionProvider", "qdq")
    assert found.speedups == {b: approx(x, abs=1e-3) for b, x in speedups.items()}
    (finding,) = [f for f in report.findings if f.rule == "int8_slower"]
    assert finding.title == "INT8 is slower than FP32 on CUDAExecutionProvider"
    assert "0.53x at batch 1, 0.71x at batch 32, 0.73x at batch 128" in finding.explanation
    assert "no fused INT8 convolution for a QDQ model" in finding.explanation
    assert "TensorRT" in finding.explanation


@pytest.mark.parametrize(
    ("int8_rates", "fires"),
    [
        ((40.0, 90.0), True),  # slower at both batch sizes
        ((40.0, 110.0), False),  # faster at one: a speed-up to quote there
        ((60.0, 100.0), False),  # as fast at batch 8 (1.0x) is not slower
    ],
)
def test_int8_slower_needs_every_batch_size_slower(tmp_path, int8_rates, fires):
    rates = {("fp32", 1): 50.0, ("fp32", 8): 100.0}
    rates |= {("int8", 1): int8_rates[0], ("int8", 8): int8_rates[1]}
    report = report_of(tmp_path, rates, {"fp32": 0.75, "int8": 0.75})
    found = detect_int8_slower(report)
    assert bool(found) is fires
    if fires:  # worded by the provider that ran it (these runs': the CPU's)
        (finding,) = [f for f in report.findings if f.rule == "int8_slower"]
        assert "integer dot products (AVX-512 VNNI or AVX-VNNI" in finding.explanation


def test_whose_compute_is_full_follows_the_provider():
    on_gpu = words(ThroughputSaturated("fp32", 32, 3282.6, 128, 3608.5, "CUDAExecutionProvider"))
    assert "The GPU's compute is full" in on_gpu.explanation  # the second H200 run's
    on_cpu = words(ThroughputSaturated("fp32", 8, 30.5, 32, 29.2, "CPUExecutionProvider"))
    assert "The node's compute is full" in on_cpu.explanation
