"""Line protocol parse cost: ``collector.lineprotocol`` against the ``line-protocol-parser``
library (a C extension), the same bodies in one process, rounds interleaved.

The bodies are ``ceiling.py``'s: a node's 300 series, 5 ticks, 110 lines (~45 kB), one per
node. Ours goes to columns (what the store takes), malformed lines reported by number;
the library gives a dict per line (no columns, and a malformed line raises), so its time
is a lower bound for any parser built on it. CPU time per body, best round of each.

    .venv/bin/python -m pip install line-protocol-parser   # not a dependency of epochscope
    .venv/bin/python bench/ingest/parsers.py --nodes 300 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.ingest.ceiling import POOL_HOST, batch_body, node_payload, renamed
from bench.ingest.run import machine_line
from collector.lineprotocol import parse_body_bytes


def node_bodies(nodes: int) -> list[bytes]:
    pool = node_payload(POOL_HOST, 300, random.Random(1))
    return [batch_body(renamed(pool, f"node{n:05d}")[0], 0, 4, 1_700_000_000) for n in range(nodes)]


def ours(bodies: list[bytes]) -> None:
    for body in bodies:
        parse_body_bytes(body, "ns", 0)


def library(bodies: list[bytes]) -> None:
    from line_protocol_parser import parse_line

    for body in bodies:
        for line in body.decode().splitlines():
            parse_line(line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    bodies = node_bodies(args.nodes)
    print(f"machine: {machine_line()}; load at the start {os.getloadavg()[0]:.1f}")
    best: dict[str, float] = {}
    for round_no in range(args.rounds):
        for name, parse in (("collector.lineprotocol", ours), ("line-protocol-parser", library)):
            started = time.process_time()
            parse(bodies)
            per_body = (time.process_time() - started) / len(bodies)
            best[name] = min(best.get(name, per_body), per_body)
            print(f"round {round_no + 1} {name}: {1e3 * per_body:.2f} ms CPU per 110-line body")
    load_end = os.getloadavg()[0]
    print("best: " + ", ".join(f"{k} {1e3 * v:.2f} ms" for k, v in best.items()))
    print(f"load at the end {load_end:.1f}")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine_line(), "best_s": best}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
