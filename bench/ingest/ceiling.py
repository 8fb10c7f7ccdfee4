"""The ceiling of one collector host: how many 1 Hz nodes it holds, ramped up in steps.

Not one client sending pre-built bodies (``run.py``, a payload benchmark) but a cluster of
senders: ``--senders`` processes, each simulating its share of the nodes with asyncio,
one kept-alive HTTP/1.1 connection per node, as the agent's shipper has. Every node
samples ``--series`` series (the agent's own tag sets and fields for the captured
``procfs-mlx-hfi`` tree plus disks; ``bench/reliability/load.py``'s templates) with its
ticks on whole seconds, and hands its batch over once every ``--batch-seconds`` (by
default the agent's own ``push.batch_seconds``, 5; ``--batch-seconds 1`` sends a request
per node per second, five times as many) at its own phase in the window, a uniform random
jitter, each request carrying every tick not sent yet: the shipper's semantics with a
fixed cadence. The lag is counted from the hand-over, so batching does not add to it.

Senders stay light: each sender encodes ``POOL_SIZE`` nodes' lines once, without their
timestamps, in ``VARIANTS`` value sets (counters move, gauges wander between them), and
every node it simulates is one of them under its own host tag; a request is one
``bytes.join`` per tick with the tick's timestamp as the separator (~6 us for 300 series).
Their own CPU is measured and reported (they share the host's cores with the collector).
The collector and victoria-metrics run in sessions of their own: with the kernel's
autogroups (``/proc/sys/kernel/sched_autogroup_enabled``) CPU is shared between sessions
first, and a service has its own; in the bench's session they would share one share with
the senders on a loaded machine.

The ramp (``--steps``, nodes per step, each run ``--step-seconds``) goes on while every
request of a step got 204, the delivery lag's p99 (204 received minus the moment the
batch was handed over) stayed under ``--max-lag`` (1 s) and the collector's RSS did not
keep growing in the step's second half (``--max-growth-mb-per-min``; steps of 60 s or
more). The first ``--warmup-seconds`` (20) of a step are nodes joining (new connections, new
series: the lag then rises for 10-15 s and drains): their lag is reported apart
(``lag_p99_joining_seconds``) and left out of the percentiles that decide, not of the
losses. Per step: nodes,
samples/s, points lost (unanswered, non-204), lag p50/p99, CPU % (one core = 100) and RSS
of the collector (its parse workers included) and of victoria-metrics where it runs, and
the senders' CPU. ``--backend vm-direct`` measures the path past one collector: the nodes
push to victoria-metrics, the collector (``--backend victoriametrics``) running beside it
for the runs' events, its CPU and RSS counted. After the ramp the store is counted: the SQLite
store's points per step window (distinct times per tag set), victoria-metrics'
``vm_rows_inserted_total``.

    flock /work/bench.lock .venv/bin/python bench/ingest/ceiling.py
    .venv/bin/python bench/ingest/ceiling.py --workers 1,2   # a ramp per collector --workers
    .venv/bin/python bench/ingest/ceiling.py --backend sqlite --steps 250,500 --step-seconds 15

Writes ``bench/ingest/results/ceiling.json`` (``--json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.config import DEFAULT_BATCH_SECONDS
from bench.reliability import harness
from bench.reliability.load import agent_templates, percentile

NS = 1_000_000_000
VARIANTS = 4
POOL_SIZE = 8
POOL_HOST = "poolnode"
DEFAULT_STEPS = (250, 500, 1000, 2000, 4000, 5000, 6000)
RESULTS = harness.REPO_ROOT / "bench" / "ingest" / "results"
VICTORIA_METRICS = shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics"
BACKENDS = ("sqlite", "victoriametrics", "vm-direct")
DRAIN_SECONDS = 15.0  # after a step, how long answers still in flight are waited for


# ---------------------------------------------------------------- what a node sends


def node_payload(host: str, series: int, rng: random.Random) -> tuple[list[list[bytes]], int]:
    """A node's lines without timestamps, in ``VARIANTS`` value sets, and its samples per
    tick."""
    templates = agent_templates(host, series, rng)
    variants = []
    for tick in range(VARIANTS):
        variants.append([t.render(tick, 0)[: -len(" 0")].encode() for t in templates])
    return variants, sum(len(t.names) for t in templates)


def renamed(payload: tuple[list[list[bytes]], int], host: str) -> tuple[list[list[bytes]], int]:
    """A pool node's lines with its host tag replaced by ``host``."""
    variants, samples = payload
    old, new = f"host={POOL_HOST}".encode(), f"host={host}".encode()
    return [[line.replace(old, new) for line in lines] for lines in variants], samples


def batch_body(variants: list[list[bytes]], first_tick: int, last_tick: int, start: int) -> bytes:
    """The lines of ticks ``first_tick..last_tick``, stamped ``start + tick`` seconds."""
    pieces = []
    for tick in range(first_tick, last_tick + 1):
        separator = b" %d\n" % ((start + tick) * NS)
        pieces.append(separator.join(variants[tick % VARIANTS]) + separator)
    return b"".join(pieces)


# ---------------------------------------------------------------- one sender process


@dataclass
class SenderResult:
    lags: list[float]  # seconds, one per answered request
    dues: list[float]  # when each answered request was handed over (wall-clock seconds)
    samples_sent: int
    samples_acknowledged: int
    lines_acknowledged: int
    requests_failed: int
    errors: list[str]
    cpu_seconds: float  # the process' own user + system time over the step


def sender_main(
    hosts: list[str],
    port: int,
    token: str,
    series: int,
    batch_seconds: float,
    seconds: int,
    seed: int,
    ready: multiprocessing.Queue,
    start_at: multiprocessing.Value,
    results: multiprocessing.Queue,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    rng = random.Random(seed)
    # a pool of nodes' lines, each node one of them under its own host tag: building every
    # node's templates from the agent's samplers costs ~25 ms of CPU a node
    pool = [node_payload(POOL_HOST, series, rng) for _ in range(POOL_SIZE)]
    payloads = {host: renamed(pool[i % POOL_SIZE], host) for i, host in enumerate(hosts)}
    ready.put(len(hosts))
    while start_at.value == 0:
        time.sleep(0.01)
    before = resource.getrusage(resource.RUSAGE_SELF)
    result = asyncio.run(
        _send_all(payloads, port, token, batch_seconds, seconds, int(start_at.value), rng)
    )
    after = resource.getrusage(resource.RUSAGE_SELF)
    result.cpu_seconds = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    results.put(result)


async def _send_all(
    payloads: dict[str, tuple[list[list[bytes]], int]],
    port: int,
    token: str,
    batch_seconds: float,
    seconds: int,
    start: int,
    rng: random.Random,
) -> SenderResult:
    result = SenderResult([], [], 0, 0, 0, 0, [], 0.0)
    head = (
        "POST /api/v2/write?bucket=epochscope&org=epochscope&precision=ns HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{port}\r\nAuthorization: Token {token}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\nContent-Length: "
    ).encode()
    nodes = [
        _node(
            payload,
            port,
            head,
            batch_seconds,
            seconds,
            start,
            rng.uniform(0, batch_seconds),
            result,
        )
        for payload in payloads.values()
    ]
    await asyncio.gather(*nodes)
    return result


async def _node(
    payload: tuple[list[list[bytes]], int],
    port: int,
    head: bytes,
    batch_seconds: float,
    seconds: int,
    start: int,
    phase: float,
    result: SenderResult,
) -> None:
    variants, samples_per_tick = payload
    lines_per_tick = len(variants[0])
    connection = Connection(port)
    next_tick = 0
    due = start + phase
    give_up = start + seconds + DRAIN_SECONDS
    while next_tick < seconds:
        due += batch_seconds
        await asyncio.sleep(max(0.0, due - time.time()))
        last_tick = min(int(due - start), seconds - 1)  # ticks that have happened
        if last_tick < next_tick:
            continue
        body = batch_body(variants, next_tick, last_tick, start)
        ticks = last_tick - next_tick + 1
        next_tick = last_tick + 1
        result.samples_sent += ticks * samples_per_tick
        request = head + b"%d\r\n\r\n" % len(body) + body
        try:
            status = await asyncio.wait_for(
                connection.send(request), max(0.1, give_up - time.time())
            )
        except (OSError, asyncio.IncompleteReadError, TimeoutError) as error:
            result.errors.append(f"{type(error).__name__} at +{due - start:.0f} s: {error}")
            result.requests_failed += 1
            break
        if status != 204:
            result.errors.append(f"HTTP {status}")
            result.requests_failed += 1
            continue
        result.lags.append(time.time() - due)
        result.dues.append(due)
        result.samples_acknowledged += ticks * samples_per_tick
        result.lines_acknowledged += ticks * lines_per_tick
    connection.close()


class Connection:
    """A node's kept-alive connection as the agent's ``HttpWriter`` keeps it: opened at
    the first request (victoria-metrics closes one that sends no request head within 5 s
    of its accept), and a request on a kept connection the server has since closed is sent
    once more on a new one."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def send(self, request: bytes) -> int:
        reused = self.streams is not None
        try:
            return await self._send(request)
        except (OSError, asyncio.IncompleteReadError):
            self.close()
            if not reused:
                raise
            return await self._send(request)

    async def _send(self, request: bytes) -> int:
        if self.streams is None:
            self.streams = await asyncio.open_connection("127.0.0.1", self.port)
        reader, writer = self.streams
        writer.write(request)
        status, close = await _status(reader)
        if close:
            self.close()
        return status

    def close(self) -> None:
        if self.streams is not None:
            self.streams[1].close()
            self.streams = None


async def _status(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """A response's status and whether the server closes the connection after it."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length, close = 0, False
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "connection":
            close = value.strip().lower() == "close"
    if length:
        await reader.readexactly(length)
    return int(lines[0].split()[1]), close


# ---------------------------------------------------------------- the host's resources


class Monitor(threading.Thread):
    """Once a second: CPU (all of a process' tree) and RSS of the watched processes."""

    def __init__(self, watched: dict[str, int]) -> None:
        super().__init__(name="monitor", daemon=True)
        import psutil

        self.processes = {name: psutil.Process(pid) for name, pid in watched.items()}
        self.senders: list[int] = []
        self.rows: list[dict] = []
        self.stopping = threading.Event()

    def _read(self) -> dict[str, tuple[float, int]]:
        import psutil

        found = {}
        for name, root in self.processes.items():
            cpu, rss = 0.0, 0
            for process in [root, *root.children(recursive=True)]:
                try:
                    times = process.cpu_times()
                    cpu += times.user + times.system
                    rss += process.memory_info().rss
                except psutil.NoSuchProcess:
                    continue
            found[name] = (cpu, rss)
        return found

    def run(self) -> None:
        last_t, last = time.time(), self._read()
        while not self.stopping.wait(1.0):
            now, current = time.time(), self._read()
            row: dict = {"t": now, "load1": harness.load_average()[0]}
            for name, (cpu, rss) in current.items():
                row[f"{name}_cpu_percent"] = 100 * (cpu - last[name][0]) / (now - last_t)
                row[f"{name}_rss_bytes"] = rss
            self.rows.append(row)
            last_t, last = now, current


# ---------------------------------------------------------------- the servers


class Servers:
    """The collector (and for ``victoriametrics``, a victoria-metrics beside it) on
    loopback, in a temporary directory; for ``vm-direct`` the same two, the nodes pushing to
    victoria-metrics as agents whose ``push.url`` names it do, the collector holding the
    runs' events (none here: a few a second at most) (docs/scale-out.md)."""

    def __init__(self, backend: str, workdir: Path, workers: int | None = None) -> None:
        self.backend = backend
        self.workdir = workdir
        self.vm: subprocess.Popen | None = None
        self.vm_port = 0
        extra: tuple[str, ...] = ("--workers", str(workers)) if workers else ()
        if backend in ("victoriametrics", "vm-direct"):
            self.vm_port = harness.free_port()
            self.vm = subprocess.Popen(
                [
                    VICTORIA_METRICS,
                    f"-storageDataPath={workdir / 'vm-data'}",
                    f"-httpListenAddr=127.0.0.1:{self.vm_port}",
                    "-retentionPeriod=100y",
                    "-loggerLevel=ERROR",
                ],
                stdout=(workdir / "vm.log").open("ab"),
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own autogroup, as a service has
            )
            harness.wait_until(lambda: self._vm_get("/health") is not None, 30)
            extra += ("--backend", f"victoriametrics=http://127.0.0.1:{self.vm_port}")
        self.token, token_file = harness.write_token_file(workdir)
        self.collector = harness.Collector(
            db=workdir / "epochscope.sqlite",
            token_file=token_file,
            log=workdir / "collector.log",
            extra_args=extra,
            own_session=True,
        )
        self.collector.start()
        # vm-direct: the collector runs as docs/scale-out.md sets it up, for the runs'
        # events and reading the samples from victoria-metrics; the nodes push there
        self.port = self.vm_port if backend == "vm-direct" else self.collector.port

    def _vm_get(self, path: str) -> str | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.vm_port}{path}", timeout=5) as r:
                return r.read().decode()
        except OSError:
            return None

    def watched(self) -> dict[str, int]:
        pids = {"collector": self.collector.process.pid}
        if self.vm is not None:
            pids["victoriametrics"] = self.vm.pid
        return pids

    def vm_rows_inserted(self) -> int:
        """victoria-metrics' count of samples it took (all protocols)."""
        total = 0
        for line in (self._vm_get("/metrics") or "").splitlines():
            if line.startswith("vm_rows_inserted_total"):
                total += int(float(line.rsplit(" ", 1)[1]))
        return total

    def stop(self) -> None:
        self.collector.stop()
        if self.vm is not None:
            self.vm.terminate()
            self.vm.wait(30)


# ---------------------------------------------------------------- a step, a ramp


def run_step(
    servers: Servers, monitor: Monitor, nodes: int, args: argparse.Namespace, step_index: int
) -> dict:
    context = multiprocessing.get_context("fork")
    ready, results = context.Queue(), context.Queue()
    start_at = context.Value("d", 0.0)
    hosts = [f"node{i:05d}" for i in range(nodes)]
    senders = min(args.senders, nodes)
    processes = [
        context.Process(
            target=sender_main,
            args=(
                hosts[k::senders],
                servers.port,
                servers.token,
                args.series,
                args.batch_seconds,
                args.step_seconds,
                1000 * step_index + k,
                ready,
                start_at,
                results,
            ),
            daemon=True,
        )
        for k in range(senders)
    ]
    for process in processes:
        process.start()
    for _ in processes:
        ready.get(timeout=600)
    start = int(time.time()) + 2
    start_at.value = start
    vm_rows_before = servers.vm_rows_inserted() if servers.vm is not None else 0
    _progress(f"{servers.backend}: {nodes} nodes", start, args.step_seconds)
    collected = [results.get(timeout=args.step_seconds + DRAIN_SECONDS + 60) for _ in processes]
    for process in processes:
        process.join(10)
    end = start + args.step_seconds
    rows = [r for r in monitor.rows if start + 1 <= r["t"] <= end]
    # the step's first seconds are nodes joining: every new node opens its connection and
    # its series are new to the store (the collector's series table, victoria-metrics'
    # index), which a running cluster does not do; their lag is reported apart
    # (lag_p99_joining_seconds) and left out of the held/not-held percentiles (their
    # losses still count)
    settled = start + args.warmup_seconds
    lags, joining = [], []
    for result in collected:
        for due, lag in zip(result.dues, result.lags, strict=True):
            (lags if due >= settled else joining).append(lag)
    sent = sum(r.samples_sent for r in collected)
    acknowledged = sum(r.samples_acknowledged for r in collected)
    by_second: dict[int, list[float]] = {}
    for result in collected:
        for due, lag in zip(result.dues, result.lags, strict=True):
            by_second.setdefault(int(due) - start, []).append(lag)
    step = {
        "nodes": nodes,
        "series_per_node": args.series,
        "window_ns": [start * NS, end * NS],
        "samples_per_second_offered": nodes * args.series,
        "samples_sent": sent,
        "samples_acknowledged": acknowledged,
        "samples_per_second_acknowledged": round(acknowledged / args.step_seconds),
        "lines_acknowledged": sum(r.lines_acknowledged for r in collected),
        # not answered 204 by the step's end + DRAIN_SECONDS (the store may still take
        # them later: compare points_stored / vm_rows_inserted)
        "points_lost_unacknowledged": sent - acknowledged,
        "requests": sum(len(r.lags) for r in collected),
        "requests_failed": sum(r.requests_failed for r in collected),
        "errors": sorted({e for r in collected for e in r.errors})[:5],
        "lag_p50_seconds": round(percentile(lags, 50), 4) if lags else None,
        "lag_p99_seconds": round(percentile(lags, 99), 4) if lags else None,
        "lag_max_seconds": round(max(lags), 4) if lags else None,
        "lag_p99_joining_seconds": round(percentile(joining, 99), 4) if joining else None,
        # when the lag happened: p99 of the requests handed over in each second
        "lag_p99_by_second": [round(percentile(by_second[k], 99), 3) for k in sorted(by_second)],
        "senders": senders,
        "senders_cpu_percent": round(
            100 * sum(r.cpu_seconds for r in collected) / args.step_seconds, 1
        ),
        "load1_mean": round(sum(r["load1"] for r in rows) / len(rows), 2) if rows else None,
    }
    for name in servers.watched():
        cpu = [r[f"{name}_cpu_percent"] for r in rows]
        rss = [r[f"{name}_rss_bytes"] for r in rows]
        step[f"{name}_cpu_percent"] = round(sum(cpu) / len(cpu), 1) if cpu else None
        step[f"{name}_rss_mb_end"] = round(rss[-1] / 2**20, 1) if rss else None
        step[f"{name}_rss_mb_max"] = round(max(rss) / 2**20, 1) if rss else None
        half = rss[len(rss) // 2 :]
        span_min = (len(half) - 1) / 60 if len(half) > 1 else 0
        growth = (half[-1] - half[0]) / 2**20 / span_min if span_min else 0.0
        step[f"{name}_rss_growth_mb_per_min"] = round(growth, 1)
    if servers.vm is not None:
        time.sleep(2)  # victoria-metrics counts rows as it flushes them
        step["vm_rows_inserted"] = servers.vm_rows_inserted() - vm_rows_before
    step["held"], step["why_not"] = verdict(step, args)
    return step


def verdict(step: dict, args: argparse.Namespace) -> tuple[bool, str]:
    if step["points_lost_unacknowledged"] or step["requests_failed"]:
        return False, (
            f"{step['requests_failed']} requests not answered 204 by the step's end + "
            f"{DRAIN_SECONDS:.0f} s"
        )
    if step["lag_p99_seconds"] is None or step["lag_p99_seconds"] > args.max_lag:
        return False, f"lag p99 {step['lag_p99_seconds']} s > {args.max_lag} s"
    # the server the nodes push to: the collector, or victoria-metrics for vm-direct
    server = "collector" if "collector_rss_growth_mb_per_min" in step else "victoriametrics"
    growth = step[f"{server}_rss_growth_mb_per_min"]
    # a short step's second half is within one of the store's 30 s folds: too short to tell
    if args.step_seconds >= 60 and growth > args.max_growth_mb_per_min:
        return False, f"{server} RSS grew {growth} MB/min"
    return True, ""


def _progress(label: str, start: int, seconds: int) -> None:
    from rich.progress import Progress

    with Progress(transient=True) as progress:
        task = progress.add_task(label, total=seconds)
        while (now := time.time()) < start + seconds + 1:
            progress.update(task, completed=min(seconds, max(0.0, now - start)))
            time.sleep(0.5)


def count_stored_sqlite(db: Path, steps: list[dict]) -> None:
    """Points the SQLite store holds in each step's time window (after the collector has
    folded what it took), beside the points acknowledged."""
    import numpy as np

    for step in steps:
        step["points_stored"] = 0
    for parts in harness.raw_times(db).values():
        times = np.unique(np.concatenate(parts))
        for step in steps:
            low, high = step["window_ns"]
            step["points_stored"] += int(((times >= low) & (times < high)).sum())


def ramp(backend: str, args: argparse.Namespace, workers: int | None = None) -> dict:
    """One backend's ramp; ``workers``: the collector's ``--workers`` (None: its default)."""
    workdir = Path(tempfile.mkdtemp(prefix=f"ceiling-{backend}-"))
    servers = Servers(backend, workdir, workers)
    label = backend if workers is None else f"{backend} w{workers}"
    monitor = Monitor(servers.watched())
    monitor.start()
    steps = []
    try:
        for index, nodes in enumerate(args.steps):
            step = run_step(servers, monitor, nodes, args, index)
            steps.append(step)
            print(step_line(label, step), flush=True)
            if not step["held"] and not args.keep_going:
                break
            time.sleep(args.pause)
    finally:
        monitor.stopping.set()
        servers.stop()
    if backend == "sqlite":
        count_stored_sqlite(workdir / "epochscope.sqlite", steps)
    held = [
        s["nodes"]
        for s in steps[: next((i for i, s in enumerate(steps) if not s["held"]), len(steps))]
    ]
    shutil.rmtree(workdir, ignore_errors=True)
    return {
        "backend": backend,
        "workers": workers,
        "label": label,
        "nodes_held": max(held) if held else 0,
        "steps": steps,
    }


def step_line(backend: str, step: dict) -> str:
    servers = ""
    for name in ("collector", "victoriametrics"):
        if f"{name}_cpu_percent" in step:
            servers += (
                f" | {name} {step[f'{name}_cpu_percent']}% {step[f'{name}_rss_mb_end']} MB "
                f"(+{step[f'{name}_rss_growth_mb_per_min']} MB/min)"
            )
    return (
        f"{backend:19} {step['nodes']:6} nodes {step['samples_per_second_acknowledged']:>9,} "
        f"samples/s lost {step['points_lost_unacknowledged']:,} "
        f"lag p50 {step['lag_p50_seconds']} p99 {step['lag_p99_seconds']} s "
        f"(joining {step['lag_p99_joining_seconds']} s){servers} | senders "
        f"{step['senders_cpu_percent']}% | load {step['load1_mean']} | "
        + ("held" if step["held"] else f"NOT held: {step['why_not']}")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--backend",
        choices=(*BACKENDS, "both", "all"),
        default="all",
        help="both: sqlite and victoriametrics; all: vm-direct too",
    )
    parser.add_argument("--steps", default=",".join(map(str, DEFAULT_STEPS)))
    parser.add_argument("--step-seconds", type=int, default=60)
    parser.add_argument("--series", type=int, default=300)
    parser.add_argument("--batch-seconds", type=float, default=DEFAULT_BATCH_SECONDS)
    parser.add_argument("--senders", type=int, default=4)
    parser.add_argument("--warmup-seconds", type=float, default=20.0)
    parser.add_argument("--max-lag", type=float, default=1.0)
    parser.add_argument("--max-growth-mb-per-min", type=float, default=60.0)
    parser.add_argument(
        "--keep-going", action="store_true", help="run every step, held or not (a curve)"
    )
    parser.add_argument("--pause", type=float, default=5.0, help="seconds between steps")
    parser.add_argument(
        "--workers",
        default="",
        help="the collector's --workers, one ramp each, side by side (e.g. 1,2; default: "
        "the collector's own default); vm-direct ramps once",
    )
    parser.add_argument("--json", type=Path, default=RESULTS / "ceiling.json")
    args = parser.parse_args(argv)
    args.steps = [int(n) for n in args.steps.split(",")]
    args.workers = [int(n) for n in args.workers.split(",") if n] or [None]
    backends = {"both": BACKENDS[:2], "all": BACKENDS}.get(args.backend, (args.backend,))
    results = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": harness.machine(),
        "load_before": harness.load_average(),
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
        "ramps": [
            ramp(backend, args, workers)
            for backend in backends
            for workers in ([None] if backend == "vm-direct" else args.workers)
        ],
        "load_after": harness.load_average(),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1, default=str) + "\n")
    for ramp_result in results["ramps"]:
        print(f"{ramp_result['label']}: held {ramp_result['nodes_held']} nodes")
    print(f"results: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
