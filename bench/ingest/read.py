"""Read path of the SQLite store at the size the analysis needs: 8 hosts x 3 h x 1 Hz x 304
series per host (~26M values), read back whole, then cut into 90 epochs.

The store is filled through its real write path (``SqliteStore.write`` of parsed groups, one
batch per host per minute as agents push them) and compacted after each minute with the
clock of a live run (``now_ns``), as ``collector serve`` does, so the blocks read are the
ones a real store holds: one per 10-minute window once the window is merged, one per fold in
the windows still open. Timed, best of ``--repeat``:

* ``list_series`` for every field of every sample measurement (what the analysis asks);
* ``read_series`` of all of them over the whole run (plus the neighbour samples);
* that read plus per-epoch increases of every series over 90 epochs (``numpy.interp`` at
  the 91 boundaries), i.e. the job the brief sets at < 1 s.

    .venv/bin/python bench/ingest/read.py            # 8 hosts, 3 h
    .venv/bin/python bench/ingest/read.py --hosts 2 --hours 0.5
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import DEVICE_LAYOUT, T0_NS  # noqa: E402  (the same hosts the ingest bench sends)

from collector.lineprotocol import ParsedBody, SampleGroup  # noqa: E402
from collector.store import SqliteStore  # noqa: E402
from contract import schema  # noqa: E402

S = 1_000_000_000


def fill(store: SqliteStore, hosts: int, seconds: int, batch_seconds: int = 60) -> int:
    """Write every host's samples, a batch per host per ``batch_seconds``; the value count."""
    rng = np.random.default_rng(5)
    written = 0
    for start in range(0, seconds, batch_seconds):
        stop = min(start + batch_seconds, seconds)
        for host in range(hosts):
            jitter = rng.integers(0, 5_000_000, stop - start)
            times = T0_NS + np.arange(start, stop, dtype=np.int64) * S + jitter
            groups = []
            for measurement, tag_sets in DEVICE_LAYOUT:
                names = tuple(measurement.fields())
                for tags in tag_sets:
                    values = np.cumsum(rng.integers(0, 10**6, (len(names), stop - start)), axis=1)
                    tag_items = tuple(sorted({"host": f"node{host:03d}", **tags}.items()))
                    groups.append(
                        SampleGroup(
                            measurement.NAME,
                            tag_items,
                            names,
                            times.tobytes(),
                            values.astype(np.float64).tobytes(),
                        )
                    )
                    written += values.size
            store.write(ParsedBody(groups=groups))
        # the clock of a live collector: windows that are over (and quiet) get merged,
        # the last ones stay a block per fold, as in a store being written to
        store.compact(now_ns=T0_NS + stop * S + S)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--hours", type=float, default=3.0)
    parser.add_argument("--epochs", type=int, default=90)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--db", type=Path, help="reuse (or keep) this store file")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    from rich.console import Console

    console = Console()
    seconds = int(args.hours * 3600)
    workdir = None
    if args.db is None:
        workdir = tempfile.TemporaryDirectory(prefix="bench-read-")
        args.db = Path(workdir.name) / "read.sqlite"
    store = SqliteStore(args.db)
    if not store.list_series(schema.Cpu.NAME, schema.Cpu.USER_SECONDS):
        with console.status(f"writing {args.hosts} hosts x {seconds} s"):
            started = time.perf_counter()
            written = fill(store, args.hosts, seconds)
            console.print(
                f"wrote {written:,} values in {time.perf_counter() - started:.1f} s "
                f"({args.db.stat().st_size / 1e6:.0f} MB)"
            )
    fields = [(m.NAME, name) for m in schema.SAMPLE_MEASUREMENTS for name in m.fields()]
    start_ns, end_ns = T0_NS, T0_NS + seconds * S
    boundaries = np.linspace(start_ns, end_ns, args.epochs + 1)
    timings: dict[str, float] = {}  # best wall seconds
    cpu: dict[str, float] = {}  # best CPU seconds (this process)
    values = series_count = 0

    def keep(name: str, wall: float, cpu_s: float) -> None:
        timings[name] = min(timings.get(name, wall), wall)
        cpu[name] = min(cpu.get(name, cpu_s), cpu_s)

    for _ in range(args.repeat):
        wall0, cpu0 = time.perf_counter(), time.process_time()
        infos = [info for name, field in fields for info in store.list_series(name, field)]
        wall1, cpu1 = time.perf_counter(), time.process_time()
        data = store.read_series(infos, start_ns, end_ns)
        wall2, cpu2 = time.perf_counter(), time.process_time()
        increases = [np.diff(np.interp(boundaries, d.times_ns, d.values)) for d in data]
        wall3, cpu3 = time.perf_counter(), time.process_time()
        keep("list_series", wall1 - wall0, cpu1 - cpu0)
        keep("read_series", wall2 - wall1, cpu2 - cpu1)
        keep("read+epochs", wall3 - wall1, cpu3 - cpu1)
        values = sum(d.values.size for d in data)
        series_count = len(data)
        assert len(increases) == series_count
    load = os.getloadavg()[0]
    console.print(
        f"{series_count} series, {values:,} values (load average {load:.1f}), best of "
        f"{args.repeat}, wall (CPU): list_series {timings['list_series']:.3f} s "
        f"({cpu['list_series']:.3f}), read_series {timings['read_series']:.3f} s "
        f"({cpu['read_series']:.3f}), read + {args.epochs} per-epoch increases "
        f"{timings['read+epochs']:.3f} s ({cpu['read+epochs']:.3f}) (target < 1 s)"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"series": series_count, "values": values, "load_average": load}
                | {"wall_seconds": timings, "cpu_seconds": cpu},
                indent=2,
            )
        )
    store.close()
    if workdir is not None:
        workdir.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
