"""Network interface counters from ``<proc>/net/dev``, one point per interface.

Measurement ``net``, tags ``interface`` (the kernel's name) and ``kind`` (``loopback`` |
``virtual`` | ``physical``). Fields (see ``contract.schema.Net``), by column of the
receive and transmit halves of each line:

==========  =======  =====  =========================================================
field       kind     unit   source
==========  =======  =====  =========================================================
rx_bytes    counter  bytes  receive column 1 (bytes)
rx_packets  counter  count  receive column 2 (packets)
rx_errors   counter  count  receive column 3 (errs)
rx_drops    counter  count  receive column 4 (drop)
tx_bytes    counter  bytes  transmit column 1 (bytes)
tx_packets  counter  count  transmit column 2 (packets)
tx_errors   counter  count  transmit column 3 (errs)
tx_drops    counter  count  transmit column 4 (drop)
==========  =======  =====  =========================================================

Each line is ``name: 16 numbers``; the name is split off at the *last* colon, which
copes both with names that contain one (``eth0:1``) and with old kernels that print the
first number right after the colon (``eth0:1234 ...``). A line with another count of
numbers is skipped and logged once. The counters are ``unsigned long`` on 32-bit
kernels and wrap at 2^32 there.

``kind``: ``lo``, or anything sysfs types 772 (ARPHRD_LOOPBACK), is ``loopback``;
interfaces that sysfs registers under ``devices/virtual/net`` (bridges, veth, bonds,
VLANs, tunnels) are ``virtual``; the rest ``physical``. Without sysfs the name decides
(see :func:`kind_from_name`). Virtual interfaces carry traffic that usually also crosses
a physical one (a bond and its slaves, a bridge and its port), so a node total that
wants wire bytes should count ``physical`` only; loopback never leaves the host.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from agent.samplers.base import ProcFile, Roots, read_text
from agent.samplers.host_common import ProblemLog, to_ints
from contract.point import Point
from contract.schema import InterfaceKind, Net, Tag

log = logging.getLogger(__name__)

ARPHRD_LOOPBACK = "772"  # include/uapi/linux/if_arp.h
_COLUMNS = 16
# Names the kernel or common tools give only to software interfaces (sysfs would list
# them under devices/virtual/net). Used only when sysfs does not know the interface.
_VIRTUAL_PREFIXES = (
    "veth",
    "docker",
    "br",
    "virbr",
    "vnet",
    "tun",
    "tap",
    "dummy",
    "ifb",
    "bond",
    "team",
    "vxlan",
    "geneve",
    "gre",
    "sit",
    "ip6",
    "ip_vti",
    "erspan",
    "wg",
    "cali",
    "flannel",
    "cni",
    "kube-",
    "lxc",
    "macvlan",
    "nlmon",
)


@dataclass(frozen=True)
class InterfaceCounters:
    interface: str
    rx_bytes: int
    rx_packets: int
    rx_errors: int
    rx_drops: int
    tx_bytes: int
    tx_packets: int
    tx_errors: int
    tx_drops: int

    def fields(self) -> dict[str, int]:
        return {
            Net.RX_BYTES: self.rx_bytes,
            Net.RX_PACKETS: self.rx_packets,
            Net.RX_ERRORS: self.rx_errors,
            Net.RX_DROPS: self.rx_drops,
            Net.TX_BYTES: self.tx_bytes,
            Net.TX_PACKETS: self.tx_packets,
            Net.TX_ERRORS: self.tx_errors,
            Net.TX_DROPS: self.tx_drops,
        }


def parse_net_dev(text: str, problems: list[str] | None = None) -> list[InterfaceCounters]:
    """Every well-formed interface line of ``/proc/net/dev``."""
    interfaces = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or (number <= 2 and "|" in line):
            continue  # the two header lines
        name, colon, rest = line.rpartition(":")
        name = name.strip()
        values = to_ints(rest.split())
        if not colon or not name or values is None or len(values) != _COLUMNS:
            if problems is not None:
                problems.append(f"line {number}: expected 'name: {_COLUMNS} numbers', skipped")
            continue
        interfaces.append(
            InterfaceCounters(
                interface=name,
                rx_bytes=values[0],
                rx_packets=values[1],
                rx_errors=values[2],
                rx_drops=values[3],
                tx_bytes=values[8],
                tx_packets=values[9],
                tx_errors=values[10],
                tx_drops=values[11],
            )
        )
    return interfaces


def kind_from_name(interface: str) -> str:
    """The kind of an interface judged by its name alone (no sysfs at hand)."""
    if interface == "lo":
        return InterfaceKind.LOOPBACK
    # "eth0.100" is the kernel's default name of a VLAN device on eth0.
    if interface.startswith(_VIRTUAL_PREFIXES) or "." in interface:
        return InterfaceKind.VIRTUAL
    return InterfaceKind.PHYSICAL


def kind_from_sysfs(sys_root: Path, interface: str) -> str | None:
    """The kind sysfs gives an interface, or None when sysfs does not list it."""
    entry = sys_root / "class" / "net" / interface
    if not entry.exists():
        return None
    link_type = read_text(entry / "type")
    if interface == "lo" or (link_type is not None and link_type.strip() == ARPHRD_LOOPBACK):
        return InterfaceKind.LOOPBACK
    if (sys_root / "devices" / "virtual" / "net" / interface).exists():
        return InterfaceKind.VIRTUAL
    return InterfaceKind.PHYSICAL


class NetSampler:
    name = Net.NAME

    def __init__(self, roots: Roots) -> None:
        self._path = roots.proc / "net" / "dev"
        self._file = ProcFile(self._path)
        self._sys_root = roots.sys
        self._sysfs_present = True
        self._kinds: dict[str, str] = {}  # what sysfs said, per interface name
        self._problems = ProblemLog(log, self._path)

    def available(self) -> bool:
        return bool(self._read())

    def kind(self, interface: str) -> str:
        kind = self._kinds.get(interface)
        if kind is not None:
            return kind
        kind = kind_from_sysfs(self._sys_root, interface) if self._sysfs_present else None
        if kind is None:
            # Not (yet) in sysfs: judge by name, and ask sysfs again next time.
            return kind_from_name(interface)
        self._kinds[interface] = kind
        return kind

    def sample(self, now_ns: int) -> list[Point]:
        points = []
        # Without sysfs (a captured tree, an old kernel) skip a failed lookup per row.
        self._sysfs_present = (self._sys_root / "class" / "net").is_dir()
        interfaces = self._read()
        for counters in interfaces:
            tags = {Tag.INTERFACE: counters.interface, Tag.KIND: self.kind(counters.interface)}
            points.append(Point(Net.NAME, tags, dict(counters.fields()), now_ns))
        # Forget interfaces that are gone (container veths come and go by the thousand).
        current = {counters.interface for counters in interfaces}
        self._kinds = {name: kind for name, kind in self._kinds.items() if name in current}
        return points

    def _read(self) -> list[InterfaceCounters]:
        text = self._file.read()
        if text is None:
            return []
        problems: list[str] = []
        interfaces = parse_net_dev(text, problems)
        self._problems.report(problems)
        return interfaces


SAMPLER = NetSampler
