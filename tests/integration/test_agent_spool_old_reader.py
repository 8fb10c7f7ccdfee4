"""An older agent replaying a spool written by this one (a node rolled back after an
upgrade, with points still spooled): the agent code from just before spool checksums
(commit 944f2c9's parent, taken from git) runs in a subprocess and sends a spool this
code wrote to a real ``collector serve``.

The checksum stands on a line of its own before its line: to the old agent, which sends a
segment's bytes as they are, and to the collector, that line is a comment, so every point
is stored. The first checksummed form (``#xxxxxxxx <line>``) made each line a comment:
the old agent sent it, got ``204`` and nothing was stored; the test keeps that case to
show why the form changed.

Skipped where the repository's history is not at hand (an archive, a shallow clone).
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zlib
from pathlib import Path

import pytest

from agent.spool import Spool
from tests.conftest import REPO_ROOT
from tests.integration.test_agent_shipper import expected_lines
from tests.integration.test_collector_ingest_server import start_server, stored

BEFORE_CHECKSUMS = "944f2c9^"  # agent spool: a CRC32 per line
PACKAGES = ("agent", "contract", "netserve")  # what the old agent's shipper imports

OLD_AGENT_REPLAY = """
import sys
from pathlib import Path
from agent.shipper import Shipper
shipper = Shipper(sys.argv[1], None, "o", "b", Path(sys.argv[2]), backoff_max_seconds=0.2)
shipper.start()
assert shipper.flush(30), "the old agent did not deliver its spool"
shipper.close()
print(shipper.queue.spool.points_dropped)
"""


@pytest.fixture(scope="module")
def old_agent(tmp_path_factory) -> Path:
    """A tree with the packages the old agent imports, as they were before checksums."""
    tree = tmp_path_factory.mktemp("old-agent")
    archive = tree / "old.tar"
    made = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "archive", "-o", str(archive), BEFORE_CHECKSUMS, *PACKAGES],
        capture_output=True,
    )
    if made.returncode != 0:
        pytest.skip(f"no git history for {BEFORE_CHECKSUMS}: {made.stderr[-200:]!r}")
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    assert (
        b"def read(self) -> bytes:\n        return self.path.read_bytes()"
        in (tree / "agent" / "spool.py").read_bytes()
    )
    return tree


def _replay_with_old_agent(old_agent: Path, url: str, spool_dir: Path) -> int:
    """Run the old agent's shipper over ``spool_dir``; the points it counted as dropped."""
    done = subprocess.run(
        [sys.executable, "-c", OLD_AGENT_REPLAY, url, str(spool_dir)],
        cwd=old_agent,
        env={"PYTHONPATH": str(old_agent), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.split()[-1])


def _spool_ticks(spool_dir: Path, ticks: range) -> None:
    spool = Spool(spool_dir, 1 << 20)
    for tick in ticks:
        assert spool.append("\n".join(expected_lines(range(tick, tick + 1))).encode(), 3)
    spool.close()


def test_an_older_agent_delivers_every_point_of_a_newer_checksummed_spool(
    old_agent, tmp_path, repo_env
):
    spool_dir = tmp_path / "spool"
    _spool_ticks(spool_dir, range(4))
    assert b"\n#" in next(spool_dir.glob("*.lp")).read_bytes()  # checksummed
    collector = start_server(tmp_path, repo_env)
    try:
        assert _replay_with_old_agent(old_agent, collector.url, spool_dir) == 0
        devices = stored(collector.db, "disk", "reads", "n1")
    finally:
        collector.stop()
    for n in range(3):
        times, values = devices[("n1", (("device", f"sd{n}"),))]
        assert times == [t * 10**9 + n for t in range(4)] and values == [0.0, 1.0, 2.0, 3.0]
    assert list(spool_dir.glob("*.lp")) == []  # delivered, so deleted


def test_the_first_checksummed_form_was_lost_on_an_older_agent(old_agent, tmp_path, repo_env):
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    lines = expected_lines(range(2))
    first_form = "".join(f"#{zlib.crc32(line.encode()):08x} {line}\n" for line in lines)
    (spool_dir / "00000000000000000001.lp").write_text(first_form)
    collector = start_server(tmp_path, repo_env)
    try:
        assert _replay_with_old_agent(old_agent, collector.url, spool_dir) == 0
        devices = stored(collector.db, "disk", "reads", "n1")
    finally:
        collector.stop()
    assert devices == {}  # 204 for comments only: every point lost, nothing said
