"""Ingest with scoped tokens: what checking each series' owner costs (issue 44, item 2).

Each host writes its own lines with its own node token (``collector token add --scope
node``), as agents do: one body per host per ``--body-seconds`` of samples (the payload of
``run.py``: 26 tag sets, 304 fields a host-second), ``--senders`` at a time, every body must
get a 204. The collector of this tree and of ``--baseline`` (another checkout, the tree
before the change) are run one after the other in every round, the order alternating, each
with a fresh store, with tokens (``--tokens-file``) and without (open): before/after side by
side in one run. Reported: points (lines)/s, samples/s and the server's CPU seconds, per
round and the best of each; the load average at the start and the end.

    mkdir /tmp/before && git archive COMMIT | tar -x -C /tmp/before
    .venv/bin/python bench/ingest/owned.py --baseline /tmp/before --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from bench.ingest.run import (  # noqa: E402
    COLLECTOR_SERVE,
    free_port,
    host_lines,
    process_cpu_seconds,
    send_all,
    wait_http,
)
from netserve.tokens import mint_token  # noqa: E402


@dataclass
class Body:
    token: str | None
    data: bytes


def make_bodies(hosts: int, seconds: int, body_seconds: int) -> tuple[list[Body], int, int]:
    """Each host's lines, a body per ``body_seconds``, hosts interleaved as agents push."""
    rng = random.Random(20240501)
    counters: dict = {}
    per_host: dict[str, list[str]] = {f"node{i:03d}": [] for i in range(hosts)}
    bodies: list[tuple[str, bytes]] = []
    samples = 0
    for second in range(seconds):
        for host, pending in per_host.items():
            lines = host_lines(host, second, rng, counters)
            samples += sum(line.split(" ")[-2].count("=") for line in lines)
            pending.extend(lines)
            if (second + 1) % body_seconds == 0 or second == seconds - 1:
                bodies.append((host, "\n".join(pending).encode()))
                pending.clear()
    lines_total = sum(body.count(b"\n") + 1 for _, body in bodies)
    return [Body(host, data) for host, data in bodies], lines_total, samples


def send_owned(port: int, bodies: list[Body], tokens: dict[str, str] | None, senders: int) -> float:
    """run.send_all, each body with its own host's token when ``tokens`` is given."""
    headers = (
        [{"Authorization": f"Token {tokens[body.token]}"} for body in bodies] if tokens else None
    )
    return send_all(port, [body.data for body in bodies], senders, headers)


@dataclass
class Result:
    tree: str
    tokens: str
    round: int
    seconds: float
    lines_per_s: float
    samples_per_s: float
    server_cpu_s: float


def run_one(
    tree: Path, label: str, scoped: bool, bodies: list[Body], lines: int, samples: int,
    senders: int, round_no: int,
) -> Result:  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-owned-") as workdir:
        command = [*COLLECTOR_SERVE, "--db", f"{workdir}/c.sqlite"]
        tokens = None
        if scoped:
            tokens_file = Path(workdir) / "tokens.json"
            tokens = {body.token: "" for body in bodies if body.token}
            for host in tokens:
                tokens[host] = mint_token(tokens_file, "node", host)
            command += ["--tokens-file", str(tokens_file)]
        port = free_port()
        env = dict(os.environ, PYTHONPATH=str(tree), EPOCHSCOPE_LOG_LEVEL="WARNING")
        proc = subprocess.Popen(
            [*command, "--listen", f"127.0.0.1:{port}"],
            env=env, cwd=tree, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            wait_http(port, "/ping")
            time.sleep(3)  # the parse workers come up beside the server
            cpu_before = process_cpu_seconds(proc.pid)
            elapsed = send_owned(port, bodies, tokens, senders)
            cpu = process_cpu_seconds(proc.pid) - cpu_before
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    return Result(
        label, "node tokens" if scoped else "open", round_no, elapsed, lines / elapsed,
        samples / elapsed, cpu,
    )  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--seconds", type=int, default=120, help="seconds of agent data")
    parser.add_argument("--body-seconds", type=int, default=10, help="a host's seconds a body")
    parser.add_argument("--senders", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path, required=True, help="the tree before")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    bodies, lines, samples = make_bodies(args.hosts, args.seconds, args.body_seconds)
    print(
        f"payload: {args.hosts} hosts x {args.seconds} s = {lines:,} lines, {samples:,} "
        f"samples, {len(bodies)} bodies; {args.senders} senders; {os.cpu_count()} CPUs; "
        f"load at start {os.getloadavg()}"
    )
    runs = [
        (REPO_ROOT, "this tree", True), (args.baseline.resolve(), "baseline", True),
        (REPO_ROOT, "this tree", False), (args.baseline.resolve(), "baseline", False),
    ]  # fmt: skip
    load_start = os.getloadavg()
    results: list[Result] = []
    for round_no in range(1, args.rounds + 1):
        for tree, label, scoped in runs if round_no % 2 else runs[::-1]:
            result = run_one(tree, label, scoped, bodies, lines, samples, args.senders, round_no)
            results.append(result)
            print(
                f"round {round_no} {label:<9} {result.tokens:<11}: "
                f"{result.lines_per_s:>9,.0f} lines/s {result.samples_per_s:>11,.0f} "
                f"samples/s, server CPU {result.server_cpu_s:5.1f} s, "
                f"load {os.getloadavg()[0]:.2f}"
            )
    load_end = os.getloadavg()
    print(f"load at start {load_start}, at end {load_end}")
    best: dict[tuple[str, str], Result] = {}
    for result in results:
        key = (result.tree, result.tokens)
        if key not in best or result.lines_per_s > best[key].lines_per_s:
            best[key] = result
    for (tree, tokens), result in sorted(best.items()):
        print(
            f"best {tree:<9} {tokens:<11}: {result.lines_per_s:>9,.0f} lines/s, "
            f"{lines / result.server_cpu_s:>9,.0f} lines per server CPU-second"
        )
    for tokens in ("node tokens", "open"):
        ours, before = best[("this tree", tokens)], best[("baseline", tokens)]
        print(f"{tokens}: this tree / baseline = {ours.lines_per_s / before.lines_per_s:.3f}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"results": [asdict(r) for r in results], "load": [load_start, load_end]},
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
