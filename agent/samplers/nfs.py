"""NFS client statistics per mount, and the client's RPC totals.

Measurement ``nfs`` (schema ``Nfs``), one point per NFS mount, from
``<proc>/self/mountstats`` (only mounts with fstype ``nfs`` or ``nfs4``).

Tags:
  - ``mountpoint``: where it is mounted (octal escapes such as ``\\040`` decoded)
  - ``server``, ``export``: from the ``device SERVER:EXPORT`` of the mount line
    (``[addr]:/export`` for IPv6: the brackets are dropped)
  - ``nfs_version``: the ``vers=`` mount option (``3``, ``4.0``, ``4.1``, ``4.2``);
    an old kernel's ``vers=4`` with ``minorversion=N`` becomes ``4.N``
  - ``proto``: the ``proto=`` mount option (``tcp``, ``udp``, ``rdma``, ``tcp6``...)
  - ``duplicate_of``: only on a mount whose counters are the same as an earlier mount's
    (see below): that earlier mount's mountpoint. Sum the points without this tag.

Fields:
  - from the ``bytes:`` line (int, cumulative): ``app_read_bytes`` (read by applications,
    page-cache hits included), ``app_write_bytes``, ``direct_read_bytes``,
    ``direct_write_bytes`` (O_DIRECT), ``server_read_bytes`` (fetched from the server by
    READ), ``server_write_bytes``, ``read_pages``, ``write_pages``.
  - from the ``READ:`` per-op row (int, cumulative): ``read_ops``, ``read_transmissions``,
    ``read_major_timeouts``, ``read_bytes_sent``, ``read_bytes_received``,
    ``read_queue_seconds``, ``read_rtt_seconds``, ``read_execute_seconds`` (float: the
    kernel's milliseconds / 1000) and, with RPC iostats 1.1 (9-field rows),
    ``read_errors``. The same eight or nine for ``WRITE:`` as
    ``write_*``.
  - ``age_seconds`` (float): seconds since the mount.

Measurement ``nfs_rpc`` (schema ``NfsRpc``), one point per host, from the ``rpc`` line of
``<proc>/net/rpc/nfs``: ``calls``, ``retransmissions``, ``auth_refreshes`` (int,
cumulative, all mounts together).

Caveats:
  - Duplicates. The kernel keeps these statistics per superblock, and mounts of one
    server file system share a superblock (the same export mounted twice, or two exports
    that are directories of one file system on the server), so every such mount shows the
    same numbers and summing them counts the traffic several times. A mount whose
    ``events:``, ``bytes:`` and per-op rows are identical to an earlier mount of the same
    server and NFS version is tagged ``duplicate_of``. Two idle, unrelated mounts can look
    identical for a while; that moves nothing in a total, since both are idle.
  - Values are printed by the kernel as unsigned 64-bit. A value of 2**63 or more (seen
    in real files: a negative time delta wrapped around) does not fit a line protocol
    integer and is no count anyway, so that field is left out of that sample.
  - Tabs or spaces, indented lines, extra words after a value (``age: 19 (time...)``),
    ``xprt:`` lines of any transport and stray lines are tolerated; a line that does not
    parse is skipped.
  - ``/proc/self/mountstats`` shows the agent's own mount namespace.
  - The sampler is available when either file has NFS data at agent start.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from agent.samplers.base import Roots, read_text
from contract.point import Point
from contract.schema import Nfs, NfsRpc, Tag

log = logging.getLogger(__name__)

INT64_MAX = 2**63 - 1
NFS_FSTYPES = frozenset({"nfs", "nfs4"})

_MOUNT_LINE = re.compile(r"^device (\S+) mounted on (\S+) with fstype (\S+)")
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")
_OP_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")

BYTES_FIELDS: tuple[str, ...] = (
    Nfs.APP_READ_BYTES,
    Nfs.APP_WRITE_BYTES,
    Nfs.DIRECT_READ_BYTES,
    Nfs.DIRECT_WRITE_BYTES,
    Nfs.SERVER_READ_BYTES,
    Nfs.SERVER_WRITE_BYTES,
    Nfs.READ_PAGES,
    Nfs.WRITE_PAGES,
)
# Per-op row columns: ops, transmissions, major timeouts, bytes sent, bytes received,
# queue ms, rtt ms, execute ms, and errors (RPC iostats 1.1 only).
OP_FIELDS: dict[str, tuple[str, ...]] = {
    "READ": (
        Nfs.READ_OPS,
        Nfs.READ_TRANSMISSIONS,
        Nfs.READ_MAJOR_TIMEOUTS,
        Nfs.READ_BYTES_SENT,
        Nfs.READ_BYTES_RECEIVED,
        Nfs.READ_QUEUE_SECONDS,
        Nfs.READ_RTT_SECONDS,
        Nfs.READ_EXECUTE_SECONDS,
        Nfs.READ_ERRORS,
    ),
    "WRITE": (
        Nfs.WRITE_OPS,
        Nfs.WRITE_TRANSMISSIONS,
        Nfs.WRITE_MAJOR_TIMEOUTS,
        Nfs.WRITE_BYTES_SENT,
        Nfs.WRITE_BYTES_RECEIVED,
        Nfs.WRITE_QUEUE_SECONDS,
        Nfs.WRITE_RTT_SECONDS,
        Nfs.WRITE_EXECUTE_SECONDS,
        Nfs.WRITE_ERRORS,
    ),
}
# Per-op times the kernel prints in milliseconds; reported in seconds.
MILLISECOND_FIELDS = frozenset(
    (
        Nfs.READ_QUEUE_SECONDS,
        Nfs.READ_RTT_SECONDS,
        Nfs.READ_EXECUTE_SECONDS,
        Nfs.WRITE_QUEUE_SECONDS,
        Nfs.WRITE_RTT_SECONDS,
        Nfs.WRITE_EXECUTE_SECONDS,
    )
)


@dataclass
class NfsMount:
    """One NFS mount's block of ``mountstats``, numbers as the kernel printed them."""

    device: str
    mountpoint: str
    fstype: str
    options: dict[str, str] = field(default_factory=dict)
    age_seconds: int | None = None
    events: tuple[int, ...] | None = None
    bytes: tuple[int, ...] | None = None
    ops: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def server(self) -> str:
        return split_device(self.device)[0]

    @property
    def export(self) -> str:
        return split_device(self.device)[1]

    @property
    def nfs_version(self) -> str | None:
        version = self.options.get("vers")
        minor = self.options.get("minorversion")
        if version == "4" and minor is not None:
            return f"4.{minor}"
        return version


def unescape(text: str) -> str:
    """Undo the kernel's octal escapes in mount lines (``\\040`` is a space)."""
    return _OCTAL_ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), text)


def split_device(device: str) -> tuple[str, str]:
    """``server:/export`` -> (server, export); ``[fe80::1]:/x`` -> (``fe80::1``, ``/x``)."""
    if device.startswith("[") and "]:" in device:
        server, _, export = device[1:].partition("]:")
        return server, export
    server, _, export = device.partition(":")
    return server, export


def _ints(words: list[str]) -> tuple[int, ...] | None:
    try:
        return tuple(int(word) for word in words)
    except ValueError:
        return None


def _leading_ints(words: list[str]) -> tuple[int, ...]:
    """The integers before the first word that is not one (``19  (time, in s...)``)."""
    values = []
    for word in words:
        if not word.isdigit():
            break
        values.append(int(word))
    return tuple(values)


def parse_options(text: str) -> dict[str, str]:
    """``rw,vers=3,proto=tcp`` -> {"rw": "", "vers": "3", "proto": "tcp"}; spaces ignored."""
    options = {}
    for item in text.split(","):
        key, _, value = item.strip().partition("=")
        if key:
            options[key] = value
    return options


def parse_mountstats(text: str) -> list[NfsMount]:
    """The NFS mounts in ``/proc/self/mountstats``, in file order; other mounts skipped."""
    mounts: list[NfsMount] = []
    current: NfsMount | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("device "):
            match = _MOUNT_LINE.match(stripped)
            current = None
            if match and match.group(3) in NFS_FSTYPES:
                current = NfsMount(
                    device=unescape(match.group(1)),
                    mountpoint=unescape(match.group(2)),
                    fstype=match.group(3),
                )
                mounts.append(current)
            continue
        if current is None or ":" not in stripped:
            continue
        key, _, rest = stripped.partition(":")
        key = key.strip()
        words = rest.split()
        if key == "opts":
            current.options = parse_options(rest)
        elif key == "age":
            values = _leading_ints(words)
            if values:
                current.age_seconds = values[0]
        elif key == "events" and current.events is None:
            current.events = _leading_ints(words)
        elif key == "bytes" and current.bytes is None:
            current.bytes = _leading_ints(words)
        elif _OP_NAME.match(key) and key not in current.ops:
            values = _ints(words)
            if values:
                current.ops[key] = values
    return mounts


def _put_counters(fields: dict, names: tuple[str, ...], values: tuple[int, ...]) -> None:
    for name, value in zip(names, values, strict=False):
        # Line protocol integers are signed 64-bit. The kernel prints u64 values, and one
        # at 2**63 or above is a negative delta that wrapped (seen in real files), not a
        # count: leave the field out of this sample instead of writing a bogus number.
        if value <= INT64_MAX:
            fields[name] = value / 1000 if name in MILLISECOND_FIELDS else value


def mount_fields(mount: NfsMount) -> dict[str, int | float]:
    fields: dict[str, int | float] = {}
    if mount.bytes:
        _put_counters(fields, BYTES_FIELDS, mount.bytes)
    for op, names in OP_FIELDS.items():
        values = mount.ops.get(op)
        if values and len(values) >= 8:
            # 8 columns with RPC iostats 1.0, 9 (adds errors) with 1.1.
            _put_counters(fields, names, values[:9])
    if mount.age_seconds is not None:
        fields[Nfs.AGE_SECONDS] = float(mount.age_seconds)
    return fields


def _counter_signature(mount: NfsMount) -> tuple:
    """What two mounts sharing one superblock have in common."""
    return (
        mount.server,
        mount.nfs_version,
        mount.events,
        mount.bytes,
        tuple(sorted(mount.ops.items())),
    )


def duplicates(mounts: list[NfsMount]) -> dict[int, str]:
    """For each later mount whose counters are an earlier one's (one superblock: one server
    file system), its index -> the earlier mount's mount point. Mounts with no ``bytes:``
    line are never called the same."""
    first_mountpoint: dict[tuple, str] = {}
    found = {}
    for index, mount in enumerate(mounts):
        if mount.bytes:
            signature = _counter_signature(mount)
            if signature in first_mountpoint:
                found[index] = first_mountpoint[signature]
            else:
                first_mountpoint[signature] = mount.mountpoint
    return found


def distinct_mounts(mounts: list[NfsMount]) -> list[NfsMount]:
    """The mounts without the later ones that share an earlier one's superblock."""
    repeated = duplicates(mounts)
    return [mount for index, mount in enumerate(mounts) if index not in repeated]


def mount_points(mounts: list[NfsMount], now_ns: int) -> list[Point]:
    """One ``nfs`` point per mount; later mounts with the same counters get ``duplicate_of``."""
    repeated = duplicates(mounts)
    points = []
    for index, mount in enumerate(mounts):
        fields = mount_fields(mount)
        if not fields:
            continue
        tags = {
            Tag.MOUNTPOINT: mount.mountpoint,
            Tag.SERVER: mount.server,
            Tag.EXPORT: mount.export,
        }
        if mount.nfs_version:
            tags[Tag.NFS_VERSION] = mount.nfs_version
        if mount.options.get("proto"):
            tags[Tag.PROTO] = mount.options["proto"]
        if repeated.get(index, mount.mountpoint) != mount.mountpoint:
            tags[Tag.DUPLICATE_OF] = repeated[index]
        points.append(Point(Nfs.NAME, tags, fields, now_ns))
    return points


def parse_rpc(text: str) -> dict[str, int]:
    """``nfs_rpc`` fields from the ``rpc calls retrans authrefresh`` line of /proc/net/rpc/nfs."""
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 4 and words[0] == "rpc":
            values = _ints(words[1:4])
            if values is None:
                return {}
            fields: dict[str, int] = {}
            _put_counters(
                fields, (NfsRpc.CALLS, NfsRpc.RETRANSMISSIONS, NfsRpc.AUTH_REFRESHES), values
            )
            return fields
    return {}


class NfsSampler:
    name = "nfs"

    def __init__(self, roots: Roots) -> None:
        self.mountstats_path: Path = roots.proc / "self" / "mountstats"
        self.rpc_path: Path = roots.proc / "net" / "rpc" / "nfs"

    def _mounts(self) -> list[NfsMount]:
        text = read_text(self.mountstats_path)
        return parse_mountstats(text) if text else []

    def _rpc_fields(self) -> dict[str, int]:
        text = read_text(self.rpc_path)
        return parse_rpc(text) if text else {}

    def available(self) -> bool:
        if self._mounts() or self._rpc_fields():
            return True
        log.info(
            "nfs sampler off: no NFS mount in %s and no rpc line in %s",
            self.mountstats_path,
            self.rpc_path,
        )
        return False

    def sample(self, now_ns: int) -> list[Point]:
        points = mount_points(self._mounts(), now_ns)
        rpc = self._rpc_fields()
        if rpc:
            points.append(Point(NfsRpc.NAME, {}, rpc, now_ns))
        return points


SAMPLER = NfsSampler
