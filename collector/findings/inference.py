"""The inference rules: detections on an ``InferenceReport``'s values (typed evidence of
defined here), worded by ``collector.findings.base.words`` as the
training rules are (see ``collector.analysis.inference`` for each rule's decision).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from collector.analysis.inference import PRECISIONS, InferenceReport
from collector.findings.base import (
    INFO,
    NO_REPORT_COLUMN,
    WARNING,
    Finding,
    digits,
    evidence_json,
    words,
)
from contract.schema import ExecutionProvider, InferencePrecision
from contract.units import format_fraction, format_points

# inference (collector.analysis.inference)
INT8_TOP1_LOSS_LIMIT = 0.01  # a fraction: one percentage point of top-1


SATURATION_GAIN = 0.10  # a larger batch giving < 10 % more images/s adds nothing


# a measurement to quote: at least 3 s of timed batches (20 batches of one picture, 0.07 s,
# gave INT8 speed-ups of 5.48x and 4.73x on two runs) and p90/p10 of its batches <= 1.5
MIN_TIMED_SECONDS = 3.0


SPREAD_LIMIT = 1.5


# INT8 under FP32's images/s at every batch size measured: no speed-up to quote
INT8_NO_FASTER = 1.0


@dataclass(frozen=True)
class Int8AccuracyLoss:
    """INT8 top-1 more than ``INT8_TOP1_LOSS_LIMIT`` below FP32's (top-1 as fractions)."""

    fp32_top1: float
    int8_top1: float
    top1_loss: float  # fp32 - int8


@dataclass(frozen=True)
class ThroughputSaturated:
    """From ``batch_size`` on, no larger batch size of ``precision`` gave
    ``SATURATION_GAIN`` more images/s."""

    precision: str
    batch_size: int
    images_per_second: float
    largest_batch_size: int
    largest_images_per_second: float
    execution_provider: str = ""  # whose compute is full: a GPU's, or the node's CPUs


@dataclass(frozen=True)
class Int8Slower:
    """INT8 below ``INT8_NO_FASTER`` x FP32's images/s at every batch size both were
    measured at, on ``execution_provider`` with INT8 encoded as ``int8_format``."""

    execution_provider: str
    int8_format: str
    speedups: dict[int, float] = field(metadata=digits(3))  # batch size -> int8 / fp32
    threshold: float = INT8_NO_FASTER


@dataclass(frozen=True)
class TimingUnsteady:
    """A measurement timed for under ``MIN_TIMED_SECONDS``, or whose batches' p90/p10 is
    over ``SPREAD_LIMIT``; ``int8_speedup`` is the speed-up at its batch size resting on it
    (None where one precision only was measured)."""

    precision: str
    batch_size: int
    timed_seconds: float
    timed_batches: int | None = field(metadata={"if_known": True})
    latency_spread: float | None = field(metadata=digits(3) | {"if_known": True})
    int8_speedup: float | None = field(metadata=digits(3) | {"if_known": True})
    too_short: bool
    too_spread: bool
    min_timed_seconds: float = MIN_TIMED_SECONDS
    spread_limit: float = SPREAD_LIMIT


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
    """Each rule's evidence worded (``collector.findings.base.words``), in rule order."""
    return [words(found) for detect in INFERENCE_DETECTORS.values() for found in detect(report)]


@words.register
def word_int8_accuracy_loss(found: Int8AccuracyLoss) -> Finding:
    return Finding(
        rule="int8_accuracy_loss",
        severity=WARNING,
        title=f"INT8 loses {format_points(found.top1_loss).lstrip('+')} of top-1",
        explanation=(
            f"Top-1 fell from {format_fraction(found.fp32_top1)} in FP32 to "
            f"{format_fraction(found.int8_top1)} in INT8, more than the "
            f"{format_points(INT8_TOP1_LOSS_LIMIT).lstrip('+')} this check "
            "allows (the study's TensorRT INT8 lost at most 0.18). Calibrate on more "
            "training pictures, ones like those served, or keep the layers that "
            "lose most in FP32."
        ),
        evidence=evidence_json(found),
        chart=NO_REPORT_COLUMN,
    )


# why INT8 gains nothing, by the ONNX Runtime execution provider that ran it
INT8_SLOWER_WHY = {
    ExecutionProvider.CUDA: (
        "ONNX Runtime's CUDA provider has no fused INT8 convolution for a QDQ model: it runs"
        " the QuantizeLinear and DequantizeLinear nodes around FP32 convolutions, which only"
        " adds work (on an H200: 0.62-0.73x). INT8 on a GPU's tensor cores is TensorRT's:"
        " install TensorRT so that ONNX Runtime's TensorRT provider loads (the study's 3.7x"
        " on a V100 was TensorRT's), or serve FP16"
    ),
    ExecutionProvider.TENSORRT: (
        "TensorRT built the engine, so it kept higher-precision kernels for the quantised"
        " layers or the batches were too small to fill the tensor cores; TensorRT's verbose"
        " log names each layer's precision"
    ),
    ExecutionProvider.CPU: (
        "On a CPU, INT8 pays through its integer dot products (AVX-512 VNNI or AVX-VNNI:"
        " vpdpbusd); without them the quantise and dequantise work costs more than the"
        " integer kernels save. Try the other encoding (`--int8-format qoperator` or `qdq`)"
        " or keep FP32 on this CPU"
    ),
}


@words.register
def word_int8_slower(found: Int8Slower) -> Finding:
    by_batch = ", ".join(f"{x:.2f}x at batch {b}" for b, x in sorted(found.speedups.items()))
    why = INT8_SLOWER_WHY.get(
        found.execution_provider,
        f"{found.execution_provider} ran both precisions; its INT8 kernels did not pay for"
        " the quantise and dequantise work",
    )
    return Finding(
        rule="int8_slower",
        severity=WARNING,
        title=f"INT8 is slower than FP32 on {found.execution_provider}",
        explanation=(
            f"INT8 ({found.int8_format.upper()}) ran at {by_batch} of FP32's images/s. {why}."
        ),
        evidence=evidence_json(found),
        chart=NO_REPORT_COLUMN,
    )


@words.register
def word_throughput_saturated(found: ThroughputSaturated) -> Finding:
    precision = found.precision.upper()
    return Finding(
        rule="throughput_saturated",
        severity=INFO,
        title=f"{precision} throughput stops growing at batch size {found.batch_size}",
        explanation=(
            f"{precision} runs {found.images_per_second:.1f} images/s at batch "
            f"{found.batch_size} and {found.largest_images_per_second:.1f} at batch "
            f"{found.largest_batch_size}: less than {format_fraction(SATURATION_GAIN)} more. "
            f"{'The GPU' if found.execution_provider in ExecutionProvider.GPU else 'The node'}'s"
            " compute is full; larger batches only add latency."
        ),
        evidence=evidence_json(found),
        chart=NO_REPORT_COLUMN,
    )


@words.register
def word_timing_unsteady(found: TimingUnsteady) -> Finding:
    precision = found.precision.upper()
    batches = "" if found.timed_batches is None else f" over {found.timed_batches} batches"
    reasons = []
    if found.too_short:
        reasons.append(
            f"was timed for {found.timed_seconds:.3g} s{batches}, under the "
            f"{MIN_TIMED_SECONDS:g} s this check asks"
        )
    if found.too_spread and found.latency_spread is not None:
        reasons.append(f"its batches' p90/p10 is {found.latency_spread:.2f}, over {SPREAD_LIMIT:g}")
    what = (
        f"the INT8 speed-up at batch {found.batch_size} ({found.int8_speedup:.2f}x)"
        if found.int8_speedup is not None
        else f"its images/s at batch {found.batch_size}"
    )
    trouble = (
        "too little time" if found.too_short and not found.too_spread
        else "too wide a spread" if not found.too_short
        else "too little time, too widely spread"
    )  # fmt: skip
    return Finding(
        rule="timing_unsteady",
        severity=WARNING,
        title=f"{precision} at batch size {found.batch_size} rests on {trouble} to quote",
        explanation=(
            f"{precision} at batch {found.batch_size} {' and '.join(reasons)}, so "
            f"{what} moves from one run to the next (twenty batches of one picture gave "
            "5.48x and 4.73x on two runs of the same models). Time it longer "
            f"(`workloads infer --min-seconds {MIN_TIMED_SECONDS:g}` or more) on a node "
            "nothing else loads."
        ),
        evidence=evidence_json(found),
        chart=NO_REPORT_COLUMN,
    )
