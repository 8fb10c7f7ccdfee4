"""``collector jobs`` and ``collector job JOBID``: the Slurm jobs the agents saw.

``jobs``            every job, newest first (by its first sample), one row each: the numbers
                    of ``collector.analysis.jobs`` (which defines each), as a table, CSV or
                    JSON (a list of ``JOB_KEYS`` dicts).
``job JOBID``       that job per node, the other jobs beside it, its findings
                    (``collector.findings.jobs``) and its runs, each with its per-epoch
                    table and findings. JSON: ``{"job", "nodes", "neighbours", "findings",
                    "runs": [{"run_id", "rows", "findings"}]}``; CSV: the node rows.
``job JOBID --summary``
                    a compact JSON object (``job_summary``, a few KB at most) a Slurm
                    epilog can store in the job's ``AdminComment`` (docs/slurm.md).

The dashboard's Jobs pages read ``jobs_rows`` and ``job_view``, the same dicts.
"""

from __future__ import annotations

import argparse
import json
import threading
import weakref
from typing import Any

from collector.analysis.epochs import iso_utc
from collector.analysis.jobs import (
    IO_FIELDS,
    JobNode,
    JobReport,
    KeptNodes,
    job_report,
    job_reports,
)
from collector.store.api import ReadStore
from collector.views.errors import CliError
from collector.views.output import (
    console_for,
    print_findings,
    print_table,
    report_table,
    shown_plain,
    shown_text,
    write_csv,
    write_json,
)
from contract.units import (
    MISSING,
    format_clock_duration,
    format_fraction,
    format_number,
    human_bytes,
)

# the keys of a job's row (``collector jobs``), in order
JOB_KEYS = (
    "job_id",
    "user",
    "account",
    "partition",
    "nodes",
    "start",
    "end",
    "elapsed_seconds",
    "cpu_seconds",
    "allocated_cpus",
    "allocated_cpu_seconds",
    "cpu_efficiency",
    "memory_peak_bytes",
    "allocated_memory_bytes",
    "memory_use_fraction",
    *IO_FIELDS,
    "allocated_gpus",
    "gpus",
    "gpu_util_percent",
    "gpu_memory_peak_bytes",
    "gpu_process_sm_percent",
    "runs",
)
NODE_KEYS = (
    "job_id",
    "host",
    "user",
    "uid",
    "account",
    "partition",
    "start",
    "end",
    "samples",
    "interval_seconds",
    "elapsed_seconds",
    "cpu_seconds",
    "allocated_cpus",
    "allocated_cpu_seconds",
    "cpu_efficiency",
    "memory_peak_bytes",
    "allocated_memory_bytes",
    "memory_use_fraction",
    *IO_FIELDS,
    "allocated_gpus",
    "gpus",
    "gpu_util_percent",
    "gpus_without_process",
    "gpu_memory_peak_bytes",
    "gpu_process_sm_percent",
)
# the summary stays well under Slurm's field sizes: at most this many nodes and runs named
SUMMARY_MAX_NAMES = 32


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(float(value), digits)


def job_row(report: JobReport) -> dict[str, Any]:
    """A job as ``collector jobs`` JSON gives it (values unrounded but for float noise)."""
    gpus = [g for node in report.nodes for g in node.gpus]
    return {
        "job_id": report.job_id,
        "user": report.user,
        "account": report.account,
        "partition": report.partition,
        "nodes": list(report.hosts),
        "start": iso_utc(report.first_ns),
        "end": iso_utc(report.last_ns),
        "elapsed_seconds": _round(report.elapsed_seconds, 3),
        "cpu_seconds": _round(report.cpu_seconds, 3),
        "allocated_cpus": report.allocated_cpus,
        "allocated_cpu_seconds": _round(report.allocated_cpu_seconds, 3),
        "cpu_efficiency": _round(report.cpu_efficiency, 4),
        "memory_peak_bytes": report.memory_peak_bytes,
        "allocated_memory_bytes": report.allocated_memory_bytes,
        "memory_use_fraction": _round(report.memory_use_fraction, 4),
        **{name: report.io_bytes(name) for name in IO_FIELDS},
        "allocated_gpus": report.allocated_gpus,
        "gpus": gpus,
        "gpu_util_percent": _round(report.gpu_util_percent, 2),
        "gpu_memory_peak_bytes": report.gpu_memory_peak_bytes,
        "gpu_process_sm_percent": _round(report.gpu_process_sm_percent, 2),
        "runs": list(report.runs),
    }


def node_row(node: JobNode) -> dict[str, Any]:
    return {
        "job_id": node.job_id,
        "host": node.host,
        "user": node.user,
        "uid": node.uid,
        "account": node.account,
        "partition": node.partition,
        "start": iso_utc(node.first_ns),
        "end": iso_utc(node.last_ns),
        "samples": node.samples,
        "interval_seconds": _round(node.interval_seconds, 3),
        "elapsed_seconds": _round(node.elapsed_seconds, 3),
        "cpu_seconds": _round(node.cpu_seconds, 3),
        "allocated_cpus": node.allocated_cpus,
        "allocated_cpu_seconds": _round(node.allocated_cpu_seconds, 3),
        "cpu_efficiency": _round(node.cpu_efficiency, 4),
        "memory_peak_bytes": node.memory_peak_bytes,
        "allocated_memory_bytes": node.allocated_memory_bytes,
        "memory_use_fraction": _round(node.memory_use_fraction, 4),
        **{name: getattr(node, name) for name in IO_FIELDS},
        "allocated_gpus": node.allocated_gpus,
        "gpus": list(node.gpus),
        "gpu_util_percent": _round(node.gpu_util_percent, 2),
        "gpus_without_process": None
        if node.gpus_without_process is None
        else list(node.gpus_without_process),
        "gpu_memory_peak_bytes": node.gpu_memory_peak_bytes,
        "gpu_process_sm_percent": _round(node.gpu_process_sm_percent, 2),
    }


_KEPT: weakref.WeakKeyDictionary[Any, KeptNodes] = weakref.WeakKeyDictionary()
_KEPT_LOCK = threading.Lock()


def kept_nodes(store: ReadStore) -> KeptNodes | None:
    """The finished jobs' nodes kept for ``store`` (one per store object, for as long as
    it lives: the read API's and the dashboard's), or None for a store that cannot be
    referenced weakly."""
    with _KEPT_LOCK:
        try:
            return _KEPT.setdefault(store, KeptNodes())
        except TypeError:
            return None


def jobs_rows(store: ReadStore) -> list[dict[str, Any]]:
    """Every job, newest first (``JOB_KEYS``); a finished job's samples are read once
    per store (``kept_nodes``)."""
    return [job_row(report) for report in job_reports(store, kept_nodes(store))]


def _find_job(store: ReadStore, job_id: str) -> JobReport:
    report = job_report(store, job_id)
    if report is None:
        raise CliError(f"no job {job_id!r} in the store (see `collector jobs`)")
    return report


def job_view(store: ReadStore, job_id: str) -> dict[str, Any] | None:
    """``collector job JOBID --format json``'s object; None for a job no agent sampled."""
    report = job_report(store, job_id)
    return None if report is None else _job_view(store, report)


def _job_view(store: ReadStore, report: JobReport) -> dict[str, Any]:
    from collector.findings.engine import run_findings
    from collector.findings.jobs import job_findings
    from collector.queries.query import epoch_table

    runs = []
    for run_id in report.runs:
        runs.append(
            {
                "run_id": run_id,
                "rows": epoch_table(store, run_id),
                "findings": [f.to_dict() for f in run_findings(store, run_id)],
            }
        )
    return {
        "job": job_row(report),
        "nodes": [node_row(node) for node in report.nodes],
        "neighbours": [
            {
                "job_id": n.job_id,
                "host": n.host,
                "user": n.user,
                "overlap_seconds": round(n.overlap_seconds, 3),
                "cpu_seconds": _round(n.cpu_seconds, 3),
            }
            for n in report.neighbours
        ],
        "findings": [f.to_dict() for f in job_findings(report)],
        "runs": runs,
    }


def job_summary(store: ReadStore, report: JobReport) -> dict[str, Any]:
    """The job in a few KB: what a Slurm epilog stores in AdminComment."""
    from collector.findings.jobs import job_findings
    from collector.queries.query import runs_summary

    row = job_row(report)
    throughput = {
        s.run_id: s.images_per_second for s in runs_summary(store) if s.run_id in report.runs
    }
    summary: dict[str, Any] = {
        "epochscope": 1,
        **{key: row[key] for key in ("job_id", "user", "account", "partition") if row[key]},
        "nodes": row["nodes"][:SUMMARY_MAX_NAMES],
        "start": row["start"],
        "end": row["end"],
        "elapsed_s": _round(report.elapsed_seconds, 1),
        "cpus": report.allocated_cpus,
        "cpu_s": _round(report.cpu_seconds, 1),
        "cpu_eff": _round(report.cpu_efficiency, 3),
        "mem_peak": report.memory_peak_bytes,
        "mem_limit": report.allocated_memory_bytes,
        "mem_frac": _round(report.memory_use_fraction, 3),
        "io": {
            name.removesuffix("_bytes"): value
            for name in IO_FIELDS
            if (value := report.io_bytes(name)) is not None
        },
        "gpus": report.allocated_gpus,
        "gpu_util": _round(report.gpu_util_percent, 1),
        "gpu_mem_peak": report.gpu_memory_peak_bytes,
        "gpu_sm_own": _round(report.gpu_process_sm_percent, 1),
        "runs": [
            {"run_id": run_id, "images_per_second": _round(throughput.get(run_id), 1)}
            for run_id in report.runs[:SUMMARY_MAX_NAMES]
        ],
        "findings": [
            {"rule": f.rule, "severity": f.severity, "title": f.title} for f in job_findings(report)
        ],
    }
    if len(report.hosts) > SUMMARY_MAX_NAMES:
        summary["nodes_left_out"] = len(report.hosts) - SUMMARY_MAX_NAMES
    if len(report.runs) > SUMMARY_MAX_NAMES:
        summary["runs_left_out"] = len(report.runs) - SUMMARY_MAX_NAMES
    return {
        key: value
        for key, value in summary.items()
        if value is not None and not (isinstance(value, dict | list) and not value)
    }


# --------------------------------------------------------------------------------------
# printing
# --------------------------------------------------------------------------------------


def _bytes(value: float | None) -> str:
    return MISSING if value is None else human_bytes(value)


def _fraction(value: float | None) -> str:
    return MISSING if value is None else format_fraction(value)


def _cpus(value: float | None) -> str:
    return MISSING if value is None else f"{value:g}"


def _io(row: dict[str, Any]) -> str:
    parts = [
        f"{label} {human_bytes(row[name])}"
        for name, label in (
            ("block_read_bytes", "block r"),
            ("block_write_bytes", "block w"),
            ("process_read_bytes", "read"),
            ("process_write_bytes", "write"),
            ("file_refault_bytes", "refaults"),
        )
        if row.get(name) is not None
    ]
    return ", ".join(parts) or MISSING


def _gpus(row: dict[str, Any]) -> str:
    if not row.get("allocated_gpus"):
        return MISSING
    text = f"{row['allocated_gpus']:g}"
    if row.get("gpu_util_percent") is not None:
        text += f" ({row['gpu_util_percent']:.1f}% busy)"
    if row.get("gpu_memory_peak_bytes") is not None:
        text += f", own procs {human_bytes(row['gpu_memory_peak_bytes'])}"
        if row.get("gpu_process_sm_percent") is not None:
            text += f" {row['gpu_process_sm_percent']:.1f}% SM"
    return text


NUMBER_HEADERS = (
    "elapsed",
    "CPUs",
    "CPU s",
    "CPU eff.",
    "mem peak",
    "mem limit",
    "mem use",
    "I/O",
    "GPUs",
)


def _number_cells(row: dict[str, Any]) -> list[str]:
    return [
        format_clock_duration(row["elapsed_seconds"]),
        _cpus(row["allocated_cpus"]),
        format_number(row["cpu_seconds"]),
        _fraction(row["cpu_efficiency"]),
        _bytes(row["memory_peak_bytes"]),
        _bytes(row["allocated_memory_bytes"]),
        _fraction(row["memory_use_fraction"]),
        _io(row),
        _gpus(row),
    ]


def print_jobs(store: ReadStore, args: argparse.Namespace, out) -> int:

    rows = jobs_rows(store)
    if args.format == "json":
        write_json(rows, out)
        return 0
    if args.format == "csv":
        write_csv(rows, JOB_KEYS, out)
        return 0
    from rich.table import Table

    console = console_for(out)
    if not rows:
        console.print("no Slurm jobs seen yet (the agents' jobs sampler reports them)")
        return 0
    table = Table(title="Slurm jobs, newest first (MB = 10^6 bytes)")
    for header in ("job", "user", "account", "partition", "nodes", "start", "end"):
        table.add_column(header, no_wrap=True)
    for header in (*NUMBER_HEADERS, "runs"):
        table.add_column(header, no_wrap=True, justify="left" if header == "runs" else "right")
    for row in rows:
        table.add_row(
            shown_text(row["job_id"]),
            shown_text(row["user"] or MISSING),
            shown_text(row["account"] or MISSING),
            shown_text(row["partition"] or MISSING),
            shown_text(", ".join(row["nodes"])),
            row["start"],
            row["end"],
            *_number_cells(row),
            shown_text(", ".join(row["runs"]) or MISSING),
        )
    print_table(table, console, out, "--format csv")
    return 0


def print_job(store: ReadStore, args: argparse.Namespace, out) -> int:

    report = _find_job(store, args.job_id)
    if getattr(args, "summary", False):
        out.write(json.dumps(job_summary(store, report), separators=(",", ":"), allow_nan=False))
        out.write("\n")
        return 0
    if args.format == "csv":
        write_csv([node_row(node) for node in report.nodes], NODE_KEYS, out)
        return 0
    view = _job_view(store, report)
    if args.format == "json":
        write_json(view, out)
        return 0
    _print_job_table(store, view, out)
    return 0


def _print_job_table(store: ReadStore, view: dict[str, Any], out) -> None:
    from rich.table import Table
    from rich.text import Text

    from collector.findings.base import Finding

    console = console_for(out)
    job = view["job"]
    job_id = shown_plain(job["job_id"])
    who = ", ".join(
        f"{key} {shown_plain(job[key])}" for key in ("user", "account", "partition") if job.get(key)
    )
    heading = Text.assemble((f"job {job_id}", "bold"), f" {who}: {job['start']} → {job['end']}")
    console.print(heading)
    table = Table(title=Text(f"job {job_id} per node (MB = 10^6 bytes)"))
    table.add_column("node", no_wrap=True)
    for header in NUMBER_HEADERS:
        table.add_column(header, no_wrap=True, justify="right")
    for node in view["nodes"]:
        table.add_row(shown_text(node["host"]), *_number_cells(node))
    if len(view["nodes"]) > 1:
        table.add_section()
        table.add_row("all nodes", *_number_cells(job), style="bold")
    print_table(table, console, out, "--format csv, or --format json")
    for near in view["neighbours"]:
        console.print(
            f"beside job {shown_plain(near['job_id'])} "
            f"({shown_plain(near['user'] or 'user unknown')}) on {shown_plain(near['host'])} "
            f"for {near['overlap_seconds']:,.0f} s: it used "
            f"{format_number(near['cpu_seconds'])} CPU seconds meanwhile",
            highlight=False,
            markup=False,
        )
    console.print()
    print_findings([Finding(**f) for f in view["findings"]], console)
    for run in view["runs"]:
        console.print()
        from collector.analysis.epochs import build_report

        rows = build_report(store, run["run_id"]).rows
        if rows:
            console.print(report_table(run["run_id"], rows), no_wrap=True, overflow="ignore")
        else:
            console.print(f"run {shown_plain(run['run_id'])} has no epoch events yet", markup=False)
        print_findings([Finding(**f) for f in run["findings"]], console)
    if not view["runs"]:
        console.print("no run named this job (a rank's run_start names its Slurm job)")
