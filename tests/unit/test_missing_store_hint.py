"""`collector report RUN` without --db after `make demo` (issue 45, item 4): the demo's run
is in runs/RUN_ID.sqlite, not the default runs/epochscope.sqlite, and the error names the
files that are there (the run's own first, then the newest) instead of "start a collector"."""

from __future__ import annotations

import os

import pytest

from collector.arguments import build_parser
from collector.views.errors import CliError
from collector.views.reports import open_store


def refused(*argv: str) -> str:
    with pytest.raises(CliError) as error:
        open_store(build_parser().parse_args(list(argv)))
    return str(error.value)


def test_the_run_files_beside_the_missing_store_are_named(tmp_path):
    for age, name in enumerate(("newest", "demo-run", "older", "oldest")):
        (tmp_path / f"{name}.sqlite").write_bytes(b"")
        os.utime(tmp_path / f"{name}.sqlite", (1e9 - age * 60, 1e9 - age * 60))
    default = tmp_path / "epochscope.sqlite"

    message = refused("report", "demo-run", "--db", str(default))
    assert f"no store at {default}" in message
    assert f"give --db {tmp_path / 'demo-run.sqlite'}" in message  # the run's own file
    named = f"{tmp_path / 'demo-run.sqlite'}, {tmp_path / 'newest.sqlite'}, "
    assert named + f"{tmp_path / 'older.sqlite'} and 1 more" in message
    assert "collector serve" not in message

    message = refused("runs", "--db", str(default))
    assert f"give --db {tmp_path / 'newest.sqlite'}" in message  # no run named: the newest


def test_with_no_file_there_start_a_collector(tmp_path):
    message = refused("report", "r1", "--db", str(tmp_path / "epochscope.sqlite"))
    assert "start `collector serve --db" in message


def test_dashboard_serve_names_the_run_files_too(tmp_path, capsys):
    """`dashboard serve` as docs/dashboard.md and usage.md write it (the default store)
    after `make demo`: the run's file is named, not "start a collector"; nothing listens."""
    from dashboard.cli import main

    (tmp_path / "demo-run.sqlite").write_bytes(b"")
    default = tmp_path / "epochscope.sqlite"
    assert main(["serve", "--db", str(default), "--port", "0"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"dashboard: error: no store at {default} ")
    assert f"give --db {tmp_path / 'demo-run.sqlite'}" in line
    assert "collector serve" not in line and not default.exists()
