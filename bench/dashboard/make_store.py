"""A big stored run for the dashboard benchmark: 8 hosts x 3 h of 1 Hz samples.

    python bench/dashboard/make_store.py PATH [--hosts 8] [--hours 3]

Writes through the real store's write path (``SqliteStore.write_points``, the project's
line-protocol encoder and parser) in 10-minute batches, then compacts as ``collector serve``
does. Every field of every sampled measurement in ``contract.schema`` is written (text fields
aside), for the devices a GPU node has: two disks, a partition and a device-mapper volume, an
NFS mount, one InfiniBand port, Ethernet, IPoIB and loopback, 4 GPUs. That is about 190
series per host. Workload events: 4 ranks per host, epoch events, a step event every 10 s
per rank.

The run's timeline and events are ``tests.support.run_builder.RunBuilder``'s, as the tests'
runs are; its samples come from ``HostModel`` (the builder's ``sampler``).

The run behaves like the seed studies' runs: epoch 1 (1,000 s) reads the data set from NFS
over InfiniBand at 150 MB/s per host while the page cache fills; 14 later 700-s epochs read
nothing from the server and run faster.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from contract.schema import (  # noqa: E402
    Cpu,
    Disk,
    DiskKind,
    FieldName,
    Gpu,
    Infiniband,
    InterfaceKind,
    Kind,
    Measurement,
    Memory,
    Net,
    Nfs,
    Tag,
)
from tests.support.run_builder import (  # noqa: E402
    NS,
    RunBuilder,
    SampledSeries,
    series_points,
)

T0_NS = 1_750_000_000 * NS
RUN_ID = "bench-8x3h"
RANKS_PER_HOST = 4
FIRST_EPOCH_S = 1000
LATER_EPOCH_S = 700
STEP_EVERY_S = 10
BATCH = 256
BATCH_SECONDS = 600  # samples per write: one agent's 10 minutes
PAD_S = 30  # samples before the run starts and after it ends


def epoch_bounds(hours: float) -> list[tuple[int, int]]:
    """(start, end) seconds after T0 of each epoch, filling ``hours``."""
    total = round(hours * 3600)
    bounds = [(0, min(FIRST_EPOCH_S, total))]
    while bounds[-1][1] < total:
        start = bounds[-1][1]
        bounds.append((start, min(start + LATER_EPOCH_S, total)))
    return bounds


def host_names(hosts: int) -> list[str]:
    return [f"gpu{i + 1:02d}" for i in range(hosts)]


def bench_run(hosts: int = 8, hours: float = 3.0) -> RunBuilder:
    """The run: its epochs with a step event every ``STEP_EVERY_S`` per rank (each for that
    many seconds of ``BATCH``-image steps), its samples from one ``HostModel`` per host."""
    names = host_names(hosts)
    bounds = epoch_bounds(hours)
    index = {name: number for number, name in enumerate(names)}

    def samples(host: str, times: np.ndarray) -> list[SampledSeries]:
        seconds = (times - T0_NS) // NS
        return HostModel(index[host], seconds, bounds[-1][1]).series()

    run = RunBuilder(
        run_id=RUN_ID,
        hosts=tuple(names),
        ranks_per_host=RANKS_PER_HOST,
        t0_ns=T0_NS,
        pad_s=PAD_S,
        precision="fp16",
        batch_size=BATCH,
        dataset_bytes=144_000_000_000,
        sampler=samples,
    )
    for start, end in bounds:
        steps = max(1, (end - start) // STEP_EVERY_S)
        run.epoch(end - start, steps * STEP_EVERY_S * BATCH, steps=steps)
    return run


def tagsets(host_index: int) -> list[tuple[type[Measurement], dict[str, str]]]:
    return [
        (Cpu, {}),
        (Memory, {}),
        (Disk, {Tag.DEVICE: "nvme0n1", Tag.KIND: DiskKind.DISK}),
        (Disk, {Tag.DEVICE: "nvme0n1p1", Tag.KIND: DiskKind.PARTITION}),
        (Disk, {Tag.DEVICE: "sda", Tag.KIND: DiskKind.DISK}),
        (Disk, {Tag.DEVICE: "dm-0", Tag.KIND: DiskKind.VIRTUAL}),
        (
            Nfs,
            {
                Tag.MOUNTPOINT: "/data",
                Tag.SERVER: "isilon",
                Tag.EXPORT: "/ifs/imagenet",
                Tag.NFS_VERSION: "3",
                Tag.PROTO: "tcp",
            },
        ),
        (Infiniband, {Tag.DEVICE: "mlx5_0", Tag.PORT: "1"}),
        (Net, {Tag.INTERFACE: "eth0", Tag.KIND: InterfaceKind.PHYSICAL}),
        (Net, {Tag.INTERFACE: "ib0", Tag.KIND: InterfaceKind.PHYSICAL}),
        (Net, {Tag.INTERFACE: "lo", Tag.KIND: InterfaceKind.LOOPBACK}),
        *[
            (
                Gpu,
                {
                    Tag.GPU: str(g),
                    Tag.UUID: f"GPU-{host_index:02d}{g:02d}",
                    Tag.NAME: "Tesla V100-SXM2-32GB",
                },
            )
            for g in range(4)
        ],
    ]


class HostModel:
    """Per-second rates and levels of one host, epoch by epoch (deterministic noise), at
    ``seconds`` after T0 (the samples' times) of a run of ``run_seconds``."""

    def __init__(self, host_index: int, seconds: np.ndarray, run_seconds: int) -> None:
        self.host_index = host_index
        self.rng = np.random.default_rng(1000 + host_index)
        self.seconds = seconds
        in_run = (self.seconds >= 0) & (self.seconds < run_seconds)
        first = (self.seconds >= 0) & (self.seconds < FIRST_EPOCH_S)
        later = in_run & ~first

        def noisy(level: float, spread: float = 0.05) -> np.ndarray:
            return level * (1 + spread * self.rng.standard_normal(self.seconds.size))

        self.nfs_server = np.where(first, noisy(150e6, 0.25), 0.0).clip(0)
        self.nfs_app = np.where(first, self.nfs_server, np.where(later, noisy(210e6), 0.0))
        gradients = np.where(in_run, noisy(120e6), 0.0).clip(0)
        self.ib_xmit = gradients
        self.ib_rcv = gradients + self.nfs_server
        self.cache = 4e9 + np.cumsum(self.nfs_server)
        self.busy = np.where(first, 0.35, np.where(later, 0.55, 0.02))
        self.iowait = np.where(first, noisy(0.12), np.where(later, 0.005, 0.0)).clip(0)
        self.gpu = np.where(first, noisy(62, 0.15), np.where(later, noisy(94, 0.02), 0.0))

    def series(self) -> list[SampledSeries]:
        """Every field of every sampled measurement, for the devices of ``tagsets``."""
        return [
            (measurement.NAME, tags, self._fields(measurement, tags))
            for measurement, tags in tagsets(self.host_index)
        ]

    def _fields(
        self, measurement: type[Measurement], tags: dict[str, str]
    ) -> dict[FieldName, np.ndarray]:
        n = self.seconds.size
        out: dict[FieldName, np.ndarray] = {}
        for name in measurement.fields().values():
            if name.kind is Kind.TEXT:
                continue
            if name.kind is Kind.COUNTER:
                out[name] = np.cumsum(np.full(n, 10.0))  # steady background counting
            else:
                out[name] = np.full(n, 1.0)
        cpus = 64.0
        if measurement is Cpu:
            out[Cpu.USER_SECONDS] = np.cumsum(self.busy * cpus * 0.85)
            out[Cpu.SYSTEM_SECONDS] = np.cumsum(self.busy * cpus * 0.15)
            out[Cpu.IOWAIT_SECONDS] = np.cumsum(self.iowait * cpus)
            out[Cpu.IDLE_SECONDS] = np.cumsum((1 - self.busy - self.iowait) * cpus)
            for name in (Cpu.NICE_SECONDS, Cpu.IRQ_SECONDS, Cpu.SOFTIRQ_SECONDS):
                out[name] = np.zeros(n)
            out[Cpu.STEAL_SECONDS] = np.zeros(n)
            out[Cpu.CPUS_ONLINE] = np.full(n, cpus)
        elif measurement is Memory:
            out[Memory.CACHED_BYTES] = self.cache
            out[Memory.TOTAL_BYTES] = np.full(n, 384e9)
        elif measurement is Nfs:
            out[Nfs.SERVER_READ_BYTES] = np.cumsum(self.nfs_server)
            out[Nfs.APP_READ_BYTES] = np.cumsum(self.nfs_app)
        elif measurement is Infiniband:
            out[Infiniband.RCV_BYTES] = np.cumsum(self.ib_rcv)
            out[Infiniband.XMIT_BYTES] = np.cumsum(self.ib_xmit)
        elif measurement is Net and tags[Tag.INTERFACE] == "ib0":
            out[Net.RX_BYTES] = np.cumsum(self.nfs_server)  # NFS over IPoIB
            out[Net.TX_BYTES] = np.cumsum(np.full(n, 2e5))
        elif measurement is Net:
            out[Net.RX_BYTES] = np.cumsum(np.full(n, 5e4))
            out[Net.TX_BYTES] = np.cumsum(np.full(n, 5e4))
        elif measurement is Gpu:
            out[Gpu.UTILIZATION_PERCENT] = self.gpu
        elif measurement is Disk:
            out[Disk.READ_BYTES] = np.cumsum(np.full(n, 4096.0))
        return out


def build(path: Path, hosts: int = 8, hours: float = 3.0) -> None:
    from rich.progress import Progress

    from collector.store import SqliteStore

    run = bench_run(hosts, hours)
    store = SqliteStore(path)
    try:
        store.write_points(run.event_points())
        samples = {host: run.host_series(host) for host in run.hosts}
        length = min(times.size for times, _series in samples.values())
        with Progress() as progress:
            task = progress.add_task("writing samples", total=length * hosts)
            for start in range(0, length, BATCH_SECONDS):
                stop = min(start + BATCH_SECONDS, length)
                for host, (times, series) in samples.items():
                    store.write_points(series_points(host, series, times, start, stop))
                    progress.advance(task, stop - start)
        store.compact()  # as `collector serve` does every 30 s
    finally:
        store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--hours", type=float, default=3.0)
    args = parser.parse_args()
    if args.path.exists():
        parser.error(f"{args.path} exists: the benchmark builds a fresh store")
    build(args.path, args.hosts, args.hours)
    return 0


if __name__ == "__main__":
    sys.exit(main())
