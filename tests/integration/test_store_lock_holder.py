"""Another process holding the store's write lock (issue 44, item 9): ``/health`` fails
within seconds, saying so, instead of passing while every write waits 30 s; a collector
started under the lock exits with one line, not a traceback after 30 s."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.reliability import harness
from collector.store import SqliteStore

HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


@contextmanager
def write_lock_held(db: Path) -> Iterator[None]:
    """Another process holds ``db``'s write lock (``BEGIN IMMEDIATE``) for the block."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)


def health(collector) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"{collector.url}/health", timeout=20) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_health_fails_while_another_process_holds_the_write_lock(tmp_path):
    collector = harness.Collector(db=tmp_path / "s.sqlite", token_file=None, log=tmp_path / "log")
    collector.start()
    try:
        assert health(collector)[0] == 200
        with write_lock_held(collector.db):
            started = time.monotonic()
            status, answer = health(collector)
            took = time.monotonic() - started
        assert status == 503 and answer["status"] == "fail"
        assert "cannot take the write lock" in answer["message"]
        assert "another process holds it" in answer["message"]
        assert took < 10  # its own wait (2 s) and the other checks: not a write's 30 s
        assert health(collector)[0] == 200  # the lock let go: healthy again
    finally:
        collector.stop()


def test_a_start_under_the_lock_exits_with_one_line(tmp_path):
    db = tmp_path / "s.sqlite"
    SqliteStore(db).close()
    with write_lock_held(db):
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "collector", "serve", "--db", str(db), "--listen", ":0"],
            capture_output=True,
            text=True,
            timeout=60,
            env=harness.repo_env(),
        )
        took = time.monotonic() - started
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("collector: a write cannot take the write lock of")
    assert "another collector serve on this file?" in last
    assert took < 20


def write(collector, line: str) -> tuple[int, dict, str | None]:
    request = urllib.request.Request(
        f"{collector.url}/api/v2/write?bucket=b&org=o&precision=ns",
        data=line.encode(),
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, {}, None
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), error.headers.get("Retry-After")


def stored_busy(db: Path) -> list[float]:
    with SqliteStore(db) as store:
        series = store.list_series("cpu", "busy", "node01")
        return [v for data in store.read_series(series, 0, 2**62) for v in data.values.tolist()]


def test_a_write_under_another_processs_lock_is_answered_503_not_kept_waiting(tmp_path):
    """A write that cannot take the store's write lock within WRITE_BUSY_SECONDS (3 s)
    because another process holds it is answered 503 with Retry-After and the reason, and
    nothing of it is stored (issue 44, item 5): before, it waited SQLite's 30 s busy
    timeout, past the agent's 10 s, and the client's 20 s here. Sent again once the lock
    is let go, it is stored, once."""
    collector = harness.Collector(db=tmp_path / "s.sqlite", token_file=None, log=tmp_path / "log")
    collector.start()
    line = "cpu,host=node01 busy=0.25 1700000000000000000"
    try:
        with write_lock_held(collector.db):
            started = time.monotonic()
            status, answer, retry_after = write(collector, line)
            took = time.monotonic() - started
        assert status == 503, answer
        assert retry_after == "5"
        assert answer["code"] == "unavailable"
        assert "could not be taken in 3 s: another process holds it" in answer["message"]
        assert "nothing of this write was stored" in answer["message"]
        assert took < 15  # its 3 s bound and the load of a busy machine, not 30 s
        assert stored_busy(collector.db) == []  # nothing acknowledged, nothing stored
        assert write(collector, line)[0] == 204  # the lock let go: the retry is stored
        assert stored_busy(collector.db) == [0.25]
    finally:
        collector.stop()
