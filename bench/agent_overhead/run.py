"""Agent overhead, side by side with Prometheus node_exporter in one run.

Starts ``agent run`` (1 Hz, every sampler that finds its data, /metrics on, pushing to a
loopback write endpoint run by this script) and Debian's ``prometheus-node-exporter``,
scrapes both /metrics once a second, and reads each process's CPU time
(/proc/<pid>/stat utime+stime) and VmRSS. CPU per sample = CPU seconds spent in the
measured window / samples in it (agent: distinct timestamps it pushed; node_exporter:
scrapes). Prints a table and writes the numbers as JSON.

    python bench/agent_overhead/run.py --seconds 180
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE_EXPORTER = Path("/usr/bin/prometheus-node-exporter")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
TARGET_CPU_RATIO = 0.5
TARGET_RSS_BYTES = 40 * 10**6


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, all threads, in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    # After "pid (comm) ": field 3 (state) is fields[0], so utime (14) is fields[11].
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


class WriteEndpoint:
    """Accepts InfluxDB v2 writes (204) and keeps the timestamps of the lines it got."""

    def __init__(self) -> None:
        self.timestamps: set[int] = set()
        self.lines = 0
        self.port = free_port()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                for line in body.decode().splitlines():
                    endpoint.lines += 1
                    endpoint.timestamps.add(int(line.rsplit(" ", 1)[1]))
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def scrape(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read()


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

    def __init__(self, name: str, process: subprocess.Popen, metrics_url: str) -> None:
        self.name = name
        self.process = process
        self.metrics_url = metrics_url
        self.cpu_start = 0.0
        self.cpu_end = 0.0
        self.rss_max = 0
        self.rss_final = 0
        self.scrapes = 0
        self.scrape_bytes = 0

    def poll_rss(self) -> None:
        rss = rss_bytes(self.process.pid)
        self.rss_max = max(self.rss_max, rss)
        self.rss_final = rss


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


def run(seconds: float, warmup: float, out: Path) -> dict:
    if not NODE_EXPORTER.exists():
        sys.exit(f"{NODE_EXPORTER} is missing: apt-get install prometheus-node-exporter")
    endpoint = WriteEndpoint()
    workdir = Path(tempfile.mkdtemp(prefix="agent-overhead-"))
    agent_port, exporter_port = free_port(), free_port()
    config = workdir / "agent.toml"
    config.write_text(
        "interval_seconds = 1\n"
        "[push]\n"
        f'url = "http://127.0.0.1:{endpoint.port}"\n'
        'token = "bench-token"\n'
        f'spool_dir = "{workdir / "spool"}"\n'
        "[metrics]\n"
        f'listen = "127.0.0.1:{agent_port}"\n'
    )
    config.chmod(0o600)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    agent_log = (workdir / "agent.log").open("w")
    agent = Watched(
        "epochscope agent",
        subprocess.Popen(
            [sys.executable, "-m", "agent", "run", "--config", str(config)],
            env=env,
            stdout=agent_log,
            stderr=subprocess.STDOUT,
        ),
        f"http://127.0.0.1:{agent_port}/metrics",
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
    watched = [agent, exporter]
    try:
        for each in watched:
            wait_for(each.metrics_url)
        time.sleep(warmup)  # past start-up: imports and first samples are not counted
        for each in watched:
            each.cpu_start = cpu_seconds(each.process.pid)
        window_start_ns = time.time_ns()
        started = time.monotonic()
        update, stop_bar = progress(seconds)
        next_scrape = started
        while (elapsed := time.monotonic() - started) < seconds:
            for each in watched:
                each.scrape_bytes = len(scrape(each.metrics_url))
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
        agent_samples = len(
            [t for t in endpoint.timestamps if window_start_ns <= t < window_end_ns]
        )
    finally:
        agent.process.send_signal(signal.SIGTERM)
        exporter.process.terminate()
        agent_exit = agent.process.wait(30)
        exporter.process.wait(30)
        endpoint.close()
        agent_log.close()

    agent_cpu = agent.cpu_end - agent.cpu_start
    exporter_cpu = exporter.cpu_end - exporter.cpu_start
    per_agent_sample = agent_cpu / max(agent_samples, 1)
    per_exporter_scrape = exporter_cpu / max(exporter.scrapes, 1)
    results = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()}: {os.cpu_count()} CPUs, {platform.platform()}",
        "python": platform.python_version(),
        "seconds": seconds,
        "agent": {
            "samples": agent_samples,
            "scrapes": agent.scrapes,
            "cpu_seconds": round(agent_cpu, 3),
            "cpu_seconds_per_sample": round(per_agent_sample, 5),
            "rss_max_bytes": agent.rss_max,
            "rss_final_bytes": agent.rss_final,
            "metrics_page_bytes": agent.scrape_bytes,
            "points_pushed": endpoint.lines,
            "exit_code_on_sigterm": agent_exit,
        },
        "node_exporter": {
            "scrapes": exporter.scrapes,
            "cpu_seconds": round(exporter_cpu, 3),
            "cpu_seconds_per_scrape": round(per_exporter_scrape, 5),
            "rss_max_bytes": exporter.rss_max,
            "rss_final_bytes": exporter.rss_final,
            "metrics_page_bytes": exporter.scrape_bytes,
        },
        "cpu_ratio_agent_to_node_exporter": round(per_agent_sample / per_exporter_scrape, 3)
        if per_exporter_scrape
        else None,
        "agent_log": str(workdir / "agent.log"),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)
    return results


def print_table(results: dict) -> None:
    agent, exporter = results["agent"], results["node_exporter"]
    ratio = results["cpu_ratio_agent_to_node_exporter"]
    rows = [
        ("samples / scrapes", agent["samples"], exporter["scrapes"]),
        ("CPU s total", agent["cpu_seconds"], exporter["cpu_seconds"]),
        (
            "CPU ms per sample",
            f"{agent['cpu_seconds_per_sample'] * 1000:.2f}",
            f"{exporter['cpu_seconds_per_scrape'] * 1000:.2f}",
        ),
        (
            "RSS max MB",
            f"{agent['rss_max_bytes'] / 1e6:.1f}",
            f"{exporter['rss_max_bytes'] / 1e6:.1f}",
        ),
        (
            "RSS final MB",
            f"{agent['rss_final_bytes'] / 1e6:.1f}",
            f"{exporter['rss_final_bytes'] / 1e6:.1f}",
        ),
        ("/metrics bytes", agent["metrics_page_bytes"], exporter["metrics_page_bytes"]),
    ]
    verdict_cpu = "met" if ratio is not None and ratio <= TARGET_CPU_RATIO else "MISSED"
    verdict_rss = "met" if agent["rss_max_bytes"] <= TARGET_RSS_BYTES else "MISSED"
    print(f"\n{'':20} {'agent':>14} {'node_exporter':>14}")
    for label, left, right in rows:
        print(f"{label:20} {left!s:>14} {right!s:>14}")
    print(
        f"\nCPU per sample, agent / node_exporter: {ratio} (target <= {TARGET_CPU_RATIO}: {verdict_cpu})"
    )
    print(f"agent RSS max {agent['rss_max_bytes'] / 1e6:.1f} MB (target <= 40 MB: {verdict_rss})")
    print(f"agent exit code on SIGTERM: {agent['exit_code_on_sigterm']}")


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
    args = parser.parse_args()
    run(args.seconds, args.warmup, args.out)


if __name__ == "__main__":
    main()
