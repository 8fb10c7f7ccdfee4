"""EIO under the spool: the kernel answers the agent's writes, fsyncs and reads with EIO.

The spool lives on a real FUSE mount (``tests/support/faulty_fs.py``) that fails writes or
reads on demand, the nearest real fault this machine has: its kernel has no device-mapper
(``error``/``flakey`` targets), it has FUSE. The shipper sends to a real loopback endpoint.

- writes failing: points go to memory and are sent from there (one log line), the spool
  takes them again when writes work, nothing lost;
- every read failing (a failing disk): nothing dropped, the points wait and are sent once
  reads work;
- reads of one segment failing (a bad sector): that segment, and only it, is dropped after
  a few tries with one line naming it, counted in ``points_dropped``.

Needs root, /dev/fuse, libfuse2 and fusepy; skipped elsewhere.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from agent.samplers.agent import AgentStats
from agent.shipper import UNREADABLE_SEGMENT_TRIES, Shipper
from tests.integration.test_agent_shipper import Endpoint, expected_lines, points_for, wait_until
from tests.integration.test_agent_spool_faults import received_lines
from tests.support.faulty_mount import faulty_mount


@pytest.fixture
def faulty_disk(tmp_path):
    """(mountpoint, control directory): the FUSE mount, and where its faults are switched."""
    with faulty_mount(tmp_path) as mounted:
        yield mounted


def _shipper(endpoint: Endpoint, spool: Path, stats: AgentStats) -> Shipper:
    return Shipper(
        endpoint.url,
        "secret-token",
        "o",
        "b",
        spool,
        stats=stats,
        segment_max_bytes=256,  # a segment every tick or so
        backoff_max_seconds=0.2,
    )


def test_failing_writes_send_from_memory_and_lose_nothing(faulty_disk, caplog):
    mountpoint, control = faulty_disk
    endpoint = Endpoint()
    stats = AgentStats()
    shipper = _shipper(endpoint, mountpoint / "spool", stats)
    shipper.start()
    try:
        with caplog.at_level(logging.INFO):
            for tick in range(5):
                shipper.submit(points_for(tick))
            assert wait_until(lambda: len(received_lines(endpoint)) == 15, 30)
            (control / "write").touch()
            for tick in range(5, 25):
                shipper.submit(points_for(tick))
            assert wait_until(lambda: len(received_lines(endpoint)) == 75, 30)
            assert stats.spool_error == 1
            (control / "write").unlink()
            shipper.submit(points_for(25))
            assert wait_until(lambda: len(received_lines(endpoint)) == 78, 30)
            assert wait_until(lambda: stats.spool_error == 0)
        assert received_lines(endpoint) == expected_lines(range(26))
        assert stats.points_dropped == 0
        failures = [r.getMessage() for r in caplog.records if "cannot write" in r.getMessage()]
        assert len(failures) == 1 and "Input/output error" in failures[0], failures
        assert sum("write works again" in r.getMessage() for r in caplog.records) == 1
    finally:
        shipper.close(1)
        endpoint.stop()


def test_failing_reads_drop_nothing_and_one_bad_segment_only_itself(faulty_disk, caplog):
    mountpoint, control = faulty_disk
    endpoint = Endpoint()
    endpoint.stop()  # down while the spool fills
    stats = AgentStats()
    spool = mountpoint / "spool"
    shipper = _shipper(endpoint, spool, stats)
    shipper.start()
    try:
        with caplog.at_level(logging.INFO):
            for tick in range(12):
                shipper.submit(points_for(tick))
            shipper.queue.spool.close()
            segments = sorted(spool.glob("*.lp"))
            assert len(segments) >= 3
            bad = segments[1]
            bad_ticks = sorted({int(line.rsplit(" ", 1)[1]) // 10**9 for line in _lines(bad)})
            (control / "read").touch()  # every read fails: a failing disk
            endpoint.start()
            time.sleep(UNREADABLE_SEGMENT_TRIES * 0.5 + 2)  # past the tries at full backoff
            assert received_lines(endpoint) == [] and stats.points_dropped == 0
            assert stats.spool_error == 1
            (control / "read").write_text(bad.name)  # then only one segment's: a bad sector
            kept = [tick for tick in range(12) if tick not in bad_ticks]
            assert wait_until(lambda: len(received_lines(endpoint)) == 3 * len(kept), 30)
        assert received_lines(endpoint) == expected_lines(kept)
        assert stats.points_dropped == 3 * len(bad_ticks)
        messages = [r.getMessage() for r in caplog.records]
        assert sum("cannot read (Input/output error)" in m for m in messages) == 1, messages
        dropped = [m for m in messages if "cannot be read after" in m]
        assert len(dropped) == 1 and bad.name in dropped[0], messages
        assert f"its {3 * len(bad_ticks)} points are dropped" in dropped[0]
    finally:
        shipper.close(1)
        endpoint.stop()


def _lines(segment: Path) -> list[str]:
    from agent.spool import verified_lines

    return verified_lines(segment.read_bytes())[0].decode().split("\n")[:-1]


def test_points_after_a_long_write_failure_are_sent_at_once(faulty_disk):
    """With the spool's writes failing and nothing left to send, the sender waits for new
    points (a put retries the write itself), not out a backoff that kept doubling while
    nothing was sent: before, a point submitted 7.6 s into the failure waited out the
    8 s pause then under way."""
    mountpoint, control = faulty_disk
    endpoint = Endpoint()
    shipper = Shipper(endpoint.url, "secret-token", "o", "b", mountpoint / "spool",
                      stats=AgentStats(), segment_max_bytes=256,
                      backoff_max_seconds=30.0)  # fmt: skip
    shipper.start()
    try:
        (control / "write").touch()
        shipper.submit(points_for(0))
        assert wait_until(lambda: len(received_lines(endpoint)) == 3, 30)
        time.sleep(7.6)  # backoffs of 0.5 + 1 + 2 + 4 s had passed; the next was 8 s
        (control / "write").unlink()
        submitted = time.monotonic()
        shipper.submit(points_for(1))
        assert wait_until(lambda: len(received_lines(endpoint)) == 6, 30)
        assert time.monotonic() - submitted < 4.0  # not the 8 s pause's remainder
    finally:
        shipper.close(1)
        endpoint.stop()
