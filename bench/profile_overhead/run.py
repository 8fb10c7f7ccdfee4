"""Overhead of ``workloads profile``'s instrumentation: the same PyTorch script
(``train.py``, timing itself) run plain and under ``workloads profile`` (hooks in the
process, events to the embedded collector, the agent sampling at 1 Hz beside it), the
two interleaved round by round (the order reversed every other round) so that drifting
load hits both alike; the figure per variant is the median over rounds, with each round's
ratio (profiled / the plain run beside it), their spread, and the 1-minute load average
before every run. Beside images/s (wall time): the CPU seconds per image of each run
(``train.py``), the figure a loaded machine blurs least.

    python bench/profile_overhead/run.py --model resnet50 --rounds 3 \\
        --out bench/profile_overhead/results-resnet50.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRAIN = Path(__file__).with_name("train.py")
RESULT = re.compile(r"RESULT (\{.*\})")


def env() -> dict[str, str]:
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), environment.get("PYTHONPATH")])
    )
    return environment


def measured(output: str) -> dict[str, float]:
    match = RESULT.search(output)
    if match is None:
        raise RuntimeError(f"no RESULT line in:\n{output[-3000:]}")
    return json.loads(match.group(1))


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def once(profiled: bool, train_args: list[str], runs: Path, index: int) -> dict[str, float]:
    command = [sys.executable, str(TRAIN), *train_args]
    if profiled:
        command = [sys.executable, "-m", "workloads", "profile", "--runs-dir", str(runs),
                   "--run-id", f"overhead-{index}", "--", *command]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, env=env(), timeout=1800)
    if result.returncode != 0:
        raise RuntimeError(result.stdout[-2000:] + result.stderr[-3000:])
    return measured(result.stdout)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=("resnet50", "small"), default="resnet50")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads in train.py")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    train_args = ["--model", args.model, "--batch-size", str(args.batch_size),
                  "--image-size", str(args.image_size), "--images", str(args.images),
                  "--epochs", str(args.epochs), "--threads", str(args.threads)]  # fmt: skip
    figures: dict[str, list[float]] = {"plain": [], "profiled": []}
    cpu: dict[str, list[float]] = {"plain": [], "profiled": []}
    loads: dict[str, list[float]] = {"plain": [], "profiled": []}
    with tempfile.TemporaryDirectory() as scratch:
        for index in range(args.rounds):
            order = [False, True] if index % 2 == 0 else [True, False]
            for profiled in order:
                variant = "profiled" if profiled else "plain"
                loads[variant].append(load_average())
                figure = once(profiled, train_args, Path(scratch) / "runs", index)
                figures[variant].append(figure["images_per_second"])
                cpu[variant].append(figure["cpu_seconds_per_image"])
                print(f"round {index + 1}: {variant} {figure['images_per_second']:.1f} "
                      f"images/s, {1e3 * figure['cpu_seconds_per_image']:.3f} CPU ms/image, "
                      f"load {loads[variant][-1]:.1f}", flush=True)  # fmt: skip
    plain, profiled = (statistics.median(figures[k]) for k in ("plain", "profiled"))
    ratios = [p / q for p, q in zip(figures["profiled"], figures["plain"], strict=True)]
    # the plain run's CPU per image over the profiled one's: images/s on an idle machine
    cpu_ratios = [q / p for p, q in zip(cpu["profiled"], cpu["plain"], strict=True)]
    cpu_plain, cpu_profiled = (statistics.median(cpu[k]) for k in ("plain", "profiled"))
    result = {
        "config": vars(args) | {"out": str(args.out) if args.out else None},
        "rounds": figures,
        "cpu_seconds_per_image": cpu,
        "load_average_before": loads,
        "median_images_per_second": {"plain": plain, "profiled": profiled},
        "profiled_over_plain": profiled / plain,
        "round_ratios": spread(ratios),
        "cpu_profiled_over_plain": cpu_plain / cpu_profiled,
        "cpu_round_ratios": spread(cpu_ratios),
        "load_average": spread(loads["plain"] + loads["profiled"]),
        "seconds_per_step_added": args.batch_size / profiled - args.batch_size / plain,
        "cpu_seconds_per_step_added": args.batch_size * (cpu_profiled - cpu_plain),
    }
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
