"""Each NFS mount's read rate as a ceiling (``agent ceilings``), and the report and the
storage-bound finding stating NFS reads against it.

This machine has no NFS client. The mounts are found in real captured
``/proc/self/mountstats`` files (the shared fixtures); the timed read runs on a real
directory of this machine's disk standing in for a mount point (its file system, not NFS,
answers the O_DIRECT reads): what is tested there is the bounded read and the bookkeeping,
not an NFS server's rate.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from agent import ceilings
from agent.samplers.ceilings import CeilingsSampler
from collector.analysis.epochs import build_report
from contract.point import Point
from contract.schema import Ceiling, Tag
from tests.conftest import REPO_ROOT
from tests.support.run_builder import NS, T0_NS, RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

ROOTS = REPO_ROOT.parent / "shared" / "fixtures" / "roots"
MIB = 1 << 20


def captured_mountstats(root: str) -> str:
    path = ROOTS / root / "proc" / "self" / "mountstats"
    if not path.is_file():
        pytest.skip("the shared fixtures are not beside this checkout")
    return path.read_text()


def test_the_nfs_mounts_of_captured_hosts_one_per_server_file_system():
    # ten mounts of one NAS whose counters come in two groups: two superblocks
    assert ceilings.nfs_mountpoints(captured_mountstats("pcp-nas-nfsv3")) == [
        "/nasbox/music",
        "/nasbox/newmovies",
    ]
    # NFSv3 (Isilon) and v4.0/v4.1 mounts; the local ext3 and tmpfs mounts are not NFS
    assert ceilings.nfs_mountpoints(captured_mountstats("pcp-isilon-nfs")) == [
        "/ifs",
        "/mnt/nfsv4",
        "/ifsfoo",
        "/mnt/nfs41",
    ]
    assert ceilings.nfs_mountpoints(captured_mountstats("pcp-nfsv42-krb5p")) == ["/home"]


def test_the_mount_holding_a_path_is_the_deepest():
    mounts = ["/ifs", "/ifsfoo", "/ifs/data"]
    assert ceilings.mount_holding("/ifs/data/train/a.jpg", mounts) == "/ifs/data"
    assert ceilings.mount_holding("/ifs/other", mounts) == "/ifs"
    assert ceilings.mount_holding("/ifsfoo/x", mounts) == "/ifsfoo"  # not /ifs's
    assert ceilings.mount_holding("/home/x", mounts) is None


def test_a_real_directory_standing_in_for_a_mount_is_read_bounded(tmp_path):
    """A scratch file written and read at the stand-in mount point, then removed; a given
    file is read only up to the byte bound; a file under two blocks is refused."""
    mount = str(tmp_path)
    scratch = ceilings.nfs_ceiling(mount, None, tmp_path, 8, 2.0, 5.0)
    assert scratch.field == str(Ceiling.NFS_READ) and scratch.kind == "nfs"
    assert scratch.device == mount and scratch.measured_at == 5.0
    assert scratch.method in ("o_direct", "fadvise") and scratch.value > 1e6
    assert list(tmp_path.iterdir()) == []
    data = tmp_path / "shard-0.tfrecord"
    data.write_bytes(os.urandom(12 * MIB))
    before = os.times()
    read = ceilings.nfs_ceiling(mount, data, tmp_path, 4, 2.0, 5.0)
    assert read.value > 1e6 and data.stat().st_size == 12 * MIB  # read, not rewritten
    assert os.times().elapsed - before.elapsed < 2.0
    tiny = tmp_path / "tiny"
    tiny.write_bytes(b"x" * MIB)
    with pytest.raises(ValueError, match="too small"):
        ceilings.nfs_ceiling(mount, tiny, tmp_path, 4, 1.0, 5.0)


def test_each_mount_is_measured_or_logged(tmp_path, caplog):
    """The captured Isilon host's ``/ifs`` mount line names the stand-in directory; its
    other mounts do not exist here, so they are logged and left out, not measured."""
    text = captured_mountstats("pcp-isilon-nfs").replace(
        "mounted on /ifs with", f"mounted on {tmp_path} with"
    )
    (tmp_path / "imagenet").mkdir()
    plan = ceilings.NfsPlan(text, size_mib=4, seconds=1.0)
    with caplog.at_level(logging.WARNING, logger="agent.ceilings"):
        found = ceilings.nfs_ceilings(plan, tmp_path / "imagenet", 9.0)
    assert [(m.device, m.kind) for m in found] == [(str(tmp_path), "nfs")]
    assert list((tmp_path / "imagenet").iterdir()) == []  # the scratch file was there
    skipped = sorted(r.args[0] for r in caplog.records if "not measured" in r.getMessage())
    assert skipped == ["/ifsfoo", "/mnt/nfs41", "/mnt/nfsv4"]


def test_a_data_dir_on_nfs_gets_the_mounts_ceiling_not_a_disks(tmp_path, caplog):
    """A disk ceiling measured there would be NFS's, added to the local disks' sum."""
    text = captured_mountstats("pcp-nfsv42-krb5p").replace(
        "mounted on /home with", f"mounted on {tmp_path} with"
    )
    plan = ceilings.NfsPlan(text, files=(REPO_ROOT / "pyproject.toml",), size_mib=4, seconds=1)
    with caplog.at_level(logging.WARNING, logger="agent.ceilings"):
        found = ceilings.measure(tmp_path, 4, 1.0, 0.05, REPO_ROOT / "no-sys", plan)
    assert {m.kind for m in found} == {"nfs", "cpu"}  # no disk, no link, no GPU here
    assert list(tmp_path.iterdir()) == []  # the NFS scratch file went in --data-dir, removed
    assert "is on no NFS mount: not read" in caplog.text  # the file outside every mount


def test_the_command_reads_the_given_file_and_the_sampler_reports_it(tmp_path, repo_env):
    """``agent ceilings --proc-root`` over a proc tree holding the captured mountstats
    (its ``/ifs`` moved to the stand-in); ``--nfs-file`` names a data set file there."""
    mount, proc = tmp_path / "ifs", tmp_path / "proc" / "self"
    mount.mkdir()
    proc.mkdir(parents=True)
    (proc / "mountstats").write_text(
        captured_mountstats("pcp-isilon-nfs").replace(
            "mounted on /ifs with", f"mounted on {mount} with"
        )
    )
    data = mount / "train.bin"
    data.write_bytes(os.urandom(6 * MIB))
    kept = tmp_path / "ceilings.json"
    result = subprocess.run(
        [sys.executable, "-m", "agent", "ceilings", "--data-dir", str(tmp_path),
         "--disk-mib", "4", "--disk-seconds", "0.5", "--cpu-seconds", "0.1",
         "--proc-root", str(tmp_path / "proc"), "--nfs-file", str(data), "--nfs-mib", "6",
         "--nfs-seconds", "1", "--out", str(kept)],
        capture_output=True, text=True, env=repo_env, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"nfs        {mount}" in result.stdout
    (nfs,) = [m for m in ceilings.from_json(kept.read_text()) if m.kind == "nfs"]
    assert nfs.device == str(mount) and nfs.value > 1e6
    assert sorted(mount.iterdir()) == [data]  # the given file read, nothing written
    (point,) = [p for p in CeilingsSampler(None, kept).sample(NS) if p.tags[Tag.KIND] == "nfs"]
    assert point.fields[str(Ceiling.NFS_READ)] == nfs.value
    assert point.tags[Tag.DEVICE] == str(mount)


def nfs_ceiling_points(hosts, bytes_per_second: float) -> list[Point]:
    return [
        Point(
            Ceiling.NAME,
            {Tag.HOST: host, Tag.DEVICE: "/data", Tag.KIND: "nfs", Tag.METHOD: "o_direct"},
            {str(Ceiling.NFS_READ): bytes_per_second, str(Ceiling.MEASURED_AT): 1.0},
            T0_NS + second * NS,
        )
        for host in hosts
        for second in range(-5, 200, 5)
    ]


def test_the_report_states_nfs_reads_as_a_share_of_the_mounts_ceiling(make_store):
    run = RunBuilder("nfsceil", warmup_steps=2)
    run.epoch(20, 400, nfs_server_read=50e6, nfs_app_read=60e6)  # 50 MB/s from the server
    store = make_store([*run.points(), *nfs_ceiling_points(run.hosts, 200e6)])
    row = build_report(store, "nfsceil").rows[0]
    assert row.nfs_server_read_mbps == pytest.approx(50.0, rel=0.02)
    assert row.nfs_read_ceiling_percent == pytest.approx(25.0, rel=0.02)
    (bare, *_) = build_report(make_store(run.points()), "nfsceil").rows
    assert bare.nfs_read_ceiling_percent is None


@pytest.mark.parametrize(
    ("disk_read", "nfs_read", "stated"),
    [
        (0.0, 180e6, "90% of {host}'s measured NFS read ceiling"),  # the data set on NFS
        (180e6, 5e6, "18% of {host}'s measured disk read ceiling"),  # on the local disk
    ],
)
def test_the_storage_bound_finding_judges_reads_against_where_they_came_from(
    make_store, disk_read, nfs_read, stated
):
    """NFS ceiling 200 MB/s, disk ceiling 1000 MB/s: NFS reads of 180 MB/s are at 90% of
    the mount's (the mount at its limit); disk reads of 180 MB/s are at 18% of the disk's."""
    from collector.findings.engine import run_findings
    from tests.integration.test_ceilings import ceiling_points

    run = RunBuilder("nfsbound", steps_per_epoch=6)
    run.epoch(
        100, 6_000, step_pattern=(1, 3), disk_read=disk_read, nfs_server_read=nfs_read,
        nfs_app_read=nfs_read, cpu_busy=0.3, cpu_iowait=0.2,
    )  # fmt: skip
    run.epoch(60, 6_000, cpu_busy=0.6)
    ceiling = [*ceiling_points(run.hosts, 1000e6), *nfs_ceiling_points(run.hosts, 200e6)]
    store = make_store([*run.points(), *ceiling])
    (finding,) = [f for f in run_findings(store, "nfsbound") if f.rule == "storage_bound"]
    assert stated.format(host=run.hosts[0]) in finding.explanation
    worst = finding.evidence["host_epochs"][0]
    if nfs_read > disk_read:
        assert worst["nfs_read_ceiling_percent"] == 90
        assert "the NFS mount was at its measured limit" in finding.explanation
    else:
        assert "nfs_read_ceiling_percent" not in worst


def test_the_nfs_share_prints_the_same_in_the_table_json_and_dashboard(make_store):
    from tests.support.views import assert_views_agree

    run = RunBuilder("nfsviews", warmup_steps=2)
    run.epoch(20, 400, nfs_server_read=50e6, nfs_app_read=60e6)
    store = make_store([*run.points(), *nfs_ceiling_points(run.hosts, 200e6)])
    shown = assert_views_agree(store, "nfsviews", ["nfs_read_ceiling_percent"])
    assert shown["nfs_read_ceiling_percent"] == pytest.approx(25.0, rel=0.02)
