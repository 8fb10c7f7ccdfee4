"""Validate `collector forecast` on real runs: DDP over tc-shaped links between namespaces.

One command (root; not CI):

    .venv/bin/python bench/forecast/netns.py [--rates 200,500] [--hosts 4]

builds a cluster of network-namespace hosts behind one switch (tests/support/netns.py),
starts a real collector on the switch's address and a real agent on every host (cpu, net,
agent samplers, 1 s), and for each link rate (a tc token bucket on both ends of every link)
runs bench/forecast/ddp_sleep.py (compute a fixed sleep, 24 MB of real float32 gradients
all-reduced by DDP over gloo) under `workloads profile --collector` on 1, 2, 3 and 4 hosts,
one rank per host. It then forecasts 3 and 4 hosts with `collector forecast --format json`:

- from the 1-host run, given the gradient bytes (``--gradient-mb``, the script's parameters)
  and the link (``--link-gbps``: tc's rate times TCP's payload share, what a peer
  measurement reads; a 1-host run sends nothing over a fabric to measure it on);
- from the 2-host run, from its own measurements only (gradient bytes from the bytes its
  hosts sent per step, the link from its all-reduce's time);

and compares them with the measured 3- and 4-host runs (their own images/s over the same
steady epochs, `collector forecast RUN --nodes N` on the run itself). The 1-host run does
not depend on the link: it is run once and serves every rate. Progress goes to stdout;
results to bench/forecast/results/netns.json and netns.md (the table in docs/forecast.md).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from tests.support import netns  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SCRIPT = Path(__file__).resolve().parent / "ddp_sleep.py"
COLLECTOR_PORT = 8086
AGENT_PORT = 9711
SOURCES = (1, 2)
HELD_OUT = (3, 4)


def cpu_model() -> str:
    fields: dict[str, str] = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if ":" in line:
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name", "unknown CPU")
    if "cpu family" in fields:
        name += f" (family {fields['cpu family']}, model {fields.get('model', '?')})"
    return f"{name}, {len(os.sched_getaffinity(0))} CPUs"


def load() -> float:
    return round(os.getloadavg()[0], 2)


class Bench:
    def __init__(self, cluster: netns.NetnsCluster, base: Path, args: argparse.Namespace) -> None:
        self.cluster = cluster
        self.base = base
        self.args = args
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(REPO_ROOT), self.env.get("PYTHONPATH")])
        )
        self.db = base / "collector.sqlite"
        self.token_file = base / "token"
        self.collector_url = f"http://{cluster.switch_address}:{COLLECTOR_PORT}"
        self.port = 29500

    def start_services(self) -> None:
        self.token_file.write_text("tok-" + secrets.token_hex(12) + "\n")
        self.token_file.chmod(0o600)
        serve = [sys.executable, "-m", "collector", "serve", "--db", str(self.db),
                 "--token-file", str(self.token_file),
                 "--listen", f"{self.cluster.switch_address}:{COLLECTOR_PORT}"]  # fmt: skip
        _, log = self.cluster.start("collector", serve, self.env)
        netns.wait_for_log(log, "listening on", 90)
        token = self.token_file.read_text().strip()
        for host in self.cluster.hosts:
            self.cluster.start_agent(host, self.collector_url, token, self.env,
                                     ("cpu", "net", "agent"), AGENT_PORT,
                                     batch_seconds=1)  # fmt: skip
        time.sleep(3)  # the agents' first pushes

    def train(self, run_id: str, hosts: int) -> float:
        """One run on the first ``hosts`` hosts, one rank each; its wall seconds."""
        self.port += 1
        started = time.monotonic()
        processes = []
        master = self.cluster.addresses[self.cluster.hosts[0]]
        for rank, host in enumerate(self.cluster.hosts[:hosts]):
            env = dict(self.env)
            if hosts > 1:
                env |= {"RANK": str(rank), "WORLD_SIZE": str(hosts), "LOCAL_RANK": "0",
                        "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": master,
                        "MASTER_PORT": str(self.port)}  # fmt: skip
            argv = [sys.executable, "-m", "workloads", "profile", "--collector",
                    self.collector_url, "--token-file", str(self.token_file),
                    "--run-id", run_id, "--runs-dir", str(self.base / f"runs-{host}"),
                    "--agent-port", str(AGENT_PORT), "--",
                    sys.executable, str(SCRIPT), "--gradient-mb", str(self.args.gradient_mb),
                    "--compute-seconds", str(self.args.compute_seconds),
                    "--epochs", str(self.args.epochs),
                    "--steps-per-epoch", str(self.args.steps)]  # fmt: skip
            log = open(self.base / f"{run_id}-{host}.log", "wb")  # noqa: SIM115 - closed below
            processes.append(
                (log, subprocess.Popen(self.cluster.on_host(host, argv), env=env, cwd=self.base,
                                       stdout=log, stderr=subprocess.STDOUT))
            )  # fmt: skip
        failed = []
        for (log, process), host in zip(processes, self.cluster.hosts, strict=False):
            if process.wait(timeout=900) != 0:
                failed.append(host)
            log.close()
        if failed:
            tail = (self.base / f"{run_id}-{failed[0]}.log").read_text(errors="replace")[-4000:]
            raise RuntimeError(f"{run_id} failed on {failed}:\n{tail}")
        return time.monotonic() - started

    def forecast(self, run_id: str, nodes: list[int], *extra: str) -> dict:
        argv = [sys.executable, "-m", "collector", "forecast", run_id, "--db", str(self.db),
                "--nodes", ",".join(map(str, nodes)), "--format", "json", *extra]  # fmt: skip
        result = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=300)
        if result.returncode != 0:
            raise RuntimeError(f"{argv} exited {result.returncode}: {result.stderr[-2000:]}")
        return json.loads(result.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="200,500", help="link rates, Mbit/s each way")
    parser.add_argument("--gradient-mb", type=float, default=24.0)
    parser.add_argument("--compute-seconds", type=float, default=0.5)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6, help="steps per epoch")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--keep", action="store_true", help="keep the logs and the store")
    args = parser.parse_args()
    why_not = netns.missing()
    if why_not:
        print(f"netns: {why_not}", file=sys.stderr)
        return 2
    rates = [float(r) for r in args.rates.split(",")]
    sizes = sorted({*SOURCES, *HELD_OUT})
    hosts = tuple(f"h{i + 1}" for i in range(max(sizes)))
    tag = secrets.token_hex(2)
    session = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{cpu_model()}, Python {sys.version.split()[0]}",
        "load_at_start": load(),
        "gradient_mb": args.gradient_mb,
        "compute_seconds": args.compute_seconds,
        "epochs": args.epochs,
        "steps_per_epoch": args.steps,
        "command": "python bench/forecast/netns.py " + " ".join(sys.argv[1:]),
    }
    print(f"{session['machine']}; load {session['load_at_start']}", flush=True)
    base = Path(tempfile.mkdtemp(prefix="epochscope-forecast-"))
    base.chmod(0o755)
    measured: dict[str, dict] = {}
    rows = []
    try:
        with netns.NetnsCluster(hosts, base) as cluster:
            bench = Bench(cluster, base, args)
            bench.start_services()
            one_host = f"fc-{tag}-1h"
            cluster.shape(None)
            seconds = bench.train(one_host, 1)
            own = bench.forecast(one_host, [1])["measured"]
            measured[one_host] = own | {"wall_seconds": seconds, "load": load()}
            print(f"1 host: {own['images_per_second']:.2f} images/s ({seconds:.0f} s, load "
                  f"{load()})", flush=True)  # fmt: skip
            for rate in rates:
                cluster.shape(rate)
                link_gbps = cluster.payload_bytes_per_second() * 8 / 1e9
                runs = {1: one_host}
                for size in sizes[1:]:
                    run_id = f"fc-{tag}-{rate:g}m-{size}h"
                    seconds = bench.train(run_id, size)
                    own = bench.forecast(run_id, [size])["measured"]
                    measured[run_id] = own | {"wall_seconds": seconds, "load": load(),
                                              "rate_mbit": rate}  # fmt: skip
                    runs[size] = run_id
                    print(f"{rate:g} Mbit/s, {size} hosts: {own['images_per_second']:.2f} images/s"
                          f" ({seconds:.0f} s, load {load()})", flush=True)  # fmt: skip
                baseline = measured[one_host]["images_per_second"]
                for source in SOURCES:
                    extra = []
                    if source == 1:
                        extra = ["--gradient-mb", str(args.gradient_mb), "--link-gbps",
                                 f"{link_gbps:.6f}"]  # fmt: skip
                    answer = bench.forecast(runs[source], list(HELD_OUT), *extra)
                    for row in answer["forecast"]:
                        actual = measured[runs[row["nodes"]]]["images_per_second"]
                        row_out = {
                            "rate_mbit": rate,
                            "source_hosts": source,
                            "hosts": row["nodes"],
                            "forecast_images_per_second": row["images_per_second"],
                            "measured_images_per_second": actual,
                            "images_per_second_error": row["images_per_second"] / actual - 1,
                            "forecast_efficiency": row["images_per_second"]
                            / (row["nodes"] * baseline),
                            "measured_efficiency": actual / (row["nodes"] * baseline),
                            "forecast_bound": row["bound"],
                            "forecast_allreduce_seconds": row["allreduce"],
                            "link_source": answer["measured"]["link_source"],
                            "gradient_source": answer["measured"]["gradient_source"],
                            "link_bytes_per_second": answer["measured"]["link_bytes_per_second"],
                            "gradient_bytes": answer["measured"]["gradient_bytes"],
                        }
                        row_out["efficiency_error_points"] = 100 * (
                            row_out["forecast_efficiency"] - row_out["measured_efficiency"]
                        )
                        rows.append(row_out)
                        print(f"  from {source} host(s) to {row['nodes']}: forecast "
                              f"{row['images_per_second']:.2f}, measured {actual:.2f} images/s, "
                              f"{row_out['images_per_second_error']:+.1%}", flush=True)  # fmt: skip
    finally:
        if args.keep:
            print(f"logs and the store kept in {base}", flush=True)
        else:
            shutil.rmtree(base, ignore_errors=True)
    errors = [abs(r["images_per_second_error"]) for r in rows]
    session["load_at_end"] = load()
    summary = {
        "median_abs_error": statistics.median(errors),
        "worst_abs_error": max(errors),
        "median_abs_efficiency_error_points": statistics.median(
            abs(r["efficiency_error_points"]) for r in rows
        ),
        "worst_abs_efficiency_error_points": max(abs(r["efficiency_error_points"]) for r in rows),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "netns.json").write_text(
        json.dumps(
            {"session": session, "summary": summary, "measured": measured, "forecasts": rows},
            indent=1,
        )
        + "\n"
    )
    (args.out / "netns.md").write_text(markdown(session, summary, rows))
    print(markdown(session, summary, rows))
    return 0


def markdown(session: dict, summary: dict, rows: list[dict]) -> str:
    lines = [
        f"`{session['command'].strip()}` on {session['machine']}, load "
        f"{session['load_at_start']} at start, {session['load_at_end']} at end, "
        f"{session['started']}. DDP over gloo, {session['gradient_mb']:g} MB of gradients, "
        f"{session['compute_seconds']:g} s of sleep per step, {session['epochs']} epochs of "
        f"{session['steps_per_epoch']} steps (the first left out), one rank per host.",
        "",
        "| link Mbit/s | from | to | forecast images/s | measured images/s | error |"
        " efficiency forecast | measured | error (points) | bound (forecast) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['rate_mbit']:g} | {r['source_hosts']} host{'s' if r['source_hosts'] > 1 else ''}"
            f" | {r['hosts']} hosts | {r['forecast_images_per_second']:.2f}"
            f" | {r['measured_images_per_second']:.2f} | {r['images_per_second_error']:+.1%}"
            f" | {r['forecast_efficiency']:.0%} | {r['measured_efficiency']:.0%}"
            f" | {r['efficiency_error_points']:+.1f} | {r['forecast_bound']} |"
        )
    lines += [
        "",
        f"Median |error| of images/s {summary['median_abs_error']:.1%}, worst "
        f"{summary['worst_abs_error']:.1%}; efficiency (against the 1-host run) median "
        f"{summary['median_abs_efficiency_error_points']:.1f} points, worst "
        f"{summary['worst_abs_efficiency_error_points']:.1f}.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
