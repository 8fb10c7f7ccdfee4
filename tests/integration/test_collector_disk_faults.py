"""The collector's disk fails under it: full while it is killed -9 (a real 8 MiB tmpfs), and
EIO from its store (a real FUSE mount failing on demand, ``tests/support/faulty_fs.py``).

Every write answered ``204`` before the fault is there after it; a write the store could
not take is never answered ``204`` (the writer keeps it and sends it again); the collector
says what is wrong on /health. Root needed for the mounts; skipped elsewhere.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collector.store import SqliteStore
from tests.integration.test_collector_ingest_server import start_server
from tests.integration.test_store_faults import body, env, fill, small_disk  # noqa: F401 (fixtures)
from tests.support.faulty_mount import faulty_mount

WRITE = "/api/v2/write?bucket=b"


def _hosts(db: Path) -> list[str]:
    with SqliteStore(db) as store:
        return sorted(info.host for info in store.list_series("cpu", "user_seconds"))


def test_a_full_disk_and_a_kill_9_keep_every_acknowledged_write(env, tmp_path, small_disk):  # noqa: F811
    db = small_disk / "c.sqlite"
    server = start_server(tmp_path, env, db=db)
    try:
        assert server.request("POST", WRITE, body("a", 100))[0] == 204
        filler = fill(small_disk)
        status, _, reply = server.request("POST", WRITE, body("b", 20_000))
        assert status != 204, reply  # not acknowledged: the writer keeps it
        server.process.kill()  # kill -9 while the disk is full
        server.process.wait(10)
    finally:
        server.stop()
    filler.unlink()
    server = start_server(tmp_path, env, db=db)
    try:
        status, _, reply = server.request("GET", "/health")
        assert (status, json.loads(reply)["status"]) == (200, "pass"), reply
        assert server.request("POST", WRITE, body("b", 20_000))[0] == 204  # sent again
    finally:
        server.stop()
    assert _hosts(db) == ["a", "b"]
    with SqliteStore(db) as store:
        (series,) = store.read_series(store.list_series("cpu", "user_seconds", "a"), 0, 2**62)
        assert len(series.times_ns) == 100


@pytest.fixture
def faulty_disk(tmp_path):
    """(mountpoint, control directory): the FUSE mount, and where its faults are switched."""
    # "cached": SQLite maps its -shm file, the page cache is kept
    with faulty_mount(tmp_path, "cached") as mounted:
        yield mounted


def test_eio_under_the_store_is_never_acknowledged_and_passes(env, tmp_path, faulty_disk):  # noqa: F811
    mountpoint, control = faulty_disk
    db = mountpoint / "c.sqlite"
    server = start_server(tmp_path, env, db=db)
    try:
        assert server.request("POST", WRITE, body("a", 100))[0] == 204
        (control / "write").touch()
        status, _, reply = server.request("POST", WRITE, body("b", 100, start=1000))
        assert status != 204, reply
        status, _, health = server.request("GET", "/health")
        assert status == 503, health
        (control / "write").unlink()
        # the writer sends it again: stored once the disk takes writes
        assert server.request("POST", WRITE, body("b", 100, start=1000))[0] == 204
        status, _, health_after = server.request("GET", "/health")
        assert status == 200, health_after
    finally:
        server.stop()
    assert _hosts(db) == ["a", "b"]
    print(reply, health)
