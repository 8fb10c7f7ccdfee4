"""Ingest throughput: ``collector serve`` (SQLite) vs Debian's victoria-metrics, same payload,
same client, same run, same machine.

The payload is what a cluster of agents sends: every host's ~300 series (26 lines of the
agent's measurements per second: cpu, memory, 6 disks, 4 NICs, 2 IB ports, 2 NFS mounts,
nfs_rpc, 8 GPUs, agent), one line per tag set per second, counters as integers and gauges
as floats. Lines are ordered by time then host, cut into bodies of ``--body-lines`` lines,
and sent by ``--senders`` threads over keep-alive ``http.client`` connections to
``/api/v2/write`` (both servers speak it). Every body must get a 204.

Each round starts both servers fresh (empty data directories) one after the other; rounds
alternate which goes first. Reported: lines/s and samples/s from the first request to the
last 204, the server's CPU seconds (all its processes), and for the collector the time
``SqliteStore.compact`` then takes to fold the small blocks (what its background thread
does every 30 s), counted into a second "with compaction" rate. ``--baseline DIR`` runs a
second collector, from another checkout, in every round too: before and after a change,
measured side by side.

    .venv/bin/python bench/ingest/run.py               # defaults: 64 hosts, 240 s of data
    .venv/bin/python bench/ingest/run.py --hosts 8 --seconds 60 --rounds 1
    git archive 0c1ba06 | tar -x -C /tmp/before && \
        .venv/bin/python bench/ingest/run.py --baseline /tmp/before
"""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from contract import schema  # noqa: E402
from contract.point import Point, encode_line  # noqa: E402

VICTORIA_METRICS = "/usr/bin/victoria-metrics"
COLLECTOR_SERVE = [sys.executable, "-m", "collector", "serve"]
WRITE_PATH = "/api/v2/write?org=bench&bucket=bench&precision=ns"
T0_NS = 1_700_000_000 * 10**9
COLLECTOR = "collector (SQLite)"
BASELINE = "collector (baseline)"  # --baseline: another checkout's collector

# tag sets per host: (measurement, tags)
DEVICE_LAYOUT: list[tuple[type[schema.Measurement], list[dict[str, str]]]] = [
    (schema.Cpu, [{}]),
    (schema.Memory, [{}]),
    (
        schema.Disk,
        [
            {"device": name, "kind": "disk"}
            for name in ("sda", "sdb", "nvme0n1", "nvme1n1", "nvme2n1", "nvme3n1")
        ],
    ),
    (
        schema.Net,
        [
            {"interface": name, "kind": kind}
            for name, kind in (
                ("eno1", "physical"),
                ("eno2", "physical"),
                ("ib0", "physical"),
                ("docker0", "virtual"),
            )
        ],
    ),
    (schema.Infiniband, [{"device": "mlx5_0", "port": "1"}, {"device": "mlx5_1", "port": "1"}]),
    (
        schema.Nfs,
        [
            {
                "mountpoint": mount,
                "server": "fs01",
                "export": f"/export{mount}",
                "nfs_version": "4.2",
                "proto": "tcp",
            }
            for mount in ("/data", "/home")
        ],
    ),
    (schema.NfsRpc, [{}]),
    (
        schema.Gpu,
        [
            {"gpu": str(i), "uuid": f"GPU-3b2c{i:04d}", "name": "Tesla V100-SXM2-32GB"}
            for i in range(8)
        ],
    ),
    (schema.AgentSelf, [{}]),
]


def host_lines(host: str, second: int, rng: random.Random, counters: dict) -> list[str]:
    """One agent sample of one host: 26 lines, 304 fields."""
    lines = []
    time_ns = T0_NS + second * 10**9 + rng.randrange(0, 5_000_000)  # sampling jitter
    for measurement, tag_sets in DEVICE_LAYOUT:
        fields_spec = measurement.fields()
        for tags in tag_sets:
            fields: dict[str, int | float] = {}
            for name, spec in fields_spec.items():
                if spec.is_counter:
                    key = (host, measurement.NAME, tuple(tags.items()), name)
                    counters[key] = counters.get(key, rng.randrange(10**6, 10**12)) + (
                        rng.randrange(0, 10**6)
                    )
                    fields[name] = counters[key]
                else:
                    fields[name] = round(rng.uniform(0, 1000), 3)
            lines.append(
                encode_line(Point(measurement.NAME, {"host": host, **tags}, fields, time_ns))
            )
    return lines


def make_bodies(hosts: int, seconds: int, body_lines: int) -> tuple[list[bytes], int, int]:
    rng = random.Random(20240501)
    counters: dict = {}
    lines: list[str] = []
    for second in range(seconds):
        for index in range(hosts):
            lines.extend(host_lines(f"node{index:03d}", second, rng, counters))
    samples = sum(line.split(" ")[-2].count("=") for line in lines[: 26 * hosts]) * seconds
    bodies = [
        "\n".join(lines[i : i + body_lines]).encode() for i in range(0, len(lines), body_lines)
    ]
    return bodies, len(lines), samples


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_http(port: int, path: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", path)
            if conn.getresponse().status < 500:
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing answered on port {port}")


def process_cpu_seconds(pid: int) -> float:
    """CPU time of a process and its children (the collector's parse workers)."""
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for each in procs:
        try:
            times = each.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def own_cpu_seconds(pid: int) -> float:
    """CPU time of the process alone (not its children)."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def send_all(
    port: int, bodies: list[bytes], senders: int, headers: list[dict[str, str]] | None = None
) -> float:
    """Send every body, ``senders`` at a time (``headers[i]`` with body ``i`` when given);
    seconds from first request to last 204."""
    next_body = iter(range(len(bodies)))
    lock = threading.Lock()
    failures: list[str] = []

    def sender() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        while True:
            with lock:
                index = next(next_body, None)
            if index is None:
                break
            conn.request(
                "POST", WRITE_PATH, body=bodies[index], headers=headers[index] if headers else {}
            )
            response = conn.getresponse()
            reply = response.read()
            if response.status != 204:
                failures.append(f"{response.status} {reply[:200]!r}")
                break
        conn.close()

    threads = [threading.Thread(target=sender) for _ in range(senders)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if failures:
        raise RuntimeError(f"writes failed: {failures[:3]}")
    return elapsed


@dataclass
class Result:
    server: str
    round: int
    seconds: float
    lines_per_s: float
    samples_per_s: float
    server_cpu_s: float
    compact_s: float | None = None
    samples_per_s_with_compaction: float | None = None
    # a collector forwarding to victoria-metrics: that one's CPU, in server_cpu_s too
    backend_cpu_s: float | None = None
    # the collector's own process, without its parse workers: the one writer's share
    main_cpu_s: float | None = None
    requests: int = 0


# run in the collector's own tree: compaction timed, and one series counted, as JSON
_COMPACT_AND_COUNT = """
import json, sys, time
from collector.store import SqliteStore
with SqliteStore(sys.argv[1]) as store:
    started = time.perf_counter()
    store.compact()
    compact_s = time.perf_counter() - started
    (info,) = store.list_series(sys.argv[2], sys.argv[3], "node000")
    (data,) = store.read_series([info], 0, 2**62)
print(json.dumps({"compact_s": compact_s, "count": int(data.times_ns.size)}))
"""


def collector_name(workers: int | None, into_vm: bool) -> str:
    if workers is None and not into_vm:
        return COLLECTOR
    option = f" --workers {workers}" if workers else ""
    return f"collector{option} ({'to victoria-metrics' if into_vm else 'SQLite'})"


def run_collector(
    workdir: Path,
    bodies,
    lines,
    samples,
    senders,
    round_no,
    tree: Path = REPO_ROOT,
    workers: int | None = None,
    into_vm: bool = False,
) -> Result:
    """``collector serve`` (``--workers``, default its own) into SQLite, or with
    ``into_vm`` in front of a fresh victoria-metrics (``--backend victoriametrics=URL``),
    whose CPU then counts too."""
    port = free_port()
    db = workdir / "collector.sqlite"
    env = dict(os.environ, PYTHONPATH=str(tree), EPOCHSCOPE_LOG_LEVEL="WARNING")
    extra = ["--workers", str(workers)] if workers else []
    vm, vm_port = start_victoria_metrics(workdir) if into_vm else (None, 0)
    if into_vm:
        extra += ["--backend", f"victoriametrics=http://127.0.0.1:{vm_port}"]
    proc = subprocess.Popen(
        [*COLLECTOR_SERVE, "--db", str(db), "--listen", f"127.0.0.1:{port}", *extra],
        env=env,
        cwd=tree,  # `python -m` puts the working directory first on sys.path
        stdout=subprocess.DEVNULL,
    )
    backend_cpu = None
    try:
        wait_http(port, "/ping")
        # the parse workers start beside the server: let them come up before timing
        send_all(port, [b"warmup,host=w v=1 1"] * 4, 1)
        time.sleep(3)
        cpu_before = process_cpu_seconds(proc.pid)
        main_before = own_cpu_seconds(proc.pid)
        vm_before = process_cpu_seconds(vm.pid) if vm else 0.0
        elapsed = send_all(port, bodies, senders)
        cpu = process_cpu_seconds(proc.pid) - cpu_before
        main_cpu = own_cpu_seconds(proc.pid) - main_before
        if vm is not None:
            backend_cpu = process_cpu_seconds(vm.pid) - vm_before
            cpu += backend_cpu
            wait_for_count(vm_port, lines // (26 * len_hosts(bodies)))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        if vm is not None:
            vm.terminate()
            vm.wait(timeout=60)
    name = collector_name(workers, into_vm) if tree == REPO_ROOT else BASELINE
    if into_vm:
        return Result(
            name, round_no, elapsed, lines / elapsed, samples / elapsed, cpu,
            backend_cpu_s=backend_cpu, main_cpu_s=main_cpu, requests=len(bodies),
        )  # fmt: skip
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _COMPACT_AND_COUNT,
            str(db),
            schema.Cpu.NAME,
            schema.Cpu.USER_SECONDS,
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tree,
    )
    checked = json.loads(done.stdout)
    compact_s = checked["compact_s"]
    assert checked["count"] == lines // (26 * len_hosts(bodies)), checked
    return Result(
        name,
        round_no,
        elapsed,
        lines / elapsed,
        samples / elapsed,
        cpu,
        compact_s,
        samples / (elapsed + compact_s),
        main_cpu_s=main_cpu,
        requests=len(bodies),
    )


def machine_line() -> str:
    """The CPU, its family and model, the cores, the OS and Python: every figure names it."""
    import platform

    info: dict[str, str] = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    os_name = platform.platform()
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return (
        f"{os.cpu_count()} vCPUs {info.get('model name', '?')} (family {info.get('cpu family')}"
        f" model {info.get('model')}), {os_name}, Python {platform.python_version()}"
    )


def len_hosts(bodies: list[bytes]) -> int:
    return len({host for body in bodies for host in re.findall(rb"host=(node\d+)", body)})


def victoria_metrics_count(port: int) -> int:
    """Samples of one series (node000's cpu user_seconds) victoria-metrics returns."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/internal/force_flush")
    conn.getresponse().read()
    conn.request("GET", "/api/v1/export?match[]=cpu_user_seconds{host=%22node000%22}&start=1")
    reply = conn.getresponse().read().splitlines()
    conn.close()
    return len(json.loads(reply[0])["values"]) if reply else 0


def start_victoria_metrics(workdir: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen(
        [
            VICTORIA_METRICS,
            f"-storageDataPath={workdir / 'vm'}",
            f"-httpListenAddr=127.0.0.1:{port}",
            "-search.latencyOffset=0",
            "-retentionPeriod=100y",
            "-loggerLevel=ERROR",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_http(port, "/health")
    return proc, port


def wait_for_count(port: int, expected: int) -> None:
    """Until victoria-metrics holds ``expected`` samples of one series (it flushes every
    ~1 s): every sample acknowledged is stored."""
    exported = victoria_metrics_count(port)
    deadline = time.monotonic() + 30
    while exported != expected and time.monotonic() < deadline:
        time.sleep(0.5)
        exported = victoria_metrics_count(port)
    assert exported == expected, (exported, expected)


def run_victoria_metrics(workdir: Path, bodies, lines, samples, senders, round_no) -> Result:
    proc, port = start_victoria_metrics(workdir)
    try:
        send_all(port, [b"warmup,host=w v=1 1"] * 4, 1)
        time.sleep(1)
        cpu_before = process_cpu_seconds(proc.pid)
        elapsed = send_all(port, bodies, senders)
        cpu = process_cpu_seconds(proc.pid) - cpu_before
        wait_for_count(port, lines // (26 * len_hosts(bodies)))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return Result("victoria-metrics", round_no, elapsed, lines / elapsed, samples / elapsed, cpu)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--seconds", type=int, default=240, help="seconds of agent data")
    parser.add_argument("--body-lines", type=int, default=5000)
    parser.add_argument("--senders", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout of epochscope (e.g. `git archive COMMIT | tar -x -C DIR`) whose"
        " collector runs beside this one in every round: before/after in one run",
    )
    parser.add_argument(
        "--workers",
        default="",
        help="collector serve's --workers, side by side (e.g. 1,2): each into SQLite and "
        "in front of a victoria-metrics of its own, every round (default: one collector "
        "into SQLite, with its default)",
    )
    args = parser.parse_args()
    if not Path(VICTORIA_METRICS).exists():
        print(f"{VICTORIA_METRICS} is missing: apt-get install victoria-metrics", file=sys.stderr)
        return 2

    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 150))  # the table's names, unwrapped
    with console.status("building the payload"):
        bodies, lines, samples = make_bodies(args.hosts, args.seconds, args.body_lines)
    megabytes = sum(map(len, bodies)) / 1e6
    console.print(
        f"payload: {args.hosts} hosts x {args.seconds} s = {lines:,} lines, {samples:,} samples, "
        f"{len(bodies)} bodies of {args.body_lines} lines, {megabytes:.0f} MB; "
        f"{args.senders} senders; {os.cpu_count()} CPUs"
    )
    load_average = {"start": os.getloadavg()}
    console.print(f"load average at the start: {load_average['start']}")
    machine = machine_line()
    console.print(f"machine: {machine}")
    results: list[Result] = []
    runners: list[tuple[str, Callable[..., Result]]] = [(COLLECTOR, run_collector)]
    if args.workers:
        runners = [
            (
                collector_name(workers, into_vm),
                functools.partial(run_collector, workers=workers, into_vm=into_vm),
            )
            for into_vm in (False, True)
            for workers in map(int, args.workers.split(","))
        ]
    runners.append(("victoria-metrics", run_victoria_metrics))
    if args.baseline:
        baseline = functools.partial(run_collector, tree=args.baseline.resolve())
        runners.insert(1, (BASELINE, baseline))
    collectors = [name for name, _ in runners if name != "victoria-metrics"]
    for round_no in range(1, args.rounds + 1):
        order = runners if round_no % 2 else runners[::-1]
        for name, runner in order:
            workdir = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
            try:
                with console.status(f"round {round_no}: {name}"):
                    result = runner(workdir, bodies, lines, samples, args.senders, round_no)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
            results.append(result)
            main = ""
            if result.main_cpu_s is not None:
                per_request = 1e3 * result.main_cpu_s / result.requests
                main = (
                    f" (its own process {result.main_cpu_s:.1f} s: {per_request:.2f} ms a request)"
                )
            console.print(
                f"round {round_no} {result.server}: {result.lines_per_s:,.0f} lines/s, "
                f"{result.samples_per_s:,.0f} samples/s, {result.seconds:.2f} s, "
                f"server CPU {result.server_cpu_s:.1f} s{main}"
            )

    table = Table(title="ingest throughput, best round of each")
    for column in ("server", "lines/s", "samples/s", "server CPU s", "samples/CPU-s", "note"):
        table.add_column(column, justify="right")
    best = {}
    for result in results:
        if result.server not in best or result.samples_per_s > best[result.server].samples_per_s:
            best[result.server] = result
    for result in best.values():
        note = ""
        if result.backend_cpu_s is not None:
            note = f"victoria-metrics behind it: {result.backend_cpu_s:.1f} CPU s of these"
        if result.samples_per_s_with_compaction:
            note = f"{result.samples_per_s_with_compaction:,.0f} samples/s with compaction"
        table.add_row(
            result.server,
            f"{result.lines_per_s:,.0f}",
            f"{result.samples_per_s:,.0f}",
            f"{result.server_cpu_s:.1f}",
            f"{samples / result.server_cpu_s:,.0f}",
            note,
        )
    console.print(table)
    load_average["end"] = os.getloadavg()
    console.print(f"load average at the end: {load_average['end']}")
    theirs = best["victoria-metrics"]
    ratios = {}
    for name in collectors:
        ours = best[name]
        by_round = {(r.server, r.round): r for r in results}
        per_round = [
            by_round[name, n].samples_per_s / by_round["victoria-metrics", n].samples_per_s
            for n in range(1, args.rounds + 1)
        ]
        ratios[name] = {
            "ratio": ours.samples_per_s / theirs.samples_per_s,
            "ratio_per_round": per_round,
            "cpu_ratio": theirs.server_cpu_s / ours.server_cpu_s,
        }
        console.print(
            f"{name} / victoria-metrics, samples/s: best {ratios[name]['ratio']:.0%}, per"
            f" round {', '.join(f'{r:.0%}' for r in per_round)} (target >= 50%); per"
            f" CPU-second: {ratios[name]['cpu_ratio']:.0%}"
        )
    ratio, per_round, cpu_ratio = (ratios[collectors[0]][key] for key in ratios[collectors[0]])
    if args.json:
        args.json.write_text(
            json.dumps(
                {"args": vars(args) | {"json": str(args.json), "baseline": str(args.baseline)}}
                | {"ratio": ratio, "ratio_per_round": per_round, "cpu_ratio": cpu_ratio}
                | {"ratios": ratios, "load_average": load_average, "machine": machine}
                | {"results": [asdict(result) for result in results]},
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
