"""`collector runs`, `collector scaling`, `collector jobs` and `collector job` in a terminal
narrower than their table (issue 45, item 9): the leading columns that fit and one line
naming those left out and how to see all, as `collector report` does
(test_report_width.py), instead of every column squeezed to an ellipsis or to nothing. A
pipe keeps every column. Each command runs as a user runs it, its stdout a real
pseudo-terminal whose width is set by ``COLUMNS``, over a real SQLite store."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from collector.store import SqliteStore
from tests.support.cli import collector_in_terminal
from tests.support.run_builder import RunBuilder

RUN = "narrow-terminal-run-20261129-0001"


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("table-width") / "epochscope.sqlite"
    builder = RunBuilder(RUN, hosts=("n1", "n2"), ranks_per_host=2)
    builder.epoch(100, 6400, cpu_busy=0.5).epoch(50, 6400, cpu_busy=0.5)
    builder.job("4242", seconds=20, of_run=True)
    SqliteStore(path).write_points(builder.points())
    return path


def in_terminal(db: Path, columns: int, *argv: str, env: dict[str, str]) -> str:
    """What `collector ARGV --db DB` prints to a terminal ``columns`` characters wide."""
    return collector_in_terminal([*argv, "--db", str(db)], columns, env)


def piped(db: Path, *argv: str, env: dict[str, str]) -> str:
    return subprocess.run(
        [sys.executable, "-m", "collector", *argv, "--db", str(db)],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    ).stdout  # fmt: skip


def header(output: str) -> list[str]:
    """The table's column headings (its first row of ┃ cells)."""
    line = next(line for line in output.splitlines() if line.startswith("┃"))
    return [cell.strip() for cell in line.strip("┃").split("┃")]


@pytest.mark.parametrize(
    ("argv", "first", "every_column"),
    [
        (("runs",), "run_id", "--format json"),
        (("scaling",), "group", "--format csv"),
        (("jobs",), "job", "--format csv"),
        (("job", "4242"), "node", "--format csv, or --format json"),
    ],
)
def test_a_narrow_terminal_gets_the_columns_that_fit(db, repo_env, argv, first, every_column):
    wide = piped(db, *argv, env=repo_env)
    full = header(wide)
    assert "columns shown to fit" not in wide  # a pipe keeps every column

    narrow = in_terminal(db, 60, *argv, env=repo_env)
    table = [line for line in narrow.splitlines() if line[:1] in "┏┃┡│└"]
    assert table and max(len(line) for line in table) <= 60, narrow
    shown = header(narrow)
    assert shown[0] == first and shown == full[: len(shown)] and len(shown) < len(full)
    assert not any(cell.endswith("…") for cell in shown), narrow  # whole headings, not cut
    if argv[0] in ("runs", "scaling"):
        assert RUN in narrow  # the run id whole, not cut to an ellipsis
    note = " ".join(narrow.split("columns shown to fit", 1)[1].split())
    assert f"this 60-character terminal (left out: {', '.join(full[len(shown) :])})" in note
    assert f"); every column: {every_column}" in note  # (`job` prints its findings after)

    # a terminal wide enough: every column, no note
    assert "columns shown to fit" not in in_terminal(db, 400, *argv, env=repo_env)
