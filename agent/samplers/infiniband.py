"""InfiniBand, Omni-Path and RoCE port counters from sysfs.

Measurement ``infiniband`` (schema ``Infiniband``), one point per device port.

Source: ``<sys>/class/infiniband/<device>/ports/<port>/`` — the ``counters/`` files
(the IBA PortCounters the kernel reads through the port's performance manager agent),
the older ``counters_ext/`` files some Mellanox OFED kernels had, every ``hw_counters/``
file, and ``rate``, ``state``, ``phys_state``.

Tags:
  - ``device``: the HCA name (``mlx5_0``, ``hfi1_0``, ...)
  - ``port``: the port number (``1``)

Fields (integers are cumulative counters, floats are gauges):
  - ``rcv_bytes``, ``xmit_bytes`` (int, bytes): 4 x ``port_rcv_data`` / ``port_xmit_data``,
    which count 4-byte words. ``counters_ext/port_{rcv,xmit}_data_64`` wins when present
    and non-zero.
  - ``rcv_packets``, ``xmit_packets`` (int): ``port_{rcv,xmit}_packets`` (or the ``_64``
    files under ``counters_ext``).
  - ``unicast_rcv_packets``, ``unicast_xmit_packets``, ``multicast_rcv_packets``,
    ``multicast_xmit_packets`` (int): from ``counters/`` (or
    ``counters_ext/port_{unicast,multicast}_{rcv,xmit}_packets``).
  - ``xmit_wait`` (int, ticks): ``port_xmit_wait``, time with data to send but no credit.
  - errors (int): ``symbol_error``, ``link_error_recovery``, ``link_downed``,
    ``rcv_errors`` (``port_rcv_errors``), ``rcv_remote_physical_errors``,
    ``rcv_switch_relay_errors``, ``xmit_discards``, ``xmit_constraint_errors``,
    ``rcv_constraint_errors``, ``local_link_integrity_errors``,
    ``excessive_buffer_overrun_errors``, ``vl15_dropped`` (``VL15_dropped``).
  - ``hw_<name>`` (int): every ``hw_counters/<name>`` file except ``lifespan``.
  - ``rate_bytes_per_second`` (float): ``rate`` ("100 Gb/sec (4X EDR)" -> 100e9 / 8).
  - ``state``, ``phys_state`` (float): the number before the colon ("4: ACTIVE" -> 4).
  - ``saturated_counters`` (float): counters stuck at their maximum and left out.

Caveats:
  - A file reading ``N/A (no PMA)`` (a device without a performance manager agent, such
    as iWARP) or that cannot be read gives no field, never 0.
  - Counter widths come from the IBA PortCounters attribute as the kernel reads it
    (``drivers/infiniband/core/sysfs.c``): the error counters are 4, 8 or 16 bits,
    ``port_xmit_wait`` is 32 bits, and the data/packet counters are 32 bits unless the
    port supports PortCountersExtended (then they are 64 bits and the kernel also creates
    the ``unicast_*``/``multicast_*`` files, or the values are above 2**32 - 1, which a
    32-bit counter cannot hold). PMA counters do not wrap: at their maximum they stop.
    A stuck counter would read as zero traffic (or zero errors) forever, so it gets no
    field and is counted in ``saturated_counters``. A 64-bit counter is never saturated.
    A port that has extended counters but no ``unicast_*`` files and has not yet passed
    2**32 - 1 words reads as 32-bit: at exactly 4294967295 it leaves one sample's gap.
  - ``hw_counters/lifespan`` is a setting (how many milliseconds the driver caches the
    other hw counters), not a counter, so it is not reported.
  - Line protocol integers are signed 64-bit: a value above 2**63 - 1 (possible only for
    ``xmit_bytes``/``rcv_bytes`` of a 64-bit word counter after years at full rate) is
    left out for that sample rather than written as a wrong number.
  - Device-level ``hw_counters`` (``<device>/hw_counters``, single-port RoCE drivers) are
    not read.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from agent.samplers.base import Roots, read_text
from contract.point import Point
from contract.schema import Infiniband, Tag

log = logging.getLogger(__name__)

INT64_MAX = 2**63 - 1
UINT32_MAX = 2**32 - 1

# Data and packet counters: (counters/ file, counters_ext/ 64-bit file, field, multiplier).
# The word counters count 4-byte units; the byte fields are x4.
_DATA_COUNTERS: tuple[tuple[str, str, str, int], ...] = (
    ("port_rcv_data", "port_rcv_data_64", Infiniband.RCV_BYTES, 4),
    ("port_xmit_data", "port_xmit_data_64", Infiniband.XMIT_BYTES, 4),
    ("port_rcv_packets", "port_rcv_packets_64", Infiniband.RCV_PACKETS, 1),
    ("port_xmit_packets", "port_xmit_packets_64", Infiniband.XMIT_PACKETS, 1),
)

# Always-64-bit packet counters: (counters/ file, counters_ext/ file, field). The kernel
# creates the counters/ ones only for ports with PortCountersExtended.
_EXTENDED_ONLY_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("unicast_rcv_packets", "port_unicast_rcv_packets", Infiniband.UNICAST_RCV_PACKETS),
    ("unicast_xmit_packets", "port_unicast_xmit_packets", Infiniband.UNICAST_XMIT_PACKETS),
    ("multicast_rcv_packets", "port_multicast_rcv_packets", Infiniband.MULTICAST_RCV_PACKETS),
    ("multicast_xmit_packets", "port_multicast_xmit_packets", Infiniband.MULTICAST_XMIT_PACKETS),
)

# Fixed-width PortCounters fields: (counters/ file, field, width in bits).
_NARROW_COUNTERS: tuple[tuple[str, str, int], ...] = (
    ("symbol_error", Infiniband.SYMBOL_ERROR, 16),
    ("link_error_recovery", Infiniband.LINK_ERROR_RECOVERY, 8),
    ("link_downed", Infiniband.LINK_DOWNED, 8),
    ("port_rcv_errors", Infiniband.RCV_ERRORS, 16),
    ("port_rcv_remote_physical_errors", Infiniband.RCV_REMOTE_PHYSICAL_ERRORS, 16),
    ("port_rcv_switch_relay_errors", Infiniband.RCV_SWITCH_RELAY_ERRORS, 16),
    ("port_xmit_discards", Infiniband.XMIT_DISCARDS, 16),
    ("port_xmit_constraint_errors", Infiniband.XMIT_CONSTRAINT_ERRORS, 8),
    ("port_rcv_constraint_errors", Infiniband.RCV_CONSTRAINT_ERRORS, 8),
    ("local_link_integrity_errors", Infiniband.LOCAL_LINK_INTEGRITY_ERRORS, 4),
    ("excessive_buffer_overrun_errors", Infiniband.EXCESSIVE_BUFFER_OVERRUN_ERRORS, 4),
    ("VL15_dropped", Infiniband.VL15_DROPPED, 16),
    ("port_xmit_wait", Infiniband.XMIT_WAIT, 32),
)

_HW_COUNTER_SETTINGS = frozenset({"lifespan"})

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec")
_STATE = re.compile(r"^\s*(\d+)\s*:")


def parse_counter(text: str | None) -> int | None:
    """The integer in a counter file; None when missing, ``N/A (no PMA)`` or not a number."""
    if text is None:
        return None
    stripped = text.strip()
    if not stripped.isdigit():
        return None
    return int(stripped)


def parse_rate(text: str | None) -> float | None:
    """``"56 Gb/sec (4X FDR)"`` -> 7e9 bytes/s; None when the file is missing or odd."""
    if text is None:
        return None
    match = _RATE.match(text)
    if match is None:
        return None
    return float(match.group(1)) * 1e9 / 8


def parse_state(text: str | None) -> float | None:
    """``"4: ACTIVE"`` -> 4.0 (``state`` and ``phys_state`` files)."""
    if text is None:
        return None
    match = _STATE.match(text)
    return float(match.group(1)) if match else None


@dataclass
class PortFiles:
    """The raw text of one port's files, keyed by file name (None: unreadable)."""

    counters: dict[str, str | None] = field(default_factory=dict)
    counters_ext: dict[str, str | None] = field(default_factory=dict)
    hw_counters: dict[str, str | None] = field(default_factory=dict)
    rate: str | None = None
    state: str | None = None
    phys_state: str | None = None


def _has_extended_width(counters: dict[str, int | None]) -> bool:
    """Are ``port_{rcv,xmit}_{data,packets}`` 64-bit (PortCountersExtended) on this port?"""
    if any(name in counters for name, _, _ in _EXTENDED_ONLY_COUNTERS):
        return True
    return any((counters.get(name) or 0) > UINT32_MAX for name, _, _, _ in _DATA_COUNTERS)


def parse_port(files: PortFiles) -> dict[str, int | float]:
    """The ``infiniband`` fields of one port from its files' text."""
    counters = {name: parse_counter(text) for name, text in files.counters.items()}
    counters_ext = {name: parse_counter(text) for name, text in files.counters_ext.items()}
    extended = _has_extended_width(counters)
    fields: dict[str, int | float] = {}
    saturated = 0

    def put(name: str, value: int) -> None:
        # Line protocol integers are signed 64-bit; a larger value would be written as a
        # wrong number, so this sample has a gap in that field instead.
        if value <= INT64_MAX:
            fields[name] = value

    for name, ext_name, field_name, multiplier in _DATA_COUNTERS:
        value = counters_ext.get(ext_name)
        if not value:  # absent, N/A or never updated: fall back to counters/
            value = counters.get(name)
            if value is None:
                continue
            if not extended and value == UINT32_MAX:
                saturated += 1
                continue
        put(field_name, value * multiplier)

    for name, ext_name, field_name in _EXTENDED_ONLY_COUNTERS:
        value = counters.get(name)
        if value is None:
            value = counters_ext.get(ext_name)
        if value is not None:
            put(field_name, value)

    for name, field_name, width in _NARROW_COUNTERS:
        value = counters.get(name)
        if value is None:
            continue
        if value == (1 << width) - 1:
            saturated += 1
            continue
        put(field_name, value)

    for name in sorted(files.hw_counters):
        if name in _HW_COUNTER_SETTINGS:
            continue
        value = parse_counter(files.hw_counters[name])
        if value is not None:
            put(Infiniband.HW_COUNTER_PREFIX + name, value)

    for field_name, gauge in (
        (Infiniband.RATE_BYTES_PER_SECOND, parse_rate(files.rate)),
        (Infiniband.STATE, parse_state(files.state)),
        (Infiniband.PHYS_STATE, parse_state(files.phys_state)),
    ):
        if gauge is not None:
            fields[field_name] = gauge
    if not fields and not saturated:
        return {}  # nothing readable: the port went away while we read it
    fields[Infiniband.SATURATED_COUNTERS] = float(saturated)
    return fields


def _read_dir(directory: Path) -> dict[str, str | None]:
    """``{file name: text}`` for the regular files in ``directory`` (empty when absent)."""
    try:
        entries = [entry for entry in directory.iterdir() if entry.is_file()]
    except OSError:
        return {}
    return {entry.name: read_text(entry) for entry in entries}


def read_port(port_dir: Path) -> PortFiles:
    return PortFiles(
        counters=_read_dir(port_dir / "counters"),
        counters_ext=_read_dir(port_dir / "counters_ext"),
        hw_counters=_read_dir(port_dir / "hw_counters"),
        rate=read_text(port_dir / "rate"),
        state=read_text(port_dir / "state"),
        phys_state=read_text(port_dir / "phys_state"),
    )


def _sorted_names(directory: Path) -> list[str]:
    try:
        names = [entry.name for entry in directory.iterdir() if entry.is_dir()]
    except OSError:
        return []
    # Ports sort as numbers (2 before 10); device names as text.
    return sorted(names, key=lambda name: (len(name), name) if name.isdigit() else (0, name))


class InfinibandSampler:
    name = "infiniband"

    def __init__(self, roots: Roots) -> None:
        self.class_dir = roots.sys / "class" / "infiniband"

    def _ports(self) -> list[tuple[str, str, Path]]:
        return [
            (device, port, self.class_dir / device / "ports" / port)
            for device in _sorted_names(self.class_dir)
            for port in _sorted_names(self.class_dir / device / "ports")
        ]

    def available(self) -> bool:
        if self._ports():
            return True
        log.info("infiniband sampler off: no device ports under %s", self.class_dir)
        return False

    def sample(self, now_ns: int) -> list[Point]:
        points = []
        for device, port, port_dir in self._ports():
            fields = parse_port(read_port(port_dir))
            if not fields:
                continue
            tags = {Tag.DEVICE: device, Tag.PORT: port}
            points.append(Point(Infiniband.NAME, tags, fields, now_ns))
        return points


SAMPLER = InfinibandSampler
