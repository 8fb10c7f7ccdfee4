"""How the collector's views are written out: JSON and CSV, the rich console, findings, and
a run's per-epoch report as a text table. Shared by ``collector.views.reports`` (report,
runs, scaling) and ``collector.views.jobs`` (jobs, job)."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from typing import Any

from collector.analysis.epochs import EpochRow
from collector.views.epoch_table import aligned, column_widths, rows_to_show
from collector.views.errors import CliError
from collector.views.evidence import evidence_items
from contract.columns import (
    COMPLETE,
    TEXT,
    ReportColumn,
    format_cell,
    select,
    unfinished_epochs_note,
)
from contract.markers import ALL_HOSTS

# --------------------------------------------------------------------------------------
# formatting helpers
# --------------------------------------------------------------------------------------


def write_json(data: Any, out) -> None:
    """JSON a person can read and a program parses fast to write: a list as one element
    per line, an object as one key per line with its lists so too, every element by json's
    C encoder (``indent`` would switch all of it to the pure-Python one: 0.4 s of a big
    report's 1.5 s)."""
    out.write(_readable_json(data, "") + "\n")


def _readable_json(data: Any, indent: str) -> str:
    inner = indent + "  "
    if isinstance(data, list):
        if not data:
            return "[]"
        prefix = inner if indent else ""  # a list alone: one element a line, as before
        items = ",\n".join(prefix + json.dumps(item, allow_nan=False) for item in data)
        return f"[\n{items}\n{indent}]"
    if isinstance(data, dict) and indent == "":
        if not data:
            return "{}"
        members = ",\n".join(
            f"{inner}{json.dumps(str(key))}: {_readable_json(value, inner)}"
            for key, value in data.items()
        )
        return f"{{\n{members}\n}}"
    return json.dumps(data, allow_nan=False)


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


def console_for(out):
    from rich.console import Console

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            """The reader went away (``| head``): rich would exit 1 here; the command line
            ends as for any other write (``contract.commandline.quiet_broken_pipe``)."""
            self.quiet = True
            raise BrokenPipeError

    # Wide tables must not be squeezed into 80 columns when stdout is a pipe or a file.
    return PipeConsole(file=out, width=None if out.isatty() else 400, soft_wrap=False)


DEFAULT_COLUMNS = "default"


def table_columns(rows: list[EpochRow], choice: str) -> tuple[ReportColumn, ...]:
    """The text table's columns (``--columns``): the default set leaves out columns that no
    row measured (no NFS mount, no InfiniBand, no GPU), and the epochs' state when every
    epoch ended."""
    try:
        chosen = select(choice)
    except ValueError as error:
        raise CliError(str(error), 2) from None
    if choice != DEFAULT_COLUMNS:
        return chosen
    unfinished = any(r.state != COMPLETE for r in rows)

    def shown(column: ReportColumn) -> bool:
        if column.name == "state":
            return unfinished
        return column.unit == TEXT or any(getattr(r, column.name) is not None for r in rows)

    return tuple(c for c in chosen if shown(c))


def terminal_width(out) -> int | None:
    """The width of the terminal ``out`` writes to (``$COLUMNS`` first, as
    ``shutil.get_terminal_size`` reads it); None for a file or a pipe, which keep every
    column."""
    import shutil

    isatty = getattr(out, "isatty", None)
    return shutil.get_terminal_size().columns if isatty and isatty() else None


def fit_table(table, console, out, every_column: str, keep: int = 2) -> str | None:
    """A rich ``table`` written to a terminal narrower than it (``terminal_width``): its
    trailing columns that do not fit are left out (the first ``keep`` always stay), as
    ``report_table`` does, rather than every column squeezed to an ellipsis; the line that
    says which and how to see them (``every_column``), or None (a pipe, a file, a table
    that fits). A column that wraps counts at its longest word, one that does not at its
    longest cell; between columns 3 characters (padding and a rule), at the edges 2 each."""
    width = terminal_width(out)
    if width is None or not table.columns:
        return None
    from rich.measure import Measurement

    options = console.options.update_width(width)
    widths = []
    for column in table.columns:
        measured = [Measurement.get(console, options, c) for c in (column.header, *column.cells)]
        widths.append(max(m.maximum if column.no_wrap else m.minimum for m in measured))
    shown = columns_that_fit(widths, width - 4)  # 3 between columns, 2 at the edges
    if shown >= len(table.columns):
        return None
    shown = max(shown, keep)
    left_out = [str(column.header) for column in table.columns[shown:]]
    total = len(table.columns)
    del table.columns[shown:]
    return (
        f"{shown} of {total} columns shown to fit this {width}-character terminal "
        f"(left out: {', '.join(left_out)}); every column: {every_column}"
    )


def print_table(table, console, out, every_column: str) -> None:
    """``table`` on ``console``, fitted to the terminal ``out`` is (``fit_table``), the
    line naming the columns left out under it."""
    note = fit_table(table, console, out, every_column)
    console.print(table)
    if note:
        console.print(note, style="dim", markup=False, highlight=False)


def columns_that_fit(widths: list[int], max_width: int, separator: int = 3) -> int:
    """How many leading columns of these widths fit in ``max_width`` characters with
    ``separator`` characters between them (host and epoch, the first two, always)."""
    used = 0
    for count, width in enumerate(widths):
        used += width + (separator if count else 0)
        if used > max_width:
            return max(count, 2)
    return len(widths)


def report_table(
    run_id: str,
    rows: list[EpochRow],
    choice: str = DEFAULT_COLUMNS,
    max_width: int | None = None,
):
    """The report as a rich ``Text``: ``*`` rows bold, a rule between epochs, the ``*`` row
    left out when the run has one host (it would repeat the host's row). With
    ``max_width`` (a terminal's, no ``--columns`` given) only the leading columns that fit
    are shown, and one line says how to see the others.

    Laid out here rather than with ``rich.table.Table``, which measures every cell: a
    90-epoch, 8-host report (810 rows x 25 columns) took 3.5 s of CPU that way, 0.1 s so.
    """
    from rich.text import Text

    rows = rows_to_show(rows, host_of=lambda row: row.host)
    columns = table_columns(rows, choice)
    headers = [column.heading for column in columns]
    cells = [[format_cell(c, getattr(row, c.name)) for c in columns] for row in rows]
    widths = column_widths(headers, cells)
    shown = len(widths) if max_width is None else columns_that_fit(widths, max_width - 1)
    left_out = [column.heading for column in columns[shown:]]
    if left_out:
        headers, widths = headers[:shown], widths[:shown]
        cells = [row_cells[:shown] for row_cells in cells]

    def line(values: list[str]) -> str:
        return aligned(values, widths, left=1, separator=" │ ") + "\n"

    rule = "─┼─".join("─" * width for width in widths) + "\n"
    text = Text()
    title = f"run {shown_plain(run_id)}: per epoch, per host (MB = 10^6 bytes)\n"
    text.append(title, style="italic")
    text.append(line(headers), style="bold")
    text.append(rule, style="dim")
    previous_epoch = None
    for row, row_cells in zip(rows, cells, strict=True):
        if previous_epoch is not None and row.epoch != previous_epoch:
            text.append(rule, style="dim")
        previous_epoch = row.epoch
        text.append(line(row_cells), style="bold" if row.host == ALL_HOSTS else "")
    notes = (
        unfinished_epochs_note([r.to_dict() for r in rows]),
        interpolated_edges_note(rows),
        f"{shown} of {len(columns)} columns shown to fit this {max_width}-character terminal "
        f"(left out: {', '.join(left_out)}); every column: --columns default, or --format csv"
        if left_out
        else "",
    )
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


def write_findings(findings: list, err) -> None:
    """The findings beside a CSV report (on stderr, so that the CSV stays clean)."""
    print_findings(findings, console_for(err))


def shown_plain(text: object) -> str:
    """Text a writer sent (a model, a job id, a host) as a plain-text view prints it
    (contract.text.shown: escapes visible, cut at 120 characters; issue 44, item 5)."""
    from contract.text import shown

    return shown(text)


def shown_text(text: object):
    """``shown_plain`` as a Rich table cell: never read as Rich markup."""
    from rich.text import Text

    return Text(shown_plain(text))
