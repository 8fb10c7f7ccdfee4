"""What ``workloads`` and ``collector`` refuse while reading their arguments, before anything
starts: a --run-id that would leave --runs-dir, a misspelt option. Each command's ``main``
in this process (tests/support/cli.py), as its console script runs it; the refusals that
need a process or the frameworks stay in tests/integration/test_workloads_validation.py."""

from __future__ import annotations

import sys

import pytest

from collector.cli import main as collector_main
from tests.support.cli import run_main
from workloads.cli import main as workloads_main

MAINS = {"workloads": workloads_main, "collector": collector_main}


@pytest.mark.parametrize(
    "run_id",
    ["..", "../escape", "a/../../b", "/tmp/abs", "a/b", "x..y", ".hidden", "-x", "", "a\nb"],
)
@pytest.mark.parametrize("command", ["run", "profile"])
def test_a_run_id_that_is_not_one_plain_name_is_refused_up_front(tmp_path, capfd, command, run_id):
    runs = tmp_path / "runs"
    argv = [command, "--runs-dir", str(runs), f"--run-id={run_id}"]
    argv += ["--", sys.executable, "-c", "print('ran')"] if command == "profile" else []
    result = run_main(workloads_main, argv, capfd)  # capfd: a started command's output too
    assert result.returncode == 2, result.stderr
    assert "is not a run id" in result.stderr
    assert "ran" not in result.stdout
    assert not runs.exists()  # nothing written anywhere
    assert not (tmp_path / "escape").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["workloads", "run", "--framwork", "pytorch", "--synthetic"],
         "workloads run: unknown option --framwork: did you mean --framework?"),
        (["workloads", "run", "--framework", "pytorch", "--synthetic", "--epohcs=2"],
         "workloads run: unknown option --epohcs: did you mean --epochs?"),
        (["workloads", "profile", "--colector", "http://x", "--", "python", "-c", "1"],
         "workloads profile: unknown option --colector: did you mean --collector?"),
        (["workloads", "resend", "--spol", "s", "--collector", "http://x"],
         "workloads resend: unknown option --spol: did you mean --spool?"),
        (["collector", "report", "r1", "--fromat", "json"],
         "collector report: unknown option --fromat: did you mean --format?"),
        (["collector", "runs", "--zzz"], "collector runs: unknown option --zzz: see"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)  # fmt: skip
def test_a_misspelt_option_is_named_with_the_nearest_known_one(capfd, argv, message):
    """One line and exit 2, not the whole usage and the `required` options it hid."""
    program, *arguments = argv
    result = run_main(MAINS[program], arguments, capfd)
    assert result.returncode == 2
    assert result.stderr.startswith(message), result.stderr
    assert len(result.stderr.splitlines()) == 1 and "usage" not in result.stderr
    assert "required" not in result.stderr and result.stdout == ""
