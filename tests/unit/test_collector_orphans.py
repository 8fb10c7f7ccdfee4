"""kill -9 of a collector run without systemd leaves no worker process behind.

The collector parses large bodies in a forkserver-started process pool. Those workers are
the forkserver's children, not the collector's, so killing the collector with SIGKILL
(no cleanup runs) used to leave them sleeping forever. Real processes: the collector is
started with ``python -m collector serve`` and its whole process tree is read from /proc.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from tests.integration.test_collector_ingest_server import start_server


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (read from /proc/*/stat)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if fields[0] == "Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_workers_exit_when_the_collector_is_killed_with_sigkill(tmp_path, repo_env):
    served = start_server(tmp_path, repo_env)
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        # the pool starts beside the server: the forkserver plus at least one worker
        while len(descendants(served.process.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        workers = descendants(served.process.pid)
        if (os.cpu_count() or 1) > 1:
            assert len(workers) >= 2, "the parse pool did not start"
        os.kill(served.process.pid, signal.SIGKILL)
        served.process.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [pid for pid in workers if alive(pid)]
        assert left == [], f"worker processes outlived the collector: {left}"
    finally:
        for pid in workers | descendants(served.process.pid):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        served.stop()
