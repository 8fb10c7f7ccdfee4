"""What one bounded time-series read costs a real ``collector serve`` in memory (issue 44,
item 3: one request peaked at 2.7 GB before the bounds).

    python bench/read_api/bounded_memory.py [--hours 3] [--interval 10]

Builds a store of one run (the test builder's node samples: one host, every ``--interval``
seconds over ``--hours``), starts ``collector serve`` on it (loopback, no token), then asks
``GET /api/v1/dashboard/timeseries`` the questions of the issue's attack and the largest
ones the bounds allow. Before each request the server's peak RSS is reset (``5`` into
``/proc/PID/clear_refs``); after it, ``VmHWM`` less the RSS before is what that request
took at most. Prints status, answer bytes, seconds and that peak per request, and the load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from bench.ingest.run import free_port, wait_http  # noqa: E402
from collector.store import SqliteStore  # noqa: E402
from tests.support.run_builder import NS, T0_NS, RunBuilder  # noqa: E402

MIB = 1024 * 1024


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def ask(port: int, params: dict[str, str]) -> tuple[int, int, float]:
    url = f"http://127.0.0.1:{port}/api/v1/dashboard/timeseries?" + urllib.parse.urlencode(params)
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=600) as response:
            return response.status, len(response.read()), time.perf_counter() - started
    except urllib.error.HTTPError as error:
        return error.code, len(error.read()), time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=3.0)
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    args = parser.parse_args()
    seconds = int(args.hours * 3600)
    three_years = 3 * 365 * 86_400 * NS
    questions = [
        ("bucket_ns=1 (the attack)", {"bucket_ns": "1"}),
        ("since 3 years before the run", {"since": json.dumps({"node1": T0_NS - three_years})}),
        ("since 3 years before, 22 s buckets",
         {"since": json.dumps({"node1": T0_NS - three_years}), "bucket_ns": str(22 * NS)}),
        ("the whole run in 1 s buckets (the least)", {"bucket_ns": str(NS)}),
        ("the default (max_points)", {}),
    ]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-bounded-") as workdir:
        db = Path(workdir) / "long.sqlite"
        run = RunBuilder("long", sample_interval_s=args.interval, write_samples=True)
        run.epoch(seconds, 100_000, disk_read=10_000_000)
        with SqliteStore(db) as store:
            store.write_points(run.points())
            store.compact()
        port = free_port()
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), EPOCHSCOPE_LOG_LEVEL="WARNING")
        server = subprocess.Popen(
            [sys.executable, "-m", "collector", "serve", "--db", str(db),
             "--listen", f"127.0.0.1:{port}"],
            env=env, cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            wait_http(port, "/ping")
            ask(port, {"run_id": "long"})  # the first read opens the store's readers
            print(
                f"one run of {args.hours:g} h, a sample every {args.interval:g} s; "
                f"{os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f}"
            )
            for name, params in questions:
                Path(f"/proc/{server.pid}/clear_refs").write_text("5")
                before = status_kib(server.pid, "VmRSS")
                status, size, took = ask(port, {"run_id": "long", **params})
                peak = status_kib(server.pid, "VmHWM") - before
                print(
                    f"{name:<42} {status}  {size:>10,} bytes  {took:6.2f} s  "
                    f"peak +{peak / 1024:6.1f} MiB (RSS before {before / 1024:.1f} MiB)"
                )
            print(f"load at the end {os.getloadavg()[0]:.2f}")
        finally:
            server.terminate()
            server.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
