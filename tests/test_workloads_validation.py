"""``workloads run`` / ``workloads profile`` refuse a --run-id that would leave --runs-dir,
before anything starts (the real CLI, as a process)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "run_id",
    ["..", "../escape", "a/../../b", "/tmp/abs", "a/b", "x..y", ".hidden", "-x", "", "a\nb"],
)
@pytest.mark.parametrize("command", ["run", "profile"])
def test_a_run_id_that_is_not_one_plain_name_is_refused_up_front(
    tmp_path, repo_env, command, run_id
):
    runs = tmp_path / "runs"
    argv = [sys.executable, "-m", "workloads", command, "--runs-dir", str(runs)]
    argv += [f"--run-id={run_id}"]
    argv += ["--", sys.executable, "-c", "print('ran')"] if command == "profile" else []
    result = subprocess.run(argv, capture_output=True, text=True, env=repo_env, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "is not a run id" in result.stderr
    assert "ran" not in result.stdout
    assert not runs.exists()  # nothing written anywhere
    assert not (tmp_path / "escape").exists()
