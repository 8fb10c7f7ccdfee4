"""Inference runs (``workloads infer``): FP32 against INT8 per batch size, and its findings.

One computation, every view: ``inference_report`` turns a run's ``inference`` events into
an ``InferenceReport``; ``collector inference`` (table and JSON), the read API
(``GET /api/v1/inference``) and the dashboard's inference page all show that object's
values. The JSON keeps full precision; tables round.

Definitions (each computed here and nowhere else):

- images/s of a precision at a batch size: ``contract.throughput.rank_images_per_second`` of
  the event's ``timed_images`` over ``timed_seconds`` (the timed batches; warm-up out), the
  training rule;
- INT8 speed-up at a batch size: INT8 images/s over FP32 images/s at that batch size;
- top-1 kept: INT8 top-1 minus FP32 top-1 on the same validation pictures (negative: INT8
  lost accuracy), a fraction (tables print it in percentage points);
- the spread of a measurement: p90 / p10 of its timed batches' latencies (the event's
  ``latency_spread``, else computed from its ``latency_p90_seconds`` and
  ``latency_p10_seconds``; None for runs that recorded neither).

Findings (each a detection returning typed evidence, ``collector.findings.inference``,
worded by ``collector.findings.base.words`` as the training rules are; an inference run
has no epochs, so no per-epoch report column is their chart: the dashboard's inference page
points them at its images/s-by-batch-size figure):

``int8_accuracy_loss``
    INT8 top-1 is more than ``INT8_TOP1_LOSS_LIMIT`` below FP32's. One percentage point:
    the study's TensorRT INT8 lost 0.02 to 0.18 points on seven ImageNet networks, so a
    loss five times the worst of those says the calibration (too few or unlike pictures,
    MinMax ranges stretched by outliers) or an operator's quantisation went wrong.
``int8_slower``
    INT8 under ``INT8_NO_FASTER`` x FP32's images/s at every batch size both were measured
    at: no speed-up to quote. Worded by the provider that ran it: ONNX Runtime's CUDA
    provider runs a QDQ model's quantise and dequantise nodes around FP32 convolutions
    (an H200: 0.62-0.73x), INT8 on tensor cores is TensorRT's; a CPU without integer
    dot-product instructions (VNNI) gains least.
``throughput_saturated``
    For a precision, from some batch size on, no larger batch size measured gives more
    than ``SATURATION_GAIN`` more images/s than it: the node's compute is full, larger
    batches only add latency. Needs at least one larger batch size measured above it.
``timing_unsteady``
    A measurement's images/s (and the INT8 speed-up made of it) rests on under
    ``MIN_TIMED_SECONDS`` of timed batches, or its batches' spread p90/p10 is over
    ``SPREAD_LIMIT``: twenty batches of one picture (0.07 s) gave speed-ups of 5.48x and
    4.73x on two runs of the same models; such a number is not one to quote.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from collector.store.api import ReadStore, RunInfo, WorkloadEvent, event_number
from contract.schema import INFERENCE_FRAMEWORK, Event, InferencePrecision, Workload
from contract.throughput import TimedWork, rank_images_per_second

if TYPE_CHECKING:  # the findings are attached by collector.views.inference
    from collector.findings.base import Finding

PRECISIONS = InferencePrecision.ALL


@dataclass(frozen=True)
class Measurement:
    """One precision at one batch size."""

    precision: str
    batch_size: int
    images_per_second: float | None
    timed_images: float
    timed_seconds: float
    latency_p10_seconds: float | None
    latency_p50_seconds: float | None
    latency_p90_seconds: float | None
    latency_p99_seconds: float | None
    top1: float | None
    timed_batches: int | None = None
    latency_spread: float | None = None  # p90 / p10 of the timed batches' latencies


@dataclass(frozen=True)
class BatchComparison:
    """FP32 and INT8 at one batch size."""

    batch_size: int
    fp32_images_per_second: float | None
    int8_images_per_second: float | None
    int8_speedup: float | None  # int8 / fp32 images/s


@dataclass(frozen=True)
class InferenceReport:
    run_id: str
    model: str
    state: str
    execution_provider: str
    int8_format: str
    weights: str
    image_size: int | None
    validation_images: int | None
    calibration_images: int | None
    measurements: tuple[Measurement, ...]
    comparisons: tuple[BatchComparison, ...]
    top1: dict[str, float | None]  # precision -> top-1 on the validation split
    top1_difference: float | None  # int8 - fp32
    findings: tuple[Finding, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["findings"] = [finding.to_dict() for finding in self.findings]
        return data


def int8_speedup(fp32: float | None, int8: float | None) -> float | None:
    if fp32 is None or int8 is None or fp32 <= 0:
        return None
    return int8 / fp32


def top1_difference(top1: dict[str, float | None]) -> float | None:
    fp32, int8 = top1.get(InferencePrecision.FP32), top1.get(InferencePrecision.INT8)
    if fp32 is None or int8 is None:
        return None
    return int8 - fp32


def latency_spread(recorded: float | None, p10: float | None, p90: float | None) -> float | None:
    """The recorded p90 / p10, else the one made of the recorded percentiles."""
    if recorded is not None:
        return recorded
    if p10 is None or p90 is None or p10 <= 0:
        return None
    return p90 / p10


def _text(event: WorkloadEvent, name: str) -> str:
    value = event.fields.get(name)
    return value if isinstance(value, str) else ""


def measurement_of(event: WorkloadEvent) -> Measurement | None:
    """An ``inference`` event as a measurement; None when it lacks precision or batch size."""
    precision = _text(event, Workload.PRECISION)
    batch_size = event_number(event, Workload.BATCH_SIZE)
    if not precision or batch_size is None:
        return None
    images = event_number(event, Workload.TIMED_IMAGES) or 0.0
    seconds = event_number(event, Workload.TIMED_SECONDS) or 0.0
    p10 = event_number(event, Workload.LATENCY_P10_SECONDS)
    p90 = event_number(event, Workload.LATENCY_P90_SECONDS)
    batches = event_number(event, Workload.TIMED_BATCHES)
    return Measurement(
        precision=precision,
        batch_size=int(batch_size),
        images_per_second=rank_images_per_second(TimedWork(images, seconds)),
        timed_images=images,
        timed_seconds=seconds,
        latency_p10_seconds=p10,
        latency_p50_seconds=event_number(event, Workload.LATENCY_P50_SECONDS),
        latency_p90_seconds=p90,
        latency_p99_seconds=event_number(event, Workload.LATENCY_P99_SECONDS),
        top1=event_number(event, Workload.TOP1),
        timed_batches=None if batches is None else int(batches),
        latency_spread=latency_spread(event_number(event, Workload.LATENCY_SPREAD), p10, p90),
    )


def build_report(run: RunInfo, events: list[WorkloadEvent]) -> InferenceReport:
    """The report of one inference run from its events (a later measurement of the same
    precision and batch size replaces an earlier one)."""
    latest: dict[tuple[str, int], Measurement] = {}
    for event in events:
        if event.event == Event.INFERENCE and (measured := measurement_of(event)) is not None:
            latest[(measured.precision, measured.batch_size)] = measured
    order = {precision: index for index, precision in enumerate(PRECISIONS)}
    measurements = tuple(
        sorted(latest.values(), key=lambda m: (m.batch_size, order.get(m.precision, 99)))
    )
    comparisons = []
    for batch_size in sorted({m.batch_size for m in measurements}):
        fp32 = latest.get((InferencePrecision.FP32, batch_size))
        int8 = latest.get((InferencePrecision.INT8, batch_size))
        fp32_rate = fp32.images_per_second if fp32 else None
        int8_rate = int8.images_per_second if int8 else None
        comparisons.append(
            BatchComparison(batch_size, fp32_rate, int8_rate, int8_speedup(fp32_rate, int8_rate))
        )
    top1: dict[str, float | None] = {}
    for measured in measurements:  # the same validation pass for every batch size
        if measured.top1 is not None:
            top1[measured.precision] = measured.top1
    config = run.config

    def config_number(name: str) -> int | None:
        value = config.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            return None
        return int(value)

    def config_text(name: str) -> str:
        value = config.get(name)
        return value if isinstance(value, str) else ""

    report = InferenceReport(
        run_id=run.run_id,
        model=run.model,
        state=run.state,
        execution_provider=config_text(Workload.EXECUTION_PROVIDER),
        int8_format=config_text(Workload.INT8_FORMAT),
        weights=config_text(Workload.WEIGHTS),
        image_size=config_number(Workload.IMAGE_SIZE),
        validation_images=config_number(Workload.VALIDATION_IMAGES),
        calibration_images=config_number(Workload.CALIBRATION_IMAGES),
        measurements=measurements,
        comparisons=tuple(comparisons),
        top1=top1,
        top1_difference=top1_difference(top1),
    )
    return report


def is_inference_run(run: RunInfo) -> bool:
    return run.framework == INFERENCE_FRAMEWORK


def inference_runs(store: ReadStore) -> list[RunInfo]:
    """Inference runs, newest first."""
    return [run for run in store.runs() if is_inference_run(run)]
