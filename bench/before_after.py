"""One command timed in two checkouts of epochscope, side by side: the same command line run
with each checkout first on ``PYTHONPATH`` and as its working directory, the checkouts
interleaved round by round (A B, B A, ...), each run's CPU (user + system of the process and
its children) and wall time recorded, the ratio of the medians with a bootstrap interval.

    git worktree add /tmp/before <commit>
    .venv/bin/python bench/before_after.py --before /tmp/before --after . --rounds 8 -- \\
        python -m collector report RUN --db runs/bench-report.sqlite --format json

``python`` in the command is this interpreter. Output goes to /dev/null; a run that fails
stops the bench with its stderr. The load average is printed at the start and the end: a
ratio taken on a loaded machine does not stand for a quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.side_by_side import interleaved, load_average, ratio_summary, spread


def run_once(tree: Path, command: list[str]) -> tuple[float, float]:
    """CPU seconds (process and children) and wall seconds of ``command`` in ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    argv = [sys.executable if part == "python" else part for part in command]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(
        argv, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"{tree}: {' '.join(argv)} failed:\n{result.stderr.decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the older checkout")
    parser.add_argument("--after", type=Path, required=True, help="the newer checkout")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    cpu: dict[str, list[float]] = {name: [] for name in trees}
    wall: dict[str, list[float]] = {name: [] for name in trees}
    load_start = load_average()
    for _, name in interleaved(args.rounds, list(trees)):
        seconds, elapsed = run_once(trees[name], command)
        cpu[name].append(seconds)
        wall[name].append(elapsed)
    results = {
        "command": command,
        "trees": {name: str(tree) for name, tree in trees.items()},
        "rounds": args.rounds,
        "load_average": [load_start, load_average()],
        "cpu_seconds": {name: spread(values) for name, values in cpu.items()},
        "wall_seconds": {name: spread(values) for name, values in wall.items()},
        "cpu_after_over_before": ratio_summary(cpu, "after", "before"),
        "wall_after_over_before": ratio_summary(wall, "after", "before"),
    }
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
