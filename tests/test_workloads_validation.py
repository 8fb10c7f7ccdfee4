"""``workloads run`` / ``workloads profile`` refuse a --run-id that would leave --runs-dir,
before anything starts (the real CLI, as a process)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.loopback import free_port


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


def _unreachable_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("notaurl", "must start with http:// or https://"),
        ("http://", "names no host"),
        ("http://:8086", "names no host"),
        ("http://head:99999", "has a port that is not 0..65535"),
        ("unreachable", "cannot reach the collector at http://127.0.0.1:"),
    ],
)
def test_a_collector_url_that_cannot_work_is_refused_before_training(
    tmp_path, repo_env, url, message
):
    """Before, ``--collector notaurl`` ended in a ValueError traceback (exit 1) from the
    pre-flight write; every form is now refused with one line and exit 2, nothing trained."""
    url = _unreachable_url() if url == "unreachable" else url
    runs = tmp_path / "runs"
    argv = [sys.executable, "-m", "workloads", "run", "--framework", "pytorch", "--synthetic"]
    argv += ["--batch-size", "2", "--image-size", "32", "--steps-per-epoch", "2"]
    argv += ["--runs-dir", str(runs), "--collector", url]
    result = subprocess.run(argv, capture_output=True, text=True, env=repo_env, timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert "epoch" not in result.stdout.lower()  # no training started
    assert not runs.exists()  # nothing written
