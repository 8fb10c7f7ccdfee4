"""Spool lines carry a CRC32 each (agent.spool): a line damaged on disk is reported with
its line number and skipped at replay, nothing else is lost, and spools written before
checksums still replay. Against a real ``collector serve`` on loopback; the damage is
done to the real segment files, as a bad sector or a stray write would."""

from __future__ import annotations

import logging
import zlib

from agent.shipper import Shipper
from agent.spool import Spool, verified_lines, with_checksums
from tests.integration.test_agent_shipper import expected_lines, points_for
from tests.integration.test_collector_ingest_server import start_server, stored


def test_with_checksums_round_trips_and_finds_each_kind_of_damage():
    body = b"disk,host=a reads=1i 1\ndisk,host=a reads=2i 2\ndisk,host=a reads=3i 3"
    data = with_checksums(body) + b"\n"
    crc = zlib.crc32(b"disk,host=a reads=1i 1")
    assert data.split(b"\n")[:2] == [b"#%08x" % crc, b"disk,host=a reads=1i 1"]
    assert verified_lines(data) == (body + b"\n", [])
    # a digit changed: still line protocol that parses, a different value
    flipped = data.replace(b"reads=2i", b"reads=7i")
    assert verified_lines(flipped) == (
        b"disk,host=a reads=1i 1\ndisk,host=a reads=3i 3\n",
        [2],
    )
    # the checksum itself damaged, a line without one among checksummed lines, zeros
    lines = data.split(b"\n")
    lines[0] = b"#zzzzzzzz"
    lines.insert(4, b"disk,host=a reads=9i 9")
    lines.insert(5, b"\x00" * 30)
    assert verified_lines(b"\n".join(lines)) == (
        b"disk,host=a reads=2i 2\ndisk,host=a reads=3i 3\n",
        [1, 3, 4],
    )
    # a checksum whose line was lost (a line break damaged), and one at the very end
    lines = data.split(b"\n")
    del lines[3]
    assert verified_lines(b"\n".join(lines) + b"#00000000\n") == (
        b"disk,host=a reads=1i 1\ndisk,host=a reads=3i 3\n",
        [2, 4],
    )
    # the first checksummed form, the checksum before the line on the same line
    first_form = b"".join(b"#%08x %s\n" % (zlib.crc32(line), line) for line in body.split(b"\n"))
    assert verified_lines(first_form) == (body + b"\n", [])
    assert verified_lines(first_form.replace(b"reads=2i", b"reads=7i"))[1] == [2]
    # a spool from before checksums: taken as it is
    old = b"disk,host=a reads=1i 1\ndisk,host=a reads=2i 2\n"
    assert verified_lines(old) == (old, [])


def test_a_damaged_line_is_skipped_and_reported_the_rest_delivered(tmp_path, caplog, repo_env):
    """Four ticks of three lines spooled while the collector is down; on disk, one value
    of tick 1 is changed (the line still parses) and a line of tick 2 gets random bytes.
    At replay: those two lines are skipped, named by segment and line number in one log
    line, counted in points_dropped; the ten others are stored with their values."""
    spool_dir = tmp_path / "spool"
    spool = Spool(spool_dir, 1 << 20)  # what the agent's shipper appends, tick by tick
    for tick in range(4):
        assert spool.append("\n".join(expected_lines(range(tick, tick + 1))).encode(), 3)
    spool.close()
    (segment,) = sorted(spool_dir.glob("*.lp"))
    lines = segment.read_bytes().split(b"\n")
    assert len(lines) == 25 and lines[-1] == b""  # a checksum line before each of 12
    lines[9] = lines[9].replace(b"reads=1i", b"reads=8i")  # line 5: tick 1, sd1
    lines[15] = b"\xde\xad\xbe\xef" + lines[15][4:]  # line 8: tick 2, sd1
    segment.write_bytes(b"\n".join(lines))

    collector = start_server(tmp_path, repo_env)
    try:
        second = Shipper(collector.url, None, "o", "b", spool_dir, backoff_max_seconds=0.2)
        with caplog.at_level(logging.INFO):
            second.start()
            assert second.flush(30)
        second.close()
        assert second.queue.spool.points_dropped == 2
        devices = stored(collector.db, "disk", "reads", "n1")
        assert devices[("n1", (("device", "sd0"),))] == (
            [t * 10**9 for t in range(4)],
            [0, 1, 2, 3],
        )
        assert devices[("n1", (("device", "sd2"),))][1] == [0, 1, 2, 3]
        times, values = devices[("n1", (("device", "sd1"),))]
        assert times == [1, 3 * 10**9 + 1] and values == [0.0, 3.0]  # 8 was never stored
        damaged = [r.getMessage() for r in caplog.records if "damaged on disk" in r.getMessage()]
        assert damaged == [
            f"spool: {segment.name}: line 5, 8 damaged on disk (checksum mismatch): skipped, "
            "the segment's other lines are sent"
        ]
    finally:
        collector.stop()


def test_a_spool_written_before_checksums_still_replays(tmp_path, repo_env):
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    old = "".join(line + "\n" for line in expected_lines(range(2)))
    (spool_dir / "00000000000000000003.lp").write_text(old)
    assert Spool(spool_dir, 1 << 20).points == 6
    collector = start_server(tmp_path, repo_env)
    try:
        shipper = Shipper(collector.url, None, "o", "b", spool_dir, backoff_max_seconds=0.2)
        shipper.start()
        shipper.submit(points_for(2))  # a new, checksummed segment after the old one
        assert shipper.flush(30)
        shipper.close()
        assert shipper.queue.spool.points_dropped == 0
        devices = stored(collector.db, "disk", "reads", "n1")
        for n in range(3):
            times, values = devices[("n1", (("device", f"sd{n}"),))]
            assert times == [t * 10**9 + n for t in range(3)] and values == [0.0, 1.0, 2.0]
    finally:
        collector.stop()
