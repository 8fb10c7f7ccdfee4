"""A real FUSE mount failing on demand (``tests/support/faulty_fs.py``) for a test: mounted
in a child process, unmounted after; the test is skipped where FUSE cannot mount."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def faulty_mount(base: Path, *options: str) -> Iterator[tuple[Path, Path]]:
    """(mountpoint, control directory): the mount, and where its faults are switched.
    ``options``: faulty_fs's own after its three paths (e.g. "cached")."""
    pytest.importorskip("fuse", reason="needs fusepy (and libfuse2)")
    if os.geteuid() != 0 or not Path("/dev/fuse").exists():
        pytest.skip("needs root and /dev/fuse for a real EIO")
    backing, mountpoint, control = (base / name for name in ("backing", "mnt", "control"))
    for directory in (backing, mountpoint, control):
        directory.mkdir()
    paths = [str(path) for path in (backing, mountpoint, control)]
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.support.faulty_fs", *paths, *options],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 10
    while not os.path.ismount(mountpoint):
        if time.monotonic() > deadline or server.poll() is not None:
            server.kill()
            pytest.skip(f"FUSE mount failed: {server.communicate()[1][-500:]!r}")
        time.sleep(0.05)
    try:
        yield mountpoint, control
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True)
        server.wait(10)
