"""``make docs-check`` as a test: every command README.md and docs/*.md name is checked
against its program's real ``--help`` (the dashboard's imports Dash: system tier), and the
blocks not marked ``docs-check: skip`` run green from a fresh clone of what is committed:
the README's ``make demo`` first (about 3 minutes on 2 cores), then the blocks that read its
run and data set (report, runs, scaling, hosts, forecast, compare, ``workloads cache``), and
every ``dashboard serve`` started, asked over HTTP and stopped with Ctrl-C."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "docs_check" / "docs_check.py"


def test_every_documented_command_and_option_exists(repo_env) -> None:
    code = (
        "import sys, os; from pathlib import Path; sys.path.insert(0, sys.argv[1]);"
        "import docs_check as d; failures, checked = d.check_options(Path(sys.argv[2]), "
        "dict(os.environ)); print(checked); [print(f) for f in failures];"
        "sys.exit(1 if failures else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(SCRIPT.parent), str(REPO)],
        env={**repo_env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert int(result.stdout.split()[0]) > 200  # the docs name a few hundred commands


@pytest.mark.timeout(1800)
@pytest.mark.skipif(not (REPO / ".git").exists(), reason="needs a git checkout to clone")
def test_the_runnable_blocks_run_from_a_fresh_clone() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--timeout", "120"],
        capture_output=True,
        text=True,
        timeout=1700,
        env=dict(os.environ),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "blocks: " in result.stdout and " 0 failed" in result.stdout
    ran = int(result.stdout.split("blocks: ")[1].split()[0])
    assert ran >= 12  # make demo and the blocks on its run: none marked skip again unnoticed
