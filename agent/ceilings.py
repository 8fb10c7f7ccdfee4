"""A node's ceilings: the most its disks, links, GPUs' PCIe and CPUs deliver, measured
once by ``agent ceilings`` and kept in a JSON file that the ``ceilings`` sampler reports
at every tick, so that the collector can state a run's rates as a share of them.

What is measured, and how (``method``):

- **disk** (``o_direct``): the device holding ``--data-dir``; a scratch file of
  ``--disk-mib`` written there and read back with ``O_DIRECT`` (the page cache bypassed):
  1 MiB reads in order, then 128 KiB reads at random offsets (an ImageNet JPEG's size).
  Where the file system refuses ``O_DIRECT`` (tmpfs, some overlays) the file's pages are
  dropped with ``posix_fadvise(DONTNEED)`` before each pass instead (``fadvise``), which
  readahead can flatter. fio does the same with more knobs; this needs nothing installed.
- **NFS reads** (``o_direct``, else ``fadvise``): each NFS mount in
  ``/proc/self/mountstats`` (one per server file system: mounts sharing a superblock are
  measured once), 1 MiB reads in order of a file under it, for at most ``--nfs-seconds``
  and ``--nfs-mib``: the ``--nfs-file`` given on that mount (a data set file), else a
  scratch file written in ``--data-dir`` when it is on that mount, else at the mount point
  (and removed). ``O_DIRECT`` on NFS bypasses the client's page cache, not the server's:
  a scratch file just written is read from the server's memory.
- **links** (``sysfs``): each physical NIC's ``speed`` (Mb/s) and each InfiniBand port's
  ``rate`` (``100 Gb/sec (4X EDR)``): the negotiated rate, not a measured throughput.
- **PCIe** (``nvml``): each GPU's maximum link generation and width, as bytes/s per
  direction (128b/130b encoding from generation 3).
- **peer throughput** (``tcp``, with ``--peer HOST[:PORT]``): one TCP stream to the
  receiver ``agent ceilings --serve-peer`` runs on another node (``agent/peer.py``), the
  receiver's count over its clock: what the path between the two delivers, not the port's
  negotiated rate. Kept beside the link rates; re-measured alone with ``--peer-only``.
- **JPEG decode** (``pillow``): one thread decoding a 500x375 JPEG and resizing it to
  224 px for ``--cpu-seconds`` of the clock: the bundled input pipeline's work per
  picture, as pictures per CPU second (per core), so that a cgroup CPU quota on the
  command, or other work on the node, takes clock time from it but leaves the rate per
  core alone. The command states the CPUs and quota it ran under.

Shared storage under other tenants' load, a disk's cache on a short test, and links
that are shared upstream (an oversubscribed fabric) are not seen: the docs say so.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import mmap
import os
import random
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

from agent.samplers.nfs import distinct_mounts, parse_mountstats
from contract.ceilings import MAX_CEILING as MAX_CEILING
from contract.ceilings import MIN_CEILING as MIN_CEILING
from contract.ceilings import ceiling_problem as ceiling_problem
from contract.cpulist import cgroup_quota, format_cpu_list
from contract.point import Point
from contract.schema import Ceiling, Tag

log = logging.getLogger(__name__)

DEFAULT_FILE = Path("/var/lib/epochscope/ceilings.json")
CGROUP_ROOT = Path("/sys/fs/cgroup")
FILE_ENV = "EPOCHSCOPE_CEILINGS_FILE"
SEQUENTIAL_BLOCK = 1 << 20
RANDOM_BLOCK = 128 << 10
NFS_KIND = "nfs"
BYTES_PER_MBIT = 1_000_000 / 8
# PCIe bytes/s per lane and direction, by generation (after line encoding)
PCIE_LANE_BYTES = {1: 250e6, 2: 500e6, 3: 984.6e6, 4: 1969.2e6, 5: 3938.5e6, 6: 7877e6}


def ceilings_file() -> Path:
    return Path(os.environ.get(FILE_ENV) or DEFAULT_FILE)


def unwritable_reason(out: Path) -> str | None:
    """Why the ceilings file cannot be written at ``out`` (checked before measuring, so that
    minutes of measurement are not lost), as one line naming the path and what to do; None
    when it can."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        probe = out.with_name(out.name + ".new")
        probe.touch()
        probe.unlink()
    except OSError as error:
        return not_kept_message(out, error)
    return None


def not_kept_message(out: Path, error: OSError) -> str:
    blocker = next((p for p in out.parents if p.exists() and not p.is_dir()), None)
    reason = f"{blocker} is not a folder" if blocker else (error.strerror or str(error))
    return (
        f"cannot write the ceilings file {out}: {reason}. Run as a user who "
        f"can write there (the default is root's), or give --out FILE (or {FILE_ENV}=FILE) "
        "where you can, and set the agent's ceilings_file (agent.toml) to the same FILE so "
        "its sampler reads them."
    )


def usable(found: list[Measured]) -> tuple[list[Measured], list[str]]:
    """The measurements a ceiling can be (``ceiling_problem``: finite, within physical
    bounds), and one line for each that cannot, saying what was measured and why it is not
    written (a timer or device fault, not a limit: 1e-300 B/s would read "inf%")."""
    kept: list[Measured] = []
    refused: list[str] = []
    for measured in found:
        problem = ceiling_problem(measured.field, measured.value, measured.measured_at)
        if problem is None:
            kept.append(measured)
        else:
            refused.append(
                f"{measured.field} of {measured.kind} {measured.device} ({measured.method}) "
                f"not written: {problem}; measure it again"
            )
    return kept, refused


def keep(found: list[Measured], out: Path) -> list[str]:
    """Write the usable ceilings to ``out`` whole: the sampler never reads half a file.
    One line per measurement left out (``usable``). OSError whose message names the path
    and what to do when it cannot."""
    found, refused = usable(found)
    scratch = out.with_name(out.name + ".new")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        scratch.write_text(to_json(found))
        scratch.replace(out)
    except OSError as error:
        raise OSError(error.errno, not_kept_message(out, error)) from error
    return refused


@dataclass(frozen=True)
class Measured:
    """One ceiling: which field of ``contract.schema.Ceiling``, of which device, how."""

    field: str
    device: str
    kind: str  # disk | nfs | net | infiniband | gpu | cpu
    method: str
    value: float
    measured_at: float  # unix seconds

    @property
    def tags(self) -> tuple[str, str, str]:
        return (self.device, self.kind, self.method)


def points(ceilings: list[Measured], now_ns: int) -> list[Point]:
    """One point per device, kind and method, with every ceiling measured there and the
    latest ``measured_at_seconds`` (one series per metric and label set on /metrics)."""
    grouped: dict[tuple[str, str, str], dict[str, float]] = {}
    for ceiling in ceilings:
        fields = grouped.setdefault(ceiling.tags, {})
        fields[ceiling.field] = ceiling.value
        at = str(Ceiling.MEASURED_AT)
        fields[at] = max(fields.get(at, 0.0), ceiling.measured_at)
    return [
        Point(
            Ceiling.NAME, {Tag.DEVICE: device, Tag.KIND: kind, Tag.METHOD: method}, fields, now_ns
        )
        for (device, kind, method), fields in grouped.items()
    ]


# --- parsing (pure) --------------------------------------------------------------------


_IB_RATE = re.compile(r"^\s*([0-9.]+)\s*Gb/sec")


def parse_ib_rate(text: str) -> float | None:
    """``/sys/class/infiniband/<hca>/ports/<n>/rate`` (``100 Gb/sec (4X EDR)``) ->
    bytes/s, or None when it says no rate."""
    found = _IB_RATE.match(text)
    if found is None:
        return None
    gbits = float(found.group(1))
    return gbits * 1e9 / 8 if gbits > 0 else None


def parse_net_speed(text: str) -> float | None:
    """``/sys/class/net/<if>/speed`` (Mb/s; -1 or empty when the link is down) ->
    bytes/s, or None."""
    try:
        mbits = int(text.strip())
    except ValueError:
        return None
    return mbits * BYTES_PER_MBIT if mbits > 0 else None


def pcie_bytes_per_second(generation: int, width: int) -> float | None:
    lane = PCIE_LANE_BYTES.get(generation)
    return lane * width if lane is not None and width > 0 else None


def nfs_mountpoints(mountstats: str) -> list[str]:
    """The NFS mounts' mount points in ``/proc/self/mountstats`` text (as the ``nfs``
    sampler finds them), one per server file system: a later mount whose counters are an
    earlier one's shares its superblock, and measuring it again measures the same thing."""
    return [mount.mountpoint for mount in distinct_mounts(parse_mountstats(mountstats))]


def mount_holding(path: str, mountpoints: list[str]) -> str | None:
    """The deepest of ``mountpoints`` that holds the absolute ``path``, or None."""
    holding = [m for m in mountpoints if PurePosixPath(path).is_relative_to(m)]
    return max(holding, key=lambda m: len(PurePosixPath(m).parts), default=None)


# the values a ceiling can take: contract/ceilings.py


def from_json(text: str) -> list[Measured]:
    """The kept file's usable ceilings; ValueError (with what is wrong) for a file that is
    not a ceilings file. A ceiling whose value cannot be one (``ceiling_problem``) is left
    out with one log line naming it."""
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("ceilings"), list):
        raise ValueError('not a ceilings file: no "ceilings" list')
    out = []
    for number, entry in enumerate(data["ceilings"], start=1):
        try:
            measured = Measured(**entry)
        except TypeError as error:
            raise ValueError(f"ceiling {number}: {error}") from None
        problem = ceiling_problem(measured.field, measured.value, measured.measured_at)
        if problem is not None:
            log.warning("ceiling %d (%s of %s) left out: %s", number, measured.field,
                        measured.device, problem)  # fmt: skip
            continue
        out.append(measured)
    return out


def to_json(ceilings: list[Measured]) -> str:
    return json.dumps({"ceilings": [asdict(c) for c in ceilings]}, indent=1) + "\n"


# --- measuring -------------------------------------------------------------------------


def link_ceilings(sys_root: Path, now: float) -> list[Measured]:
    """Physical NICs' and InfiniBand ports' link rates from sysfs."""
    out = []
    net = sys_root / "class" / "net"
    for interface in sorted(net.iterdir()) if net.is_dir() else []:
        with contextlib.suppress(OSError):
            if "/virtual/" in os.path.realpath(interface):
                continue  # bridges, veth, loopback: no wire of their own
            rate = parse_net_speed((interface / "speed").read_text())
            if rate is not None:
                field = str(Ceiling.LINK)
                out.append(Measured(field, interface.name, "net", "sysfs", rate, now))
    ib = sys_root / "class" / "infiniband"
    for port in sorted(ib.glob("*/ports/*")) if ib.is_dir() else []:
        with contextlib.suppress(OSError):
            rate = parse_ib_rate((port / "rate").read_text())
            if rate is not None:
                device = f"{port.parent.parent.name}/{port.name}"
                out.append(Measured(str(Ceiling.LINK), device, "infiniband", "sysfs", rate, now))
    return out


def block_device_of(path: Path, sys_root: Path = Path("/sys")) -> str:
    """The name of the whole disk that holds ``path`` (``sda`` for ``sda2``), or the
    device number as ``major:minor`` when sysfs does not know it (overlay, tmpfs)."""
    number = os.stat(path).st_dev
    ident = f"{os.major(number)}:{os.minor(number)}"
    device = sys_root / "dev" / "block" / ident
    if not device.exists():
        return ident
    real = Path(os.path.realpath(device))
    return real.parent.name if (real / "partition").exists() else real.name


def _timed_reads(fd: int, offsets: list[int], block: int, budget: float) -> float:
    """Bytes/s over the reads at ``offsets`` after the first (stopping after ``budget``
    seconds): the first, untimed, waits out what came before (a cgroup blkio throttle's
    debt from the command's own start-up reads, the disk's first seek)."""
    buffer = mmap.mmap(-1, block)  # page-aligned, as O_DIRECT needs
    try:
        if offsets:
            os.preadv(fd, [buffer], offsets[0])
        done, start = 0, time.perf_counter()
        for offset in offsets[1:]:
            done += os.preadv(fd, [buffer], offset)
            if time.perf_counter() - start > budget:
                break
    finally:
        buffer.close()
    elapsed = time.perf_counter() - start
    return done / elapsed if elapsed > 0 else 0.0


def _write_scratch(path: Path, size: int) -> None:
    with path.open("wb") as out:
        chunk = os.urandom(SEQUENTIAL_BLOCK)
        for _ in range(size // SEQUENTIAL_BLOCK):
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())


def _open_uncached(path: Path) -> tuple[int, str]:
    """A descriptor whose reads skip the page cache, and how (``o_direct``; else
    ``fadvise``: the caller drops the file's pages before each pass)."""
    fd = None
    try:  # refused at the open or the first read where O_DIRECT is not supported
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        _timed_reads(fd, [0], 4096, 1.0)
        return fd, "o_direct"
    except OSError:
        if fd is not None:
            os.close(fd)
        return os.open(path, os.O_RDONLY), "fadvise"


def sequential_read_rate(path: Path, max_bytes: int, seconds: float) -> tuple[float, str]:
    """(bytes/s, method) of 1 MiB reads in order from the start of ``path``, uncached, over
    at most ``max_bytes`` and ``seconds``; ValueError for a file under two blocks (the
    first read is not timed)."""
    blocks = min(os.stat(path).st_size, max_bytes) // SEQUENTIAL_BLOCK
    if blocks < 2:
        raise ValueError(f"{path}: under {2 * SEQUENTIAL_BLOCK >> 20} MiB, too small to time")
    fd, method = _open_uncached(path)
    try:
        if method == "fadvise":
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        offsets = [i * SEQUENTIAL_BLOCK for i in range(blocks)]
        return _timed_reads(fd, offsets, SEQUENTIAL_BLOCK, seconds), method
    finally:
        os.close(fd)


def nfs_ceiling(
    mountpoint: str, file: Path | None, scratch_dir: Path, size_mib: int, seconds: float, now: float
) -> Measured:
    """The sequential read rate of an NFS mount: of ``file`` (a data set file on it) when
    given, else of a scratch file of ``size_mib`` written in ``scratch_dir`` (on the mount)
    and removed. OSError where it cannot be read or written; ValueError for a tiny file."""
    max_bytes = size_mib << 20
    if file is not None:
        rate, method = sequential_read_rate(file, max_bytes, seconds)
    else:
        scratch = scratch_dir / f".epochscope-ceiling-{os.getpid()}"
        try:
            _write_scratch(scratch, max_bytes)
            rate, method = sequential_read_rate(scratch, max_bytes, seconds)
        finally:
            scratch.unlink(missing_ok=True)
    return Measured(str(Ceiling.NFS_READ), mountpoint, NFS_KIND, method, rate, now)


@dataclass(frozen=True)
class NfsPlan:
    """How ``measure`` reads the NFS mounts: from ``mountstats`` (the text), with the
    user's ``files`` (each read on the mount holding it), bounded per mount."""

    mountstats: str
    files: tuple[Path, ...] = ()
    size_mib: int = 128
    seconds: float = 5.0


def nfs_ceilings(plan: NfsPlan, data_dir: Path, now: float) -> list[Measured]:
    """One read rate per NFS mount (``nfs_ceiling``); a mount that cannot be measured is
    logged and left out."""
    mountpoints = nfs_mountpoints(plan.mountstats)
    files: dict[str, Path] = {}
    for file in plan.files:
        mount = mount_holding(str(file.resolve()), mountpoints)
        if mount is None:
            log.warning("--nfs-file %s is on no NFS mount: not read", file)
        else:
            files[mount] = file
    data_mount = mount_holding(str(data_dir.resolve()), mountpoints)
    out = []
    for mountpoint in mountpoints:
        scratch_dir = data_dir if mountpoint == data_mount else Path(mountpoint)
        file = files.get(mountpoint)
        try:
            out.append(nfs_ceiling(mountpoint, file, scratch_dir, plan.size_mib, plan.seconds, now))
        except (OSError, ValueError) as error:
            log.warning("NFS mount %s not measured: %s (give --nfs-file, a file on it)",
                        mountpoint, error)  # fmt: skip
    return out


def disk_ceilings(
    directory: Path, size_mib: int, seconds: float, now: float, sys_root: Path = Path("/sys")
) -> list[Measured]:
    """Sequential and random read rates of the disk under ``directory``, on a scratch
    file written there (and removed)."""
    size = size_mib << 20
    device = block_device_of(directory, sys_root)
    scratch = directory / f".epochscope-ceiling-{os.getpid()}"
    try:
        _write_scratch(scratch, size)
        fd, method = _open_uncached(scratch)
        try:
            blocks = size // SEQUENTIAL_BLOCK
            if method == "fadvise":
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            sequential = _timed_reads(
                fd, [i * SEQUENTIAL_BLOCK for i in range(blocks)], SEQUENTIAL_BLOCK, seconds
            )
            if method == "fadvise":
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            spots = size // RANDOM_BLOCK
            offsets = [random.randrange(spots) * RANDOM_BLOCK for _ in range(spots)]
            scattered = _timed_reads(fd, offsets, RANDOM_BLOCK, seconds)
        finally:
            os.close(fd)
    finally:
        scratch.unlink(missing_ok=True)
    return [
        Measured(str(Ceiling.DISK_SEQUENTIAL_READ), device, "disk", method, sequential, now),
        Measured(str(Ceiling.DISK_RANDOM_READ), device, "disk", method, scattered, now),
    ]


@dataclass(frozen=True)
class DecodeRates:
    """One core's JPEG decoding: pictures per CPU second (the ceiling, per core whatever
    quota the measuring process runs under) and per second of the clock (what this process
    got: under a cgroup CPU quota of half a core, about half)."""

    per_cpu_second: float
    per_wall_second: float


DECODE_PICTURE = (500, 375)  # an ImageNet picture's usual size, in pixels
DECODE_TO = (224, 224)  # the bundled pipeline's training size


def sample_jpeg() -> bytes:
    """The picture the decode rate is measured on: DECODE_PICTURE of noise (as hard to
    compress as a photograph's detail), JPEG quality 90. Needs Pillow."""
    from PIL import Image

    picture = Image.effect_noise(DECODE_PICTURE, 40).convert("RGB")
    encoded = io.BytesIO()
    picture.save(encoded, "JPEG", quality=90)
    return encoded.getvalue()


def decode_rates(seconds: float) -> DecodeRates | None:
    """Decode and resize a 500x375 JPEG to 224 px for ``seconds`` of the clock, in this
    one thread (None without Pillow)."""
    try:
        from PIL import Image
    except ImportError:
        return None
    data = sample_jpeg()
    count, start, cpu_start = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        with Image.open(io.BytesIO(data)) as image:
            image.convert("RGB").resize(DECODE_TO)
        count += 1
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return DecodeRates(count / cpu if cpu > 0 else 0.0, count / wall)


def jpeg_decode_ceiling(seconds: float, now: float) -> Measured | None:
    """Pictures one core decodes and resizes per CPU second (None without Pillow): per CPU
    second, so that a CPU quota or other processes on the node while it measures take the
    clock's seconds, not the rate per core."""
    rates = decode_rates(seconds)
    if rates is None:
        return None
    field = str(Ceiling.JPEG_DECODE)
    return Measured(field, "cpu", "cpu", "pillow", rates.per_cpu_second, now)


def allowed_cpus_text(proc: Path = Path("/proc"), cgroup_root: Path = CGROUP_ROOT) -> str:
    """What this process may use, in words: the decode ceiling is per core, a run's share
    is of the cores its own ranks may use (their CPU list and quota, not these)."""
    cpus = os.sched_getaffinity(0)
    quota = cgroup_quota(proc, cgroup_root)
    held = f"{len(cpus)} CPUs allowed ({format_cpu_list(cpus)})"
    if quota is not None:
        held += f", a cgroup CPU quota of {quota:g} CPUs"
    return (
        f"cpu: this command ran on {held}; the JPEG decode rate is per core (per CPU second), "
        "so neither lowers it; a run's decode ceiling is that rate x the cores its own ranks "
        "may use"
    )


def pcie_ceilings(now: float) -> list[Measured]:
    """Each GPU's PCIe link at its maximum generation and width (NVML); none without."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no driver, no library: no GPU ceilings
        return []
    out = []
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            rate = pcie_bytes_per_second(
                pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle),
                pynvml.nvmlDeviceGetMaxPcieLinkWidth(handle),
            )
            if rate is not None:
                out.append(Measured(str(Ceiling.PCIE), str(index), "gpu", "nvml", rate, now))
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return out


PEER_KIND = "net"
PEER_METHOD = "tcp"


def peer_ceiling(host: str, port: int, seconds: float, now: float) -> Measured:
    """The receiver-counted TCP throughput to ``host:port`` (OSError when unreachable)."""
    from agent import peer

    received = peer.measure(host, port, seconds)
    device = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return Measured(
        str(Ceiling.PEER_THROUGHPUT), device, PEER_KIND, PEER_METHOD,
        received.bytes_per_second, now,
    )  # fmt: skip


def with_peer(kept: list[Measured], peer: Measured) -> list[Measured]:
    """``kept`` with ``peer`` in place of any earlier peer throughput: one peer ceiling per
    node, so that the collector never adds two measurements of the same path."""
    field = str(Ceiling.PEER_THROUGHPUT)
    return [c for c in kept if c.field != field] + [peer]


def measure(
    data_dir: Path,
    disk_mib: int,
    disk_seconds: float,
    cpu_seconds: float,
    sys_root: Path,
    nfs: NfsPlan | None = None,
) -> list[Measured]:
    now = time.time()
    found: list[Measured] = []
    on_nfs = nfs is not None and mount_holding(
        str(data_dir.resolve()), nfs_mountpoints(nfs.mountstats)
    )
    if on_nfs:  # its NFS ceiling is the data's; a "disk" one would be added to the disks'
        log.info("--data-dir %s is on NFS mount %s: no disk ceiling measured", data_dir, on_nfs)
    else:
        found += disk_ceilings(data_dir, disk_mib, disk_seconds, now, sys_root)
    if nfs is not None:
        found += nfs_ceilings(nfs, data_dir, now)
    found += link_ceilings(sys_root, now)
    found += pcie_ceilings(now)
    decode = jpeg_decode_ceiling(cpu_seconds, now)
    if decode is not None:
        found.append(decode)
    return found


def describe(measured: Measured) -> str:
    value = measured.value
    if measured.field == str(Ceiling.PEER_THROUGHPUT):
        amount = f"{value / 1e6:,.1f} MB/s ({value * 8 / 1e9:,.2f} Gb/s)"
    elif measured.field == str(Ceiling.JPEG_DECODE):
        amount = f"{value:,.0f} pictures/s per core (per CPU second)"
    else:
        amount = f"{value / 1e6:,.1f} MB/s"
    where = f"{measured.kind:<10} {measured.device:<12} {measured.field:<40}"
    return f"{where} {amount} ({measured.method})"
