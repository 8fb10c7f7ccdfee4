"""The spool directory is checked before use (issue 44, item 10), on real directories of
this machine: refused when a symlink, another user's or writable by group/others; made 0700
with 0600 segments otherwise. Needs root (to hand a directory to ``nobody``)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agent.queue import PointQueue, UnsafeSpoolDirectory, check_spool_directory, unsafe_reason

NOBODY = 65534
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown to nobody")


@root_only
def test_a_world_writable_directory_owned_by_nobody_is_refused(tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    os.chown(spool, NOBODY, NOBODY)
    spool.chmod(0o777)
    with pytest.raises(UnsafeSpoolDirectory, match="owned by uid 65534"):
        PointQueue(spool, 1 << 20)
    assert list(spool.iterdir()) == []  # nothing written into it


def test_a_group_writable_directory_of_the_agent_is_refused(tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    spool.chmod(0o770)
    with pytest.raises(UnsafeSpoolDirectory, match="mode 0770"):
        check_spool_directory(spool)


@root_only
def test_a_symlink_into_a_root_only_directory_is_not_followed(tmp_path):
    secret = tmp_path / "root-only"
    secret.mkdir(mode=0o700)
    (secret / "keep").write_text("x")
    link = tmp_path / "spool"
    link.symlink_to(secret)
    with pytest.raises(UnsafeSpoolDirectory, match="symlink"):
        PointQueue(link, 1 << 20)
    assert sorted(p.name for p in secret.iterdir()) == ["keep"]


def test_a_new_spool_is_0700_and_its_segments_0600(tmp_path):
    spool = tmp_path / "new" / "spool"
    queue = PointQueue(spool, 1 << 20)
    queue.put(b"m v=1 1", 1)
    queue.close()
    assert stat.S_IMODE(spool.stat().st_mode) == 0o700
    segments = list(spool.iterdir())
    assert segments and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in segments)


def test_reasons():
    directory, link = stat.S_IFDIR | 0o755, stat.S_IFLNK | 0o777
    assert unsafe_reason(directory, 0, 0) is None
    assert unsafe_reason(stat.S_IFDIR | 0o1777, 0, 0) is not None  # /tmp itself
    assert "symlink" in (unsafe_reason(link, 0, 0) or "")
    assert "not a directory" in (unsafe_reason(stat.S_IFREG | 0o600, 0, 0) or "")


@root_only
def test_agent_run_stops_with_one_line_naming_the_directory(tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    os.chown(spool, NOBODY, NOBODY)
    config = tmp_path / "agent.toml"
    config.write_text(f'[push]\nurl = "http://127.0.0.1:9"\nspool_dir = "{spool}"\n')
    result = subprocess.run(
        [sys.executable, "-m", "agent", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if "spool" in line]
    assert len(lines) == 1 and str(spool) in lines[0] and "owned by uid 65534" in lines[0]
    assert "Traceback" not in result.stderr
