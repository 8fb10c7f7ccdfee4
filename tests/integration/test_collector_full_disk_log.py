"""A collector whose disk is full fails every write alike; it used to log a traceback per
failed write (154 failures, 3,860 log lines in 8 s). Now the first failure is logged with
its traceback and the rest of the minute are counted into the next line. A real
``collector serve`` on a real full tmpfs (root needed for ``mount``; skipped elsewhere)."""

from __future__ import annotations

from tests.integration.test_collector_ingest_server import start_server
from tests.integration.test_store_faults import body, env, fill, small_disk  # noqa: F401

FAILED_WRITES = 40


def test_writes_failing_on_a_full_disk_log_one_traceback(env, tmp_path, small_disk):  # noqa: F811
    server = start_server(tmp_path, env, db=small_disk / "c.sqlite")
    try:
        write = "/api/v2/write?bucket=b"
        assert server.request("POST", write, body("a", 100))[0] == 204
        fill(small_disk)
        statuses = [
            server.request("POST", write, body(f"h{n}", 20_000))[0] for n in range(FAILED_WRITES)
        ]
        log = server.log.read_text()
    finally:
        server.stop()
    assert statuses == [500] * FAILED_WRITES
    failures = [line for line in log.splitlines() if "write failed:" in line]
    assert len(failures) == 1, failures
    assert "database or disk is full" in failures[0]
    assert log.count("Traceback (most recent call last)") == 1
