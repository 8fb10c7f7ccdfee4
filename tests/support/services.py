"""Real service processes in tests (collector, agent, VictoriaMetrics, Prometheus): start
one with its output in a log file, wait until it answers, stop it with SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest


def start(command: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)


def wait_until(condition, what: str, process: subprocess.Popen, log: Path, seconds=30.0):
    """Until ``condition()`` holds (an OSError counts as not yet); fails the test with the
    log's tail when the process exits first or the time runs out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{what}: the process exited: {log.read_text()[-3000:]}")
        try:
            if condition():
                return
        except OSError:
            pass
        time.sleep(0.1)
    pytest.fail(f"{what}: not within {seconds} s; log: {log.read_text()[-3000:]}")


def stop(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 20 s."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
