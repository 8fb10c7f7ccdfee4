"""`collector jobs` on a store of many jobs: every sample read at each call, against the
finished jobs kept from the call before (what the read API and the dashboard do).

In this process, on one store handle (``--db``, made by ``generate.py`` when missing):
``jobs_rows`` with nothing kept (as every call did before, and as a fresh ``collector
jobs`` process still does) and with the finished jobs kept from the call before,
interleaved (``--repeat`` rounds), CPU (``thread_time``) and wall time of each. Both must
give the same rows. Prints the medians and the load average; ``--out`` writes JSON.

    python bench/jobs/bench_jobs.py --db runs/bench-jobs.sqlite --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from collector.analysis.jobs import KeptNodes, job_reports
from collector.store import SqliteStore
from collector.views.jobs import job_row


def timed(call) -> tuple[float, float, object]:
    cpu, wall = time.thread_time(), time.perf_counter()
    result = call()
    return time.thread_time() - cpu, time.perf_counter() - wall, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=Path("runs/bench-jobs.sqlite"))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not args.db.exists():
        here = Path(__file__).parent
        subprocess.run(
            [sys.executable, str(here / "generate.py"), "--db", str(args.db)], check=True
        )
    load_start = os.getloadavg()
    store = SqliteStore(args.db)
    kept = KeptNodes()
    first = [job_row(r) for r in job_reports(store, kept)]  # fills what is kept
    got: dict[str, tuple[list[float], list[float]]] = {"every sample": ([], []), "kept": ([], [])}
    for round_number in range(args.repeat):
        order = ["every sample", "kept"] if round_number % 2 == 0 else ["kept", "every sample"]
        for name in order:
            chosen = kept if name == "kept" else None
            cpu, wall, reports = timed(lambda chosen=chosen: job_reports(store, chosen))
            if [job_row(r) for r in reports] != first:
                raise SystemExit(f"{name}: rows differ from the first call's")
            got[name][0].append(cpu)
            got[name][1].append(wall)
    store.close()
    rows = {
        name: {
            "cpu_s_median": round(statistics.median(cpus), 3),
            "wall_s_median": round(statistics.median(walls), 3),
        }
        for name, (cpus, walls) in got.items()
    }
    out = {
        "db": str(args.db),
        "jobs": len(first),
        "nodes_kept": len(kept.nodes),
        "repeat": args.repeat,
        "load_average_start": load_start,
        "load_average_end": os.getloadavg(),
        "variants": rows,
    }
    print(f"{len(first)} jobs, {len(kept.nodes)} finished job nodes kept; load average "
          f"{load_start[0]:.2f} -> {out['load_average_end'][0]:.2f}")  # fmt: skip
    for name, row in rows.items():
        print(f"{name:14} CPU {row['cpu_s_median']:.3f} s, wall {row['wall_s_median']:.3f} s")
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
