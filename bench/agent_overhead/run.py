"""Agent overhead, side by side with Prometheus node_exporter in one run.

Starts two ``agent run`` (1 Hz, default samplers: every one that finds its data, /metrics
on, pushing to a loopback write endpoint run by this script) and Debian's
``prometheus-node-exporter`` with its default collectors. The bench scrapes
node_exporter and the first agent once a second, as Prometheus does unless told
(``Scraper``, ``--scrape``); the second agent is left alone (push only). It reads
each process's CPU time (/proc/<pid>/stat utime+stime, all threads) and VmRSS. CPU per
sample = CPU seconds in the measured window / samples in it (agents: the distinct
timestamps they pushed from the window; node_exporter: scrapes). Prints a table
and writes the numbers as JSON, with the split of each agent's sampling time between its
samplers: the mean wall time of each sampler's ``sample()`` per tick, from the
``agent_sampler`` points it pushed in the window (``duration_seconds``, tag ``sampler``).

    python bench/agent_overhead/run.py --seconds 180
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from contract import procfs  # noqa: E402 (the one /proc parser)

NODE_EXPORTER = Path("/usr/bin/prometheus-node-exporter")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Issue #46 (was #17: 0.35 and 0.25): CPU per sample against node_exporter's, per case.
TARGET_CPU_RATIO = {"agent_scraped": 0.20, "agent_push_only": 0.15}
TARGET_RSS_BYTES = 40 * 10**6


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, all threads, in seconds."""
    return procfs.parse_stat(Path(f"/proc/{pid}/stat").read_text()).ticks / CLOCK_TICKS


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


SAMPLER_LINE = "agent_sampler,"  # contract.schema.SamplerSelf, as pushed


def sampler_duration(line: str) -> tuple[str, int, float] | None:
    """``(sampler, time_ns, seconds)`` of an ``agent_sampler`` line, else None."""
    if not line.startswith(SAMPLER_LINE):
        return None
    tags, fields, time_ns = line.split(" ")
    sampler = dict(tag.split("=", 1) for tag in tags.split(",")[1:])["sampler"]
    values = dict(field.split("=", 1) for field in fields.split(","))
    return sampler, int(time_ns), float(values["duration_seconds"])


def sampler_split(durations: list[tuple[str, int, float]], start_ns: int, end_ns: int) -> dict:
    """Per sampler, slowest first: mean wall ms of its ``sample()`` per tick in the window
    and its share of all the samplers' time."""
    seconds: dict[str, list[float]] = {}
    for sampler, time_ns, duration in durations:
        if start_ns <= time_ns < end_ns:
            seconds.setdefault(sampler, []).append(duration)
    total = sum(sum(values) for values in seconds.values()) or 1.0
    split = {
        sampler: {
            "ms_per_tick": round(sum(values) / len(values) * 1000, 3),
            "share": round(sum(values) / total, 3),
        }
        for sampler, values in seconds.items()
    }
    return dict(sorted(split.items(), key=lambda item: -item[1]["ms_per_tick"]))


class WriteEndpoint:
    """Accepts InfluxDB v2 writes (204); keeps, per host tag, the timestamps it got and
    the sampler durations it was sent."""

    def __init__(self) -> None:
        self.timestamps: dict[str, set[int]] = {}
        self.lines: dict[str, int] = {}
        self.sampler_durations: dict[str, list[tuple[str, int, float]]] = {}
        self.port = free_port()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                for line in body.decode().splitlines():
                    host = line.split(",host=", 1)[1].split(",", 1)[0].split(" ", 1)[0]
                    endpoint.lines[host] = endpoint.lines.get(host, 0) + 1
                    endpoint.timestamps.setdefault(host, set()).add(int(line.rsplit(" ", 1)[1]))
                    duration = sampler_duration(line)
                    if duration is not None:
                        endpoint.sampler_durations.setdefault(host, []).append(duration)
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def samples(self, host: str, start_ns: int, end_ns: int) -> int:
        return len([t for t in self.timestamps.get(host, ()) if start_ns <= t < end_ns])

    def sampler_split(self, host: str, start_ns: int, end_ns: int) -> dict:
        return sampler_split(self.sampler_durations.get(host, []), start_ns, end_ns)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def scrape(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read()


# What Prometheus sends with every scrape, captured from Debian's prometheus 2.42 (the
# timeout is its default, 10 s): it asks for gzip unless a job sets
# `enable_compression: false`, and keeps its connection open between scrapes.
PROMETHEUS_HEADERS = {
    "User-Agent": "Prometheus/2.42.0+ds",
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
    "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
    "X-Prometheus-Scrape-Timeout-Seconds": "10",
}
SCRAPE_STYLES = ("prometheus", "keep-alive", "new-connection")


class Scraper:
    """Scrapes one URL as ``style`` says: ``prometheus`` (one kept-open connection and
    Prometheus's request headers, gzip asked for), ``keep-alive`` (one kept-open
    connection, no gzip) or ``new-connection`` (a connection per scrape, no gzip)."""

    def __init__(self, url: str, style: str) -> None:
        self.url, self.style = url, style
        parts = urllib.parse.urlsplit(url)
        self._host, self._port, self._path = parts.hostname or "", parts.port, parts.path
        self._connection: http.client.HTTPConnection | None = None

    def __call__(self) -> bytes:
        if self.style == "new-connection":
            return scrape(self.url)
        if self._connection is None:
            self._connection = http.client.HTTPConnection(self._host, self._port, timeout=5)
        headers = PROMETHEUS_HEADERS if self.style == "prometheus" else {}
        self._connection.request("GET", self._path, headers=headers)
        response = self._connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise OSError(f"{self.url}: HTTP {response.status}")
        return body


def wait_for(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            scrape(url)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class Watched:
    """One process under measurement."""

    def __init__(self, name: str, process: subprocess.Popen, metrics_url: str | None) -> None:
        self.name = name
        self.process = process
        self.metrics_url = metrics_url  # None: not scraped
        self.scraper: Scraper | None = None
        self.cpu_start = 0.0
        self.cpu_end = 0.0
        self.rss_max = 0
        self.rss_final = 0
        self.scrapes = 0
        self.scrape_bytes = 0
        self.samples = 0
        self.exit_code: int | None = None

    def poll_rss(self) -> None:
        rss = rss_bytes(self.process.pid)
        self.rss_max = max(self.rss_max, rss)
        self.rss_final = rss

    def report(self) -> dict:
        cpu = self.cpu_end - self.cpu_start
        return {
            "samples": self.samples,
            "scrapes": self.scrapes,
            "cpu_seconds": round(cpu, 3),
            "cpu_ms_per_sample": round(cpu / max(self.samples, 1) * 1000, 3),
            "rss_max_bytes": self.rss_max,
            "rss_final_bytes": self.rss_final,
            "metrics_page_bytes": self.scrape_bytes,
            "exit_code": self.exit_code,
        }


def progress(total: float):
    """A rich progress bar when rich is there, a plain line per 10 s otherwise."""
    try:
        from rich.progress import Progress

        bar = Progress()
        task = bar.add_task("measuring", total=total)
        bar.start()
        return (lambda done: bar.update(task, completed=done)), bar.stop
    except ImportError:
        return (lambda done: print(f"{done:.0f}/{total:.0f} s", file=sys.stderr)), (lambda: None)


def start_agent(
    workdir: Path,
    host: str,
    endpoint: WriteEndpoint,
    samplers: list[str] | None,
    tree: Path = REPO_ROOT,
) -> Watched:
    """``agent run`` at 1 Hz (default samplers unless told), /metrics on, pushing; the
    agent of ``tree`` (the working tree, or ``--before``'s revision unpacked)."""
    port = free_port()
    config = workdir / f"{host}.toml"
    config.write_text(
        f'host = "{host}"\n'
        "interval_seconds = 1\n"
        + (f"samplers = {json.dumps(samplers)}\n" if samplers is not None else "")
        + "[push]\n"
        f'url = "http://127.0.0.1:{endpoint.port}"\n'
        'token = "bench-token"\n'
        f'spool_dir = "{workdir / host / "spool"}"\n'
        "[metrics]\n"
        f'listen = "127.0.0.1:{port}"\n'
    )
    config.chmod(0o600)
    log = (workdir / f"{host}.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "agent", "run", "--config", str(config)],
        env=dict(os.environ, PYTHONPATH=str(tree)),
        cwd=str(tree),  # ``-m`` puts the working directory first on sys.path
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    return Watched(host, process, f"http://127.0.0.1:{port}/metrics")


def unpack(revision: str) -> Path:
    """``agent``, ``contract`` and ``netserve`` as they were at ``revision``, in a new
    temporary directory (``git archive``): the "before" agents' tree."""
    tree = Path(tempfile.mkdtemp(prefix="agent-before-"))
    archive = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "archive", revision, "agent", "contract", "netserve"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


AGENTS = ("agent_scraped", "agent_push_only", "agent_scraped_before", "agent_push_only_before")


def run(
    seconds: float,
    warmup: float,
    out: Path,
    samplers: list[str] | None = None,
    scrape_style: str = "prometheus",
    before: str | None = None,
) -> dict:
    if not NODE_EXPORTER.exists():
        sys.exit(f"{NODE_EXPORTER} is missing: apt-get install prometheus-node-exporter")
    endpoint = WriteEndpoint()
    workdir = Path(tempfile.mkdtemp(prefix="agent-overhead-"))
    exporter_port = free_port()
    # Two agents: one also scraped once a second (pull and push), one push only.
    scraped = start_agent(workdir, "agent-scraped", endpoint, samplers)
    push_only = start_agent(workdir, "agent-push-only", endpoint, samplers)
    # --before: the same two agents from the revision's tree, side by side in this run
    agents = {"agent_scraped": scraped, "agent_push_only": push_only}
    tree: Path | None = None
    if before is not None:
        tree = unpack(before)
        agents["agent_scraped_before"] = start_agent(
            workdir, "agent-scraped-before", endpoint, samplers, tree
        )
        agents["agent_push_only_before"] = start_agent(
            workdir, "agent-push-only-before", endpoint, samplers, tree
        )
    exporter = Watched(
        "node_exporter",
        subprocess.Popen(
            [str(NODE_EXPORTER), f"--web.listen-address=127.0.0.1:{exporter_port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
        f"http://127.0.0.1:{exporter_port}/metrics",
    )
    watched = [*agents.values(), exporter]
    try:
        for each in watched:
            wait_for(each.metrics_url)
        for key, agent in agents.items():
            if "push_only" in key:
                agent.metrics_url = None  # up; from now on left alone
        for each in watched:
            if each.metrics_url is not None:
                each.scraper = Scraper(each.metrics_url, scrape_style)
        time.sleep(warmup)  # past start-up: imports and first samples are not counted
        for each in watched:
            each.cpu_start = cpu_seconds(each.process.pid)
        window_start_ns = time.time_ns()
        load_start = round(os.getloadavg()[0], 2)
        started = time.monotonic()
        update, stop_bar = progress(seconds)
        next_scrape = started
        while (elapsed := time.monotonic() - started) < seconds:
            for each in watched:
                if each.scraper is not None:
                    each.scrape_bytes = len(each.scraper())
                    each.scrapes += 1
                each.poll_rss()
            update(elapsed)
            next_scrape += 1.0
            time.sleep(max(0.0, next_scrape - time.monotonic()))
        stop_bar()
        for each in watched:
            each.cpu_end = cpu_seconds(each.process.pid)
            each.poll_rss()
        window_end_ns = time.time_ns()
    finally:
        for each in watched:
            each.process.send_signal(signal.SIGTERM)
        for each in watched:
            each.exit_code = each.process.wait(30)
        if tree is not None:
            shutil.rmtree(tree, ignore_errors=True)  # the unpacked revision, not its logs
    # The agents flushed their last batch on SIGTERM: count the samples taken in the window.
    for agent in agents.values():
        agent.samples = endpoint.samples(agent.name, window_start_ns, window_end_ns)
    exporter.samples = exporter.scrapes
    splits = {
        agent.name: endpoint.sampler_split(agent.name, window_start_ns, window_end_ns)
        for agent in agents.values()
    }
    endpoint.close()

    results = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()}: {os.cpu_count()} CPUs, {platform.platform()}",
        "python": platform.python_version(),
        "seconds": seconds,
        "load_average_start": load_start,
        "load_average_end": round(os.getloadavg()[0], 2),
        "samplers": samplers or "default (every sampler that finds its data)",
        "scrape_style": scrape_style,
        "before_revision": before,
        **{key: agent.report() for key, agent in agents.items()},
        "node_exporter": exporter.report(),
        "points_pushed": endpoint.lines,
        "logs": str(workdir),
    }
    for key, agent in agents.items():
        results[key]["sampler_ms_per_tick"] = splits[agent.name]
    exporter_ms = results["node_exporter"]["cpu_ms_per_sample"]
    for key in agents:
        results[key]["cpu_ratio_to_node_exporter"] = (
            round(results[key]["cpu_ms_per_sample"] / exporter_ms, 3) if exporter_ms else None
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)
    return results


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} ({size / 2**20:.1f})"


def print_table(results: dict) -> None:
    columns = (*(name for name in AGENTS if name in results), "node_exporter")
    rows = [
        ("samples (scrapes)", lambda r: f"{r['samples']} ({r['scrapes']})"),
        ("CPU s in window", lambda r: f"{r['cpu_seconds']:.2f}"),
        ("CPU ms / sample", lambda r: f"{r['cpu_ms_per_sample']:.2f}"),
        ("CPU ratio to n_e", lambda r: str(r.get("cpu_ratio_to_node_exporter", "1"))),
        ("RSS max MB (MiB)", lambda r: _megabytes(r["rss_max_bytes"])),
        ("RSS final MB (MiB)", lambda r: _megabytes(r["rss_final_bytes"])),
        ("/metrics bytes", lambda r: str(r["metrics_page_bytes"] or "-")),
        ("exit code", lambda r: str(r["exit_code"])),
    ]
    print(f"\n{'':20}" + "".join(f"{name:>24}" for name in columns))
    for label, cell in rows:
        print(f"{label:20}" + "".join(f"{cell(results[name]):>24}" for name in columns))
    for name in columns[:-1]:
        ratio = results[name]["cpu_ratio_to_node_exporter"]
        rss = results[name]["rss_max_bytes"]
        target = TARGET_CPU_RATIO[name.removesuffix("_before")]
        cpu_ok = "met" if ratio is not None and ratio <= target else "MISSED"
        rss_ok = "met" if rss <= TARGET_RSS_BYTES else "MISSED"
        print(
            f"{name}: CPU/sample {ratio}x node_exporter's (target <= {target}: "
            f"{cpu_ok}); RSS max {rss / 1e6:.1f} MB (target <= 40 MB: {rss_ok})"
        )
    for name in columns[:-1]:
        print_sampler_split(name, results[name].get("sampler_ms_per_tick", {}))
    print(
        f"load average {results['load_average_start']} at the start, "
        f"{results['load_average_end']} at the end"
    )


def print_sampler_split(name: str, split: dict) -> None:
    """The agent's sampling time per sampler (wall time of ``sample()``, not CPU time)."""
    if not split:
        print(f"{name}: no agent_sampler points (is the agent sampler off?)")
        return
    print(f"{name}: sampling wall time per tick, by sampler")
    for sampler, numbers in split.items():
        print(f"  {sampler:12} {numbers['ms_per_tick']:8.3f} ms  {numbers['share']:6.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=180.0, help="measured window")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before measuring")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "results.json",
        help="where the numbers go (JSON)",
    )
    parser.add_argument(
        "--samplers",
        help="comma-separated samplers for the agents (default: the agent's own default)",
    )
    parser.add_argument(
        "--runs", type=int, default=1, help="repeat; more than 1 prints the median and spread"
    )
    parser.add_argument(
        "--scrape",
        choices=SCRAPE_STYLES,
        default="prometheus",
        help="how the agent and node_exporter are scraped (Scraper); default: as Prometheus does",
    )
    parser.add_argument(
        "--before",
        metavar="REVISION",
        help="also run the agent of this git revision (scraped and push only) side by side",
    )
    args = parser.parse_args()
    samplers = args.samplers.split(",") if args.samplers else None
    if args.runs == 1:
        run(args.seconds, args.warmup, args.out, samplers, args.scrape, args.before)
        return
    results = []
    for number in range(1, args.runs + 1):
        out = args.out.with_name(f"{args.out.stem}-run{number}{args.out.suffix}")
        results.append(run(args.seconds, args.warmup, out, samplers, args.scrape, args.before))
    summary = summarise_runs(results)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


def summarise_runs(results: list[dict]) -> dict:
    """Median and spread (min, max) over runs of the ratios, ms per sample and RSS."""

    def stats(values: list[float]) -> dict:
        ordered = sorted(values)
        return {"median": ordered[len(ordered) // 2], "min": ordered[0], "max": ordered[-1]}

    summary: dict = {
        "runs": len(results),
        "seconds": results[0]["seconds"],
        "scrape_style": results[0]["scrape_style"],
        "load_average": [[r["load_average_start"], r["load_average_end"]] for r in results],
    }
    for name in (name for name in AGENTS if name in results[0]):
        summary[name] = {
            "cpu_ratio_to_node_exporter": stats(
                [r[name]["cpu_ratio_to_node_exporter"] for r in results]
            ),
            "cpu_ms_per_sample": stats([r[name]["cpu_ms_per_sample"] for r in results]),
            "rss_max_mb": stats([r[name]["rss_max_bytes"] / 1e6 for r in results]),
            "target_cpu_ratio": TARGET_CPU_RATIO[name.removesuffix("_before")],
            "sampler_ms_per_tick": {
                sampler: stats(
                    [r[name]["sampler_ms_per_tick"][sampler]["ms_per_tick"] for r in results]
                )
                for sampler in results[0][name].get("sampler_ms_per_tick", {})
                if all(sampler in r[name].get("sampler_ms_per_tick", {}) for r in results)
            },
        }
    summary["node_exporter"] = {
        "cpu_ms_per_sample": stats([r["node_exporter"]["cpu_ms_per_sample"] for r in results])
    }
    return summary


if __name__ == "__main__":
    main()
