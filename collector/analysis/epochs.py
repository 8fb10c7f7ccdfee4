"""The per-epoch view of a run: one row per (host, epoch) plus a ``host="*"`` row per epoch.

Epoch windows come from the workload events and are cut per host on that host's own clock:
an epoch's window on host H runs from the earliest ``epoch_start`` of H's ranks to the latest
``epoch_end`` of H's ranks. Every node metric of H is then measured over that window (see
``collector.analysis.counters``), so clock skew between hosts never mixes two clocks in one number.

Columns (``COLUMNS``, in this order; MB = 10^6 bytes, rates per second of the window):

=========================  ==================================================================
host, epoch                the host (``*`` for all hosts together) and the epoch number
start, end                 window bounds, ISO-8601 UTC on the host's clock
seconds                    window length
images                     images the host's ranks processed (``epoch_end.images``; the sum
                           of the rank's ``step`` images when a rank has no ``epoch_end`` yet)
images_per_second          the ranks' timed steps' images over their seconds, summed over
                           ranks (``contract.throughput``: warm-up steps left out, so an epoch
                           whose steps were all warm-up has none); not images / seconds,
                           whose seconds also hold validation and the epoch's start-up
disk_read_bytes/_mbps      block devices of kind ``disk`` (partitions, dm, md, loop excluded:
disk_write_bytes           their I/O is already counted on the disk below them)
nfs_server_read_bytes/mbps bytes fetched from NFS servers, each duplicate mount group once
nfs_app_read_bytes         bytes applications read from NFS mounts (page-cache hits included)
nfs_cache_hit_ratio        1 - server_read / app_read, when app_read > 0
ib_rcv/xmit_bytes, _mbps   all InfiniBand ports
net_rx/tx_bytes            physical interfaces only (IPoIB included): bonds, bridges, veth,
                           ifb, VLANs repeat bytes a physical interface already counts; a
                           host with no physical interface (a container, a namespace)
                           counts its non-loopback ones
rx_minus_tx_mbps           receive minus send on the fabric: InfiniBand when the host shows
                           any InfiniBand traffic during the run, else the NICs. With shared
                           storage on the fabric this is the storage read rate (gradients
                           are sent and received in equal amounts).
disk_read_ceiling_percent  the reads of the devices with a measured sequential read ceiling
                           (``agent ceilings``) per second, over the sum of those devices'
                           ceilings: each device's reads against its own ceiling (matched on
                           the device tag, a loop device's included); devices without one
                           are left out of the share
decode_ceiling_percent     images_per_second as a share of the host's decode ceiling: its
                           measured JPEG decode rate per core times the cores the ranks may
                           use (``collector.analysis.decode``); JPEG data sets only
fabric_ceiling_mbps        the fabric's ceiling, one direction (``fabric_ceiling``): the
                           measured peer throughput, else the NICs' sysfs link rates; the
                           InfiniBand ports' rates when the fabric is InfiniBand
fabric_ceiling_percent     the fabric's busier direction (rx or tx) per second over it
nfs_read_ceiling_percent   nfs_server_read_mbps as a share of the host's measured NFS read
                           ceilings (``agent ceilings``: the sum over the mounts it measured)
gpu_pcie_ceiling_percent   the GPUs' busier PCIe direction (rx or tx, summed over the GPUs) per
                           second over the sum of their links' maxima (``agent ceilings``:
                           NVML's max generation and width, one direction each)
page_cache_delta_bytes     ``memory.cached_bytes`` at end minus at start
major_faults               ``memory.pgmajfault`` growth
page_cache_drops           ``memory.page_cache_drops`` growth: drop_caches runs on the host
file_refault_bytes         ``memory.file_refault_bytes`` growth: file pages, every job's, read
                           back after the kernel's reclaim had evicted them
cpu_util_percent           share of all CPU time that is neither idle nor iowait
iowait_percent             share of all CPU time in iowait
gpu_util_percent           time-weighted mean utilisation over the host's GPUs
gpu_energy_joules          energy the host's GPUs used (NVML's counter), summed over GPUs
gpu_pcie_rx/tx_bytes       PCIe bytes the host's GPUs received/sent (NVML field-value
                           counters; absent where the driver only has the 20 ms gauge).
                           GPU columns count whole GPUs: a MIG device's point (tag ``mig``)
                           is part of its parent GPU's and is left out
seconds_per_step           the ranks' mean step wall time (their step seconds over their steps)
input_wait_percent,        the ranks' step time split (``collector.analysis.anatomy``): each part's
compute_percent,           sum over the host's ranks over the sum of their step seconds;
communication_percent      the rest (optimizer update, callbacks) is 100 minus the three
accelerator_util_percent   AU, the MLPerf Storage way: the share of the ranks' timed steps'
                           wall time not spent waiting for input (forward, backward,
                           all-reduce, optimizer: the accelerator's work); warm-up steps left
                           out, as images/s leaves them out (MLPerf leaves out the first step:
                           --warmup-steps 1); a profiled rank's over each epoch's steps after
                           its first (``anatomy.au_steps``: DLIO's rule)
training_read_bytes        what the ranks and their data loaders read from storage
                           (/proc/<pid>/io read_bytes, mapped libraries' page-ins included)
training_cache_read_bytes  what their reads got from the page cache (rchar - read_bytes)
dataset_cached_start/      share of the data set's bytes in the host's page cache as the
end_percent                epoch began / ended (``collector.analysis.residency``: measured
                           with mincore by the host's first rank; epoch 1 starts from the
                           ``run_start`` measurement, before the run)
training_cpu_percent       the ranks' own CPU seconds (each with its loaders, ``epoch_end``)
                           over all the host's CPU time (``collector.analysis.contention``)
other_cpu_percent          busy CPU time minus the training's, over all CPU time: everything
                           else on the host (other jobs, the agent, the collector if local)
other_read_bytes           disk + NFS-server reads minus the training's read_bytes, floored
state                      ``complete``; ``running``: a rank of the host started the epoch
                           and has not ended it, and the run is live; ``interrupted``: so,
                           but the run is no longer live (a rank's ``run_end``, failed after
                           Ctrl-C or a signal, or written by the launcher for a killed rank),
                           so seconds and images are what was done before the stop
                           (``epoch_state``)
interpolated_edges         the window's edges ("start", "end", "start,end") with no real node
                           reading at them: the node amounts there are interpolated between
                           the agent's ticks; "" when both edges are real edge samples
loss, top1                 the epoch's training loss and validation top-1 from the run's
                           learning curve (``collector.analysis.learning``): the run's, the
                           same on each host row
=========================  ==================================================================

The ``*`` row of an epoch adds up the hosts that ran it:

- images and every byte or fault count are sums over hosts; ``state`` is the worst of the
  hosts' (interrupted, then running, then complete);
- ``seconds`` is the *longest* per-host window, each measured on its own clock. The ranks
  synchronise every step, so every host's span is the same epoch seen through a different
  clock; taking the longest never credits the cluster with time a skewed clock lost.
  Rates (images/s, MB/s) are the summed amounts over these seconds;
- ``start``/``end`` are the earliest start and latest end over hosts: indicative only,
  as they mix clocks;
- CPU percentages pool all hosts' CPU seconds; GPU utilisation averages all GPUs (each
  GPU's time-weighted mean counts once, whatever its host); GPU energy and PCIe bytes are
  sums;
  the cache-hit ratio is computed from the summed NFS bytes.

A value that cannot be measured (no such device on the host, no samples in the window) is
``None``: missing data is never reported as zero.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import groupby
from typing import Any

import numpy as np

from collector.analysis import anatomy, decode, learning, residency, throughput
from collector.analysis.contention import TRAINING_CPU, epoch_cpu
from collector.analysis.counters import (
    NS_PER_SECOND,
    counter_increases,
    gauge_deltas,
    gauge_means,
    nansum_or_nan,
    sampled_edges,
)
from collector.analysis.run import RunModel, read_run
from collector.store.api import ReadStore, SeriesData, SeriesInfo, time_resolution_ns
from contract.ceilings import MAX_BYTES_PER_SECOND, MIN_CEILING
from contract.columns import BY_NAME, COMPLETE, INTERRUPTED, REPORT_COLUMN_NAMES, RUNNING
from contract.markers import ALL_HOSTS
from contract.schema import (
    Ceiling,
    Cpu,
    Disk,
    DiskKind,
    Gpu,
    Infiniband,
    InterfaceKind,
    Memory,
    Net,
    Nfs,
    Tag,
)

BYTES_PER_MB = 1_000_000

COLUMNS: tuple[str, ...] = REPORT_COLUMN_NAMES  # declared in contract.columns


# --------------------------------------------------------------------------------------
# Epoch windows from workload events
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EpochWindow:
    """One epoch as seen on one host (times on that host's clock)."""

    host: str
    epoch: int
    start_ns: int
    end_ns: int
    images: float
    ranks: tuple[int, ...]
    complete: bool  # every rank of the host that started the epoch also ended it
    state: str = COMPLETE  # epoch_state(): complete | running | interrupted

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / NS_PER_SECOND


def epoch_state(complete: bool, run_live: bool) -> str:
    """The one definition of an epoch's state on a host, which every view writes.

    ``complete``: every rank of the host that started the epoch also ended it.
    ``run_live``: the run is still live (``RunState.LIVE``); once it is not (a rank's
    ``run_end``: failed after Ctrl-C or a signal, or written by the launcher for a killed
    rank), an epoch that did not end never will: it was interrupted.
    """
    if complete:
        return COMPLETE
    return RUNNING if run_live else INTERRUPTED


def worst_state(states: Iterable[str]) -> str:
    """An epoch's state over several hosts: interrupted on one host is interrupted."""
    present = set(states)
    for state in (INTERRUPTED, RUNNING):
        if state in present:
            return state
    return COMPLETE


def epoch_windows(model: RunModel) -> list[EpochWindow]:
    """The run's per-host epoch windows, sorted by epoch then host: each from its ranks'
    records (``collector.analysis.run``). When the run is no longer live, an epoch that did
    not end was interrupted."""
    windows = []
    for (epoch, host), group in groupby(model.records, key=lambda r: (r.epoch, r.host)):
        ranks = list(group)  # sorted by rank
        step_times = [time_ns for rank in ranks for time_ns in rank.step_times_ns]
        start_candidates = [rank.start_ns for rank in ranks if rank.start_ns is not None]
        if not start_candidates:  # no epoch_start seen: back off from the first end or step
            start_candidates = [
                rank.end_ns - int(rank.seconds * NS_PER_SECOND)
                for rank in ranks
                if rank.end_ns is not None and rank.seconds is not None
            ]
            start_candidates += step_times
        if not start_candidates:
            continue
        complete = all(rank.ended for rank in ranks)
        end_candidates = [rank.end_ns for rank in ranks if rank.end_ns is not None]
        if not complete:
            end_candidates += step_times
        start_ns = min(start_candidates)
        end_ns = max(end_candidates, default=start_ns)
        images = 0.0
        for rank in ranks:  # a rank without an epoch_end (or its images) counts its steps'
            images += rank.images if rank.images is not None else rank.step_images
        windows.append(
            EpochWindow(
                host,
                epoch,
                start_ns,
                end_ns,
                images,
                tuple(rank.rank for rank in ranks),
                complete,
                epoch_state(complete, model.live),
            )
        )
    return windows


# --------------------------------------------------------------------------------------
# Node metrics per window
# --------------------------------------------------------------------------------------

CPU_BUSY_FIELDS = (
    Cpu.USER_SECONDS,
    Cpu.NICE_SECONDS,
    Cpu.SYSTEM_SECONDS,
    Cpu.IRQ_SECONDS,
    Cpu.SOFTIRQ_SECONDS,
    Cpu.STEAL_SECONDS,
)
CPU_ALL_FIELDS = (*CPU_BUSY_FIELDS, Cpu.IDLE_SECONDS, Cpu.IOWAIT_SECONDS)


def _is_disk(info: SeriesInfo) -> bool:
    return info.tags.get(Tag.KIND) == DiskKind.DISK


def _disk_with_ceiling(info: SeriesInfo) -> bool:
    """Marks the reads of the devices with a measured read ceiling: ``series_to_read``
    matches them to the ceilings' device tags, host by host."""
    return True


def _ceiling_of_sampled_disk(info: SeriesInfo) -> bool:
    """Marks the disk read ceilings of devices whose reads were sampled (matched as above):
    a ceiling with no reads to set against it adds nothing to the share."""
    return True


def _device_among(devices: set[tuple[str, str]]) -> Callable[[SeriesInfo], bool]:
    def keep(info: SeriesInfo) -> bool:
        return (info.host, info.tags.get(Tag.DEVICE, "")) in devices

    return keep


def _devices(store: ReadStore, measurement: str, field: str) -> set[tuple[str, str]]:
    return {(i.host, i.tags.get(Tag.DEVICE, "")) for i in store.list_series(measurement, field)}


def _physical_interface(info: SeriesInfo) -> bool:
    """Wire bytes: a bond's bytes are its slaves', a bridge's are its ports', a veth's or
    ifb's cross (or mirror) a physical interface too; loopback never leaves the host."""
    return info.tags.get(Tag.KIND) == InterfaceKind.PHYSICAL


def _not_loopback(info: SeriesInfo) -> bool:
    return info.tags.get(Tag.KIND) != InterfaceKind.LOOPBACK


def series_to_read(
    store: ReadStore, totals: Iterable[HostTotal], hosts: set[str] | dict
) -> list[tuple[str, SeriesInfo]]:
    """(total key, series) of every stored series behind ``totals`` on ``hosts``.

    Wire bytes count physical interfaces; a host that has none (a container or a network
    namespace, whose uplink is a veth) counts its non-loopback interfaces instead, so its
    traffic is not reported as zero.
    """
    with_nic = {
        info.host for info in store.list_series(Net.NAME, Net.RX_BYTES) if _physical_interface(info)
    }
    totals = list(totals)
    matched: dict[Callable[[SeriesInfo], bool], Callable[[SeriesInfo], bool]] = {}
    if any(t.keep in (_disk_with_ceiling, _ceiling_of_sampled_disk) for t in totals):
        matched[_disk_with_ceiling] = _device_among(
            _devices(store, Ceiling.NAME, Ceiling.DISK_SEQUENTIAL_READ)
        )
        matched[_ceiling_of_sampled_disk] = _device_among(
            _devices(store, Disk.NAME, Disk.READ_BYTES)
        )
    wanted: list[tuple[str, SeriesInfo]] = []
    for total in totals:
        for info in store.list_series(total.measurement, total.field):
            if info.host not in hosts:
                continue
            keep = matched.get(total.keep, total.keep)
            if keep is _physical_interface and info.host not in with_nic:
                keep = _not_loopback
            if keep(info):
                wanted.append((total.key, info))
    return wanted


def _not_duplicate(info: SeriesInfo) -> bool:
    return not info.tags.get(Tag.DUPLICATE_OF)


def _any(info: SeriesInfo) -> bool:
    return True


def _whole_gpu(info: SeriesInfo) -> bool:
    """A GPU's own series, not one of its MIG devices' (whose amounts are part of it)."""
    return not info.tags.get(Tag.MIG)


def _ceiling_of(kind: str) -> Callable[[SeriesInfo], bool]:
    def keep(info: SeriesInfo) -> bool:
        return info.tags.get(Tag.KIND) == kind

    return keep


COUNTER, GAUGE_DELTA, GAUGE_MEAN = "counter", "gauge_delta", "gauge_mean"


@dataclass(frozen=True)
class HostTotal:
    """How one per-host amount is made from stored series."""

    key: str
    measurement: str
    field: str
    how: str  # COUNTER (sum of growths) | GAUGE_DELTA (sum of deltas) | GAUGE_MEAN
    keep: Callable[[SeriesInfo], bool] = _any


# Utilisation per whole GPU; the per-epoch column and the run page's chart divide the sum
# of the GPUs' means by their count.
GPU_UTIL = HostTotal("gpu_util", Gpu.NAME, Gpu.UTILIZATION_PERCENT, GAUGE_MEAN, _whole_gpu)

# The host's block-device reads (the growth of Disk.READ_BYTES, ``read_bytes``, on whole
# disks): one name for the amount the rows show as disk_read_bytes and disk_read_mbps. Not
# the training's own storage reads (Process/Workload ``read_bytes``: anatomy.PROCESS_READ).
DISK_READ = "disk_read"

# The reads of the devices with a measured read ceiling, of any kind (a data set's loop
# device too), set against the sum of those devices' ceilings: like with like.
CEILED_DISK_READ = "ceiled_disk_read"

HOST_TOTALS: tuple[HostTotal, ...] = (
    HostTotal(DISK_READ, Disk.NAME, Disk.READ_BYTES, COUNTER, _is_disk),
    HostTotal("disk_write", Disk.NAME, Disk.WRITE_BYTES, COUNTER, _is_disk),
    HostTotal("nfs_server_read", Nfs.NAME, Nfs.SERVER_READ_BYTES, COUNTER, _not_duplicate),
    HostTotal("nfs_app_read", Nfs.NAME, Nfs.APP_READ_BYTES, COUNTER, _not_duplicate),
    HostTotal("ib_rcv", Infiniband.NAME, Infiniband.RCV_BYTES, COUNTER),
    HostTotal("ib_xmit", Infiniband.NAME, Infiniband.XMIT_BYTES, COUNTER),
    HostTotal("net_rx", Net.NAME, Net.RX_BYTES, COUNTER, _physical_interface),
    HostTotal("net_tx", Net.NAME, Net.TX_BYTES, COUNTER, _physical_interface),
    HostTotal("page_cache_delta", Memory.NAME, Memory.CACHED_BYTES, GAUGE_DELTA),
    HostTotal("major_faults", Memory.NAME, Memory.PGMAJFAULT, COUNTER),
    HostTotal("page_cache_drops", Memory.NAME, Memory.PAGE_CACHE_DROPS, COUNTER),
    HostTotal("file_refault", Memory.NAME, Memory.FILE_REFAULT_BYTES, COUNTER),
    *(HostTotal(f"cpu_{f}", Cpu.NAME, f, COUNTER) for f in CPU_ALL_FIELDS),
    GPU_UTIL,
    HostTotal("gpu_energy", Gpu.NAME, Gpu.ENERGY_JOULES, COUNTER, _whole_gpu),
    HostTotal("gpu_pcie_rx", Gpu.NAME, Gpu.PCIE_RX_BYTES, COUNTER, _whole_gpu),
    HostTotal("gpu_pcie_tx", Gpu.NAME, Gpu.PCIE_TX_BYTES, COUNTER, _whole_gpu),
    # the measured ceilings (agent ceilings): the sum of the measured disks' rates, and
    # those disks' reads
    HostTotal(
        "disk_read_ceiling",
        Ceiling.NAME,
        Ceiling.DISK_SEQUENTIAL_READ,
        GAUGE_MEAN,
        _ceiling_of_sampled_disk,
    ),
    HostTotal(CEILED_DISK_READ, Disk.NAME, Disk.READ_BYTES, COUNTER, _disk_with_ceiling),
    HostTotal(decode.DECODE_PER_CORE, Ceiling.NAME, Ceiling.JPEG_DECODE, GAUGE_MEAN),
    # the fabric's: NICs' and InfiniBand ports' link rates, and a measured peer throughput
    HostTotal("net_link_ceiling", Ceiling.NAME, Ceiling.LINK, GAUGE_MEAN, _ceiling_of("net")),
    HostTotal("ib_link_ceiling", Ceiling.NAME, Ceiling.LINK, GAUGE_MEAN, _ceiling_of("infiniband")),
    HostTotal("peer_ceiling", Ceiling.NAME, Ceiling.PEER_THROUGHPUT, GAUGE_MEAN),
    # the NFS mounts' measured read rates, summed as the disks' are
    HostTotal("nfs_read_ceiling", Ceiling.NAME, Ceiling.NFS_READ, GAUGE_MEAN),
    # the GPUs' PCIe links at their maxima, summed over the GPUs
    HostTotal("gpu_pcie_ceiling", Ceiling.NAME, Ceiling.PCIE, GAUGE_MEAN),
)


def read_host_series(
    store: ReadStore,
    totals: Iterable[HostTotal],
    hosts: set[str],
    start_ns: int,
    end_ns: int,
) -> dict[tuple[str, str], list[SeriesData]]:
    """The series behind each ``HostTotal`` for each host, read in one store call.

    Keyed by (total key, host).
    """
    wanted = series_to_read(store, totals, hosts)
    data = store.read_series([info for _, info in wanted], start_ns, end_ns) if wanted else []
    by_key: dict[tuple[str, str], list[SeriesData]] = defaultdict(list)
    for (key, info), series in zip(wanted, data, strict=True):
        by_key[(key, info.host)].append(series)
    return by_key


def window_amounts(
    how: str, series: list[SeriesData], starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(amount per window, number of series with data per window) for one host total.

    COUNTER and GAUGE_DELTA amounts add up over series; GAUGE_MEAN returns the sum of the
    series' means, to be divided by the count.
    """
    function = {COUNTER: counter_increases, GAUGE_DELTA: gauge_deltas, GAUGE_MEAN: gauge_means}[how]
    results = [function(s.times_ns, s.values, starts, ends) for s in series]
    if not results:
        return np.full(starts.shape, np.nan), np.zeros(starts.shape)
    count = np.sum([~np.isnan(r) for r in results], axis=0).astype(np.float64)
    return nansum_or_nan(results, starts.size), count


# --------------------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------------------


@dataclass
class EpochAmounts:
    """Additive amounts of one (host, epoch) or of all hosts for one epoch: rows are
    derived from these, so the ``*`` row is made by adding hosts' amounts, not rates."""

    host: str
    epoch: int
    start_ns: int
    end_ns: int
    seconds: float
    images: float
    values: dict[str, float] = field(default_factory=dict)  # HostTotal key -> amount
    gpu_count: float = 0.0
    fabric: str = ""  # "ib" | "net" | "" (neither)
    interpolated_edges: tuple[str, ...] = ()  # "start" / "end": no real reading at that edge
    images_per_second: float = math.nan  # collector.analysis.throughput: not additive, set per row
    state: str = COMPLETE  # the window's epoch_state(); worst_state() over hosts for "*"


def iso_utc(time_ns: int) -> str:
    moment = datetime.fromtimestamp(time_ns / NS_PER_SECOND, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class EpochRow:
    """One line of the per-epoch report. ``None`` means "no data", never zero."""

    host: str
    epoch: int
    start_ns: int
    end_ns: int
    state: str  # epoch_state(): complete | running | interrupted
    seconds: float
    images: int
    images_per_second: float | None
    disk_read_bytes: int | None
    disk_read_mbps: float | None
    disk_read_ceiling_percent: float | None
    decode_ceiling_percent: float | None
    disk_write_bytes: int | None
    nfs_server_read_bytes: int | None
    nfs_server_read_mbps: float | None
    nfs_app_read_bytes: int | None
    nfs_cache_hit_ratio: float | None
    ib_rcv_bytes: int | None
    ib_xmit_bytes: int | None
    ib_rcv_mbps: float | None
    ib_xmit_mbps: float | None
    net_rx_bytes: int | None
    net_tx_bytes: int | None
    rx_minus_tx_mbps: float | None
    page_cache_delta_bytes: int | None
    major_faults: int | None
    page_cache_drops: int | None
    file_refault_bytes: int | None
    cpu_util_percent: float | None
    iowait_percent: float | None
    gpu_util_percent: float | None
    gpu_energy_joules: float | None
    gpu_pcie_rx_bytes: int | None
    gpu_pcie_tx_bytes: int | None
    gpu_pcie_ceiling_percent: float | None
    seconds_per_step: float | None
    input_wait_percent: float | None
    compute_percent: float | None
    communication_percent: float | None
    accelerator_util_percent: float | None
    training_read_bytes: int | None
    training_cache_read_bytes: int | None
    dataset_cached_start_percent: float | None = None
    dataset_cached_end_percent: float | None = None
    training_cpu_percent: float | None = None
    other_cpu_percent: float | None = None
    other_read_bytes: int | None = None
    fabric_ceiling_mbps: float | None = None
    fabric_ceiling_percent: float | None = None
    nfs_read_ceiling_percent: float | None = None
    interpolated_edges: str = ""  # "start", "end", "start,end": no edge sample there
    loss: float | None = None  # collector.analysis.learning's curve: the run's, per epoch
    top1: float | None = None

    @property
    def start(self) -> str:
        return iso_utc(self.start_ns)

    @property
    def end(self) -> str:
        return iso_utc(self.end_ns)

    @property
    def storage_read_bytes(self) -> int | None:
        """Disk plus NFS-server reads: what came from storage rather than the page cache."""
        parts = [v for v in (self.disk_read_bytes, self.nfs_server_read_bytes) if v is not None]
        return sum(parts) if parts else None

    @property
    def storage_read_mbps(self) -> float | None:
        parts = [v for v in (self.disk_read_mbps, self.nfs_server_read_mbps) if v is not None]
        return sum(parts) if parts else None

    def to_dict(self) -> dict[str, Any]:
        """The row with exactly ``COLUMNS`` as keys (JSON-ready)."""
        return {column: getattr(self, column) for column in COLUMNS}


def _column_values(values: np.ndarray, digits: int | None) -> list[float | int | None]:
    """Rounded Python numbers, None for NaN (no data); integers when ``digits`` is None."""
    rounded = np.round(values, digits or 0).tolist()
    if digits is None:
        return [None if v != v else int(v) for v in rounded]
    return [None if v != v else v for v in rounded]


def fabric_ceiling_percent(bytes_per_second: np.ndarray, ceiling: np.ndarray) -> np.ndarray:
    """A fabric rate as a share of its ceiling (bytes/s), NaN where none was measured: the
    one definition the report's column and the all-reduce finding use."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return 100.0 * bytes_per_second / np.where(ceiling > 0, ceiling, np.nan)


def storage_read(column: Callable[[str], np.ndarray]) -> np.ndarray:
    """Disk plus NFS-server reads per row (what ``EpochRow.storage_read_bytes`` adds up);
    NaN where neither was measured."""
    return nansum_or_nan([column(DISK_READ), column("nfs_server_read")], column(DISK_READ).size)


def contention_columns(
    training_cpu: np.ndarray,
    cpu_busy: np.ndarray,
    cpu_total: np.ndarray,
    host_reads: np.ndarray,
    training_reads: np.ndarray,
) -> dict[str, np.ndarray]:
    """The training's share of the host's CPU time against everything else's, and the
    storage reads that were not its own (the one computation every view writes)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return {
            "training_cpu_percent": 100.0 * training_cpu / cpu_total,
            "other_cpu_percent": 100.0 * np.maximum(cpu_busy - training_cpu, 0.0) / cpu_total,
            "other_read_bytes": np.maximum(host_reads - training_reads, 0.0),
        }


def rows_from_amounts(amounts: list[EpochAmounts]) -> list[EpochRow]:
    """Rows for many amounts at once (the derivations are column-wise numpy)."""
    if not amounts:
        return []
    size = len(amounts)

    def column(key: str) -> np.ndarray:
        return np.fromiter((a.values.get(key, math.nan) for a in amounts), float, size)

    seconds = np.fromiter((a.seconds for a in amounts), float, size)
    images = np.fromiter((a.images for a in amounts), float, size)
    gpu_count = np.fromiter((a.gpu_count for a in amounts), float, size)
    rate = np.fromiter((a.images_per_second for a in amounts), float, size)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_second = np.where(seconds > 0, 1.0 / np.where(seconds > 0, seconds, 1.0), np.nan)

        def mbps(key: str) -> np.ndarray:
            return column(key) * per_second / BYTES_PER_MB

        # a field a kernel does not report (steal on old kernels) is left out, not zero
        cpu_total = nansum_or_nan([column(f"cpu_{f}") for f in CPU_ALL_FIELDS], size)
        cpu_busy = nansum_or_nan([column(f"cpu_{f}") for f in CPU_BUSY_FIELDS], size)
        cpu_total = np.where(cpu_total > 0, cpu_total, np.nan)
        app_read = column("nfs_app_read")
        hit_ratio = np.where(app_read > 0, 1.0 - column("nfs_server_read") / app_read, np.nan)
        gpu_util = np.where(gpu_count > 0, column("gpu_util") / gpu_count, np.nan)
        step_seconds = column(anatomy.STEP_SECONDS)

        def share(key: str) -> np.ndarray:
            """A part's share of the ranks' step seconds, in percent."""
            return anatomy.share_percent(column(key), step_seconds)

        steps = column(anatomy.STEPS)
        seconds_per_step = step_seconds / np.where(steps > 0, steps, np.nan)
        training_read = column(anatomy.PROCESS_READ)
        cache_read = anatomy.cache_read_bytes(column(anatomy.PROCESS_RCHAR), training_read)
        derived: dict[str, np.ndarray] = {
            "images_per_second": rate,
            "disk_read_bytes": column(DISK_READ),
            "disk_read_mbps": mbps(DISK_READ),
            "disk_read_ceiling_percent": 100.0
            * column(CEILED_DISK_READ)
            * per_second
            / np.where(column("disk_read_ceiling") > 0, column("disk_read_ceiling"), np.nan),
            "decode_ceiling_percent": 100.0
            * rate
            / np.where(
                column(decode.DECODE_CEILING) >= MIN_CEILING, column(decode.DECODE_CEILING), np.nan
            ),
            "disk_write_bytes": column("disk_write"),
            "nfs_server_read_bytes": column("nfs_server_read"),
            "nfs_server_read_mbps": mbps("nfs_server_read"),
            "nfs_app_read_bytes": app_read,
            "nfs_cache_hit_ratio": hit_ratio,
            "ib_rcv_bytes": column("ib_rcv"),
            "ib_xmit_bytes": column("ib_xmit"),
            "ib_rcv_mbps": mbps("ib_rcv"),
            "ib_xmit_mbps": mbps("ib_xmit"),
            "net_rx_bytes": column("net_rx"),
            "net_tx_bytes": column("net_tx"),
            "rx_minus_tx_mbps": mbps("fabric_net"),
            "page_cache_delta_bytes": column("page_cache_delta"),
            "major_faults": column("major_faults"),
            "page_cache_drops": column("page_cache_drops"),
            "file_refault_bytes": column("file_refault"),
            "cpu_util_percent": 100.0 * cpu_busy / cpu_total,
            "iowait_percent": 100.0 * column("cpu_iowait_seconds") / cpu_total,
            "gpu_util_percent": gpu_util,
            "gpu_energy_joules": column("gpu_energy"),
            "gpu_pcie_rx_bytes": column("gpu_pcie_rx"),
            "gpu_pcie_tx_bytes": column("gpu_pcie_tx"),
            "seconds_per_step": seconds_per_step,
            "input_wait_percent": share(anatomy.INPUT_WAIT),
            "compute_percent": share(anatomy.COMPUTE),
            "communication_percent": share(anatomy.COMMUNICATION),
            "accelerator_util_percent": anatomy.share_percent(
                column(anatomy.TIMED_BUSY), column(anatomy.TIMED_STEP_SECONDS)
            ),
            "fabric_ceiling_mbps": column("fabric_ceiling") / BYTES_PER_MB,
            "fabric_ceiling_percent": fabric_ceiling_percent(
                column("fabric_busier") * per_second, column("fabric_ceiling")
            ),
            "nfs_read_ceiling_percent": 100.0
            * column("nfs_server_read")
            * per_second
            / np.where(column("nfs_read_ceiling") > 0, column("nfs_read_ceiling"), np.nan),
            "gpu_pcie_ceiling_percent": 100.0
            * np.fmax(column("gpu_pcie_rx"), column("gpu_pcie_tx"))
            * per_second
            / np.where(column("gpu_pcie_ceiling") > 0, column("gpu_pcie_ceiling"), np.nan),
            "training_read_bytes": training_read,
            "training_cache_read_bytes": cache_read,
            "dataset_cached_start_percent": residency.cached_percent(
                column(residency.CACHED_START), column(residency.FILES_START)
            ),
            "dataset_cached_end_percent": residency.cached_percent(
                column(residency.CACHED_END), column(residency.FILES_END)
            ),
            **contention_columns(
                column(TRAINING_CPU), cpu_busy, cpu_total, storage_read(column), training_read
            ),
        }
    values = {name: _column_values(array, BY_NAME[name].digits) for name, array in derived.items()}
    values["seconds"] = np.round(seconds, BY_NAME["seconds"].digits).tolist()
    values["images"] = np.round(images).astype(np.int64).tolist()
    return [
        EpochRow(
            host=a.host,
            epoch=a.epoch,
            start_ns=a.start_ns,
            end_ns=a.end_ns,
            **{name: column[i] for name, column in values.items()},
            interpolated_edges=",".join(a.interpolated_edges),
            state=a.state,
        )
        for i, a in enumerate(amounts)
    ]


def all_hosts_amounts(epoch: int, hosts: list[EpochAmounts]) -> EpochAmounts:
    """The ``*`` amounts of one epoch: sums over hosts (each host's fabric difference on its
    own fabric), the longest per-host span."""
    combined = EpochAmounts(
        host=ALL_HOSTS,
        epoch=epoch,
        start_ns=min(h.start_ns for h in hosts),
        end_ns=max(h.end_ns for h in hosts),
        seconds=max(h.seconds for h in hosts),
        images=sum(h.images for h in hosts),
        gpu_count=sum(h.gpu_count for h in hosts),
        fabric="mixed",
        interpolated_edges=tuple(
            edge for edge in EDGES if any(edge in h.interpolated_edges for h in hosts)
        ),
        state=worst_state(h.state for h in hosts),
    )
    for key in {key for h in hosts for key in h.values}:
        present = [v for h in hosts if (v := h.values.get(key, math.nan)) == v]
        combined.values[key] = sum(present) if present else math.nan
    return combined


@dataclass(frozen=True)
class EpochReport:
    """Rows of a run (host rows of each epoch, then its ``*`` row) and what they came from."""

    run_id: str
    windows: list[EpochWindow]
    rows: list[EpochRow]
    amounts: list[EpochAmounts]  # same order as rows
    model: RunModel  # the run's events, as read once: what every other analysis takes

    def host_rows(self) -> list[EpochRow]:
        return [row for row in self.rows if row.host != ALL_HOSTS]

    def total_rows(self) -> list[EpochRow]:
        return [row for row in self.rows if row.host == ALL_HOSTS]


def epoch_amounts(store: ReadStore, windows: list[EpochWindow]) -> list[EpochAmounts]:
    """Measure every node metric over every host's epoch windows (one store read)."""
    if not windows:
        return []
    by_host: dict[str, list[EpochWindow]] = defaultdict(list)
    for window in windows:
        by_host[window.host].append(window)
    span_start = min(w.start_ns for w in windows)
    span_end = max(w.end_ns for w in windows)
    series = read_host_series(store, HOST_TOTALS, set(by_host), span_start, span_end)
    # A store that keeps whole ms (VictoriaMetrics, Prometheus) floors an edge sample's
    # time: compared at that precision, the sample is the edge's reading, not one up to
    # 1 ms inside the epoch before it with the next tick's activity interpolated after it.
    resolution = time_resolution_ns(store)

    out: list[EpochAmounts] = []
    for host, host_windows in by_host.items():
        starts = np.array([w.start_ns for w in host_windows], dtype=np.int64)
        ends = np.array([w.end_ns for w in host_windows], dtype=np.int64)
        if resolution > 1:
            starts, ends = starts - starts % resolution, ends - ends % resolution
        values: dict[str, np.ndarray] = {}
        gpu_count = np.zeros(starts.shape)
        for total in HOST_TOTALS:
            amount, count = window_amounts(
                total.how, series.get((total.key, host), []), starts, ends
            )
            values[total.key] = amount
            if total.key == "gpu_util":
                gpu_count = count
        fabric = _host_fabric(series, host, int(starts.min()), int(ends.max()))
        interpolated = interpolated_edges(series, host, starts, ends)
        if fabric == "ib":
            values["fabric_net"] = values["ib_rcv"] - values["ib_xmit"]
        elif fabric == "net":
            values["fabric_net"] = values["net_rx"] - values["net_tx"]
        for key in CEILING_KEYS:  # a damaged or forged ceiling is no measurement
            values[key] = plausible_ceiling(values[key])
        values.update(fabric_ceiling_amounts(values, fabric))
        # a host without a plausible disk ceiling adds nothing to the * row's share
        values[CEILED_DISK_READ] = np.where(
            np.isnan(values["disk_read_ceiling"]), np.nan, values[CEILED_DISK_READ]
        )
        for i, window in enumerate(host_windows):
            out.append(
                EpochAmounts(
                    host=host,
                    epoch=window.epoch,
                    start_ns=window.start_ns,
                    end_ns=window.end_ns,
                    seconds=window.seconds,
                    images=window.images,
                    values={key: float(array[i]) for key, array in values.items()},
                    gpu_count=float(gpu_count[i]),
                    fabric=fabric,
                    interpolated_edges=interpolated[i],
                    state=window.state,
                )
            )
    return out


EDGES = ("start", "end")
# the hosts' measured ceilings in bytes/s (agent ceilings), summed over their devices
CEILING_KEYS = (
    "disk_read_ceiling",
    "nfs_read_ceiling",
    "gpu_pcie_ceiling",
    "net_link_ceiling",
    "ib_link_ceiling",
    "peer_ceiling",
)


def plausible_ceiling(values: np.ndarray) -> np.ndarray:
    """NaN (not measured) where a ceiling sum is below ``MIN_CEILING`` or above
    ``MAX_BYTES_PER_SECOND`` (contract/ceilings.py: what the agent would not have kept)."""
    with np.errstate(invalid="ignore"):
        ok = (values >= MIN_CEILING) & (values <= MAX_BYTES_PER_SECOND)
    return np.where(ok, values, np.nan)


def interpolated_edges(
    series: dict[tuple[str, str], list[SeriesData]],
    host: str,
    starts: np.ndarray,
    ends: np.ndarray,
) -> list[tuple[str, ...]]:
    """Per window, the edges with no real node reading at them (``counters.sampled_edges``
    on the host's page-cache series, else its disk series): amounts there are interpolated."""
    reference = series.get(("page_cache_delta", host)) or series.get((DISK_READ, host)) or []
    times = reference[0].times_ns if reference else np.empty(0, dtype=np.int64)
    at_start, at_end = sampled_edges(times, starts), sampled_edges(times, ends)
    return [
        tuple(edge for edge, sampled in zip(EDGES, pair, strict=True) if not sampled)
        for pair in zip(at_start, at_end, strict=True)
    ]


def fabric_ceiling_amounts(values: dict[str, np.ndarray], fabric: str) -> dict[str, np.ndarray]:
    """Per window, the fabric's busier direction (bytes) and its ceiling (bytes/s, one
    direction): InfiniBand against its ports' rates; the NICs against the throughput
    measured to a peer where there is one (the path's, what TCP gets), else their link
    rates. Both add up over hosts for the ``*`` row (the hosts with a ceiling)."""
    if fabric == "ib":
        busier = np.fmax(values["ib_rcv"], values["ib_xmit"])
        ceiling = values["ib_link_ceiling"]
    elif fabric == "net":
        busier = np.fmax(values["net_rx"], values["net_tx"])
        peer = values["peer_ceiling"]
        ceiling = np.where(np.isnan(peer), values["net_link_ceiling"], peer)
    else:
        return {}
    # a host without a ceiling adds nothing to the * row's share, neither side of it
    return {"fabric_busier": np.where(np.isnan(ceiling), np.nan, busier), "fabric_ceiling": ceiling}


def _host_fabric(
    series: dict[tuple[str, str], list[SeriesData]], host: str, start_ns: int, end_ns: int
) -> str:
    """``ib`` if any InfiniBand port of the host moved bytes during the run, else ``net``."""
    for key in ("ib_rcv", "ib_xmit"):
        for s in series.get((key, host), []):
            growth = counter_increases(s.times_ns, s.values, [start_ns], [end_ns])[0]
            if not math.isnan(growth) and growth > 0:
                return "ib"
    if series.get(("net_rx", host)) or series.get(("net_tx", host)):
        return "net"
    return ""


def build_report(store: ReadStore, run_id: str) -> EpochReport:
    """The per-epoch report of a run, its events read once (empty when the run has no epoch
    events)."""
    return report_of(store, read_run(store, run_id))


def report_of(store: ReadStore, model: RunModel) -> EpochReport:
    """The per-epoch report of the run ``model`` was read from: its windows cut, the node
    samples measured over them (one read of ``store``), the ranks' own amounts added and the
    rows made."""
    windows = epoch_windows(model)
    amounts = epoch_amounts(store, windows)
    host_rates, epoch_rates = throughput.epoch_rates(throughput.rank_epoch_work(model))
    step_parts = anatomy.epoch_amounts(anatomy.rank_epochs(model))
    training_reads = anatomy.epoch_reads(model)
    cached = residency.epoch_residency(model)
    training_cpu = epoch_cpu(model)
    cores = decode.epoch_decode_cores(model, [(a.host, a.epoch) for a in amounts])
    for host_amounts in amounts:
        key = (host_amounts.host, host_amounts.epoch)
        host_amounts.values.update(step_parts.get(key, {}))
        host_amounts.values.update(training_reads.get(key, {}))
        host_amounts.values.update(cached.get(key, {}))
        host_amounts.values.update(training_cpu.get(key, {}))
        host_amounts.values.update(cores.get(key, {}))
        host_amounts.values[decode.DECODE_CEILING] = host_amounts.values.get(
            decode.DECODE_PER_CORE, math.nan
        ) * host_amounts.values.get(decode.DECODE_CORES, math.nan)
        host_amounts.images_per_second = host_rates.get(key, math.nan)
    ordered = with_all_hosts(amounts, epoch_rates)
    return EpochReport(model.run_id, windows, with_learning(rows_from_amounts(ordered), model),
                       ordered, model)  # fmt: skip


def with_learning(rows: list[EpochRow], model: RunModel) -> list[EpochRow]:
    """``rows`` with their epoch's loss and top-1 from the run's learning curve."""
    curve = {epoch.epoch: epoch for epoch in learning.learning_curve(model)}
    digits = {name: BY_NAME[name].digits for name in ("loss", "top1")}

    def rounded(value: float | None, name: str) -> float | None:
        return None if value is None else round(value, digits[name])

    return [
        dataclasses.replace(row, loss=rounded(epoch.loss, "loss"), top1=rounded(epoch.top1, "top1"))
        if (epoch := curve.get(row.epoch)) is not None
        else row
        for row in rows
    ]


def with_all_hosts(
    amounts: list[EpochAmounts], epoch_rates: dict[int, float]
) -> list[EpochAmounts]:
    """Each epoch's host amounts, by host, followed by its ``*`` amounts (whose images/s is
    ``epoch_rates``' for the epoch), in epoch order."""
    by_epoch: dict[int, list[EpochAmounts]] = defaultdict(list)
    for host_amounts in amounts:
        by_epoch[host_amounts.epoch].append(host_amounts)
    ordered: list[EpochAmounts] = []
    for epoch in sorted(by_epoch):
        hosts = sorted(by_epoch[epoch], key=lambda a: a.host)
        combined = all_hosts_amounts(epoch, hosts)
        combined.images_per_second = epoch_rates.get(epoch, math.nan)
        ordered += [*hosts, combined]
    return ordered


def epoch_rows(store: ReadStore, run_id: str) -> list[dict[str, Any]]:
    """The report as a list of dicts with exactly ``COLUMNS`` as keys."""
    return [row.to_dict() for row in build_report(store, run_id).rows]
