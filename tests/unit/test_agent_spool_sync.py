"""When the spool is fdatasync'd (agent.spool): a segment when it stops taking appends and
is not delivered, or every batch with ``sync_each_batch``. The real fdatasync runs; a
spy around it records which files it was asked to sync (the only way to see a sync from
user space: its effect shows only after a machine crash)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent import config
from agent.spool import Spool

BATCH = b"cpu,host=n1 user=1.5 1700000000000000000"


@pytest.fixture
def synced_files(monkeypatch) -> list[str]:
    """The names of the files fdatasync'd from now on (the real call runs)."""
    names: list[str] = []
    real = os.fdatasync

    def spy(fd: int) -> None:
        real(fd)
        names.append(Path(os.readlink(f"/proc/self/fd/{fd}")).name)

    monkeypatch.setattr(os, "fdatasync", spy)
    return names


def test_appends_are_not_synced_and_a_delivered_segment_never_is(tmp_path, synced_files):
    spool = Spool(tmp_path, max_bytes=1 << 20)
    for _ in range(5):
        assert spool.append(BATCH, 1)
    batch, everything = spool.take(1 << 20, 8)
    assert everything and [segment.points for segment in batch] == [5]
    spool.remove(batch)
    assert synced_files == []


def test_a_segment_cut_for_its_size_is_synced_once(tmp_path, synced_files):
    spool = Spool(tmp_path, max_bytes=1 << 20, segment_max_bytes=200)
    for _ in range(5):  # 60 bytes a record with its checksum line: 3 fit in a segment
        spool.append(BATCH, 1)
    first = spool.oldest()
    assert first is not None and first.sealed and first.points == 3
    assert synced_files == [first.path.name]


def test_a_segment_whose_send_failed_is_synced_and_stays(tmp_path, synced_files):
    spool = Spool(tmp_path, max_bytes=1 << 20)
    spool.append(BATCH, 1)
    batch, _ = spool.take(1 << 20, 8)
    spool.release(batch)  # the receiver is down
    spool.release(spool.take(1 << 20, 8)[0])  # down again: nothing left to sync
    assert synced_files == [batch[0].path.name]
    assert batch[0].path.read_bytes().endswith(BATCH + b"\n")


def test_close_syncs_the_open_segment(tmp_path, synced_files):
    spool = Spool(tmp_path, max_bytes=1 << 20)
    spool.append(BATCH, 1)
    spool.close()
    assert synced_files == [spool.oldest().path.name]


def test_sync_each_batch_syncs_every_append(tmp_path, synced_files):
    spool = Spool(tmp_path, max_bytes=1 << 20, sync_each_batch=True)
    for _ in range(3):
        spool.append(BATCH, 1)
    spool.close()  # already synced: not again
    assert synced_files == [spool.oldest().path.name] * 3


def test_the_config_names_the_policy(tmp_path):
    path = tmp_path / "agent.toml"
    path.write_text("[push]\nurl = 'http://h'\nspool_sync = 'batch'\n")
    assert config.load(path, environ={}).push.spool_sync == "batch"
    path.write_text("[push]\nurl = 'http://h'\n")
    assert config.load(path, environ={}).push.spool_sync == "segment"
