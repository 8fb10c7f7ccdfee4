"""Store faults against a real ``collector serve`` on loopback with real SQLite files: bad
``--retention-days``, damaged, truncated, foreign and empty files refused at start with one
line, ``/health`` failing while the store cannot write or compact (a full tmpfs), and field
types that change between batches.

The full disk is a real tmpfs mounted for the test (root needed; skipped otherwise)."""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collector.store import SqliteStore
from tests.integration.test_collector_ingest_server import REPO_ROOT, start_server

S = 1_000_000_000
T0 = 1_700_000_000 * S


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def refused(env: dict, *args: str) -> str:
    """Run ``collector serve`` expecting it to refuse to start: its stderr, checked to be
    one line with no traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "collector", "serve", "--listen", "127.0.0.1:0", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr, done.stderr
    return lines[-1] if lines[0].startswith("usage:") else "\n".join(lines)


@pytest.mark.parametrize("days", ["0", "-1", "-0.5", "nan", "inf", "soon"])
def test_retention_days_that_would_delete_fresh_data_are_refused(env, tmp_path, days):
    db = tmp_path / "r.sqlite"
    message = refused(env, "--db", str(db), f"--retention-days={days}")
    assert "argument --retention-days" in message
    assert "positive number of days" in message or "not a number of days" in message
    assert not db.exists()  # refused before anything is opened


def make_store(path: Path) -> None:
    """A real store: samples of 8 hosts compacted into blocks, more in batches, a run."""
    with SqliteStore(path) as store:
        for start in (0, 1500):
            store.write_lines(
                "\n".join(
                    f"cpu,host=h{i} user_seconds={j}.5,idle_seconds={j}i {T0 + j * S}"
                    for j in range(start, start + 1500)
                    for i in range(8)
                )
            )
            store.compact(now_ns=T0 + 10**6 * S)
        store.write_lines(f'workload,run_id=r1,host=h0,rank=0 event="run_start" {T0}')


@pytest.fixture(scope="module")
def good_store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("good") / "good.sqlite"
    make_store(path)
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0
    return path


def damage_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    low, high = len(data) * 2 // 5, len(data) * 3 // 5
    data[low:high] = random.Random(13).randbytes(high - low)
    path.write_bytes(bytes(data))


DAMAGES = {
    # name: (how, what the one line says)
    "random bytes in the middle": (damage_middle, "is damaged (PRAGMA quick_check:"),
    "truncated to a third": (
        lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 3]),
        "restore it from a backup",
    ),
    "bad header": (
        lambda p: p.write_bytes(b"NOT SQLITE" * 10 + p.read_bytes()[100:]),
        "is not a readable store (file is not a database)",
    ),
    "empty": (lambda p: p.write_bytes(b""), "is empty (0 bytes), not a store"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_store_file_is_refused_with_one_line(env, tmp_path, good_store, damage):
    how, says = DAMAGES[damage]
    db = tmp_path / "damaged.sqlite"
    shutil.copy(good_store, db)
    how(db)
    before = db.read_bytes()
    message = refused(env, "--db", str(db))
    assert len(message.splitlines()) == 1, message
    assert message.startswith(f"collector serve: {db} "), message
    assert says in message, message
    assert db.read_bytes() == before  # refused without touching it: nothing else is lost
    if damage == "empty":
        assert db.stat().st_size == 0  # not silently made a new store


def test_a_directory_as_db_is_refused_with_one_line(env, tmp_path):
    message = refused(env, "--db", str(tmp_path))
    assert message == f"collector serve: {tmp_path} is a directory: give the path of a store file"


def test_the_undamaged_copy_starts_and_serves(env, tmp_path, good_store):
    db = tmp_path / "copy.sqlite"
    shutil.copy(good_store, db)
    server = start_server(tmp_path, env, "--retention-days", "36500", db=db)
    try:
        status, _, reply = server.request("GET", "/health")
        assert status == 200, reply
        assert json.loads(reply)["status"] == "pass"
    finally:
        server.stop()


# ---------------------------------------------------------------- a full disk (tmpfs)


@pytest.fixture
def small_disk(tmp_path):
    """An 8 MiB tmpfs, unmounted afterwards."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(disk: Path) -> Path:
    """Take every free byte of ``disk``; the file that holds them."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 65536)
        except OSError:
            pass
    return filler


def body(host: str, points: int, start: int = 0) -> bytes:
    return "\n".join(
        f"cpu,host={host} user_seconds={j}.25,idle_seconds={j}i {T0 + (start + j) * S}"
        for j in range(points)
    ).encode()


def test_health_fails_while_the_disk_is_full_and_passes_once_space_returns(
    env, tmp_path, small_disk
):
    server = start_server(tmp_path, env, db=small_disk / "c.sqlite")
    try:
        write = "/api/v2/write?bucket=b"
        assert server.request("POST", write, body("a", 100))[0] == 204
        status, _, reply = server.request("GET", "/health")
        assert (status, json.loads(reply)["status"]) == (200, "pass")

        filler = fill(small_disk)
        status, _, reply = server.request("GET", "/health")
        health = json.loads(reply)
        assert (status, health["status"]) == (503, "fail"), reply
        assert "disk full" in health["message"]
        # a write that needs new pages fails, and /health says the store cannot write
        status, _, reply = server.request("POST", write, body("b", 20_000))
        assert status != 204, reply
        status, _, reply = server.request("GET", "/health")
        assert status == 503
        assert "write failed: database or disk is full" in json.loads(reply)["message"]

        filler.unlink()
        assert server.request("POST", write, body("c", 100))[0] == 204
        status, _, reply = server.request("GET", "/health")
        assert (status, json.loads(reply)["status"]) == (200, "pass"), reply
    finally:
        server.stop()
    with SqliteStore(small_disk / "c.sqlite") as store:
        assert sorted(info.host for info in store.list_series("cpu", "user_seconds")) == [
            "a",
            "c",
        ]


@pytest.mark.slow
def test_health_fails_when_the_servers_own_compaction_fails(env, tmp_path, small_disk):
    # the server compacts every 30 s: batches written before the disk fills cannot be folded
    server = start_server(tmp_path, env, db=small_disk / "s.sqlite")
    try:
        for start in range(0, 20_000, 2_000):
            status, _, reply = server.request(
                "POST", "/api/v2/write?bucket=b", body("s", 2_000, start)
            )
            assert status == 204, reply
        filler = fill(small_disk)
        deadline = time.monotonic() + 120
        message = ""
        while "compaction failed" not in message and time.monotonic() < deadline:
            time.sleep(1)
            status, _, reply = server.request("GET", "/health")
            message = json.loads(reply)["message"]
        assert status == 503
        assert "compaction failed: database or disk is full" in message, message
        filler.unlink()
        while "compaction failed" in message and time.monotonic() < deadline:
            time.sleep(1)  # the next pass folds them, and /health passes again
            status, _, reply = server.request("GET", "/health")
            message = json.loads(reply)["message"]
        assert status == 200, message
    finally:
        server.stop()
    with SqliteStore(small_disk / "s.sqlite") as store:
        (data,) = store.read_series(store.list_series("cpu", "idle_seconds"), 0, 2**62)
        assert data.values.tolist() == [float(j) for j in range(2_000)] * 10


def test_health_names_a_compaction_that_fails_until_one_works(small_disk):
    # /health reports store.health(); compaction runs in the server's background thread
    with SqliteStore(small_disk / "k.sqlite") as store:
        for start in range(0, 40_000, 2_000):
            store.write_lines(body("k", 2_000, start).decode())
        filler = fill(small_disk)
        with pytest.raises(sqlite3.OperationalError, match="full"):
            store.compact(now_ns=T0 + 10**6 * S)
        assert any(
            p.startswith("compaction failed: database or disk is full") for p in store.health()
        )
        filler.unlink()
        assert store.compact(now_ns=T0 + 10**6 * S) == 20  # every batch folded, none lost
        assert store.health() == []
        (data,) = store.read_series(store.list_series("cpu", "idle_seconds"), 0, 2**62)
        assert data.values.tolist() == [float(j) for j in range(2_000)] * 20


# ---------------------------------------------------------------- field types


def test_a_field_written_as_int_then_float_then_string(env, tmp_path):
    server = start_server(tmp_path, env)
    write = "/api/v2/write?bucket=b&precision=s"
    try:
        assert server.request("POST", write, b"conflict,host=t x=1i 1000")[0] == 204
        assert server.request("POST", write, b"conflict,host=t x=1.5 1001")[0] == 204
        status, _, reply = server.request("POST", write, b'conflict,host=t x="abc",y=2 1002')
        assert status == 400
        message = json.loads(reply)["message"]
        assert 'line 1: field "x" is a string, not stored' in message
        assert "the line's numeric fields were stored" in message
        # and back: a text-only line is named too, a number later is stored
        status, _, reply = server.request("POST", write, b'conflict,host=t x="def" 1003')
        assert status == 400 and 'field "x" is a string' in json.loads(reply)["message"]
        assert server.request("POST", write, b"conflict,host=t x=4u 1004")[0] == 204
    finally:
        server.stop()
    with SqliteStore(server.db) as store:
        (x,) = store.read_series(store.list_series("conflict", "x"), 0, 2**62)
        assert x.times_ns.tolist() == [1000 * S, 1001 * S, 1004 * S]
        assert x.values.tolist() == [1.0, 1.5, 4.0]  # one float64 series, the strings named
        (y,) = store.read_series(store.list_series("conflict", "y"), 0, 2**62)
        assert y.values.tolist() == [2.0]


CLOSE_WHILE_READING = """
import sys, threading
from collector.store import SqliteStore

store = SqliteStore(sys.argv[1])
reading = threading.Event()
outcome = []


def read():
    conn = store.db.read_conn()
    reading.set()
    # a long statement (a few hundred ms), as a background thread's read of a big run is
    (count,) = conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000000)"
        " SELECT count(*) FROM n"
    ).fetchone()
    outcome.append(count)


thread = threading.Thread(target=read)
thread.start()
reading.wait()
store.close()  # while the other thread is inside its statement
thread.join()
print(outcome)
"""


def test_closing_the_store_while_another_thread_reads_does_not_crash(env, tmp_path):
    """A dashboard stopped while its background thread reads a run closed that thread's
    reader under it: the interpreter died of a segmentation fault. Now the reader closes
    when its thread lets go of it. In a process of its own: the fault would kill pytest."""
    db = tmp_path / "s.sqlite"
    SqliteStore(db).close()
    for _ in range(3):  # the race is the statement's whole length: it is hit every time
        done = subprocess.run(
            [sys.executable, "-c", CLOSE_WHILE_READING, str(db)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == "[3000000]"
