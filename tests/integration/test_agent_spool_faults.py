"""The shipper survives a failing spool disk: real tmpfs mounts, a real loopback endpoint.

A small tmpfs is filled to the last byte (disk full while writing or sealing a segment)
or remounted read-only (a delivered segment cannot be deleted). Before this was fixed,
the first ``OSError`` ended the sender thread for good: nothing was delivered again until
a restart. Needs root for ``mount``; skipped elsewhere.
"""

from __future__ import annotations

import logging
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from agent.exposition import render
from agent.samplers.agent import AgentSampler, AgentStats
from agent.samplers.base import Roots
from agent.shipper import Shipper
from tests.integration.test_agent_shipper import Endpoint, expected_lines, points_for, wait_until


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs mounted for the test."""
    mountpoint = tmp_path / "disk"
    mountpoint.mkdir()
    if os.geteuid() != 0 or not _mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mountpoint)):
        pytest.skip("needs root and tmpfs mounts for a real full or read-only disk")
    yield mountpoint
    subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True)


def fill(disk: Path) -> Path:
    """Fill the file system to the last byte; the filler file to delete later."""
    filler = disk / f"filler-{uuid.uuid4().hex}"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"x" * 512)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def received_lines(endpoint: Endpoint) -> list[str]:
    return b"".join(endpoint.bodies).decode().splitlines()


def test_a_full_spool_disk_keeps_delivering_from_memory_and_resumes_the_spool(small_disk, caplog):
    endpoint = Endpoint()
    endpoint.stop()  # down first: the spool fills up, then the disk does
    stats = AgentStats()
    shipper = Shipper(
        endpoint.url,
        "secret-token",
        "o",
        "b",
        small_disk / "spool",
        stats=stats,
        segment_max_bytes=256,
        backoff_max_seconds=0.2,
    )
    shipper.start()
    try:
        with caplog.at_level(logging.INFO):
            shipper.submit(points_for(0))
            filler = fill(small_disk)
            for tick in range(1, 40):  # every new segment and every append now fail
                shipper.submit(points_for(tick))
            assert stats.spool_error == 1 and stats.memory_points > 0
            assert shipper._thread.is_alive()
            endpoint.start()
            # Delivered from the spool, then from memory, while the disk is still full.
            assert wait_until(lambda: len(received_lines(endpoint)) == 120, 30)
            assert received_lines(endpoint) == expected_lines(range(40))
            assert stats.points_dropped == 0
            filler.unlink()  # space returns: new points go through the spool again
            shipper.submit(points_for(40))
            assert wait_until(lambda: len(received_lines(endpoint)) == 123, 30)
        assert received_lines(endpoint) == expected_lines(range(41))
        assert stats.spool_error == 0 and stats.memory_points == 0
        failures = [r for r in caplog.records if "cannot write" in r.getMessage()]
        assert len(failures) == 1 and "No space left on device" in failures[0].getMessage()
        assert any("write works again" in r.getMessage() for r in caplog.records)
        # No segment was left holding a cut line.
        for segment in (small_disk / "spool").iterdir():
            assert segment.read_bytes().endswith(b"\n")
    finally:
        shipper.close(1)
        endpoint.stop()


def test_a_read_only_spool_directory_does_not_stop_delivery_or_resend(small_disk, caplog):
    endpoint = Endpoint()
    endpoint.stop()
    stats = AgentStats()
    shipper = Shipper(
        endpoint.url,
        "secret-token",
        "o",
        "b",
        small_disk / "spool",
        stats=stats,
        backoff_max_seconds=0.2,
    )
    shipper.start()
    try:
        for tick in range(5):
            shipper.submit(points_for(tick))
        shipper.queue.spool.close()  # seal the open segment: a file open for writing keeps it rw
        assert _mount("-o", "remount,ro", str(small_disk))
        with caplog.at_level(logging.INFO):
            endpoint.start()
            assert wait_until(lambda: len(received_lines(endpoint)) == 15, 30)
            assert wait_until(lambda: stats.spool_error == 1)
            for tick in range(5, 10):  # cannot be spooled either: sent from memory
                shipper.submit(points_for(tick))
            assert wait_until(lambda: len(received_lines(endpoint)) >= 30, 30)
            assert shipper._thread.is_alive()
            assert _mount("-o", "remount,rw", str(small_disk))
            shipper.submit(points_for(10))  # the next tick finds the spool writable again
            assert wait_until(
                lambda: stats.spool_error == 0 and len(received_lines(endpoint)) == 33, 30
            )
        assert received_lines(endpoint) == expected_lines(range(11))  # nothing sent twice
        assert wait_until(lambda: list((small_disk / "spool").iterdir()) == [])  # deleted at last
        assert len([r for r in caplog.records if "cannot delete" in r.getMessage()]) == 1
        # The condition is on /metrics while it lasts.
        stats.spool_error, stats.memory_points = 1, 7
        text = render(AgentSampler(Roots(), stats).sample(0))
        assert "epochscope_agent_spool_error 1" in text
        assert "epochscope_agent_memory_points 7" in text
    finally:
        shipper.close(1)
        endpoint.stop()
