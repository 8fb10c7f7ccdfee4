"""The nfs sampler against every captured tree with NFS data (this machine has no NFS client).

Expected numbers are copied by hand from each tree's ``proc/self/mountstats`` and
``proc/net/rpc/nfs``. Column order, from the kernel: ``bytes:`` = normal read, normal
write, direct read, direct write, server read, server write, read pages, write pages;
per-op rows = ops, transmissions, major timeouts, bytes sent, bytes received, queue ms,
rtt ms, execute ms[, errors].
"""

from __future__ import annotations

import logging

import pytest

from agent.samplers import make_sampler
from agent.samplers.base import Roots
from agent.samplers.nfs import mount_points, parse_mountstats, parse_rpc, split_device
from contract.point import Point, encode_lines
from contract.schema import Nfs, NfsRpc
from tests.conftest import fixture_root

NOW = 1_700_000_000_000_000_000
OP_COLUMNS = (
    "ops",
    "transmissions",
    "major_timeouts",
    "bytes_sent",
    "bytes_received",
    "queue_seconds",
    "rtt_seconds",
    "execute_seconds",
    "errors",
)
BYTES_COLUMNS = (
    "app_read_bytes",
    "app_write_bytes",
    "direct_read_bytes",
    "direct_write_bytes",
    "server_read_bytes",
    "server_write_bytes",
    "read_pages",
    "write_pages",
)


def bytes_line(*values: int) -> dict[str, int]:
    """The fields of a ``bytes:`` line, values typed in from the file."""
    assert len(values) == 8
    return dict(zip(BYTES_COLUMNS, values, strict=True))


def op_row(op: str, *values: int) -> dict[str, int | float]:
    """The fields of a ``READ:``/``WRITE:`` row, values typed in from the file (the
    kernel's queue, rtt and execute milliseconds become seconds)."""
    assert len(values) in (8, 9)
    return {
        f"{op}_{column}": value / 1000 if column.endswith("_seconds") else value
        for column, value in zip(OP_COLUMNS, values, strict=False)
    }


def sample_tree(name: str) -> list[Point]:
    root = fixture_root(name)
    sampler = make_sampler("nfs", Roots(proc=root / "proc", sys=root / "sys"))
    assert sampler.available()
    points = sampler.sample(NOW)
    assert all(p.time_ns == NOW for p in points)
    return points


def nfs_by_mountpoint(points: list[Point]) -> dict[str, Point]:
    mounts = [p for p in points if p.measurement == Nfs.NAME]
    by_mountpoint = {p.tags["mountpoint"]: p for p in mounts}
    assert len(by_mountpoint) == len(mounts)
    return by_mountpoint


def rpc_fields(points: list[Point]) -> dict | None:
    rpc = [p for p in points if p.measurement == NfsRpc.NAME]
    assert len(rpc) <= 1
    if rpc:
        assert rpc[0].tags == {}
        return rpc[0].fields
    return None


def test_procfs_tree_one_nfs4_mount_and_rpc():
    points = sample_tree("procfs-mlx-hfi")
    mounts = nfs_by_mountpoint(points)
    assert list(mounts) == ["/mnt/nfs/test"]  # rootfs, sysfs, proc, ext4 skipped
    mount = mounts["/mnt/nfs/test"]
    assert mount.tags == {
        "mountpoint": "/mnt/nfs/test",
        "server": "192.168.1.1",
        "export": "/srv/test",
        "nfs_version": "4.0",
        "proto": "tcp",
    }
    assert mount.fields == {
        **bytes_line(1207640230, 0, 0, 0, 1210214218, 0, 295483, 0),
        **op_row("read", 1298, 1298, 0, 207680, 1210292152, 6, 79386, 79407),
        **op_row("write", 0, 0, 0, 0, 0, 0, 0, 0),
        "age_seconds": 13968.0,
    }
    # The ACCESS row holds 18446743919241604546 (2**64 - 154467947070: a wrapped negative
    # time); ACCESS is not a field, and the sampler must not trip over it.
    # rpc line "rpc 4329785 0 4338291": calls, retransmissions, auth refreshes.
    assert rpc_fields(points) == {
        "calls": 4329785,
        "retransmissions": 0,
        "auth_refreshes": 4338291,
    }


def test_isilon_tree_and_page_cache_ratio():
    points = sample_tree("pcp-isilon-nfs")
    mounts = nfs_by_mountpoint(points)
    assert list(mounts) == ["/ifs", "/mnt/nfsv4", "/ifsfoo", "/mnt/nfs41"]
    ifs, ifsfoo = mounts["/ifs"], mounts["/ifsfoo"]
    assert ifs.tags == {
        "mountpoint": "/ifs",
        "server": "ifs-nas.test.edu",
        "export": "/ifs",
        "nfs_version": "3",
        "proto": "tcp",
    }
    assert ifs.fields == {
        **bytes_line(479073312, 173647641, 0, 0, 12762151, 173521215, 3167, 45200),
        **op_row("read", 450, 450, 0, 76688, 12819860, 3, 2638, 2658),
        **op_row("write", 9523, 9523, 0, 175240916, 1523680, 3423263, 57150, 3480542),
        "age_seconds": 12515493.0,
    }
    # /ifs/foo is another export of the same Isilon with different counters: not a
    # duplicate.
    assert ifsfoo.tags["export"] == "/ifs/foo" and "duplicate_of" not in ifsfoo.tags
    assert ifsfoo.fields == {
        **bytes_line(481069398, 174069257, 0, 0, 12770069, 173926447, 3169, 45315),
        **op_row("read", 451, 451, 0, 76860, 12827908, 3, 2653, 2673),
        **op_row("write", 9605, 9605, 0, 175660936, 1536800, 3423264, 57254, 3480649),
        "age_seconds": 12517593.0,
    }
    # Applications read 479073312 bytes through /ifs while only 12762151 crossed the wire:
    # 479073312 / 12762151 = 37.54 (page-cache hits). /ifsfoo: 481069398 / 12770069 =
    # 37.67. Both v3 Isilon mounts together: 960142710 / 25532220 = 37.61.
    assert ifs.fields["app_read_bytes"] / ifs.fields["server_read_bytes"] == pytest.approx(
        37.5386, abs=1e-4
    )
    app = sum(m.fields["app_read_bytes"] for m in (ifs, ifsfoo))
    server = sum(m.fields["server_read_bytes"] for m in (ifs, ifsfoo))
    assert (app, server) == (960142710, 25532220)
    assert app / server == pytest.approx(37.6051, abs=1e-4)

    # vers=4 with minorversion=0 (an older kernel's way of writing 4.0); age line has
    # trailing words "(time, in seconds, since the NFS is mounted)".
    v4 = mounts["/mnt/nfsv4"]
    assert v4.tags == {
        "mountpoint": "/mnt/nfsv4",
        "server": "124.10.30.235",
        "export": "/nfsdata/",
        "nfs_version": "4.0",
        "proto": "tcp",
    }
    assert v4.fields == {
        **bytes_line(1612840960, 0, 0, 0, 627536112, 0, 158076, 0),
        **op_row("read", 9797, 9797, 0, 1567520, 628138612, 71, 7953, 8200),
        **op_row("write", 0, 0, 0, 0, 0, 0, 0, 0),
        "age_seconds": 19.0,
    }
    v41 = mounts["/mnt/nfs41"]
    assert v41.tags["nfs_version"] == "4.1" and v41.tags["export"] == "/nfsdata41"
    assert v41.fields == {
        **bytes_line(0, 0, 0, 0, 0, 0, 0, 0),
        **op_row("read", 0, 0, 0, 0, 0, 0, 0, 0),
        **op_row("write", 0, 0, 0, 0, 0, 0, 0, 0),
        "age_seconds": 44.0,
    }
    assert rpc_fields(points) is None  # this tree has no proc/net/rpc/nfs


def test_nas_tree_ten_mounts_shared_superblock_counted_once():
    points = sample_tree("pcp-nas-nfsv3")
    mounts = nfs_by_mountpoint(points)
    names = ["music", "newmovies", "Public", "assets", "movies", "downloads", "books"]
    names += ["Web", "scan", "photos"]
    assert list(mounts) == [f"/nasbox/{name}" for name in names]
    # Eight directories of the NAS's MD0_DATA file system are mounted separately; they
    # share one superblock, so all eight show the same events/bytes/per-op numbers.
    # /nasbox/music comes first; the other seven point at it. /share/external/sdt1 is
    # another file system with its own numbers.
    music_fields = {
        **bytes_line(167, 0, 0, 0, 167, 0, 1, 0),
        **op_row("read", 1, 1, 0, 136, 296, 0, 4, 4),
        **op_row("write", 0, 0, 0, 0, 0, 0, 0, 0),
        "age_seconds": 572945.0,
    }
    shared = [name for name in names if name != "newmovies"]
    for name in shared:
        point = mounts[f"/nasbox/{name}"]
        assert point.fields == music_fields
        assert point.tags == {
            "mountpoint": f"/nasbox/{name}",
            "server": "nasbox",
            "export": f"/share/MD0_DATA/{name}",
            "nfs_version": "3",
            "proto": "tcp",
            **({} if name == "music" else {"duplicate_of": "/nasbox/music"}),
        }

    newmovies = mounts["/nasbox/newmovies"]
    assert newmovies.tags == {
        "mountpoint": "/nasbox/newmovies",
        "server": "nasbox",
        "export": "/share/external/sdt1",
        "nfs_version": "3",
        "proto": "tcp",
    }
    assert newmovies.fields == {
        **bytes_line(0, 0, 0, 0, 0, 0, 0, 0),
        **op_row("read", 0, 0, 0, 0, 0, 0, 0, 0),
        **op_row("write", 0, 0, 0, 0, 0, 0, 0, 0),
        "age_seconds": 572945.0,
    }
    # Node total of server reads counting primaries only: 167 (music) + 0 (sdt1) = 167,
    # not 9 x 167 + 0 = 1503.
    primaries = [p for p in mounts.values() if "duplicate_of" not in p.tags]
    assert sum(p.fields["server_read_bytes"] for p in primaries) == 167


def test_nfsv42_krb5p_tree():
    mounts = nfs_by_mountpoint(sample_tree("pcp-nfsv42-krb5p"))
    assert list(mounts) == ["/home"]
    home = mounts["/home"]
    assert home.tags == {
        "mountpoint": "/home",
        "server": "nfs.f24.local",
        "export": "/home",
        "nfs_version": "4.2",
        "proto": "tcp",
    }
    # ~4.4 GB read from the server: 4406481497 bytes.
    assert home.fields == {
        **bytes_line(4365236327, 5911247130, 0, 0, 4406481497, 5911215386, 1075802, 1473784),
        **op_row("read", 38821, 38821, 0, 11491016, 4414245700, 950, 824228, 869033),
        **op_row("write", 137939, 137939, 0, 5954804116, 37519408, 67493582, 3087530, 70664356),
        "age_seconds": 5547.0,
    }


def test_el8_tree_rpc_iostats_10_has_no_errors_fields():
    mounts = nfs_by_mountpoint(sample_tree("pcp-el8-rpc10"))
    assert list(mounts) == ["/mnt/nfsv4.2", "/mnt/nfsv4.1", "/mnt/nfsv4.0", "/mnt/nfsv3"]
    expected = {
        # mountpoint: (server, version, WRITE row, age); every bytes line is
        # "0 1048576 0 0 0 1048576 0 256" and every READ row is zeros.
        "/mnt/nfsv4.2": ("rhel8u0-node2-beta", "4.2", (2, 2, 0, 1049072, 352, 11, 4, 15), 57),
        "/mnt/nfsv4.1": ("rhel7u6-node2", "4.1", (2, 2, 0, 1049072, 352, 3, 4, 7), 54),
        "/mnt/nfsv4.0": ("192.168.122.27", "4.0", (4, 4, 0, 1049408, 528, 6, 7, 14), 53),
        "/mnt/nfsv3": ("192.168.122.24", "3", (8, 8, 0, 1049728, 1088, 68, 56, 125), 53),
    }
    for mountpoint, (server, version, write, age) in expected.items():
        point = mounts[mountpoint]
        assert point.tags == {
            "mountpoint": mountpoint,
            "server": server,
            "export": "/exports",
            "nfs_version": version,
            "proto": "tcp",
        }
        assert point.fields == {
            **bytes_line(0, 1048576, 0, 0, 0, 1048576, 0, 256),
            **op_row("read", 0, 0, 0, 0, 0, 0, 0, 0),
            **op_row("write", *write),
            "age_seconds": float(age),
        }
        assert "read_errors" not in point.fields and "write_errors" not in point.fields


def test_telegraf_tree_mixed_formats():
    points = sample_tree("telegraf-mixed")
    mounts = nfs_by_mountpoint(points)
    # 26 other mounts (rootfs, cgroup, autofs, rpc_pipefs...) are skipped.
    assert list(mounts) == ["/A", "/B", "/C", "/D"]
    assert mounts["/A"].tags == {
        "mountpoint": "/A",
        "server": "1.2.3.4",
        "export": "/storage/NFS",
        "nfs_version": "3",
        "proto": "tcp",
    }
    # Lines indented with spaces; per-op values are Telegraf's test pattern 600..607.
    assert mounts["/A"].fields == {
        **bytes_line(
            204440464584,
            110857586443,
            783170354688,
            296174954496,
            1134399088816,
            407107155723,
            85749323,
            30784819,
        ),
        **op_row("read", 600, 601, 602, 603, 604, 605, 606, 607),
        **op_row("write", 700, 701, 702, 703, 704, 705, 706, 707),
        "age_seconds": 1136770.0,
    }
    # opts has spaces after some commas ("acregmax=60, acdirmin=30"); vers=4 +
    # minorversion=0 -> 4.0.
    assert mounts["/B"].tags == {
        "mountpoint": "/B",
        "server": "2.2.2.2",
        "export": "/nfsdata/",
        "nfs_version": "4.0",
        "proto": "tcp",
    }
    assert mounts["/B"].fields == {
        **bytes_line(1612840960, 0, 0, 0, 627536112, 0, 158076, 0),
        **op_row("read", 9797, 9797, 0, 1000, 2000, 71, 7953, 8200),
        **op_row("write", 0, 0, 0, 0, 0, 0, 0, 0),
        "age_seconds": 19.0,
    }
    assert mounts["/C"].tags["server"] == "nfsserver1"
    assert mounts["/C"].tags["export"] == "/vol/export1/bread_recipes"
    assert mounts["/C"].fields == {
        **bytes_line(0, 0, 0, 0, 0, 0, 0, 0),
        **op_row("read", 0, 0, 0, 0, 0, 0, 0, 0),
        **op_row("write", 0, 0, 0, 0, 0, 0, 0, 0),
        "age_seconds": 1084700.0,
    }
    # /D: RPC iostats 1.1, 9-field rows: errors fields present. A stray 8-field
    # LAYOUTRETURN line, indented with spaces, ends the file.
    assert mounts["/D"].tags["nfs_version"] == "4.2"
    assert mounts["/D"].fields == {
        **bytes_line(0, 0, 0, 0, 0, 0, 0, 0),
        **op_row("read", 0, 0, 0, 0, 0, 0, 0, 0, 0),
        **op_row("write", 0, 0, 0, 0, 0, 0, 0, 0, 0),
        "age_seconds": 2.0,
    }
    # /C and /D are both all-zero but on different servers: neither is a duplicate.
    assert not any("duplicate_of" in p.tags for p in mounts.values())
    assert rpc_fields(points) is None


def test_nfsrpc_tree_rpc_only():
    # "net 1 2 3 4" is a placeholder line and not read; "rpc 14415 0 14415".
    points = sample_tree("pcp-nfsrpc")
    assert nfs_by_mountpoint(points) == {}
    assert rpc_fields(points) == {"calls": 14415, "retransmissions": 0, "auth_refreshes": 14415}


def test_field_types_follow_schema():
    for tree in ["procfs-mlx-hfi", "pcp-isilon-nfs", "pcp-nas-nfsv3", "pcp-nfsv42-krb5p"]:
        for point in sample_tree(tree):
            spec = Nfs if point.measurement == Nfs.NAME else NfsRpc
            assert set(point.tags) <= set(spec.TAGS)
            for name, value in point.fields.items():
                field = spec.fields()[name]
                # Counts and bytes are integers; seconds (the kernel's ms / 1000) floats.
                integer = field.is_counter and field.unit != "seconds"
                assert type(value) is (int if integer else float)


def test_line_protocol_of_a_mount():
    points = sample_tree("pcp-nas-nfsv3")
    line = encode_lines(points[2:3])
    assert line.startswith(
        "nfs,duplicate_of=/nasbox/music,export=/share/MD0_DATA/Public,"
        "mountpoint=/nasbox/Public,nfs_version=3,proto=tcp,server=nasbox app_read_bytes=167i,"
    )


SYNTHETIC = """\
device srv:/data mounted on /mnt/a\\040b with fstype nfs4 statvers=1.1
\topts:\trw,vers=4.1,proto=rdma,port=20049
\tage:\t7
\tbytes:\t10 0 0 0 9223372036854775808 0 1 0
\tRPC iostats version: 1.1  p/v: 100003/4 (nfs)
\txprt:\trdma 0 0 1 0 0 1 1 0 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
\tper-op statistics
\t        READ: 5 5 0 100 200 18446744073709551615 3 4 1
\t       WRITE: 1 1 0 10 20 1 2 3 0
\t       WRITE: 9 9 9 9 9 9 9 9 9
device [fe80::1]:/export mounted on /mnt/v6 with fstype nfs statvers=1.1
\topts:\trw,vers=3,proto=udp6
\tbytes:\t1 2 3 4 5 6 7 8
device tmpfs mounted on /tmp with fstype tmpfs
\tbytes:\t1 2 3 4 5 6 7 8
device srv:/data mounted on /mnt/pending with fstype nfs
junk line without meaning
"""


def test_synthetic_edge_cases():
    mounts = parse_mountstats(SYNTHETIC)
    assert [m.mountpoint for m in mounts] == ["/mnt/a b", "/mnt/v6", "/mnt/pending"]
    points = mount_points(mounts, NOW)
    assert len(points) == 2  # /mnt/pending has no statistics: no point
    rdma, v6 = points
    assert rdma.tags == {
        "mountpoint": "/mnt/a b",  # \040 decoded
        "server": "srv",
        "export": "/data",
        "nfs_version": "4.1",
        "proto": "rdma",
    }
    # server_read_bytes = 2**63 and READ queue = 2**64 - 1 do not fit a signed 64-bit
    # integer: those two fields are gaps. The second WRITE row is ignored.
    assert rdma.fields == {
        "app_read_bytes": 10,
        "app_write_bytes": 0,
        "direct_read_bytes": 0,
        "direct_write_bytes": 0,
        "server_write_bytes": 0,
        "read_pages": 1,
        "write_pages": 0,
        "read_ops": 5,
        "read_transmissions": 5,
        "read_major_timeouts": 0,
        "read_bytes_sent": 100,
        "read_bytes_received": 200,
        "read_rtt_seconds": 0.003,
        "read_execute_seconds": 0.004,
        "read_errors": 1,
        **op_row("write", 1, 1, 0, 10, 20, 1, 2, 3, 0),
        "age_seconds": 7.0,
    }
    assert v6.tags == {
        "mountpoint": "/mnt/v6",
        "server": "fe80::1",
        "export": "/export",
        "nfs_version": "3",
        "proto": "udp6",
    }
    assert v6.fields == bytes_line(1, 2, 3, 4, 5, 6, 7, 8)


def test_same_export_mounted_twice():
    text = (
        "device s:/e mounted on /m1 with fstype nfs statvers=1.1\n"
        "\topts:\trw,vers=3,proto=tcp\n\tage:\t5\n\tevents:\t1 2 3\n\tbytes:\t8 0 0 0 4 0 1 0\n"
        "device s:/e mounted on /m2 with fstype nfs statvers=1.1\n"
        "\topts:\trw,vers=3,proto=tcp\n\tage:\t5\n\tevents:\t1 2 3\n\tbytes:\t8 0 0 0 4 0 1 0\n"
        "device s:/e mounted on /m3 with fstype nfs statvers=1.1\n"
        "\topts:\trw,vers=3,proto=tcp\n\tage:\t5\n\tevents:\t1 2 3\n\tbytes:\t8 0 0 0 4 0 1 0\n"
        "device t:/e mounted on /m4 with fstype nfs statvers=1.1\n"
        "\topts:\trw,vers=3,proto=tcp\n\tage:\t5\n\tevents:\t1 2 3\n\tbytes:\t8 0 0 0 4 0 1 0\n"
    )
    points = mount_points(parse_mountstats(text), NOW)
    assert [p.tags.get("duplicate_of") for p in points] == [None, "/m1", "/m1", None]


def test_split_device_and_rpc_parsing():
    assert split_device("ifs-nas.test.edu:/ifs") == ("ifs-nas.test.edu", "/ifs")
    assert split_device("[2001:db8::1]:/x/y") == ("2001:db8::1", "/x/y")
    assert parse_rpc("net 1 2 3 4\nrpc 1 2 3\n") == {
        "calls": 1,
        "retransmissions": 2,
        "auth_refreshes": 3,
    }
    assert parse_rpc("rpc x y z\n") == {}
    assert parse_rpc("") == {}


def test_unavailable_without_nfs_logs_once(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="agent.samplers.nfs")
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "mountstats").write_text(
        "device /dev/sda1 mounted on / with fstype ext4\n"
    )
    sampler = make_sampler("nfs", Roots(proc=tmp_path))
    assert sampler.available() is False
    assert len(caplog.records) == 1
    assert sampler.sample(NOW) == []


def test_meminfo_tree_has_no_nfs():
    root = fixture_root("pcp-meminfo-001")
    assert make_sampler("nfs", Roots(proc=root / "proc")).available() is False
