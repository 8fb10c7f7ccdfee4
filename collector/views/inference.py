"""The inference report as people read it: ``collector inference``'s table and JSON, made
from the one ``InferenceReport`` (``collector.analysis.inference``)."""

from __future__ import annotations

import argparse
import json

from collector.analysis.inference import InferenceReport, inference_runs
from collector.queries.inference import inference_report
from collector.store.api import ReadStore
from collector.views.errors import CliError
from collector.views.output import shown_plain
from contract import units
from contract.schema import InferencePrecision
from contract.units import format_fraction


def _fixed(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_rate(value: float | None) -> str:
    return _fixed(value, 1)


def format_speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def format_top1(value: float | None) -> str:
    return "-" if value is None else format_fraction(value)


def format_points(value: float | None) -> str:
    return "-" if value is None else units.format_points(value)


def format_milliseconds(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def format_spread(value: float | None) -> str:
    return _fixed(value, 2)


def format_timed(seconds: float, batches: int | None) -> str:
    return f"{seconds:.2f} s" + ("" if batches is None else f" / {batches}")


def format_report(report: InferenceReport) -> str:
    """The plain-text table ``collector inference`` prints."""
    lines = [
        f"run {shown_plain(report.run_id)}: {shown_plain(report.model)} inference "
        f"({shown_plain(report.state)}), "
        f"{shown_plain(report.execution_provider or 'provider unknown')}, INT8 as "
        f"{shown_plain(report.int8_format or '-')}, {shown_plain(report.image_size or '?')} px, "
        f"weights: {shown_plain(report.weights or '?')}",
        "",
        f"{'batch':>5}  {'FP32 img/s':>10}  {'INT8 img/s':>10}  {'INT8 speed-up':>13}",
    ]
    for row in report.comparisons:
        lines.append(
            f"{row.batch_size:>5}  {format_rate(row.fp32_images_per_second):>10}  "
            f"{format_rate(row.int8_images_per_second):>10}  "
            f"{format_speedup(row.int8_speedup):>13}"
        )
    lines += [
        "",
        f"{'batch':>5}  {'precision':<9}  {'p10 ms':>8}  {'p50 ms':>8}  {'p90 ms':>8}  "
        f"{'p99 ms':>8}  {'p90/p10':>7}  timed s / batches",
    ]
    for m in report.measurements:
        lines.append(
            f"{m.batch_size:>5}  {shown_plain(m.precision):<9}"
            f"  {format_milliseconds(m.latency_p10_seconds):>8}"
            f"  {format_milliseconds(m.latency_p50_seconds):>8}"
            f"  {format_milliseconds(m.latency_p90_seconds):>8}"
            f"  {format_milliseconds(m.latency_p99_seconds):>8}"
            f"  {format_spread(m.latency_spread):>7}"
            f"  {format_timed(m.timed_seconds, m.timed_batches)}"
        )
    lines += [
        "",
        f"top-1 on {shown_plain(report.validation_images or '?')} validation images: FP32 "
        f"{format_top1(report.top1.get(InferencePrecision.FP32))}, INT8 "
        f"{format_top1(report.top1.get(InferencePrecision.INT8))}, INT8 - FP32 "
        f"{format_points(report.top1_difference)}",
        "",
    ]
    if not report.findings:
        lines.append("No findings.")
    for finding in report.findings:
        lines.append(f"{finding.severity.upper()} {finding.title}")
        lines.append(f"  {finding.explanation}")
    return "\n".join(lines) + "\n"


def print_inference(store: ReadStore, args: argparse.Namespace, out) -> int:
    """``collector inference [RUN] [--format table|json]``: the newest inference run when
    no RUN is given."""
    run_id = args.run_id
    if run_id is None:
        runs = inference_runs(store)
        if not runs:
            raise CliError("no inference run in the store (make one with `workloads infer`)")
        run_id = runs[0].run_id
    report = inference_report(store, run_id)
    if report is None:
        known = store.run(run_id) is not None
        raise CliError(
            f"run {run_id!r} is a training run, not an inference run (see `collector report`)"
            if known
            else f"no run {run_id!r} in the store (see `collector runs`)"
        )
    if args.format == "json":
        out.write(json.dumps(report.to_json(), indent=2) + "\n")
    else:
        out.write(format_report(report))
    return 0
