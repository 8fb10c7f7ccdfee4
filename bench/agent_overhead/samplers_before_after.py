"""Each sampler's CPU per sample, before and after a change, side by side on this host.

For every sampler named (``--samplers``, default all of them that find their data here),
the "before" version is ``agent/samplers/<name>.py`` as it was at a git revision
(``--before``), loaded from git into this process as a module of its own; "after" is the
working tree's. Both sample the live /proc and /sys, interleaved tick by tick (the order
reversed every other tick), 1 s apart by default as the agent does (``--interval``; a
sampler's work can depend on what changed since its previous sample), each ``sample()``
plus the line-protocol encoding of its points timed with ``time.thread_time``. Before
timing, the two must give the same kinds of points (measurement, tag names, field names)
or the bench stops: nothing sampled may be dropped for speed. Prints and writes (``--out``)
the median CPU ms per sample of each sampler before and after, their totals, and the load
average at the start and the end.

    python bench/agent_overhead/samplers_before_after.py --before 7626b11 --ticks 60
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from agent.samplers import SAMPLER_NAMES, make_sampler  # noqa: E402
from agent.samplers.base import Roots  # noqa: E402
from contract.point import Point, encode_lines  # noqa: E402

BEFORE = "7626b11"  # the samplers before the processes sampler kept its /proc files open


def sampler_at(revision: str, name: str) -> object:
    """The sampler ``name`` of ``agent/samplers/<name>.py`` at ``revision``, built on the
    live roots (its imports of other modules resolve to the working tree)."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{revision}:agent/samplers/{name}.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as file:
        file.write(source)
    module_name = f"agent.samplers.{name}_at_{revision}"
    spec = importlib.util.spec_from_file_location(module_name, file.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    os.unlink(file.name)
    return module.SAMPLER(Roots())


def kinds(points: list[Point]) -> set[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    return {(p.measurement, tuple(sorted(p.tags)), tuple(sorted(p.fields))) for p in points}


def timed(sampler: object, now_ns: int) -> tuple[float, list[Point]]:
    started = time.thread_time()
    points = sampler.sample(now_ns)  # type: ignore[attr-defined]
    encode_lines(points)
    return time.thread_time() - started, points


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=BEFORE, help="git revision of the 'before' samplers")
    parser.add_argument("--samplers", default=",".join(SAMPLER_NAMES))
    parser.add_argument("--ticks", type=int, default=60)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between ticks")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "samplers-before-after.json"
    )
    args = parser.parse_args()
    load_start = os.getloadavg()
    pairs: dict[str, dict[str, object]] = {}
    for name in args.samplers.split(","):
        after = make_sampler(name, Roots())
        if not after.available():
            continue
        before = sampler_at(args.before, name)
        if not before.available():  # type: ignore[attr-defined]
            continue
        pairs[name] = {"before": before, "after": after}
    cpus = {name: {"before": [], "after": []} for name in pairs}
    seen: dict[str, dict[str, set]] = {name: {"before": set(), "after": set()} for name in pairs}
    for tick_number in range(args.ticks + 1):
        now_ns = time.time_ns()
        for name, pair in pairs.items():
            order = ["before", "after"] if tick_number % 2 == 0 else ["after", "before"]
            for variant in order:
                cpu, points = timed(pair[variant], now_ns)
                seen[name][variant] |= kinds(points)
                if tick_number > 0:  # the first sample builds state
                    cpus[name][variant].append(cpu)
        time.sleep(args.interval)
    for name in pairs:
        if seen[name]["before"] != seen[name]["after"]:
            raise SystemExit(
                f"{name}: before and after sample different kinds of points: not comparable\n"
                f"  only before: {sorted(seen[name]['before'] - seen[name]['after'])}\n"
                f"  only after: {sorted(seen[name]['after'] - seen[name]['before'])}"
            )
    load_end = os.getloadavg()
    rows = {
        name: {variant: round(statistics.median(values) * 1e3, 3) for variant, values in by.items()}
        for name, by in cpus.items()
    }
    totals = {v: round(sum(row[v] for row in rows.values()), 3) for v in ("before", "after")}
    out = {
        "before_revision": args.before,
        "ticks": args.ticks,
        "interval_seconds": args.interval,
        "cpus": os.cpu_count(),
        "processes": sum(1 for name in os.listdir("/proc") if name.isdigit()),
        "load_average_start": load_start,
        "load_average_end": load_end,
        "cpu_ms_per_sample_median": rows,
        "total_ms": totals,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"{args.ticks} ticks, interleaved; {out['processes']} processes; load average "
          f"{load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end")  # fmt: skip
    print(f"{'sampler':12} {'before ms':>10} {'after ms':>10}")
    for name, row in rows.items():
        print(f"{name:12} {row['before']:10.3f} {row['after']:10.3f}")
    print(f"{'sum':12} {totals['before']:10.3f} {totals['after']:10.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
