"""The matrix's all-reduce cases on two "hosts": network namespaces behind one switch
(tests/support/netns.py's ``NetnsCluster``, the set-up bench/forecast/netns.py uses too).

A real collector listens on the switch's address (the head node's); each host runs a real
agent (cpu, net, its own and the ceilings samplers, 1 s), its peer throughput to the other
host measured with ``agent ceilings --peer`` over the link as it is for the run, so the
agents report the link's ceiling before the run starts. The training is
bench/forecast/ddp_sleep.py under ``workloads profile``: a fixed sleep for compute (ranks
sharing two cores do not share it) and real float32 gradients all-reduced by
DistributedDataParallel over gloo, first on one host (the scaling group's reference run),
then one rank on each host. The link is either ``tc``-limited on both ends (the all-reduce
must be bandwidth-bound) or the veths as they are (it must not be called so).

The 2-host run's report is what the matrix scores, as for every other case."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support import netns
from tests.support.real_runs import REPO, RunFailed, collector_report

SCRIPT = REPO / "bench" / "forecast" / "ddp_sleep.py"
HOSTS = ("h1", "h2")
COLLECTOR_PORT = 8086
AGENT_PORT = 9711
PEER_PORT = 5291
PEER_SECONDS = 3
# 24 MB of gradients at 100 Mbit/s (11.95 MB/s of TCP payload): about 2 s of transfer per
# step against 0.25 s of compute; over the open veths (GB/s) a few tens of milliseconds.
# (With 0.5 s of compute the scaling loss read 96% of the link over the wait but only 75%
# over wait + compute, its least, so "not shown to bound": the rule cannot tell forward,
# which DDP's all-reduce never overlaps, from backward, which it may.)
GRADIENT_MB = 24
COMPUTE_SECONDS = 0.25
EPOCHS = 3
STEPS_PER_EPOCH = 6
TRAIN_TIMEOUT = 600


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _start_services(cluster: netns.NetnsCluster, base: Path, env: dict[str, str]) -> tuple:
    """The collector on the switch, an agent on each host; (db, url, token file,
    {host: ceilings file})."""
    token_file = base / "token"
    token_file.write_text("tok-" + secrets.token_hex(12) + "\n")
    token_file.chmod(0o600)
    db = base / "collector.sqlite"
    listen = f"{cluster.switch_address}:{COLLECTOR_PORT}"
    serve = [sys.executable, "-m", "collector", "serve", "--db", str(db), "--token-file",
             str(token_file), "--listen", listen]  # fmt: skip
    _, log = cluster.start("collector", serve, env)
    netns.wait_for_log(log, "listening on", 90)
    url = f"http://{listen}"
    token = token_file.read_text().strip()
    ceilings = {host: base / f"ceilings-{host}.json" for host in cluster.hosts}
    for host in cluster.hosts:
        cluster.start_agent(host, url, token, env, ("cpu", "net", "agent", "ceilings"),
                            AGENT_PORT, ceilings[host], batch_seconds=1)  # fmt: skip
    return db, url, token_file, ceilings


def measure_peers(cluster: netns.NetnsCluster, ceilings: dict[str, Path], env: dict) -> dict:
    """Each host's peer throughput to the other over the link as it now is, written to its
    ceilings file (its agent reports it from its next tick); {host: bytes/s}."""
    rates = {}
    for host, other in (cluster.hosts, cluster.hosts[::-1]):
        receiver = subprocess.Popen(
            cluster.on_host(other, [sys.executable, "-m", "agent", "ceilings", "--serve-peer",
                                    "--bind", cluster.addresses[other], "--port",
                                    str(PEER_PORT), "--serve-seconds", "30"]),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        try:
            line = receiver.stdout.readline() if receiver.stdout else ""
            if not line.startswith("receiving on"):
                raise RunFailed(f"peer receiver on {other}: {line!r}")
            netns.run_checked(
                cluster.on_host(host, [sys.executable, "-m", "agent", "ceilings", "--peer",
                                       f"{cluster.addresses[other]}:{PEER_PORT}", "--peer-only",
                                       "--peer-seconds", str(PEER_SECONDS), "--out",
                                       str(ceilings[host])]),
                env=env, timeout=120,
            )  # fmt: skip
        finally:
            receiver.terminate()
            receiver.wait(10)
        (peer,) = json.loads(ceilings[host].read_text())["ceilings"]
        rates[host] = peer["value"]
    return rates


def _train(cluster, base: Path, env: dict, run_id: str, hosts: int, url: str, token_file: Path,
           port: int, compute_seconds: float) -> float:  # fmt: skip
    """ddp_sleep.py under ``workloads profile`` on the first ``hosts`` hosts, a rank each."""
    started = time.monotonic()
    master = cluster.addresses[cluster.hosts[0]]
    processes = []
    for rank, host in enumerate(cluster.hosts[:hosts]):
        rank_env = dict(env)
        if hosts > 1:
            rank_env |= {"RANK": str(rank), "WORLD_SIZE": str(hosts), "LOCAL_RANK": "0",
                         "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": master,
                         "MASTER_PORT": str(port)}  # fmt: skip
        argv = [sys.executable, "-m", "workloads", "profile", "--collector", url,
                "--token-file", str(token_file), "--run-id", run_id,
                "--runs-dir", str(base / f"runs-{host}"), "--agent-port", str(AGENT_PORT),
                "--", sys.executable, str(SCRIPT), "--gradient-mb", str(GRADIENT_MB),
                "--compute-seconds", str(compute_seconds), "--epochs", str(EPOCHS),
                "--steps-per-epoch", str(STEPS_PER_EPOCH)]  # fmt: skip
        log = open(base / f"{run_id}-{host}.log", "wb")  # noqa: SIM115 - closed below
        process = subprocess.Popen(cluster.on_host(host, argv), env=rank_env, cwd=base,
                                   stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        processes.append((host, log, process))
    failed = []
    for host, log, process in processes:
        try:
            if process.wait(timeout=TRAIN_TIMEOUT) != 0:
                failed.append(host)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            failed.append(host)
        log.close()
    if failed:
        tail = (base / f"{run_id}-{failed[0]}.log").read_text(errors="replace")[-3000:]
        raise RunFailed(f"{run_id} failed on {failed}:\n{tail}")
    return time.monotonic() - started


def run_two_hosts(
    run_id: str, rate_mbit: float | None, work: Path, compute_seconds: float = COMPUTE_SECONDS
) -> dict[str, Any]:
    """The 1-host reference and the 2-host run with the link at ``rate_mbit`` (None: open);
    the 2-host run's report. Logs, the store and a summary (walls, peer rates, load) under
    ``work``."""
    why_not = netns.missing()
    if why_not:
        raise RunFailed(f"netns: {why_not}")
    base = work / "netns"
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o755)  # the namespaces' processes read the scripts and write their runs here
    env = _env()
    summary: dict[str, Any] = {
        "rate_mbit": rate_mbit,
        "compute_seconds": compute_seconds,
        "gradient_mb": GRADIENT_MB,
        "load_start": os.getloadavg(),
    }
    with netns.NetnsCluster(HOSTS, base) as cluster:
        db, url, token_file, ceilings = _start_services(cluster, base, env)
        cluster.shape(rate_mbit)
        summary["peer_bytes_per_second"] = measure_peers(cluster, ceilings, env)
        time.sleep(2)  # a tick of each agent reports the ceiling before the runs
        port = 29500 + secrets.randbelow(1000)
        summary["wall_seconds"] = {
            "one": _train(
                cluster, base, env, f"{run_id}-one", 1, url, token_file, port, compute_seconds
            ),
            "two": _train(
                cluster, base, env, run_id, 2, url, token_file, port + 1, compute_seconds
            ),
        }
        time.sleep(3)  # the agents' last samples reach the collector
        report = collector_report(db, run_id, env)
    summary["load_end"] = os.getloadavg()
    (work / "netns.json").write_text(json.dumps(summary, indent=1))
    return report
