"""``collector report``, ``collector runs`` and ``collector scaling``.

``report RUN_ID``   the per-epoch, per-host table of a run (collector.analysis.epochs), as a rich
                    table, CSV or JSON. JSON is one object whatever the options:
                    ``{"run_id", "rows": [row dicts with exactly the report's columns],
                    "throughput"}``, and ``"findings"`` with ``--findings``. ``--columns``
                    chooses the table's and the CSV's columns (without it the CSV carries
                    every column). ``--findings`` adds the findings: after the table, on
                    stderr for CSV (so the CSV stays clean), in ``"findings"`` for JSON.
``runs``            every run, newest first; JSON keys run_id, framework, model, hosts,
                    world_size, start, end, state.
``scaling``         scaling tables over stored runs (collector.analysis.scaling), or over given
                    numbers with ``--throughput 1:283,4:1099,8:2075 --gpus-per-node 4``.
``hosts``           the hosts the store holds samples or runs of, sorted (JSON: a list of
                    names); the deployment's check that an agent's first push arrived.

``--collector URL [--token-file F]`` asks a collector anywhere for the same view (its read
API, collector.api.client) instead of reading ``--db`` here; the output is the same.

Exit status: 0 on success, 1 when the run or the store is not there, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from collector.analysis.epochs import COLUMNS, build_report, iso_utc
from collector.analysis.throughput import rank_epoch_work, run_throughput
from collector.store.api import ReadStore, RunInfo
from collector.views.errors import CliError
from collector.views.output import (
    DEFAULT_COLUMNS,
    console_for,
    print_findings,
    print_table,
    report_table,
    shown_plain,
    shown_text,
    table_columns,
    terminal_width,
    write_csv,
    write_findings,
    write_json,
)
from contract.text import visible
from contract.units import format_clock_duration, format_fraction, format_number

_console = console_for  # (the name tests and older callers use)

RUNS_KEYS = (
    "run_id",
    "framework",
    "model",
    "hosts",
    "world_size",
    "images_per_second",
    "startup_seconds",
    "start",
    "end",
    "state",
)


STORES_NAMED = 3  # at most this many of the run files beside a missing store are named


def missing_store_hint(path: Path, args: argparse.Namespace) -> str:
    """What to do when ``--db`` names no file: the SQLite files beside it (where `workloads
    run` and `make demo` keep each run's store, ``runs/RUN_ID.sqlite``), the run's own
    first, then the newest; with none, start a collector or ask one elsewhere."""
    run_id = getattr(args, "run_id", None)
    found = sorted(
        (candidate for candidate in path.parent.glob("*.sqlite") if candidate.is_file()),
        key=lambda candidate: candidate.stat().st_mtime,
        reverse=True,
    )
    if isinstance(run_id, str):
        found.sort(key=lambda candidate: candidate.stem != run_id)  # stable: newest next
    if found:
        named = ", ".join(str(candidate) for candidate in found[:STORES_NAMED])
        more = f" and {len(found) - STORES_NAMED} more" if len(found) > STORES_NAMED else ""
        return (
            f"`workloads run` keeps each run in its own file: give --db {found[0]}"
            f"; stores here, newest first: {named}{more}"
        )
    return (
        f"start `collector serve --db {path}` first, or ask a collector elsewhere with "
        "--collector URL --token-file FILE"
    )


def open_store(args: argparse.Namespace) -> ReadStore:
    """The SQLite file at ``--db``, or the store named by ``--backend`` (samples from it,
    runs and events from the ``--db`` file, where ``collector serve`` keeps them)."""
    backend = getattr(args, "backend", None)
    if backend:
        from collector.store.backends import (
            BackendSpecError,
            open_backend_store,
            parse_backend_spec,
        )

        try:
            spec = parse_backend_spec(backend, auth_file=getattr(args, "backend_auth_file", None))
        except BackendSpecError as error:
            raise CliError(f"--backend {error}", 2) from None
        events = Path(args.db)
        if not events.is_file():
            raise CliError(
                f"no store at {events}: with --backend the runs and their events still come "
                "from the SQLite file of `collector serve` (give --db)"
            )
        return open_backend_store(spec, events)
    path = Path(args.db)
    if not path.is_file():
        raise CliError(f"no store at {path} ({missing_store_hint(path, args)})")
    from collector.store import SqliteStore

    store = SqliteStore(path)
    elsewhere = store.samples_backend()
    if elsewhere is not None:
        kind = elsewhere.partition("=")[0]
        print(
            f"collector {args.command}: {path} holds runs and events only: its collector "
            f"keeps the node samples in {kind}, so node columns read '–' without "
            f"--backend {elsewhere}",
            file=sys.stderr,
        )
    return store


def _find_run(store: ReadStore, run_id: str) -> RunInfo:
    run = store.run(run_id)
    if run is None:
        raise CliError(f"no run {run_id!r} in the store (see `collector runs`)")
    return run


def print_report(store: ReadStore, args: argparse.Namespace, out, err=None) -> int:
    """``collector report``; ``err`` takes what goes beside a CSV (its findings), stderr
    unless given (the read API gives its own buffer: a server prints nothing)."""
    _find_run(store, args.run_id)  # a run not there: CliError, before any work
    report = build_report(store, args.run_id)
    findings = None
    otlp_endpoint = getattr(args, "otlp_endpoint", None)  # the read API has no such option
    if args.findings or otlp_endpoint:
        from collector.findings.engine import (
            run_findings,  # only then: it imports the scaling rules
        )

        findings = run_findings(store, args.run_id, report)
    choice = getattr(args, "columns", None)
    if args.format == "json":
        rows = [row.to_dict() for row in report.rows]
        document: dict[str, Any] = {
            "run_id": args.run_id,
            "rows": rows,
            "throughput": asdict(run_throughput(rank_epoch_work(report.model))),
        }
        if findings is not None and args.findings:
            document["findings"] = [f.to_dict() for f in findings]
        write_json(document, out)
    elif args.format == "csv":
        names = COLUMNS if choice is None else [c.name for c in table_columns(report.rows, choice)]
        write_csv([row.to_dict() for row in report.rows], names, out)
        if findings is not None and args.findings:
            write_findings(findings, sys.stderr if err is None else err)
    else:
        console = console_for(out)
        if not report.rows:
            console.print(f"run {shown_plain(args.run_id)} has no epoch events yet", markup=False)
        else:
            # a terminal without --columns: the columns that fit it; files and pipes: all
            width = terminal_width(out) if choice is None else None
            table = report_table(args.run_id, report.rows, choice or DEFAULT_COLUMNS, width)
            console.print(table, no_wrap=True, overflow="ignore", crop=False)
        if findings is not None and args.findings:
            console.print()
            print_findings(findings, console)
    if otlp_endpoint and findings is not None:
        _send_findings(store, args, findings)
    return 0


def _send_findings(store: ReadStore, args: argparse.Namespace, findings: list) -> None:
    """``--otlp-endpoint``: the findings as OTLP log records (collector.export.otlp)."""
    from collector.export.otlp import logs_url, send_findings
    from netserve.otlp import OtlpHeadersError, read_headers_file

    headers: dict[str, str] = {}
    if getattr(args, "otlp_headers_file", None):
        try:
            headers = read_headers_file(Path(args.otlp_headers_file))
        except OtlpHeadersError as error:
            raise CliError(f"--otlp-headers-file {error}", 2) from None
    run = _find_run(store, args.run_id)
    url = logs_url(args.otlp_endpoint)
    outcome = send_findings(url, findings, args.run_id, run.end_ns or run.start_ns, headers)
    if not outcome.delivered:
        answer = f"HTTP {outcome.status}" if outcome.status else "no answer"
        raise CliError(
            f"sending {len(findings)} findings to {url} failed ({answer}: {outcome.message})"
        )
    print(f"collector report: sent {len(findings)} findings to {url}", file=sys.stderr)


# --------------------------------------------------------------------------------------
# runs
# --------------------------------------------------------------------------------------


def _iso(time_ns: int | None) -> str | None:
    return None if time_ns is None else iso_utc(time_ns)


def runs_rows(store: ReadStore) -> list[dict[str, Any]]:
    """Every run, newest first, with its throughput (``collector.analysis.throughput``, the figure
    of the dashboard's runs list and of ``collector scaling``)."""
    from collector.queries.query import runs_summary

    return [
        {
            "run_id": r.run_id,
            "framework": r.framework,
            "model": r.model,
            "hosts": list(r.host_names),
            "world_size": r.gpus,
            "images_per_second": r.images_per_second,
            "startup_seconds": r.startup_seconds,
            "start": _iso(r.start_ns),
            "end": _iso(r.end_ns),
            "state": r.state,
        }
        for r in runs_summary(store)
    ]


def print_runs(store: ReadStore, args: argparse.Namespace, out) -> int:
    rows = runs_rows(store)
    if args.format == "json":
        write_json(rows, out)
        return 0
    from rich.table import Table

    table = Table(title="runs, newest first")
    for key in RUNS_KEYS:
        table.add_column(key, no_wrap=True)
    for row in rows:
        table.add_row(
            shown_text(row["run_id"]),
            shown_text(row["framework"]),
            shown_text(row["model"]),
            shown_text(", ".join(row["hosts"])),
            str(row["world_size"]),
            format_number(row["images_per_second"]),
            format_number(row["startup_seconds"]),
            row["start"] or "",
            row["end"] or "",
            shown_text(row["state"]),
        )
    print_table(table, console_for(out), out, "--format json")
    return 0


# --------------------------------------------------------------------------------------
# hosts
# --------------------------------------------------------------------------------------


def print_hosts(store: ReadStore, args: argparse.Namespace, out) -> int:
    hosts = store.hosts()
    if args.format == "json":
        write_json(hosts, out)
    else:
        out.write("".join(f"{visible(host)}\n" for host in hosts))  # whole: scripts read it
    return 0


# --------------------------------------------------------------------------------------
# scaling
# --------------------------------------------------------------------------------------


def print_throughput_scaling(args: argparse.Namespace, out) -> int:
    from collector.analysis.scaling import THROUGHPUT_KEYS, parse_throughput, throughput_table
    from contract.units import format_efficiency

    try:
        rows = throughput_table(parse_throughput(args.throughput), args.gpus_per_node)
    except ValueError as error:
        raise CliError(str(error), 2) from None
    dicts = [row.throughput_dict() for row in rows]
    if args.format == "json":
        write_json(dicts, out)
    elif args.format == "csv":
        write_csv(dicts, THROUGHPUT_KEYS, out)
    else:
        from rich.table import Table

        table = Table(title="scaling against 1 GPU x N (ideal)")
        for header in ("GPUs", "nodes", "img/s", "ideal", "efficiency", "speedup", "scope"):
            table.add_column(header, justify="right")
        for row in rows:
            table.add_row(
                str(row.gpus),
                "–" if row.nodes is None else str(row.nodes),
                format_number(row.images_per_second),
                format_number(row.ideal),
                format_efficiency(row.efficiency_percent),
                "–" if row.speedup is None else f"{row.speedup:.2f}x",
                row.scope,
            )
        console_for(out).print(table)
    return 0


SCALING_COLUMNS = (
    "run_id",
    "framework",
    "model",
    "precision",
    "batch_size",
    "data_format",
    "image_size",
    "state",
    "gpus",
    "nodes",
    "images_per_second",
    "ideal",
    "efficiency_percent",
    "speedup",
    "lost_images_per_second",
    "scope",
    "throughput_source",
    "startup_seconds",
    "final_top1",
    "target_top1",
    "epochs_to_target",
    "seconds_to_target",
    "time_to_target_speedup",
    "time_to_target_baseline",
)


def format_speedup(value: float | None) -> str:
    """A speed-up as the scaling table prints it (1.85x; – when there is none)."""
    return "–" if value is None else f"{value:.2f}x"


def print_stored_scaling(store: ReadStore, args: argparse.Namespace, out) -> int:
    from collector.analysis.scaling import scaling_rows
    from contract.units import format_efficiency

    rows = scaling_rows(store)
    if args.format == "json":
        write_json(rows, out)
        return 0
    if args.format == "csv":
        write_csv(rows, SCALING_COLUMNS, out)
        return 0
    from rich.table import Table

    console = console_for(out)
    if not rows:
        console.print("no runs with throughput yet")
        return 0
    table = Table(
        title="scaling per group (framework, model, precision, batch/rank, format, image size)"
    )
    headers = (
        "group",
        "run",
        "ranks",  # GPUs, or processes in a CPU run (the dashboard's 'Ranks')
        "nodes",
        "img/s",
        "ideal",
        "eff.",
        "speedup",
        "scope",
        "top-1",
        "epochs to target",
        "time to target",
        "TTA speedup",
    )
    for header in headers:
        # a run id is never cut (fit_table leaves out the columns after it instead)
        table.add_column(header, justify="left" if header in ("group", "run") else "right",
                         no_wrap=header == "run")  # fmt: skip
    previous = None
    for row in rows:
        group = " ".join(
            str(row[k])
            for k in ("framework", "model", "precision", "batch_size", "data_format")
            if row[k] not in (None, "")
        ) + (f" {row['image_size']} px" if row.get("image_size") else "")
        if previous is not None and group != previous:
            table.add_section()
        table.add_row(
            shown_text(group if group != previous else ""),
            shown_text(row["run_id"]),
            str(row["gpus"]),
            str(row["nodes"]),
            format_number(row["images_per_second"]),
            format_number(row["ideal"]),
            format_efficiency(row["efficiency_percent"]),
            format_speedup(row["speedup"]),
            shown_text(row["scope"]),
            "–" if row["final_top1"] is None else format_fraction(row["final_top1"]),
            "–" if row["epochs_to_target"] is None else str(row["epochs_to_target"]),
            format_clock_duration(row["seconds_to_target"]),
            format_speedup(row["time_to_target_speedup"]),
        )
        previous = group
    print_table(table, console, out, "--format csv")
    return 0
