"""The collector's write path in one process, without sockets: what one node's request costs.

The bodies are the ones ``ceiling.py``'s senders send: a node's 300 series (the agent's tag
sets and fields) for ``--ticks`` ticks (5: the agent's ``push.batch_seconds``), for
``--nodes`` nodes under their own host tags. Stages, each over one body per node, a fresh
store per checkout and round:

- ``join``: a node's first body, parsed and stored (its tag sets' and series' ids made);
- ``parse``: ``lineprotocol.parse_body_bytes`` alone, for a known node;
- ``parse+store``: that, then ``SqliteStore.write`` (one committed transaction);
- ``request``: the whole handler of a request held in memory, as a worker thread of
  ``collector serve`` runs it (``parse_head``, ``CollectorServer.handle``: the HTTP handler,
  token check, parse, store, the 204's bytes), without the event loop's socket I/O;
- ``fold``: then ``compact()`` of everything the stages stored (3 bodies a node, 15 s of
  the nodes' samples), as ``collector serve`` runs every 30 s: its CPU seconds, and the
  wall seconds the store's write lock was held (every write waits that long).

The WAL is checkpointed as each checkout's ``collector serve`` does it: here by its
``Checkpointer`` thread once a second (its CPU counted in the stages'), in a checkout from
before it by whichever commit passes 1,000 pages.

Reported per stage: microseconds of CPU per body (the process' CPU time: SQLite's and the
checkpoints' included, so a checkpoint of the join's writes may land in ``parse``: compare
the total line), bodies/s and samples/s on one core, best of ``--rounds``.
``--baseline DIR`` runs the same in another checkout (its own ``collector`` package, in a
process of its own), alternating with this one round by round, so before and after are
measured side by side under the same load:

    mkdir /tmp/before && git archive dde22c2 | tar -x -C /tmp/before
    .venv/bin/python bench/ingest/write_path.py --baseline /tmp/before
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STAGES = ("join", "parse", "parse+store", "request")


def build_bodies(nodes: int, ticks: int, series: int) -> list[list[bytes]]:
    """A list of one body per node for each stage, each stage's ticks after the last
    one's."""
    sys.path.insert(0, str(REPO))
    from bench.ingest.ceiling import POOL_HOST, batch_body, node_payload, renamed

    rng = random.Random(1)
    pool = [node_payload(POOL_HOST, series, rng) for _ in range(4)]
    payloads = [renamed(pool[i % len(pool)], f"node{i:05d}") for i in range(nodes)]
    start = int(time.time()) - 86400
    return [
        [batch_body(variants, r * ticks, r * ticks + ticks - 1, start) for variants, _ in payloads]
        for r in range(len(STAGES))
    ]


def worker(bodies_path: Path) -> dict:
    """In a checkout's own process: time each stage over the bodies; seconds per stage."""
    import pickle

    from collector import lineprotocol
    from collector.ingest.http import parse_head
    from collector.ingest.server import CollectorServer, Sink
    from collector.store import SqliteStore

    rounds: list[list[bytes]] = pickle.loads(bodies_path.read_bytes())
    token = "bench-token"
    with tempfile.TemporaryDirectory(prefix="write-path-") as workdir:
        try:  # collector serve's store: checkpoints beside the writes
            store = SqliteStore(Path(workdir) / "store.sqlite", background_checkpoints=True)
        except TypeError:  # a checkout from before they were
            store = SqliteStore(Path(workdir) / "store.sqlite")
        server = CollectorServer(("127.0.0.1", 0), Sink(store), token=token)
        try:  # and its checkpoints, once a second, their CPU counted with the stages'
            from collector.ingest.server import Checkpointer

            checkpointer = Checkpointer(store)
            checkpointer.start()
        except ImportError:
            checkpointer = None
        try:

            def parse(body: bytes) -> None:
                lineprotocol.parse_body_bytes(body, "ns", time.time_ns())

            def parse_store(body: bytes) -> None:
                store.write(lineprotocol.parse_body_bytes(body, "ns", time.time_ns()))

            def request(body: bytes) -> None:
                head = parse_head(
                    b"POST /api/v2/write?bucket=b&org=o&precision=ns HTTP/1.1\r\n"
                    b"Host: 127.0.0.1\r\nAuthorization: Token " + token.encode() + b"\r\n"
                    b"Content-Type: text/plain; charset=utf-8\r\n"
                    b"Content-Length: %d\r\n\r\n" % len(body)
                )
                answer, _ = server.handle(head, body, ("127.0.0.1", 1))
                if not answer.startswith(b"HTTP/1.1 204"):
                    raise SystemExit(f"write refused: {answer[:200]!r}")

            seconds = {}
            for index, (stage, run) in enumerate(
                zip(STAGES, (parse_store, parse, parse_store, request), strict=True)
            ):
                bodies = rounds[index]
                started = time.process_time()
                for body in bodies:
                    run(body)
                seconds[stage] = time.process_time() - started
            seconds.update(fold(store))
            return seconds
        finally:
            if checkpointer is not None:
                checkpointer.stopping.set()
                checkpointer.join()
            server.server_close()
            store.close()


def fold(store) -> dict:
    """``compact()`` of the store's batches: its CPU seconds and the write lock's."""
    import contextlib

    held: list[float] = []
    transaction = store.db.transaction

    @contextlib.contextmanager
    def timed():
        with store.db._write_lock:  # (re-entrant) from waiting for it to committing
            started = time.perf_counter()
            with transaction() as conn:
                yield conn
            held.append(time.perf_counter() - started)

    store.db.transaction = timed
    started = time.process_time()
    store.compact()
    return {"fold_cpu": time.process_time() - started, "fold_lock_held": sum(held)}


def run_in(checkout: Path, bodies_path: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(checkout))
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--worker", str(bodies_path)],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"{checkout}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=200, help="bodies per stage")
    parser.add_argument("--ticks", type=int, default=5, help="ticks per body")
    parser.add_argument("--series", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another checkout, timed alongside")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker)))
        return 0

    import pickle

    rounds = build_bodies(args.nodes, args.ticks, args.series)
    lines = rounds[1][0].count(b"\n")
    samples_per_body = args.ticks * args.series
    checkouts = {"this": REPO}
    if args.baseline:
        checkouts["baseline"] = args.baseline.resolve()
    load_start = os.getloadavg()
    results: dict[str, list[dict]] = {name: [] for name in checkouts}
    with tempfile.TemporaryDirectory(prefix="write-path-bodies-") as workdir:
        bodies_path = Path(workdir) / "bodies.pickle"
        bodies_path.write_bytes(pickle.dumps(rounds))
        for round_no in range(args.rounds):
            order = list(checkouts.items())
            if round_no % 2:
                order.reverse()
            for name, checkout in order:
                results[name].append(run_in(checkout, bodies_path))
    load_end = os.getloadavg()
    print(
        f"{args.nodes} bodies of {len(rounds[1][0]):,} bytes ({lines} lines, "
        f"{samples_per_body} samples) per stage, best of {args.rounds}; "
        f"load {load_start[0]:.1f} -> {load_end[0]:.1f}"
    )
    summary: dict[str, dict] = {}
    for name, runs in results.items():
        summary[name] = {}
        for stage in STAGES:
            best = min(run[stage] for run in runs)
            per_body_us = best / args.nodes * 1e6
            summary[name][stage] = {
                "us_per_body": round(per_body_us, 1),
                "bodies_per_s": round(args.nodes / best, 1),
                "samples_per_s": round(args.nodes * samples_per_body / best),
                "seconds": [round(run[stage], 4) for run in runs],
            }
            print(
                f"  {name:9s} {stage:12s} {per_body_us:8.0f} us/body "
                f"{args.nodes / best:7.0f} bodies/s {args.nodes * samples_per_body / best:11,.0f} "
                f"samples/s (CPU s per round: "
                + ", ".join(f"{run[stage]:.3f}" for run in runs)
                + ")"
            )
    for name, runs in results.items():
        cpu = min(run["fold_cpu"] for run in runs)
        held = min(run["fold_lock_held"] for run in runs)
        summary[name]["fold"] = {
            "cpu_seconds": [round(run["fold_cpu"], 3) for run in runs],
            "write_lock_seconds": [round(run["fold_lock_held"], 3) for run in runs],
        }
        print(
            f"  {name:9s} fold of {3 * args.nodes} bodies: {cpu:.2f} CPU s, write lock held "
            f"{held:.2f} s (best; per round: "
            + ", ".join(f"{run['fold_lock_held']:.2f}" for run in runs)
            + ")"
        )
    for name, runs in results.items():  # the checkpoints' CPU lands in whichever stage
        total = min(sum(run[stage] for stage in STAGES) + run["fold_cpu"] for run in runs)
        summary[name]["all_stages_cpu_seconds"] = round(total, 3)
        print(f"  {name:9s} all stages and the fold: {total:.2f} CPU s (best round)")
    if "baseline" in summary:
        before, after = summary["baseline"], summary["this"]
        speedup = before["all_stages_cpu_seconds"] / after["all_stages_cpu_seconds"]
        print(f"  all stages   this / baseline: {speedup:.2f}x the bodies per CPU-second")
        for stage in STAGES:
            before, after = summary["baseline"][stage], summary["this"][stage]
            speedup = before["us_per_body"] / after["us_per_body"]
            print(f"  {stage:12s} this / baseline: {speedup:.2f}x the bodies per CPU-second")
    if args.json:
        report = {
            "nodes": args.nodes,
            "ticks": args.ticks,
            "series": args.series,
            "body_bytes": len(rounds[1][0]),
            "load_start": load_start,
            "load_end": load_end,
            "checkouts": {name: str(path) for name, path in checkouts.items()},
            "results": summary,
        }
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
