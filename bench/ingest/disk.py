"""Disk per sample of the SQLite store, measured on a real store: a real ``agent run`` on
this machine (its own /proc and /sys, every sampler it has data for) pushes to a real
``collector serve --db`` for ``--seconds``; then the store is compacted as the server's
maintenance leaves it once every window is over (one block per 10-minute window and tag
set), its WAL checkpointed, and its size divided by the samples it holds. The samples are
counted by reading every series back. Extrapolated to a cluster: nodes x series x 86,400
samples a day at 1 Hz.

    .venv/bin/python bench/ingest/disk.py                      # 660 s at 1 Hz
    .venv/bin/python bench/ingest/disk.py --seconds 120 --json /tmp/disk.json

The first window's blocks are counted whole: a run shorter than the 10-minute window
(``CHUNK_NS``) gives blocks of fewer samples than a long-lived store's, so give at least
600 s for the steady-state figure. The file's fixed part (schema, series tables, the
agent's own events) is included, which overstates bytes per sample for short runs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from collector.store import SqliteStore  # noqa: E402
from contract import schema  # noqa: E402

DAY_SECONDS = 86_400


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def count_samples(store: SqliteStore) -> tuple[int, int]:
    """(series, samples) in the store, read back through ``read_series``."""
    series = samples = 0
    for measurement in schema.SAMPLE_MEASUREMENTS:
        for field in measurement.fields():
            infos = store.list_series(measurement.NAME, field)
            if not infos:
                continue
            series += len(infos)
            for data in store.read_series(infos, 0, 2**62):
                samples += int((data.values == data.values).sum())  # NaN: no value
    return series, samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=660)
    parser.add_argument("--interval", type=float, default=1.0, help="agent interval_seconds")
    parser.add_argument("--nodes", type=int, default=256, help="extrapolate to this many")
    parser.add_argument("--series", type=int, default=300, help="... of this many series")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    with tempfile.TemporaryDirectory(prefix="bench-disk-") as workdir:
        work = Path(workdir)
        db, port = work / "disk.sqlite", free_port()
        (work / "agent.toml").write_text(
            f'host = "disknode"\ninterval_seconds = {args.interval}\n'
            f'[push]\nurl = "http://127.0.0.1:{port}"\nspool_dir = "{work / "spool"}"\n'
            'batch_seconds = 5\n[metrics]\nlisten = ""\n'
        )
        logs = open(work / "log", "wb")  # noqa: SIM115
        serve = [sys.executable, "-m", "collector", "serve", "--db", str(db)]
        collector = subprocess.Popen(
            [*serve, "--listen", f"127.0.0.1:{port}", "--parse-workers", "1"],
            stdout=logs,
            stderr=subprocess.STDOUT,
            env=env,
        )
        time.sleep(3)
        agent = subprocess.Popen(
            [sys.executable, "-m", "agent", "run", "--config", str(work / "agent.toml")],
            stdout=logs,
            stderr=subprocess.STDOUT,
            env=env,
        )
        time.sleep(args.seconds)
        for process in (agent, collector):  # the agent sends what it holds, then stops
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
        with SqliteStore(db) as store:
            store.compact(now_ns=time.time_ns() + 3600 * 10**9)  # every window over: merged
            series, samples = count_samples(store)
            conn = store.db.write_conn()
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("VACUUM")
        size = db.stat().st_size
    per_sample = size / samples
    per_day = per_sample * args.nodes * args.series * DAY_SECONDS / args.interval
    result = {
        "seconds": args.seconds,
        "interval_seconds": args.interval,
        "series": series,
        "samples": samples,
        "file_bytes": size,
        "bytes_per_sample": round(per_sample, 3),
        "extrapolated": {
            "nodes": args.nodes,
            "series_per_node": args.series,
            "gb_per_day": round(per_day / 1e9, 1),
        },
        "load_at_end": os.getloadavg()[0],
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
