"""Ingest load: many simulated agents pushing into one real collector; does it keep up?

One real ``collector serve`` (token required, SQLite store) and one load-generator process
that simulates ``--agents`` agents with asyncio, each with its own keep-alive HTTP/1.1
connection, as the real shipper has. Every simulated agent samples ``--series`` series at
1 Hz (its ticks on whole seconds, like ``agent run``) and, like the shipper with its
default ``push.batch_seconds = 5``, sends one request every ``--batch-seconds`` carrying
every tick not yet sent (each agent at its own phase in the window, so requests spread).

The lines are what an agent on an InfiniBand node writes: the tag sets and field names
of the agent's own sample of the captured ``procfs-mlx-hfi`` tree (cpu, memory, agent,
4 InfiniBand ports, an NFS mount, RPC counters) plus 17 disks: 26 lines and 300 numeric
fields per tick. Counters grow at a per-series rate, gauges wander; integers stay
integers (``i``), as the agent writes them.

What is measured:

- ingest lag of a request: the time its 204 arrives minus the time it was due (the
  moment the simulated agent would have handed it to the network). If the collector
  keeps up this is the request latency; if not, requests queue behind each other on an
  agent's connection and the lag grows without bound. Target: < 5 s.
- data age: 204 time minus the sample time of the newest and of the oldest point in the
  request (the oldest includes the deliberate batching of up to ``--batch-seconds``).
- the collector's CPU (all its processes: the server and its parse workers) and RSS, once a
  second with psutil; the generator's own CPU (it shares the two cores).
- kept up: every request got 204, every point is stored (counted in the store's blocks
  afterwards), and the lag did not grow over the run.

    python bench/reliability/load.py --agents 256 --series 300 --seconds 300

Writes ``bench/reliability/results/load.json`` and ``docs/figures/reliability-load.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import random
import sqlite3
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.reliability import harness
from contract import schema
from contract.point import Point

RESULTS = harness.REPO_ROOT / "bench" / "reliability" / "results"
FIGURES = harness.REPO_ROOT / "docs" / "figures"
NS = 1_000_000_000
TARGET_LAG_SECONDS = 5.0


# ---------------------------------------------------------------- what an agent writes


@dataclass
class LineTemplate:
    """One tag set of a simulated agent: a prefix and its fields with how they move."""

    prefix: str  # "measurement,tag=value,... "
    names: list[str]
    is_int: list[bool]
    is_counter: list[bool]
    base: list[float]
    rate: list[float]

    def render(self, tick: int, time_ns: int) -> str:
        parts = []
        for name, is_int, counter, base, rate in zip(
            self.names, self.is_int, self.is_counter, self.base, self.rate, strict=True
        ):
            value = base + rate * tick if counter else base + rate * (tick % 10)
            parts.append(f"{name}={int(value)}i" if is_int else f"{name}={value!r}")
        return f"{self.prefix}{','.join(parts)} {time_ns}"


@functools.cache
def sample_points() -> tuple[Point, ...]:
    """One real sample of the captured InfiniBand host tree by the agent's samplers."""
    from agent.daemon import SampleRound, build_samplers
    from agent.samplers import Roots

    tree = harness.FIXTURE_TREE
    samplers = build_samplers(Roots(tree / "proc", tree / "sys"), None)
    return tuple(SampleRound(samplers, "template")(0))


def agent_templates(host: str, series: int, rng: random.Random) -> list[LineTemplate]:
    """Tag sets and fields for one simulated agent: ``series`` numeric fields in all."""
    from contract.point import encode_line

    points = sample_points()
    disks = [p for p in points if p.measurement == schema.Disk.NAME]
    others = [p for p in points if p.measurement != schema.Disk.NAME]
    templates = []
    remaining = series
    disk_number = 0
    queue = list(others)
    while remaining > 0:
        if queue:
            point = queue.pop(0)
        else:  # as many disks as it takes, each a copy of a real one under a new name
            point = disks[disk_number % len(disks)]
            point = Point(
                point.measurement,
                dict(point.tags, **{schema.Tag.DEVICE: f"nvme{disk_number}n1"}),
                dict(point.fields),
                0,
            )
            disk_number += 1
        numeric = {k: v for k, v in point.fields.items() if not isinstance(v, str)}
        names = list(numeric)[:remaining]
        remaining -= len(names)
        tags = dict(point.tags, **{schema.Tag.HOST: host})
        prefix = encode_line(Point(point.measurement, tags, {"x": 1}, 0)).split(" x=")[0] + " "
        is_counter = []
        for name in names:
            spec = schema.field_spec(point.measurement, name)
            is_counter.append(bool(spec is not None and spec.is_counter))
        templates.append(
            LineTemplate(
                prefix=prefix,
                names=names,
                is_int=[
                    isinstance(numeric[n], int) and not isinstance(numeric[n], bool) for n in names
                ],
                is_counter=is_counter,
                base=[float(numeric[n]) for n in names],
                rate=[rng.uniform(0, 1e6) if c else rng.uniform(0, 10) for c in is_counter],
            )
        )
    return templates


# ---------------------------------------------------------------- the simulated fleet


@dataclass
class Request:
    host: str
    due: float  # wall-clock seconds
    sent: float
    done: float
    status: int
    lines: int
    newest_ns: int
    oldest_ns: int


@dataclass
class Fleet:
    port: int
    token: str
    agents: int
    series: int
    batch_seconds: float
    seconds: float
    seed: int = 1
    show_progress: bool = True
    requests: list[Request] = field(default_factory=list)
    lines_sent: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    async def run(self) -> None:
        rng = random.Random(self.seed)
        hosts = [f"sim{i:03d}" for i in range(self.agents)]
        templates = {host: agent_templates(host, self.series, rng) for host in hosts}
        start = float(int(time.time()) + 2)  # the first tick, on a whole second
        self.start = start
        self.end = start + self.seconds
        agents = asyncio.gather(
            *(
                self._agent(host, templates[host], start, i / self.agents)
                for i, host in enumerate(hosts)
            )
        )
        if self.show_progress:
            await asyncio.gather(agents, self._progress())
        else:
            await agents

    async def _progress(self) -> None:
        try:
            from rich.progress import Progress
        except ImportError:  # runs without rich, just without a bar
            return
        with Progress(transient=True) as progress:
            task = progress.add_task(
                f"{self.agents} agents x {self.series} series", total=self.seconds
            )
            while (now := time.time()) < self.end + 1:
                progress.update(task, completed=max(0.0, now - self.start))
                await asyncio.sleep(1)

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        for attempt in range(50):
            try:
                return await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(0.1 * (attempt + 1))
        raise RuntimeError("cannot connect to the collector")

    async def _agent(
        self, host: str, templates: list[LineTemplate], start: float, phase: float
    ) -> None:
        self.lines_sent[host] = 0
        await asyncio.sleep(max(0.0, start - time.time() + phase * self.batch_seconds))
        reader, writer = await self._connect()
        next_tick = 0  # the first tick not sent yet
        due = start + phase * self.batch_seconds
        total_ticks = int(self.seconds)
        while next_tick < total_ticks:
            due += self.batch_seconds
            await asyncio.sleep(max(0.0, due - time.time()))
            now = time.time()
            last_tick = min(int(now - start), total_ticks - 1)  # ticks that have happened
            if due >= self.end:
                last_tick = total_ticks - 1
            if last_tick < next_tick:
                continue
            lines = [
                template.render(tick, int((start + tick) * NS))
                for tick in range(next_tick, last_tick + 1)
                for template in templates
            ]
            body = "\n".join(lines).encode()
            head = (
                "POST /api/v2/write?bucket=epochscope&org=epochscope&precision=ns HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{self.port}\r\n"
                f"Authorization: Token {self.token}\r\n"
                "Content-Type: text/plain; charset=utf-8\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
            sent = time.time()
            try:
                writer.write(head + body)
                await writer.drain()
                status, close = await _read_response(reader)
            except (OSError, asyncio.IncompleteReadError) as error:
                self.errors.append(f"{host}: {type(error).__name__}: {error}")
                writer.close()
                reader, writer = await self._connect()
                continue  # the same ticks go again in the next request
            done = time.time()
            self.requests.append(
                Request(
                    host,
                    due,
                    sent,
                    done,
                    status,
                    len(lines),
                    int((start + last_tick) * NS),
                    int((start + next_tick) * NS),
                )
            )
            if status == 204:
                self.lines_sent[host] += len(lines)
                next_tick = last_tick + 1
            else:
                self.errors.append(f"{host}: HTTP {status}")
                next_tick = last_tick + 1  # counted as not stored
            if close:
                writer.close()
                reader, writer = await self._connect()
        writer.close()


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    if length:
        await reader.readexactly(length)
    return status, headers.get("connection", "").lower() == "close"


# ---------------------------------------------------------------- resources


class Monitor(threading.Thread):
    """Once a second: CPU and RSS of the collector (and its children), load average."""

    def __init__(self, pid: int) -> None:
        super().__init__(name="monitor", daemon=True)
        import psutil

        self.process = psutil.Process(pid)
        self.me = psutil.Process()
        self.rows: list[dict] = []
        self.stopping = threading.Event()

    def _cpu(self) -> tuple[float, int, int]:
        """CPU seconds and RSS of the collector's processes; (server RSS, total RSS)."""
        import psutil

        cpu = 0.0
        total_rss = 0
        server_rss = 0
        for process in [self.process, *self.process.children(recursive=True)]:
            try:
                times = process.cpu_times()
                rss = process.memory_info().rss
            except psutil.NoSuchProcess:
                continue
            cpu += times.user + times.system + times.children_user + times.children_system
            total_rss += rss
            if process.pid == self.process.pid:
                server_rss = rss
        return cpu, server_rss, total_rss

    def run(self) -> None:
        last_t = time.time()
        last_cpu = self._cpu()[0]
        last_me = sum(self.me.cpu_times()[:2])
        while not self.stopping.wait(1.0):
            now = time.time()
            cpu, server_rss, total_rss = self._cpu()
            me = sum(self.me.cpu_times()[:2])
            span = now - last_t
            self.rows.append(
                {
                    "t": now,
                    "collector_cpu_percent": 100 * (cpu - last_cpu) / span,
                    "collector_rss_bytes": server_rss,
                    "collector_total_rss_bytes": total_rss,
                    # the server's RSS split: heap and the like vs mapped file pages
                    **rss_parts(self.process.pid),
                    "generator_cpu_percent": 100 * (me - last_me) / span,
                    "load1": harness.load_average()[0],
                }
            )
            last_t, last_cpu, last_me = now, cpu, me


def rss_parts(pid: int) -> dict[str, int]:
    """``RssAnon`` and ``RssFile`` of a process, in bytes (from /proc/<pid>/status)."""
    parts = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("RssAnon", "RssFile"):
                parts[f"collector_{name[3:].lower()}_rss_bytes"] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return parts


def stored_lines(db: Path) -> dict[str, int]:
    """Points per host in the store (distinct times per tag set, summed)."""
    import numpy as np

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        hosts = dict(conn.execute("SELECT id, host FROM tagsets"))
    finally:
        conn.close()
    counts: dict[str, int] = {}
    for tagset_id, parts in harness.raw_times(db).items():
        host = hosts[tagset_id]
        counts[host] = counts.get(host, 0) + int(np.unique(np.concatenate(parts)).size)
    return counts


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def quantiles(values: list[float]) -> dict[str, float]:
    return {"p50": percentile(values, 50), "p99": percentile(values, 99)}


def run(
    agents: int = 256,
    series: int = 300,
    seconds: float = 300.0,
    batch_seconds: float = 5.0,
    workdir: Path | None = None,
    nice: int = 0,
) -> dict:
    owned = None
    if nice:
        # this thread (the event loop), the monitor started below and this session's
        # scheduler autogroup; the collector gets the same in a session of its own
        os.nice(nice)
        harness.set_autogroup_nice("self", nice)
    if workdir is None:
        owned = tempfile.TemporaryDirectory(prefix="epochscope-load-")
        workdir = Path(owned.name)
    workdir.mkdir(parents=True, exist_ok=True)
    token, token_file = harness.write_token_file(workdir)
    collector = harness.Collector(
        db=workdir / "collector.sqlite",
        token_file=token_file,
        log=workdir / "collector.log",
        nice=nice,
    )
    started_wall = datetime.now(UTC)
    load_before = harness.load_average()
    collector.start()
    time.sleep(3)  # the parse workers start beside the server
    monitor = Monitor(collector.process.pid)
    monitor.start()
    fleet = Fleet(collector.port, token, agents, series, batch_seconds, seconds)
    try:
        asyncio.run(fleet.run())
        time.sleep(2)
    finally:
        monitor.stopping.set()
        monitor.join(5)
        collector.stop()
    load_after = harness.load_average()
    stored = stored_lines(collector.db)
    db_bytes = sum(p.stat().st_size for p in workdir.glob("collector.sqlite*"))
    if owned is not None:
        owned.cleanup()

    lags = [r.done - r.due for r in fleet.requests]
    newest_age = [r.done - r.newest_ns / NS for r in fleet.requests]
    oldest_age = [r.done - r.oldest_ns / NS for r in fleet.requests]
    latency = [r.done - r.sent for r in fleet.requests]
    sent_total = sum(fleet.lines_sent.values())
    stored_total = sum(stored.values())
    run_rows = [row for row in monitor.rows if fleet.start <= row["t"] <= fleet.end]
    first_half = [
        lag
        for r, lag in zip(fleet.requests, lags, strict=True)
        if r.due < fleet.start + seconds / 2
    ]
    second_half = [
        lag
        for r, lag in zip(fleet.requests, lags, strict=True)
        if r.due >= fleet.start + seconds / 2
    ]
    expected_lines = agents * int(seconds) * len(agent_templates("x", series, random.Random(0)))
    results = {
        "experiment": "load",
        "date": started_wall.isoformat(timespec="seconds"),
        "machine": harness.machine(),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "agents": agents,
        "series_per_agent": series,
        "lines_per_agent_tick": len(agent_templates("x", series, random.Random(0))),
        "seconds": seconds,
        "batch_seconds": batch_seconds,
        "nice": nice,
        "samples_per_second": agents * series,
        "requests": len(fleet.requests),
        "requests_not_204": sum(1 for r in fleet.requests if r.status != 204),
        "connection_errors": len(fleet.errors),
        "errors_shown": fleet.errors[:10],
        "points_expected": expected_lines,
        "points_acknowledged": sent_total,
        "points_stored": stored_total,
        "db_bytes": db_bytes,
        "lag_seconds": {
            "p50": percentile(lags, 50),
            "p99": percentile(lags, 99),
            "max": max(lags, default=float("nan")),
            "p99_first_half": percentile(first_half, 99),
            "p99_second_half": percentile(second_half, 99),
        },
        "request_latency_seconds": {"p50": percentile(latency, 50), "p99": percentile(latency, 99)},
        "newest_point_age_seconds": {
            "p50": percentile(newest_age, 50),
            "p99": percentile(newest_age, 99),
        },
        "oldest_point_age_seconds": {
            "p50": percentile(oldest_age, 50),
            "p99": percentile(oldest_age, 99),
        },
        "collector_cpu_percent": {
            "mean": sum(r["collector_cpu_percent"] for r in run_rows) / max(1, len(run_rows)),
            "p95": percentile([r["collector_cpu_percent"] for r in run_rows], 95),
        },
        "collector_rss_bytes_max": max((r["collector_rss_bytes"] for r in run_rows), default=0),
        "collector_total_rss_bytes_max": max(
            (r["collector_total_rss_bytes"] for r in run_rows), default=0
        ),
        "collector_anon_rss_bytes_max": max(
            (r.get("collector_anon_rss_bytes", 0) for r in run_rows), default=0
        ),
        "collector_file_rss_bytes_max": max(
            (r.get("collector_file_rss_bytes", 0) for r in run_rows), default=0
        ),
        "generator_cpu_percent_mean": sum(r["generator_cpu_percent"] for r in run_rows)
        / max(1, len(run_rows)),
        "load1_mean": sum(r["load1"] for r in run_rows) / max(1, len(run_rows)),
        "start": fleet.start,
        "monitor": monitor.rows,
        "request_log": [
            [round(r.due - fleet.start, 3), round(r.done - r.due, 4), r.lines, r.status]
            for r in fleet.requests
        ],
    }
    results["kept_up"] = (
        results["requests_not_204"] == 0
        and stored_total == sent_total == expected_lines
        and results["lag_seconds"]["max"] < TARGET_LAG_SECONDS
    )
    return results


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    start = results["start"]
    fig, (lag_ax, cpu_ax, rss_ax) = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    log = results["request_log"]
    lag_ax.scatter([r[0] for r in log], [r[1] for r in log], s=2, alpha=0.3, label="one request")
    buckets: dict[int, list[float]] = {}
    for due, lag, _, _ in log:
        buckets.setdefault(int(due // 5), []).append(lag)
    keys = sorted(buckets)
    lag_ax.plot(
        [k * 5 + 2.5 for k in keys],
        [percentile(buckets[k], 99) for k in keys],
        color="tab:red",
        label="p99 per 5 s",
    )
    lag_ax.axhline(TARGET_LAG_SECONDS, color="k", ls="--", lw=0.8, label="target 5 s")
    lag_ax.set_yscale("log")
    lag_ax.set_ylabel("ingest lag (s)\n204 time - due time")
    lag_ax.legend(fontsize=7, loc="upper right")
    lag = results["lag_seconds"]
    lag_ax.set_title(
        f"{results['agents']} agents x {results['series_per_agent']} series at 1 Hz"
        + (f" (nice {results['nice']})" if results.get("nice") else "")
        + f" ({results['samples_per_second']} samples/s),"
        f" batches of {results['batch_seconds']:g} s:\n"
        f"lag p50 {lag['p50']:.3f} s, p99 {lag['p99']:.3f} s, max {lag['max']:.2f} s;"
        f" kept up: {results['kept_up']}",
        fontsize=9,
    )
    rows = results["monitor"]
    t = [row["t"] - start for row in rows]
    cpu_ax.plot(
        t, [row["collector_cpu_percent"] for row in rows], label="collector (all processes)"
    )
    cpu_ax.plot(
        t, [row["generator_cpu_percent"] for row in rows], label="load generator", alpha=0.7
    )
    cpu_ax.axhline(200, color="k", lw=0.5)
    cpu_ax.set_ylabel("CPU % (200 = both cores)")
    cpu_ax.legend(fontsize=7, loc="upper left")
    load_ax = cpu_ax.twinx()
    load_ax.plot(t, [row["load1"] for row in rows], color="0.6", lw=0.8, ls=":")
    load_ax.set_ylabel("load average (dotted)", color="0.4")
    rss_ax.plot(t, [row["collector_rss_bytes"] / 2**20 for row in rows], label="server process")
    rss_ax.plot(
        t, [row["collector_total_rss_bytes"] / 2**20 for row in rows], label="with parse workers"
    )
    if rows and "collector_anon_rss_bytes" in rows[0]:
        anon = [row["collector_anon_rss_bytes"] / 2**20 for row in rows]
        rss_ax.plot(t, anon, label="server: anonymous (heap)", ls="--")
        files = [row["collector_file_rss_bytes"] / 2**20 for row in rows]
        rss_ax.plot(t, files, label="server: file pages (SQLite map)", ls=":")
    rss_ax.set_ylabel("collector RSS (MiB)")
    rss_ax.set_xlabel("seconds since the first tick")
    rss_ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summary(results: dict) -> str:
    lag = results["lag_seconds"]
    return "\n".join(
        [
            f"{results['date']}  {results['machine']}",
            f"load average before {results['load_average_before'][0]:.2f}, during"
            f" {results['load1_mean']:.2f}, after {results['load_average_after'][0]:.2f}",
            f"{results['agents']} agents x {results['series_per_agent']} series"
            f" ({results['lines_per_agent_tick']} lines/tick) for {results['seconds']:.0f} s,"
            f" batches of {results['batch_seconds']:g} s: {results['requests']} requests,"
            f" {results['requests_not_204']} not 204, {results['connection_errors']} connection"
            " errors",
            f"points expected {results['points_expected']}, acknowledged"
            f" {results['points_acknowledged']}, stored {results['points_stored']}",
            f"ingest lag p50 {lag['p50']:.3f} s, p99 {lag['p99']:.3f} s (first half"
            f" {lag['p99_first_half']:.3f}, second half {lag['p99_second_half']:.3f}), max"
            f" {lag['max']:.3f} s",
            f"collector CPU mean {results['collector_cpu_percent']['mean']:.0f} %, p95"
            f" {results['collector_cpu_percent']['p95']:.0f} %; RSS max"
            f" {results['collector_rss_bytes_max'] / 2**20:.0f} MiB (anonymous"
            f" {results.get('collector_anon_rss_bytes_max', 0) / 2**20:.0f}, file"
            f" {results.get('collector_file_rss_bytes_max', 0) / 2**20:.0f}; with workers"
            f" {results['collector_total_rss_bytes_max'] / 2**20:.0f} MiB); generator CPU"
            f" {results['generator_cpu_percent_mean']:.0f} %",
            f"database {results['db_bytes'] / 2**20:.0f} MiB; kept up: {results['kept_up']}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=256)
    parser.add_argument("--series", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--batch-seconds", type=float, default=5.0)
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="nice value for the collector and the generator (-10: ahead of other work on a"
        " shared machine, as on a dedicated head node; needs root)",
    )
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--results", type=Path, default=RESULTS / "load.json")
    parser.add_argument("--figure", type=Path, default=FIGURES / "reliability-load.png")
    args = parser.parse_args(argv)
    results = run(
        args.agents, args.series, args.seconds, args.batch_seconds, args.workdir, args.nice
    )
    harness.save_results(results, args.results, args.figure, plot, summary)
    return 0 if results["kept_up"] else 1


if __name__ == "__main__":
    sys.exit(main())
