"""`collector report` in a terminal narrower than its table (issue 45, item 9): without
``--columns`` it shows the leading columns that fit and one line saying how to see all;
a pipe or a file keeps every column. The command runs as a user runs it, its stdout a
real pseudo-terminal whose width is set by ``COLUMNS``, over a real SQLite store."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from collector.store import SqliteStore
from tests.support.cli import collector_in_terminal
from tests.support.run_builder import RunBuilder

RUN = "wide-run"
MB = 1e6


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("width") / "epochscope.sqlite"
    builder = RunBuilder(RUN, hosts=("n1", "n2"), ranks_per_host=2)
    builder.epoch(100, 6400, nfs_server_read=300 * MB, nfs_app_read=300 * MB, cpu_busy=0.5)
    builder.epoch(50, 6400, nfs_app_read=300 * MB, cpu_busy=0.5)
    SqliteStore(path).write_points(builder.points())
    return path


def report_in_terminal(db: Path, columns: int, *extra: str, env: dict[str, str]) -> str:
    """What `collector report` prints to a terminal ``columns`` characters wide."""
    return collector_in_terminal(["report", RUN, "--db", str(db), *extra], columns, env,
                                 term="dumb")  # fmt: skip


def table_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if "│" in line or "┼" in line]


def test_a_narrow_terminal_gets_the_columns_that_fit_and_how_to_see_all(db, repo_env):
    wide = subprocess.run(
        [sys.executable, "-m", "collector", "report", RUN, "--db", str(db)],
        capture_output=True, text=True, env=repo_env, timeout=60, check=True,
    ).stdout  # fmt: skip
    full_width = max(len(line) for line in table_lines(wide))
    assert full_width > 100  # the default columns of this run do not fit 100 characters
    assert "columns shown to fit" not in wide  # a pipe keeps every column

    narrow = report_in_terminal(db, 100, env=repo_env)
    lines = table_lines(narrow)
    assert lines and max(len(line) for line in lines) <= 100
    assert lines[0].split("│")[0].strip() == "host"  # host and epoch lead, always
    note = next(line for line in narrow.splitlines() if "columns shown to fit" in line)
    assert "this 100-character terminal (left out: " in note
    assert note.endswith("every column: --columns default, or --format csv")
    shown, total = (int(word) for word in note.split(" columns shown")[0].split(" of "))
    assert shown < total == len(table_lines(wide)[0].split("│"))
    assert len(lines[0].split("│")) == shown

    # a terminal wide enough, or --columns given: every column, no note
    assert "columns shown to fit" not in report_in_terminal(db, full_width + 5, env=repo_env)
    asked = report_in_terminal(db, 100, "--columns", "default", env=repo_env)
    assert "columns shown to fit" not in asked
    assert max(len(line) for line in table_lines(asked)) == full_width
