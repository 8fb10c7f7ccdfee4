"""Issue 43: ``collector forecast|compare --collector URL`` against a real ``collector
serve`` print what the same commands print on the store itself, and compare's
``--fail-if-slower`` gate judges the remote answer the same way."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.reliability import harness
from tests.support.analysis_stores import sqlite_store_with
from tests.unit.test_forecast import _run

TOKEN = "forecast-token-0123456789"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("forecast-remote")
    db = workdir / "c.sqlite"
    points = _run("a", 10.0, (0.4, 0.5, 0.0)).points() + _run("b", 6.0, (0.0, 0.9, 0.0)).points()
    sqlite_store_with(points, db).close()
    _, token_file = harness.write_token_file(workdir, TOKEN)
    collector = harness.Collector(db=db, token_file=token_file, log=workdir / "collector.log")
    collector.start()
    yield collector, token_file
    collector.stop()


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "collector", *args],
        capture_output=True, text=True, env=harness.repo_env(), timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(
    "view",
    [
        ("forecast", "a", "--nodes", "1,2", "--gradient-mb", "25", "--link-gbps", "10"),
        (
            "forecast",
            "a",
            "--nodes",
            "2,4",
            "--gradient-mb",
            "25",
            "--link-gbps",
            "1",
            "--format",
            "json",
        ),
        ("compare", "a", "b"),
        ("compare", "a", "b", "--format", "json"),
    ],
    ids=lambda view: " ".join(view),
)
def test_forecast_and_compare_from_the_collector_are_the_local_ones(served, view):
    collector, token_file = served
    local = cli(*view, "--db", str(collector.db))
    remote = cli(*view, "--collector", collector.url, "--token-file", str(token_file))
    assert local.returncode == 0, local.stderr
    assert remote.returncode == 0, remote.stderr
    assert remote.stdout == local.stdout


def test_the_gate_fails_on_the_remote_answer_too(served):
    collector, token_file = served
    remote = ("--collector", collector.url, "--token-file", str(token_file))
    slower = cli("compare", "b", "a", "--fail-if-slower", "5", *remote)
    assert slower.returncode == 1
    assert "B is 40.0% slower than A, more than --fail-if-slower 5%" in slower.stderr
