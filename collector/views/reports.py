"""``collector report``, ``collector runs`` and ``collector scaling``.

``report RUN_ID``   the per-epoch, per-host table of a run (collector.analysis.epochs), as a rich
                    table, CSV or JSON (a list of row dicts with exactly the report's
                    columns). ``--findings`` adds the findings: after the table, on stderr
                    for CSV (so the CSV stays clean), or as ``{"rows": [...],
                    "findings": [...]}`` for JSON.
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
import csv
import io
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from collector.analysis.epochs import COLUMNS, EpochRow, build_report, iso_utc
from collector.analysis.scaling import stored_run_throughput
from collector.store.api import ReadStore, RunInfo
from collector.views.errors import CliError
from collector.views.evidence import evidence_items
from collector.views.inference import print_inference
from contract.columns import (
    COMPLETE,
    TEXT,
    ReportColumn,
    format_cell,
    select,
    unfinished_epochs_note,
)
from contract.markers import ALL_HOSTS
from contract.units import format_clock_duration, format_fraction, format_number

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
            spec = parse_backend_spec(backend)
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
        raise CliError(
            f"no store at {path} (start `collector serve --db {path}` first, or ask a "
            "collector elsewhere with --collector URL --token-file FILE)"
        )
    from collector.store import SqliteStore

    return SqliteStore(path)


# --------------------------------------------------------------------------------------
# formatting helpers
# --------------------------------------------------------------------------------------


def write_json(data: Any, out) -> None:
    """A list as one element per line (json's C encoder; ``indent`` would switch to the
    pure-Python one), anything else indented."""
    if isinstance(data, list):
        out.write("[\n")
        out.write(",\n".join(json.dumps(item, allow_nan=False) for item in data))
        out.write("\n]\n" if data else "]\n")
        return
    json.dump(data, out, indent=2, allow_nan=False)
    out.write("\n")


def write_csv(rows: Sequence[dict[str, Any]], columns: Sequence[str], out) -> None:
    writer = csv.DictWriter(out, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(
            {k: ("" if row.get(k) is None else _csv_value(row.get(k))) for k in columns}
        )


def _csv_value(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return " ".join(map(str, value))
    return value


def _console(out):
    from rich.console import Console

    # Wide tables must not be squeezed into 80 columns when stdout is a pipe or a file.
    return Console(file=out, width=None if out.isatty() else 400, soft_wrap=False)


def table_columns(rows: list[EpochRow], choice: str) -> tuple[ReportColumn, ...]:
    """The text table's columns (``--columns``): the default set leaves out columns that no
    row measured (no NFS mount, no InfiniBand, no GPU), and the epochs' state when every
    epoch ended."""
    try:
        chosen = select(choice)
    except ValueError as error:
        raise CliError(str(error), 2) from None
    if choice != "default":
        return chosen
    unfinished = any(r.state != COMPLETE for r in rows)

    def shown(column: ReportColumn) -> bool:
        if column.name == "state":
            return unfinished
        return column.unit == TEXT or any(getattr(r, column.name) is not None for r in rows)

    return tuple(c for c in chosen if shown(c))


def report_table(run_id: str, rows: list[EpochRow], choice: str = "default"):
    """The report as a rich ``Text``: ``*`` rows bold, a rule between epochs, the ``*`` row
    left out when the run has one host (it would repeat the host's row).

    Laid out here rather than with ``rich.table.Table``, which measures every cell: a
    90-epoch, 8-host report (810 rows x 25 columns) took 3.5 s of CPU that way, 0.1 s so.
    """
    from rich.text import Text

    if len({row.host for row in rows if row.host != ALL_HOSTS}) <= 1:
        rows = [row for row in rows if row.host != ALL_HOSTS]
    columns = table_columns(rows, choice)
    headers = [column.heading for column in columns]
    cells = [[format_cell(c, getattr(row, c.name)) for c in columns] for row in rows]
    widths = [max([len(h), *(len(c[i]) for c in cells)]) for i, h in enumerate(headers)]

    def line(values: list[str]) -> str:
        padded = [
            value.ljust(width) if i == 0 else value.rjust(width)
            for i, (value, width) in enumerate(zip(values, widths, strict=True))
        ]
        return " │ ".join(padded) + "\n"

    rule = "─┼─".join("─" * width for width in widths) + "\n"
    text = Text()
    text.append(f"run {run_id}: per epoch, per host (MB = 10^6 bytes)\n", style="italic")
    text.append(line(headers), style="bold")
    text.append(rule, style="dim")
    previous_epoch = None
    for row, row_cells in zip(rows, cells, strict=True):
        if previous_epoch is not None and row.epoch != previous_epoch:
            text.append(rule, style="dim")
        previous_epoch = row.epoch
        text.append(line(row_cells), style="bold" if row.host == ALL_HOSTS else "")
    notes = (unfinished_epochs_note([r.to_dict() for r in rows]), interpolated_edges_note(rows))
    for note in notes:
        if note:
            text.append(note + "\n", style="dim")
    return text


def interpolated_edges_note(rows: list[EpochRow]) -> str:
    """The note under the table naming the epoch edges whose node amounts are interpolated
    (no agent edge sample there); "" when every edge is a real reading."""
    flagged = [
        f"{row.host} epoch {row.epoch} {row.interpolated_edges.replace(',', '+')}"
        for row in rows
        if row.host != ALL_HOSTS and row.interpolated_edges
    ]
    if not flagged:
        return ""
    shown = "; ".join(flagged[:6]) + (f"; and {len(flagged) - 6} more" if len(flagged) > 6 else "")
    return (
        "Interpolated edges (no agent edge sample: node amounts there are spread evenly over "
        f"the tick, so a burst at the edge is misplaced): {shown}"
    )


def print_findings(findings: list, console) -> None:
    from rich.markup import escape

    colours = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
    if not findings:
        console.print("No findings.")
        return
    for finding in findings:
        colour = colours.get(finding.severity, "")
        console.print(f"[{colour}]{finding.severity.upper()}[/] {escape(finding.title)}")
        # One line however long: a pipe or a file gets the explanation whole, not cut at
        # the console's width; a terminal wraps it itself. Words are text, not markup.
        console.print(f"  {finding.explanation}", highlight=False, markup=False, soft_wrap=True)
        for label, text in evidence_items(finding.evidence):
            console.print(
                f"    {label}: {text}", style="dim", highlight=False, markup=False, soft_wrap=True
            )
        if finding.chart:
            console.print(f"  chart: {finding.chart}", style="dim")


def _find_run(store: ReadStore, run_id: str) -> RunInfo:
    run = store.run(run_id)
    if run is None:
        raise CliError(f"no run {run_id!r} in the store (see `collector runs`)")
    return run


def print_report(store: ReadStore, args: argparse.Namespace, out) -> int:
    _find_run(store, args.run_id)
    report = build_report(store, args.run_id)
    findings = None
    if args.findings:
        from collector.findings.engine import (
            run_findings,  # only then: it imports the scaling rules
        )

        findings = run_findings(store, args.run_id, report)
    rows = [row.to_dict() for row in report.rows]
    if args.format == "json":
        if findings is not None:
            throughput = stored_run_throughput(store, _find_run(store, args.run_id))
            write_json(
                {
                    "rows": rows,
                    "findings": [f.to_dict() for f in findings],
                    "throughput": asdict(throughput),
                },
                out,
            )
        else:
            write_json(rows, out)
    elif args.format == "csv":
        write_csv(rows, COLUMNS, out)
        if findings is not None:
            print_findings(findings, _console(sys.stderr))
    else:
        console = _console(out)
        if not report.rows:
            console.print(f"run {args.run_id} has no epoch events yet")
        else:
            table = report_table(args.run_id, report.rows, getattr(args, "columns", "default"))
            console.print(table, no_wrap=True, overflow="ignore", crop=False)
        if findings is not None:
            console.print()
            print_findings(findings, console)
    return 0


# --------------------------------------------------------------------------------------
# runs
# --------------------------------------------------------------------------------------


def _iso(time_ns: int | None) -> str | None:
    return None if time_ns is None else iso_utc(time_ns)


def runs_rows(store: ReadStore) -> list[dict[str, Any]]:
    """Every run, newest first, with its throughput (``collector.analysis.throughput``, the figure
    of the dashboard's runs list and of ``collector scaling``)."""
    from collector.views.query import runs_summary

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
            row["run_id"],
            row["framework"],
            row["model"],
            ", ".join(row["hosts"]),
            str(row["world_size"]),
            format_number(row["images_per_second"]),
            format_number(row["startup_seconds"]),
            row["start"] or "",
            row["end"] or "",
            row["state"],
        )
    _console(out).print(table)
    return 0


# --------------------------------------------------------------------------------------
# hosts
# --------------------------------------------------------------------------------------


def print_hosts(store: ReadStore, args: argparse.Namespace, out) -> int:
    hosts = store.hosts()
    if args.format == "json":
        write_json(hosts, out)
    else:
        out.write("".join(f"{host}\n" for host in hosts))
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
        _console(out).print(table)
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
    "scope",
    "throughput_source",
    "startup_seconds",
    "final_top1",
    "target_top1",
    "epochs_to_target",
    "seconds_to_target",
)


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

    console = _console(out)
    if not rows:
        console.print("no runs with throughput yet")
        return 0
    table = Table(
        title="scaling per group (framework, model, precision, batch/GPU, format, image size)"
    )
    headers = (
        "group",
        "run",
        "GPUs",
        "nodes",
        "img/s",
        "ideal",
        "eff.",
        "speedup",
        "scope",
        "top-1",
        "epochs to target",
        "time to target",
    )
    for header in headers:
        table.add_column(header, justify="left" if header in ("group", "run") else "right")
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
            group if group != previous else "",
            row["run_id"],
            str(row["gpus"]),
            str(row["nodes"]),
            format_number(row["images_per_second"]),
            format_number(row["ideal"]),
            format_efficiency(row["efficiency_percent"]),
            "–" if row["speedup"] is None else f"{row['speedup']:.2f}x",
            row["scope"],
            "–" if row["final_top1"] is None else format_fraction(row["final_top1"]),
            "–" if row["epochs_to_target"] is None else str(row["epochs_to_target"]),
            format_clock_duration(row["seconds_to_target"]),
        )
        previous = group
    console.print(table)
    return 0


def render(args: argparse.Namespace, store: ReadStore | None = None) -> str:
    """Run a subcommand against a given store and return what it printed (for tests and
    the dashboard's export)."""
    buffer = io.StringIO()
    if args.command == "scaling" and args.throughput:
        print_throughput_scaling(args, buffer)
    else:
        store = store if store is not None else open_store(args)
        printers = {
            "report": print_report,
            "runs": print_runs,
            "scaling": print_stored_scaling,
            "inference": print_inference,
            "hosts": print_hosts,
        }
        printers[args.command](store, args, buffer)
    return buffer.getvalue()
