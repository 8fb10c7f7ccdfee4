"""Writes' latency while 40 clients ask the read API for heavy views (issue 44, item 8).

    python bench/read_api/reads_and_writes.py [--runs 3000] [--readers 40] [--seconds 30]
        [--view scaling] [--gate 2:8] [--gate 14:1] [--gate off]

Builds a store of ``--runs`` finished runs (bench/read_api/many_runs.py's), starts a real
``collector serve`` on it for each ``--gate CONCURRENCY:QUEUE`` (its ``--read-concurrency``
and ``--read-queue``; 14:1 is about the collector before the gate: all 16 request
threads could build reads; ``off`` passes neither, for a checkout from before them),
then for ``--seconds``: ``--readers`` threads each asking
``GET /api/v1/<view>`` in a loop (after a 503, waiting its Retry-After, as a client should),
and one writer posting an agent's batch (200 lines of one host) every 0.2 s. Prints the
writes' latency (median, p99, max), the reads answered and refused, and the load average.
"""

from __future__ import annotations

import argparse
import http.client
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.read_api.many_runs import many_runs
from bench.reliability import harness

TOKEN = "bench-reads-and-writes-token"
HEADERS = {"Authorization": f"Token {TOKEN}"}


def request(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request(method, path, body=body, headers=HEADERS)
        response = conn.getresponse()
        response.read()
        return response.status, dict(response.getheaders())
    finally:
        conn.close()


def batch(number: int) -> bytes:
    time_ns = time.time_ns()
    lines = [
        f"cpu,host=writer,cpu={cpu} busy={number * 0.5 + cpu},idle=1.0 {time_ns}"
        for cpu in range(200)
    ]
    return "\n".join(lines).encode()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def measure(db: Path, workdir: Path, gate: str, readers: int, seconds: float, view: str) -> str:
    token_file = workdir / "token"
    gate_args: tuple[str, ...] = ()
    if gate != "off":  # off: no gate options (a collector from before them)
        concurrency, queue = gate.split(":")
        gate_args = ("--read-concurrency", concurrency, "--read-queue", queue)
    collector = harness.Collector(
        db=db,
        token_file=token_file,
        log=workdir / f"collector-{gate.replace(':', '-')}.log",
        extra_args=gate_args,
    )
    collector.start()
    stop = threading.Event()
    answered, refused, failed = [0], [0], [0]
    lock = threading.Lock()

    def read_loop() -> None:
        while not stop.is_set():
            try:
                status, headers = request(collector.port, "GET", f"/api/v1/{view}")
            except OSError:
                status, headers = 0, {}
            with lock:
                if status == 200:
                    answered[0] += 1
                elif status == 503:
                    refused[0] += 1
                else:
                    failed[0] += 1
            if status == 503:
                stop.wait(float(headers.get("Retry-After", "1")))

    threads = [threading.Thread(target=read_loop, daemon=True) for _ in range(readers)]
    for thread in threads:
        thread.start()
    latencies: list[float] = []
    write_failures = 0
    deadline = time.monotonic() + seconds
    number = 0
    try:
        while time.monotonic() < deadline:
            number += 1
            body = batch(number)
            started = time.perf_counter()
            status, _ = request(collector.port, "POST", "/api/v2/write?bucket=b&org=o", body)
            latencies.append(time.perf_counter() - started)
            write_failures += status != 204
            time.sleep(max(0.0, 0.2 - latencies[-1]))
    finally:
        load = os.getloadavg()
        stop.set()
        for thread in threads:
            thread.join(130)
        collector.stop()
    return (
        f"gate {gate}: {len(latencies)} writes ({write_failures} failed): median "
        f"{percentile(latencies, 0.5) * 1000:.0f} ms, p99 {percentile(latencies, 0.99) * 1000:.0f}"
        f" ms, max {max(latencies) * 1000:.0f} ms; {view} reads: {answered[0]} answered, "
        f"{refused[0]} told to retry (503), {failed[0]} failed; load average "
        f"{load[0]:.1f}/{load[1]:.1f} on {os.cpu_count()} CPUs"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3000)
    parser.add_argument("--readers", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--view", default="scaling")
    parser.add_argument("--gate", action="append", help="CONCURRENCY:QUEUE (repeatable)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="reads-and-writes-") as workdir_name:
        workdir = Path(workdir_name)
        harness.write_token_file(workdir, TOKEN)
        db = workdir / "many-runs.sqlite"
        started = time.perf_counter()
        many_runs(db, args.runs)
        print(f"built {args.runs} runs in {time.perf_counter() - started:.1f} s", flush=True)
        for gate in args.gate or ["2:8", "14:1"]:
            print(measure(db, workdir, gate, args.readers, args.seconds, args.view), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
