"""Workload throughput benchmark: ``workloads run --framework tensorflow --synthetic``
against a plain Horovod synthetic benchmark of the same model, batch and processes, and
the same workload with profiling (agent sampling at 1 Hz pushing to the embedded
collector) against without. Variants are interleaved round by round (the order reversed
every other round) so that drifting machine load hits them alike; each figure is the
median over rounds of tf_cnn_benchmarks' total images/sec (per-rank timed images over
timed seconds, warm-up excluded, summed over ranks).

    python bench/workload_throughput/run.py --np 2 --batch-size 16 --image-size 32 \
        --warmup 3 --steps 10 --rounds 2 --out bench/workload_throughput/results.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.side_by_side import (  # noqa: E402
    interleaved,
    load_average,
    ratio_summary,
    spread,
    take_priority,
)
from contract.schema import Event, Tag, Workload  # noqa: E402
from contract.throughput import TimedWork, images_per_second  # noqa: E402
from workloads.launch import frameworks  # noqa: E402

PLAIN = Path(__file__).with_name("plain_horovod.py")
AGENT_SHARES: list[float] = []  # per profiled run: agent CPU / node CPU
RESULT = re.compile(r"RESULT (\{.*\})")


def env() -> dict[str, str]:
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), environment.get("PYTHONPATH")])
    )
    environment["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return environment


def workload_argv(
    args, runs_dir: Path, run_id: str, steps_per_epoch: int, epochs: int, *extra: str
) -> list[str]:
    """``workloads run`` of the synthetic bundled workload at ``args``' sizes
    (``--framework --np --batch-size --image-size --warmup``, see ``add_size_arguments``)."""
    return [
        sys.executable, "-m", "workloads", "run", "--framework", args.framework, "--synthetic",
        "--np", str(args.np), "--batch-size", str(args.batch_size),
        "--image-size", str(args.image_size), "--warmup-steps", str(args.warmup),
        "--steps-per-epoch", str(steps_per_epoch), "--epochs", str(epochs),
        "--run-id", run_id, "--runs-dir", str(runs_dir), *extra,
    ]  # fmt: skip


def add_size_arguments(parser: argparse.ArgumentParser, framework: str = "tensorflow") -> None:
    parser.add_argument("--framework", default=framework)
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=3)


def plain(args) -> float:
    command = [
        frameworks.horovodrun(), "-np", str(args.np), "-H", f"localhost:{args.np}", "--gloo",
        sys.executable, str(PLAIN), "--batch-size", str(args.batch_size),
        "--image-size", str(args.image_size), "--num-warmup-batches", str(args.warmup),
        "--num-batches", str(args.steps),
    ]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, env=env(), check=True).stdout
    return json.loads(RESULT.search(out).group(1))["images_per_second"]


def agent_cpu_share(store) -> float:
    """Share of the node's CPU time the agent used during the run, from its own samples
    (``agent.cpu_seconds`` growth over the sampled span, over the span x CPUs)."""
    from contract.schema import AgentSelf

    (series,) = store.list_series(AgentSelf.NAME, AgentSelf.CPU_SECONDS)
    (data,) = store.read_series([series], 0, 2**62)
    seconds = (data.times_ns[-1] - data.times_ns[0]) / 1e9
    return float(data.values[-1] - data.values[0]) / seconds / (os.cpu_count() or 1)


def rank_rates(ends: list[tuple[object, dict]]) -> float:
    """The run's images/s by the one definition (``contract.throughput``): each rank's timed
    images over its timed seconds (the steps after the warm-up, on the rank's own
    ``perf_counter``), summed over ranks. The same ``Recorder`` stamps them with or without
    ``--profile``; only where they are delivered differs (event files or the collector)."""
    works = [
        (rank, TimedWork(fields[Workload.TIMED_IMAGES], fields[Workload.TIMED_SECONDS]))
        for rank, fields in ends
    ]
    return images_per_second(works)


def workload(args, runs_dir: Path, profile: bool, index: int, anatomy: bool = True) -> float:
    kind = "profiled" if profile else "plain" if anatomy else "no-anatomy"
    run_id = f"bench-{kind}-{index}"
    extra = (["--profile"] if profile else []) + ([] if anatomy else ["--no-anatomy"])
    command = workload_argv(args, runs_dir, run_id, args.warmup + args.steps, 1, *extra)
    subprocess.run(command, capture_output=True, text=True, env=env(), check=True, cwd=ROOT)
    if profile:
        from collector.store import SqliteStore

        store = SqliteStore(runs_dir / f"{run_id}.sqlite")
        ends = [(e.rank, e.fields) for e in store.events(run_id) if e.event == Event.EPOCH_END]
        AGENT_SHARES.append(agent_cpu_share(store))
        store.close()
    else:
        from workloads.launch.summary import read_events_dir

        points = read_events_dir(runs_dir / run_id / "events")
        ends = [
            (p.tags[Tag.RANK], p.fields)
            for p in points
            if p.fields.get(Workload.EVENT) == Event.EPOCH_END
        ]
    if len(ends) != args.np:
        raise RuntimeError(f"{run_id}: {len(ends)} epoch_end events for {args.np} ranks")
    return rank_rates(ends)


RATIOS = {  # name: (top, bottom)
    "workload_vs_plain": ("workload", "plain_horovod"),
    "profiled_vs_unprofiled": ("workload_profiled", "workload"),
    "anatomy_vs_no_anatomy": ("workload", "workload_no_anatomy"),
    # everything --profile adds (anatomy, events to the collector, agent, collector)
    # against the bare workload
    "profiled_vs_bare": ("workload_profiled", "workload_no_anatomy"),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    add_size_arguments(parser)
    parser.set_defaults(batch_size=16)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--variants",
        default="plain_horovod,workload,workload_profiled",
        help="of plain_horovod (TensorFlow only), workload, workload_profiled (--profile), "
        "workload_no_anatomy (the workload without its step anatomy)",
    )
    args = parser.parse_args()
    priority = take_priority()

    variants = args.variants.split(",")
    results: dict[str, list[float]] = {name: [] for name in variants}
    seconds: dict[str, list[float]] = {name: [] for name in variants}  # each run's wall time
    loads: dict[str, list[float]] = {name: [] for name in variants}  # before each run
    # CPU seconds of every process a run started (ranks, launcher, agent, collector)
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for round_index, name in interleaved(args.rounds, variants):
            loads[name].append(load_average())
            began = time.monotonic()
            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            if name == "plain_horovod":
                rate = plain(args)
            else:
                rate = workload(
                    args,
                    Path(tmp),
                    name == "workload_profiled",
                    round_index,
                    anatomy=name != "workload_no_anatomy",
                )
            seconds[name].append(round(time.monotonic() - began, 1))
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(
                round(after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime, 2)
            )
            results[name].append(rate)
            print(f"round {round_index + 1} {name}: {rate:.3f} images/s "
                  f"(load {loads[name][-1]})", flush=True)  # fmt: skip
    medians = {name: statistics.median(rates) for name, rates in results.items()}
    summary = {
        "config": vars(args) | {"out": str(args.out) if args.out else None},
        "cpus": os.cpu_count(),
        "priority": priority,
        "load_average": loads,
        "load_average_range": spread([v for values in loads.values() for v in values]),
        "wall_seconds": round(time.monotonic() - started, 1),
        "run_wall_seconds": seconds,
        "run_cpu_seconds": cpu,
        "images_per_second": results,
        "median_images_per_second": medians,
        "spread_images_per_second": {name: spread(rates) for name, rates in results.items()},
        **{
            name: ratio_summary(results, top, bottom)
            for name, (top, bottom) in RATIOS.items()
            if top in results and bottom in results
        },
        "agent_cpu_share_of_node": AGENT_SHARES,
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
