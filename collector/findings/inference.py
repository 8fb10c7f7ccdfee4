"""The inference rules: detections on an ``InferenceReport``'s values (typed evidence of
``collector.findings.evidence``), worded by ``collector.findings.words.words`` as the
training rules are (see ``collector.analysis.inference`` for each rule's decision)."""

from __future__ import annotations

from collections.abc import Callable

from collector.analysis.inference import PRECISIONS, InferenceReport
from collector.findings.evidence import (
    INT8_NO_FASTER,
    INT8_TOP1_LOSS_LIMIT,
    MIN_TIMED_SECONDS,
    SATURATION_GAIN,
    SPREAD_LIMIT,
    Finding,
    Int8AccuracyLoss,
    Int8Slower,
    ThroughputSaturated,
    TimingUnsteady,
)
from collector.findings.words import words
from contract.schema import InferencePrecision


def detect_int8_accuracy_loss(report: InferenceReport) -> list[Int8AccuracyLoss]:
    if report.top1_difference is None or -report.top1_difference <= INT8_TOP1_LOSS_LIMIT:
        return []
    fp32 = report.top1[InferencePrecision.FP32]
    int8 = report.top1[InferencePrecision.INT8]
    assert fp32 is not None and int8 is not None
    return [Int8AccuracyLoss(fp32, int8, -report.top1_difference)]


def detect_int8_slower(report: InferenceReport) -> list[Int8Slower]:
    """INT8 under ``INT8_NO_FASTER`` x FP32 at every batch size where both were measured."""
    speedups = {
        c.batch_size: c.int8_speedup for c in report.comparisons if c.int8_speedup is not None
    }
    if not speedups or max(speedups.values()) >= INT8_NO_FASTER:
        return []
    return [Int8Slower(report.execution_provider, report.int8_format, speedups)]


def detect_throughput_saturated(report: InferenceReport) -> list[ThroughputSaturated]:
    """One per precision that saturates, at the first batch size it does."""
    found = []
    for precision in PRECISIONS:
        rates = [
            (m.batch_size, m.images_per_second)
            for m in report.measurements
            if m.precision == precision and m.images_per_second is not None
        ]
        for index, (batch_size, rate) in enumerate(rates[:-1]):
            larger = [r for _, r in rates[index + 1 :]]
            if max(larger) < rate * (1 + SATURATION_GAIN):
                last_batch, last_rate = rates[-1]
                found.append(
                    ThroughputSaturated(
                        precision, batch_size, rate, last_batch, last_rate,
                        report.execution_provider,
                    )
                )  # fmt: skip
                break
    return found


def detect_timing_unsteady(report: InferenceReport) -> list[TimingUnsteady]:
    """One per measurement (batch size, then precision) timed for under
    ``MIN_TIMED_SECONDS`` or with its batches' p90/p10 over ``SPREAD_LIMIT``."""
    speedups = {c.batch_size: c.int8_speedup for c in report.comparisons}
    found = []
    for m in report.measurements:
        too_short = m.timed_seconds < MIN_TIMED_SECONDS
        too_spread = m.latency_spread is not None and m.latency_spread > SPREAD_LIMIT
        if too_short or too_spread:
            found.append(
                TimingUnsteady(
                    m.precision,
                    m.batch_size,
                    m.timed_seconds,
                    m.timed_batches,
                    m.latency_spread,
                    speedups.get(m.batch_size),
                    too_short,
                    too_spread,
                )
            )
    return found


InferenceEvidence = Int8AccuracyLoss | Int8Slower | ThroughputSaturated | TimingUnsteady
InferenceDetector = Callable[[InferenceReport], list[InferenceEvidence]]
INFERENCE_DETECTORS: dict[str, InferenceDetector] = {
    "int8_accuracy_loss": detect_int8_accuracy_loss,
    "int8_slower": detect_int8_slower,
    "throughput_saturated": detect_throughput_saturated,
    "timing_unsteady": detect_timing_unsteady,
}


def inference_findings(report: InferenceReport) -> list[Finding]:
    """Each rule's evidence worded (``collector.findings.words.words``), in rule order."""
    return [words(found) for detect in INFERENCE_DETECTORS.values() for found in detect(report)]
