"""The net sampler: parser formats, sysfs kinds, captured trees and the live host.

No captured tree in ../shared/fixtures/roots holds a proc/net/dev, so the exact-value
tests use short texts in the kernel's format, and the live /proc/net/dev is checked
against psutil.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import psutil
import pytest

from agent.samplers import make_sampler
from agent.samplers.base import Roots
from agent.samplers.net import NetSampler, kind_from_name, kind_from_sysfs, parse_net_dev
from contract.point import encode_line
from contract.schema import Net
from tests.conftest import FIXTURE_ROOTS, fixture_root

HEADER = (
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast"
    "|bytes    packets errs drop fifo colls carrier compressed\n"
)
# The layout of current kernels ("%6s: %7llu ..."); eth1 has distinct numbers in all
# 16 columns to pin each field to its column.
MODERN = HEADER + (
    "    lo:    3193      29    0    0    0     0          0         0     3193      29"
    "    0    0    0     0       0          0\n"
    "  eth0: 731186470   15121    0    0    0     0          0         0   685352    7438"
    "    0    0    0     0       0          0\n"
    "  eth1: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"
    "enp0s31f6: 10 20 30 40 50 60 70 80 90 100 110 120 130 140 150 160\n"
)


def fields_by_interface(text: str) -> dict[str, dict[str, int]]:
    return {c.interface: c.fields() for c in parse_net_dev(text)}


def test_modern_layout():
    parsed = fields_by_interface(MODERN)
    assert list(parsed) == ["lo", "eth0", "eth1", "enp0s31f6"]
    assert parsed["eth1"] == {
        "rx_bytes": 1,  # receive column 1
        "rx_packets": 2,
        "rx_errors": 3,
        "rx_drops": 4,  # columns 5-8 (fifo, frame, compressed, multicast) not reported
        "tx_bytes": 9,  # transmit column 1 = column 9
        "tx_packets": 10,
        "tx_errors": 11,
        "tx_drops": 12,
    }
    assert parsed["eth0"]["rx_bytes"] == 731186470
    assert parsed["eth0"]["tx_packets"] == 7438
    assert parsed["enp0s31f6"]["tx_drops"] == 120  # a name longer than the 6-wide column


def test_old_kernel_layout_with_no_space_after_the_colon():
    # 2.4/2.6.x printed "%6s:%8lu": a large first number runs into the colon.
    text = HEADER + (
        "    lo:12345678    1000    0    0    0     0          0         0 12345678    1000"
        "    0    0    0     0       0          0\n"
        "  eth0:4294967295 3210 1 2 0 0 0 0 98765 4321 3 4 0 0 0 0\n"
    )
    parsed = fields_by_interface(text)
    assert parsed["lo"]["rx_bytes"] == 12345678
    assert parsed["eth0"] == {
        "rx_bytes": 4294967295,
        "rx_packets": 3210,
        "rx_errors": 1,
        "rx_drops": 2,
        "tx_bytes": 98765,
        "tx_packets": 4321,
        "tx_errors": 3,
        "tx_drops": 4,
    }


def test_names_with_a_colon():
    text = (
        HEADER
        + "eth0:1: 5 6 7 8 0 0 0 0 9 10 11 12 0 0 0 0\neth0:2:77 1 0 0 0 0 0 0 2 3 0 0 0 0 0 0\n"
    )
    parsed = fields_by_interface(text)
    assert list(parsed) == ["eth0:1", "eth0:2"]
    assert parsed["eth0:1"]["rx_bytes"] == 5 and parsed["eth0:1"]["tx_drops"] == 12
    assert parsed["eth0:2"]["rx_bytes"] == 77 and parsed["eth0:2"]["tx_packets"] == 3


def test_malformed_lines_are_skipped_and_logged_once(tmp_path, caplog):
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    bad = MODERN + "  eth9: 1 2 3\nnonsense\n"
    (proc / "net" / "dev").write_text(bad)
    sampler = NetSampler(Roots(proc=proc, sys=tmp_path / "sys"))
    with caplog.at_level(logging.WARNING, logger="agent.samplers.net"):
        sampler.sample(0)
        points = sampler.sample(1)
    assert [p.tags["interface"] for p in points] == ["lo", "eth0", "eth1", "enp0s31f6"]
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2
    assert "line 7:" in messages[0] and "line 8:" in messages[1]


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("lo", "loopback"),
        ("eth0", "physical"),
        ("enp94s0f0", "physical"),
        ("ib0", "physical"),
        ("docker0", "virtual"),
        ("veth3a1b2c", "virtual"),
        ("br-5f2e", "virtual"),
        ("bond0", "virtual"),
        ("eth0.100", "virtual"),
        ("tunl0", "virtual"),
        ("virbr0", "virtual"),
    ],
)
def test_name_rules(name, kind):
    assert kind_from_name(name) == kind


def fake_sysfs(tmp_path: Path) -> Path:
    sys_root = tmp_path / "sys"
    places = {
        "lo": (sys_root / "devices" / "virtual" / "net" / "lo", "772"),
        "eth0": (sys_root / "devices" / "pci0000:00" / "0000:00:03.0" / "net" / "eth0", "1"),
        "ib0": (sys_root / "devices" / "pci0000:00" / "0000:5e:00.0" / "net" / "ib0", "32"),
        "br0": (sys_root / "devices" / "virtual" / "net" / "br0", "1"),
        # a loopback the name does not tell: ARPHRD_LOOPBACK in its type file
        "lo2": (sys_root / "devices" / "virtual" / "net" / "lo2", "772"),
        # a software interface with a name the rules do not know
        "uplink": (sys_root / "devices" / "virtual" / "net" / "uplink", "1"),
    }
    (sys_root / "class" / "net").mkdir(parents=True)
    for name, (place, link_type) in places.items():
        place.mkdir(parents=True)
        (place / "type").write_text(link_type + "\n")
        link = sys_root / "class" / "net" / name
        link.symlink_to(os.path.relpath(place, link.parent))
    return sys_root


def test_kinds_from_sysfs_win_over_names(tmp_path):
    sys_root = fake_sysfs(tmp_path)
    assert kind_from_sysfs(sys_root, "lo") == "loopback"
    assert kind_from_sysfs(sys_root, "lo2") == "loopback"
    assert kind_from_sysfs(sys_root, "eth0") == "physical"
    assert kind_from_sysfs(sys_root, "ib0") == "physical"
    assert kind_from_sysfs(sys_root, "br0") == "virtual"
    assert kind_from_sysfs(sys_root, "uplink") == "virtual"
    assert kind_from_sysfs(sys_root, "eth7") is None

    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    names = ["lo", "lo2", "eth0", "ib0", "br0", "uplink", "eth7", "veth1"]
    (proc / "net" / "dev").write_text(
        HEADER + "".join(f"{name}: 1 2 0 0 0 0 0 0 3 4 0 0 0 0 0 0\n" for name in names)
    )
    sampler = NetSampler(Roots(proc=proc, sys=sys_root))
    points = sampler.sample(5)
    assert {p.tags["interface"]: p.tags["kind"] for p in points} == {
        "lo": "loopback",
        "lo2": "loopback",
        "eth0": "physical",
        "ib0": "physical",
        "br0": "virtual",
        "uplink": "virtual",  # by name alone it would be physical
        "eth7": "physical",  # not in sysfs: by name
        "veth1": "virtual",
    }
    assert encode_line(points[2]) == (
        "net,interface=eth0,kind=physical rx_bytes=1i,rx_packets=2i,rx_errors=0i,"
        "rx_drops=0i,tx_bytes=3i,tx_packets=4i,tx_errors=0i,tx_drops=0i 5"
    )


CAPTURED_TREES = sorted(p.name for p in FIXTURE_ROOTS.glob("*") if p.is_dir())


@pytest.mark.parametrize("tree", CAPTURED_TREES)
def test_captured_trees(tree):
    root = fixture_root(tree)
    sampler = NetSampler(Roots(proc=root / "proc", sys=root / "sys"))
    net_dev = root / "proc" / "net" / "dev"
    if not net_dev.exists():
        # None of today's captures has one: the sampler must say so, not crash.
        assert not sampler.available()
        assert sampler.sample(0) == []
        return
    problems: list[str] = []
    parsed = parse_net_dev(net_dev.read_text(), problems)
    assert problems == []
    body_lines = [line for line in net_dev.read_text().splitlines()[2:] if line.strip()]
    assert len(parsed) == len(body_lines)
    assert len(sampler.sample(0)) == len(parsed)


def test_live_net_dev_is_plausible():
    sampler = make_sampler("net", Roots())
    assert sampler.available()
    before = psutil.net_io_counters(pernic=True)
    points = sampler.sample(1)
    after = psutil.net_io_counters(pernic=True)
    by_interface = {p.tags["interface"]: p for p in points}
    assert by_interface["lo"].tags["kind"] == "loopback"
    virtual = set(os.listdir("/sys/devices/virtual/net")) - {"lo"}
    for name, point in by_interface.items():
        assert set(point.fields) == set(Net.fields())
        assert all(type(v) is int and v >= 0 for v in point.fields.values())
        if name in virtual:
            assert point.tags["kind"] == "virtual", name
        if name in before and name in after:
            for ours, theirs in [
                ("rx_bytes", "bytes_recv"),
                ("tx_bytes", "bytes_sent"),
                ("rx_packets", "packets_recv"),
                ("tx_packets", "packets_sent"),
                ("rx_errors", "errin"),
                ("tx_drops", "dropout"),
            ]:
                low, high = getattr(before[name], theirs), getattr(after[name], theirs)
                assert low <= point.fields[ours] <= high, (name, ours)


# --- wire bytes: a bond and its slaves, a bridge and its ports, veth, ifb ------------------


def bonded_bridged_host(tmp_path: Path) -> Roots:
    """A host tree with a bond, a bridge, a container veth, an ifb and a VLAN.

    No captured tree in ../shared has one, so this one is built from the layout the
    kernel gives sysfs (checked against a live 6.1 kernel's /sys/class/net): every
    ``class/net/<if>`` is a link into ``devices/``; hardware NICs sit under their bus
    device and have a ``device`` link, software ones (bond, bridge, veth, ifb, VLAN)
    under ``devices/virtual/net``. A bond's and a bridge's ports carry a ``master`` link,
    a bond lists its slaves in ``bonding/slaves``, a bridge its ports in ``brif/``.
    /proc/net/dev counts as the kernel does: the bond's bytes are the sum of its slaves',
    br0 counts what its ports delivered to the host, the veth is the host end of a
    container's pair (a port of br0), ifb0 mirrors eth0's ingress for traffic shaping and
    bond0.100 is a VLAN on the bond.
    """
    sys_root = tmp_path / "sys"
    pci = sys_root / "devices" / "pci0000:00"
    virtual = sys_root / "devices" / "virtual" / "net"
    places = {
        "lo": (virtual / "lo", "772", None),
        "eth0": (pci / "0000:3b:00.0" / "net" / "eth0", "1", "bond0"),
        "eth1": (pci / "0000:3b:00.1" / "net" / "eth1", "1", "bond0"),
        "eth2": (pci / "0000:5e:00.0" / "net" / "eth2", "1", "br0"),
        "ib0": (pci / "0000:af:00.0" / "net" / "ib0", "32", None),
        "bond0": (virtual / "bond0", "1", None),
        "bond0.100": (virtual / "bond0.100", "1", None),
        "br0": (virtual / "br0", "1", None),
        "veth1a2b3c": (virtual / "veth1a2b3c", "1", "br0"),
        "ifb0": (virtual / "ifb0", "1", None),
    }
    (sys_root / "class" / "net").mkdir(parents=True)
    for name, (place, link_type, master) in places.items():
        place.mkdir(parents=True)
        (place / "type").write_text(link_type + "\n")
        if not place.is_relative_to(virtual):
            (place / "device").symlink_to("../..")
        if master is not None:
            (place / "master").symlink_to(os.path.relpath(virtual / master, place))
        link = sys_root / "class" / "net" / name
        link.symlink_to(os.path.relpath(place, link.parent))
    (virtual / "bond0" / "bonding").mkdir()
    (virtual / "bond0" / "bonding" / "slaves").write_text("eth0 eth1\n")
    (virtual / "br0" / "brif").mkdir()
    for port in ("eth2", "veth1a2b3c"):
        (virtual / "br0" / "brif" / port).symlink_to(
            os.path.relpath(sys_root / "class" / "net" / port, virtual / "br0" / "brif")
        )
    counters = {  # rx bytes, tx bytes
        "lo": (9_000_000, 9_000_000),
        "eth0": (1_000_000, 100_000),
        "eth1": (2_000_000, 200_000),
        "bond0": (3_000_000, 300_000),  # eth0 + eth1
        "bond0.100": (1_500_000, 150_000),  # part of bond0's
        "eth2": (5_000_000, 500_000),
        "br0": (4_200_000, 350_000),  # eth2's and the veth's traffic for the host
        "veth1a2b3c": (700_000, 900_000),
        "ifb0": (1_000_000, 1_000_000),  # eth0's ingress again
        "ib0": (10_000_000, 20_000_000),
    }
    proc = tmp_path / "proc" / "net"
    proc.mkdir(parents=True)
    header = (
        "Inter-|   Receive                                                |  Transmit\n"
        " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets"
        " errs drop fifo colls carrier compressed\n"
    )
    rows = "".join(
        f"{name:>6}: {rx} 10 0 0 0 0 0 0 {tx} 10 0 0 0 0 0 0\n"
        for name, (rx, tx) in counters.items()
    )
    (proc / "dev").write_text(header + rows)
    return Roots(proc=tmp_path / "proc", sys=sys_root)


def test_node_wire_bytes_count_each_physical_interface_once(tmp_path):
    from collector.analysis.epochs import HOST_TOTALS
    from collector.store.api import SeriesInfo

    points = NetSampler(bonded_bridged_host(tmp_path)).sample(1)
    kinds = {point.tags["interface"]: point.tags["kind"] for point in points}
    assert kinds == {
        "lo": "loopback",
        "eth0": "physical",
        "eth1": "physical",
        "bond0": "virtual",
        "bond0.100": "virtual",
        "eth2": "physical",
        "br0": "virtual",
        "veth1a2b3c": "virtual",
        "ifb0": "virtual",
        "ib0": "physical",
    }
    # The per-epoch NIC totals keep the series the same way.
    totals = {}
    for total in HOST_TOTALS:
        if total.key not in ("net_rx", "net_tx"):
            continue
        kept = [
            point.fields[total.field]
            for n, point in enumerate(points)
            if total.keep(SeriesInfo(n, "net", "h", total.field, point.tags))
        ]
        totals[total.key] = sum(kept)
    # eth0 + eth1 (bond0's slaves) + eth2 (br0's wire port) + ib0; nothing twice.
    assert totals == {
        "net_rx": 1_000_000 + 2_000_000 + 5_000_000 + 10_000_000,
        "net_tx": 100_000 + 200_000 + 500_000 + 20_000_000,
    }
    # Counting every interface but loopback would have said 28.4 MB received.
    assert sum(
        p.fields["rx_bytes"] for p in points if kinds[p.tags["interface"]] != "loopback"
    ) == (28_400_000)
