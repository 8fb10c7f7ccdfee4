"""ProcFile: per-tick files kept open and re-read with pread where that is safe."""

from __future__ import annotations

import os
from pathlib import Path

from agent.samplers.base import ProcFile


def test_a_procfs_file_stays_open_and_is_read_fresh_each_time():
    stat = ProcFile(Path("/proc/self/stat"))
    first = stat.read()
    assert first is not None and first.startswith(f"{os.getpid()} (")
    assert stat._fd is not None  # kept: procfs reports size 0 and regenerates the text
    fd = stat._fd
    sum(range(2_000_000))  # burn some CPU so utime moves
    second = stat.read()
    assert stat._fd == fd  # the same descriptor, read again with pread
    assert second is not None and second.split()[:3] == first.split()[:3]
    stat.close()
    assert stat._fd is None


def test_a_regular_file_is_opened_each_time_so_a_replaced_file_is_seen(tmp_path):
    path = tmp_path / "diskstats"
    path.write_text("one\n")
    reader = ProcFile(path)
    assert reader.read() == "one\n"
    assert reader._fd is None  # a captured tree: not kept open
    replacement = tmp_path / "new"
    replacement.write_text("two\n")
    replacement.replace(path)  # a new inode under the same name
    assert reader.read() == "two\n"
    path.unlink()
    assert reader.read() is None  # gone: no data, no error


def test_a_file_larger_than_the_buffer_is_read_whole(tmp_path):
    path = tmp_path / "big"
    text = "".join(f"line {n}\n" for n in range(30_000))  # ~260 KB, > 64 KiB
    path.write_text(text)
    reader = ProcFile(path)
    assert reader.read() == text
    assert reader.read() == text


def test_a_missing_file_reads_none(tmp_path):
    assert ProcFile(tmp_path / "nothing").read() is None
