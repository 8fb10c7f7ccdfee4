"""Generate a benchmark store: a 90-epoch ResNet-50 run on 8 hosts, 3 hours at 1 Hz.

Every host has about 300 series, shaped like what the agent writes on a 4-GPU node with
InfiniBand and NFS: 9 CPU fields, 14 memory fields, 10 block devices x 8 fields, 4
interfaces x 8, 2 InfiniBand ports x 25, 2 NFS mounts x 27 (one a duplicate), 3 NFS RPC
fields, 4 GPUs x 11 and 6 agent fields. Traffic follows the studies: epoch 1 reads the data
set over NFS (receive = send + storage reads on InfiniBand), later epochs run from the page
cache. Every rank writes run/epoch events and a step event every 10 seconds.

    python bench/report/generate.py --db runs/bench-report.sqlite [--hosts 8 --hours 3]

Points go through the store's own write path (``SqliteStore.write_points``), in 10-minute
chunks per host (the store's compaction window), then the store is compacted.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from contract.point import Point
from contract.schema import (
    AgentSelf,
    Cpu,
    Disk,
    DiskKind,
    Event,
    Gpu,
    Infiniband,
    InterfaceKind,
    Memory,
    Net,
    Nfs,
    NfsRpc,
    RunState,
    Tag,
    Workload,
)

NS = 1_000_000_000
T0_NS = 1_700_000_000 * NS
RUN_ID = "bench-resnet50-8x4"
CHUNK_S = 600
MB = 1e6


class Cluster:
    """Rates per second for every host, constant within each epoch."""

    def __init__(self, hosts: int, hours: float, epochs: int, ranks_per_host: int) -> None:
        self.hosts = [f"node{i:02d}" for i in range(1, hosts + 1)]
        self.seconds = int(hours * 3600)
        self.epochs = epochs
        self.epoch_s = self.seconds / epochs
        self.ranks_per_host = ranks_per_host
        t = np.arange(self.seconds + 1, dtype=np.float64)
        self.t = t
        epoch_index = np.minimum((t // self.epoch_s).astype(int), epochs - 1)
        first = epoch_index == 0
        rng = np.random.default_rng(7)
        noise = 1 + 0.05 * rng.standard_normal(t.size)
        self.nfs_rate = np.where(first, 400 * MB, 2 * MB) * noise.clip(0.5)
        self.grad_rate = 250 * MB * noise.clip(0.5)
        self.cache_rate = np.where(first, 380 * MB, 0.0)
        self.images_rate = ranks_per_host * np.where(first, 180.0, 300.0)  # per host

    def cumulative(self, rate: np.ndarray, base: float = 0.0) -> np.ndarray:
        return base + np.concatenate(([0.0], np.cumsum(rate[:-1])))


def host_columns(cluster: Cluster, host: str) -> list[tuple[str, dict, dict[str, np.ndarray]]]:
    """(measurement, tags, {field: values per second}) for every tag set of one host."""
    c = cluster
    n = c.t.size
    cols: list[tuple[str, dict, dict[str, np.ndarray]]] = []

    def add(measurement: str, tags: dict, fields: dict[str, np.ndarray]) -> None:
        cols.append((measurement, {Tag.HOST: host, **tags}, fields))

    ramp = c.t  # seconds since start
    cpus = 80
    busy = c.cumulative(np.full(n, 0.55 * cpus))
    iowait = c.cumulative(np.where(c.nfs_rate > 100 * MB, 0.05 * cpus, 0.0))
    add(
        Cpu.NAME,
        {},
        {
            Cpu.USER_SECONDS: 0.8 * busy,
            Cpu.NICE_SECONDS: np.zeros(n),
            Cpu.SYSTEM_SECONDS: 0.15 * busy,
            Cpu.IDLE_SECONDS: ramp * cpus - busy - iowait,
            Cpu.IOWAIT_SECONDS: iowait,
            Cpu.IRQ_SECONDS: 0.02 * busy,
            Cpu.SOFTIRQ_SECONDS: 0.03 * busy,
            Cpu.STEAL_SECONDS: np.zeros(n),
            Cpu.CPUS_ONLINE: np.full(n, cpus),
        },
    )
    cached = c.cumulative(c.cache_rate, 4e9)
    memory = {name: np.full(n, 1e9) for name in Memory.fields() if name not in ("cached_bytes",)}
    memory[Memory.CACHED_BYTES] = cached
    memory[Memory.PGMAJFAULT] = c.cumulative(np.where(c.nfs_rate > 100 * MB, 50.0, 1.0))
    add(Memory.NAME, {}, memory)
    disks = [("nvme0n1", DiskKind.DISK), ("nvme1n1", DiskKind.DISK)]
    disks += [(f"nvme0n1p{i}", DiskKind.PARTITION) for i in (1, 2, 3)]
    disks += [(f"nvme1n1p{i}", DiskKind.PARTITION) for i in (1, 2, 3)]
    disks += [("dm-0", DiskKind.VIRTUAL), ("dm-1", DiskKind.VIRTUAL)]
    for device, kind in disks:
        add(
            Disk.NAME,
            {Tag.DEVICE: device, Tag.KIND: kind},
            {name: c.cumulative(np.full(n, 4096.0)) for name in Disk.fields()},
        )
    for interface, kind, rate in (
        ("lo", InterfaceKind.LOOPBACK, 1 * MB),
        ("eno1", InterfaceKind.PHYSICAL, 0.1 * MB),
        ("ib0", InterfaceKind.PHYSICAL, 0.05 * MB),
        ("docker0", InterfaceKind.VIRTUAL, 0.0),
    ):
        add(
            Net.NAME,
            {Tag.INTERFACE: interface, Tag.KIND: kind},
            {name: c.cumulative(np.full(n, rate)) for name in Net.fields()},
        )
    ib_fields = [f for f in Infiniband.fields() if f not in ("rcv_bytes", "xmit_bytes")][:23]
    for port, share in (("1", 1.0), ("2", 0.0)):
        fields = {name: c.cumulative(np.full(n, 10.0)) for name in ib_fields}
        fields[Infiniband.RCV_BYTES] = c.cumulative(share * (c.grad_rate + c.nfs_rate))
        fields[Infiniband.XMIT_BYTES] = c.cumulative(share * c.grad_rate)
        add(Infiniband.NAME, {Tag.DEVICE: "mlx5_0", Tag.PORT: port}, fields)
    nfs_tags = {Tag.SERVER: "filer", Tag.EXPORT: "/imagenet", Tag.NFS_VERSION: "4.1"}
    nfs_fields = list(Nfs.fields())[:27]
    for mount, extra in (("/data", {}), ("/data2", {Tag.DUPLICATE_OF: "/data"})):
        fields = {name: c.cumulative(np.full(n, 1.0)) for name in nfs_fields}
        fields[Nfs.SERVER_READ_BYTES] = c.cumulative(c.nfs_rate)
        fields[Nfs.APP_READ_BYTES] = c.cumulative(np.full(n, 600 * MB))
        add(Nfs.NAME, {Tag.MOUNTPOINT: mount, **nfs_tags, **extra}, fields)
    add(NfsRpc.NAME, {}, {name: c.cumulative(np.full(n, 100.0)) for name in NfsRpc.fields()})
    for gpu in range(c.ranks_per_host):
        add(
            Gpu.NAME,
            {Tag.GPU: str(gpu), Tag.UUID: f"GPU-{host}-{gpu}", Tag.NAME: "Tesla V100-SXM2"},
            {name: np.full(n, 90.0) for name in Gpu.fields()},
        )
    add(AgentSelf.NAME, {}, {name: np.full(n, 1.0) for name in AgentSelf.fields()})
    return cols


def series_count(columns) -> int:
    return sum(len(fields) for _, _, fields in columns)


def sample_points(columns, start_s: int, end_s: int) -> list[Point]:
    points = []
    for measurement, tags, fields in columns:
        names = list(fields)
        matrix = np.vstack([fields[name][start_s:end_s] for name in names]).T.tolist()
        counters = [getattr(name, "is_counter", False) for name in names]
        for second, row in zip(range(start_s, end_s), matrix, strict=True):
            values = {
                name: (round(v) if is_counter else v)
                for name, v, is_counter in zip(names, row, counters, strict=True)
            }
            points.append(Point(measurement, tags, values, T0_NS + second * NS))
    return points


def event_points(cluster: Cluster, host_index: int) -> list[Point]:
    c = cluster
    host = c.hosts[host_index]
    out = []
    for local in range(c.ranks_per_host):
        rank = host_index * c.ranks_per_host + local
        tags = {Tag.HOST: host, Tag.RUN_ID: RUN_ID, Tag.RANK: str(rank), Tag.FRAMEWORK: "tf"}

        def event(t: float, fields: dict, tags=tags) -> Point:
            return Point(Workload.NAME, tags, fields, T0_NS + round(t * NS))

        out.append(
            event(
                0.0,
                {
                    Workload.EVENT: Event.RUN_START,
                    Workload.MODEL: "resnet50",
                    Workload.BATCH_SIZE: 256,
                    Workload.WORLD_SIZE: len(c.hosts) * c.ranks_per_host,
                    Workload.LOCAL_SIZE: c.ranks_per_host,
                    Workload.PRECISION: "fp16",
                    Workload.DATA_FORMAT: "tfrecord",
                    Workload.DATASET_IMAGES: 1_281_167,
                    Workload.DATASET_BYTES: 143_000_000_000,
                    Workload.IMAGE_SIZE: 224,
                    Workload.HOST_MEMORY_BYTES: 384_000_000_000,
                    Workload.WARMUP_STEPS: 10,
                    Workload.TARGET_TOP1: 0.749,
                },
            )
        )
        step = 0
        for epoch in range(1, c.epochs + 1):
            start, end = (epoch - 1) * c.epoch_s, epoch * c.epoch_s
            per_rank_rate = c.images_rate[int(start)] / c.ranks_per_host
            out.append(
                event(start + 0.01 * local, {Workload.EVENT: Event.EPOCH_START, "epoch": epoch})
            )
            t = start + 10.0
            while t < end - 1e-9:
                step += 1
                out.append(
                    event(
                        t,
                        {
                            Workload.EVENT: Event.STEP,
                            Workload.EPOCH: epoch,
                            Workload.STEP: step,
                            Workload.IMAGES: round(per_rank_rate * 10),
                            Workload.SECONDS: 10.0,
                        },
                    )
                )
                t += 10.0
            out.append(
                event(
                    end - 0.01 * local,
                    {
                        Workload.EVENT: Event.EPOCH_END,
                        Workload.EPOCH: epoch,
                        Workload.IMAGES: round(per_rank_rate * c.epoch_s),
                        Workload.SECONDS: c.epoch_s,
                        Workload.TOP1: min(0.76, 0.1 + 0.66 * epoch / c.epochs),
                    },
                )
            )
        out.append(
            event(c.seconds, {Workload.EVENT: Event.RUN_END, Workload.STATE: RunState.FINISHED})
        )
    return out


def generate(db: Path, hosts: int = 8, hours: float = 3.0, epochs: int = 90) -> dict:
    from rich.progress import Progress

    from collector.store import SqliteStore

    cluster = Cluster(hosts, hours, epochs, ranks_per_host=4)
    db.parent.mkdir(parents=True, exist_ok=True)
    store = SqliteStore(db)
    started = time.perf_counter()
    chunks = range(0, cluster.seconds + 1, CHUNK_S)
    samples = 0
    series = 0
    with Progress() as progress:
        task = progress.add_task(f"writing {db}", total=len(chunks) * hosts + hosts)
        for host_index, host in enumerate(cluster.hosts):
            store.write_points(event_points(cluster, host_index))
            progress.advance(task)
            columns = host_columns(cluster, host)
            series += series_count(columns)
            for start in chunks:
                end = min(start + CHUNK_S, cluster.seconds + 1)
                points = sample_points(columns, start, end)
                samples += sum(len(p.fields) for p in points)
                store.write_points(points)
                progress.advance(task)
    store.compact(now_ns=T0_NS + (cluster.seconds + 3600) * NS)
    store.close()
    return {
        "run_id": RUN_ID,
        "hosts": hosts,
        "series": series,
        "series_per_host": series // hosts,
        "samples": samples,
        "epochs": epochs,
        "seconds": cluster.seconds,
        "generate_seconds": round(time.perf_counter() - started, 1),
        "db_bytes": db.stat().st_size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=Path("runs/bench-report.sqlite"))
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--hours", type=float, default=3.0)
    parser.add_argument("--epochs", type=int, default=90)
    args = parser.parse_args()
    if args.db.exists():
        sys.exit(f"{args.db} exists: remove it first")
    print(generate(args.db, args.hosts, args.hours, args.epochs))


if __name__ == "__main__":
    main()
