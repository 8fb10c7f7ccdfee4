"""The per-epoch table as text, laid out once for every text view of it: ``collector
report``'s table and the summary ``workloads run --profile`` and ``workloads profile``
print. Cells are written by ``contract.columns.format_cell``; the dashboard's DataTable
takes the same column specs (``dashboard/columns.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from contract.markers import ALL_HOSTS


def rows_to_show(rows: Sequence[Any], host_of=lambda row: row["host"]) -> list[Any]:
    """``rows`` without the all-hosts rows when the run has one host (they would repeat
    the host's rows)."""
    hosts = {host_of(row) for row in rows if host_of(row) != ALL_HOSTS}
    return [row for row in rows if len(hosts) > 1 or host_of(row) != ALL_HOSTS]


def column_widths(
    headers: Sequence[str], cells: Sequence[Sequence[str]], least: int = 0
) -> list[int]:
    """Each column's width: its widest cell or heading, at least ``least``."""
    return [
        max([len(heading), least, *(len(row[i]) for row in cells)])
        for i, heading in enumerate(headers)
    ]


def aligned(values: Sequence[str], widths: Sequence[int], left: int, separator: str) -> str:
    """One line of the table: the first ``left`` columns left-aligned, numbers right."""
    return separator.join(
        value.ljust(width) if i < left else value.rjust(width)
        for i, (value, width) in enumerate(zip(values, widths, strict=True))
    )
