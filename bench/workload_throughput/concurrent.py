"""Profiled and bare runs of a bundled workload *at the same time*, each in a CPU cgroup of
its own with equal weight: the overhead of ``--profile`` with the machine's drift taken out.

Why not one after the other (``run.py``): on this shared VM the same bare run's images/s
moves by 10-20% from one minute to the next (neighbours on the host, not steal time:
CPU seconds per run move as much), so alternating runs of a minute each resolve a ratio
to +-5% at best, far from the 1% the target (>= 0.99) needs. Here both variants train
through the same minutes: whatever slows the machine slows both.

How: ``take_priority`` puts the bench in its high-weight cgroup; under it two child cgroups
``a`` and ``b`` of equal ``cpu.shares`` (cgroup v1 ``cpu`` controller). Each round starts
``workloads run --profile`` in one and the bare workload (``--no-anatomy``, no
``--profile``: events to files) in the other (which cgroup and which starts first alternate
round by round). The profiled variant's collector and agent are children of its
``workloads run``, so they run in its cgroup: the CPU they take comes out of the profiled
training's half of the machine. On this 2-core node each variant has the CPU of one core,
so the agent's and collector's share is twice what it is on the node (conservative:
on a node of C cores it is 1/C of what it is here).

The figure is the project's one throughput definition (``contract.throughput``): each rank's
timed images over its timed seconds, summed over ranks, over the epochs that both variants
ran entirely inside the window in which both were training (epoch 1, with its warm-up and
the other variant's start-up beside it, is left out). Per round: profiled / bare. The
result: the median of the rounds' ratios with a 95% bootstrap interval (rounds resampled),
each round's epochs, CPU seconds (every process the variant started) and load average.

    python bench/workload_throughput/concurrent.py --framework pytorch --np 2 \
        --batch-size 8 --image-size 32 --steps-per-epoch 10 --epochs 8 --rounds 6 \
        --out bench/workload_throughput/results-concurrent-pytorch.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.side_by_side import (  # noqa: E402
    BENCH_CGROUP,
    bootstrap_median,
    load_average,
    spread,
    take_priority,
)
from bench.workload_throughput.run import add_size_arguments, env, workload_argv  # noqa: E402
from bench.workload_throughput.side_cpu import descendants  # noqa: E402
from contract.schema import Event, Tag, Workload  # noqa: E402
from contract.throughput import TimedWork, images_per_second  # noqa: E402

CHILD_SHARES = 1024
VARIANTS = {  # name: the arguments of ``workloads run`` that make it
    "profiled": ["--profile"],  # anatomy, events to the embedded collector, the agent
    "anatomy": [],  # the step anatomy, events to files
    "bare": ["--no-anatomy"],  # events to files
}


@dataclass(frozen=True)
class EpochSpan:
    rank: str
    epoch: int
    start_ns: int
    end_ns: int
    work: TimedWork


def child_cgroups() -> tuple[Path, Path]:
    """Two cgroups of equal weight under the bench's own (``take_priority`` made it)."""
    cgroups = (BENCH_CGROUP / "a", BENCH_CGROUP / "b")
    for cgroup in cgroups:
        cgroup.mkdir(exist_ok=True)
        (cgroup / "cpu.shares").write_text(str(CHILD_SHARES))
    return cgroups


def command(args, runs_dir: Path, run_id: str, variant: str) -> list[str]:
    return workload_argv(
        args, runs_dir, run_id, args.steps_per_epoch, args.epochs, *VARIANTS[variant]
    )


def start_in(cgroup: Path, argv: list[str], log: Path) -> subprocess.Popen:
    def join() -> None:  # in the child, before exec: its whole tree stays in the cgroup
        (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    return subprocess.Popen(
        argv, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env(), cwd=ROOT,
        preexec_fn=join,
    )  # fmt: skip


LOCAL_RANK_VARIABLES = (b"LOCAL_RANK=", b"HOROVOD_LOCAL_RANK=", b"OMPI_COMM_WORLD_LOCAL_RANK=")


def local_rank_of(pid: int) -> int | None:
    """The local rank a launcher gave process ``pid`` (its environment), or None."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if b"worker" not in argv:  # the launcher carries the same variables
        return None
    for entry in environ:
        for variable in LOCAL_RANK_VARIABLES:
            if entry.startswith(variable):
                return int(entry[len(variable) :])
    return None


def pin_ranks(roots: list[int], until: float) -> dict[int, int]:
    """Pin every thread of each variant's local rank r to CPU r % CPUs, while the runs
    last (threads started later are pinned on the next pass): each CPU then carries one
    rank of each variant, so a vCPU slower than the other (a busy neighbour on its host
    core) slows both variants alike instead of whichever had its ranks there."""
    cpus = sorted(os.sched_getaffinity(0))
    pinned: dict[int, int] = {}
    while time.monotonic() < until and any(Path(f"/proc/{root}").exists() for root in roots):
        for root in roots:
            for pid in descendants(root):
                local_rank = local_rank_of(pid)
                if local_rank is None:
                    continue
                cpu = cpus[local_rank % len(cpus)]
                try:
                    for task in Path(f"/proc/{pid}/task").iterdir():
                        os.sched_setaffinity(int(task.name), {cpu})
                except OSError:
                    continue
                pinned[pid] = cpu
        time.sleep(1.0)
    return pinned


def wait_with_cpu(process: subprocess.Popen) -> float:
    """Wait for ``process``; the CPU seconds of it and every descendant it waited for."""
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def spans_from(starts: dict[tuple[str, int], int], ends: list[tuple[str, int, int, dict]]):
    return [
        EpochSpan(
            rank,
            epoch,
            starts[(rank, epoch)],
            end_ns,
            TimedWork(fields[Workload.TIMED_IMAGES], fields[Workload.TIMED_SECONDS]),
        )
        for rank, epoch, end_ns, fields in ends
        if (rank, epoch) in starts
    ]


def profiled_spans(runs_dir: Path, run_id: str) -> list[EpochSpan]:
    from collector.store import SqliteStore

    store = SqliteStore(runs_dir / f"{run_id}.sqlite")
    try:
        events = store.events(run_id, kinds=(Event.EPOCH_START, Event.EPOCH_END))
    finally:
        store.close()
    starts = {
        (str(e.rank), int(e.fields[Workload.EPOCH])): e.time_ns
        for e in events
        if e.event == Event.EPOCH_START
    }
    ends = [
        (str(e.rank), int(e.fields[Workload.EPOCH]), e.time_ns, e.fields)
        for e in events
        if e.event == Event.EPOCH_END
    ]
    return spans_from(starts, ends)


def bare_spans(runs_dir: Path, run_id: str) -> list[EpochSpan]:
    from workloads.launch.summary import read_events_dir

    points = read_events_dir(runs_dir / run_id / "events")
    starts, ends = {}, []
    for point in points:
        kind = point.fields.get(Workload.EVENT)
        key = (str(point.tags[Tag.RANK]), int(point.fields.get(Workload.EPOCH, 0)))
        if kind == Event.EPOCH_START:
            starts[key] = point.time_ns
        elif kind == Event.EPOCH_END:
            ends.append((*key, point.time_ns, point.fields))
    return spans_from(starts, ends)


def common_window(spans: dict[str, list[EpochSpan]]) -> tuple[int, int]:
    """From the latest start of a variant's epoch 2 to the earliest end of a variant's
    last epoch: the time both trained past their first epoch."""
    start = max(min(s.start_ns for s in runs if s.epoch >= 2) for runs in spans.values())
    end = min(max(s.end_ns for s in runs) for runs in spans.values())
    return start, end


def rate_inside(spans: list[EpochSpan], window: tuple[int, int]) -> tuple[float | None, int]:
    """images/s (``contract.throughput``) over the epochs that lie inside ``window`` whole,
    and how many rank-epochs that was."""
    inside = [s for s in spans if s.start_ns >= window[0] and s.end_ns <= window[1]]
    return images_per_second((s.rank, s.work) for s in inside), len(inside)


def labels_of(pair: list[str]) -> tuple[str, str]:
    """Names for the two runs of a round: the variants', or ``X-1``, ``X-2`` for an A/A
    check of the method (the same variant twice, whose ratio must come out at 1)."""
    if pair[0] != pair[1]:
        return pair[0], pair[1]
    return f"{pair[0]}-1", f"{pair[1]}-2"


def one_round(args, cgroups: tuple[Path, Path], round_index: int, tmp: Path) -> dict:
    runs_dir = tmp / f"round{round_index}"
    runs_dir.mkdir()
    labels = labels_of(args.pair)
    variant_of = dict(zip(labels, args.pair, strict=True))
    # which run gets cgroup a, and which starts first, alternate round by round
    order = labels if round_index % 2 == 0 else labels[::-1]
    load = load_average()
    processes = {}
    for label, cgroup in zip(order, cgroups, strict=True):
        argv = command(args, runs_dir, label, variant_of[label])
        processes[label] = start_in(cgroup, argv, runs_dir / f"{label}.log")
    pinned: dict[int, int] = {}
    if args.pin:
        roots = [p.pid for p in processes.values()]
        pinner = threading.Thread(
            target=lambda: pinned.update(pin_ranks(roots, time.monotonic() + 3600)),
            daemon=True,
        )
        pinner.start()
    cpu = {label: round(wait_with_cpu(p), 2) for label, p in processes.items()}
    if args.pin:
        pinner.join()
    for label, process in processes.items():
        if process.returncode != 0:
            log = (runs_dir / f"{label}.log").read_text(errors="replace")
            raise RuntimeError(f"{label} run failed ({process.returncode}):\n{log[-3000:]}")
    spans = {
        label: (profiled_spans if variant_of[label] == "profiled" else bare_spans)(runs_dir, label)
        for label in labels
    }
    window = common_window(spans)
    rates, counted = {}, {}
    for label in labels:
        rates[label], counted[label] = rate_inside(spans[label], window)
    if None in rates.values():
        raise RuntimeError(f"round {round_index + 1}: no epoch inside the common window")
    return {
        "cgroup_a": order[0],
        "load_average": load,
        "window_seconds": round((window[1] - window[0]) / 1e9, 1),
        "rank_epochs_counted": counted,
        "images_per_second": rates,
        "ratio": rates[labels[0]] / rates[labels[1]],
        "cpu_seconds": cpu,
        "ranks_pinned": len(pinned),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_size_arguments(parser, framework="pytorch")
    parser.add_argument("--steps-per-epoch", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument(
        "--pair",
        type=lambda text: text.split(","),
        default=["profiled", "bare"],
        help=f"TOP,BOTTOM of {', '.join(VARIANTS)}: the ratio is TOP / BOTTOM (the same "
        "variant twice: an A/A check of the method, whose ratio must come out at 1)",
    )
    parser.add_argument(
        "--no-pin", dest="pin", action="store_false",
        help="leave the ranks where the scheduler puts them (default: local rank r of each "
        "variant on CPU r)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if len(args.pair) != 2 or not set(args.pair) <= set(VARIANTS):
        parser.error(f"--pair takes two of {', '.join(VARIANTS)} (the same twice: an A/A check)")
    priority = take_priority()
    if "cpu_cgroup" not in priority:
        raise SystemExit("this bench needs a cgroup v1 cpu controller at /sys/fs/cgroup/cpu")
    cgroups = child_cgroups()
    started = time.monotonic()
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for round_index in range(args.rounds):
            result = one_round(args, cgroups, round_index, Path(tmp))
            rounds.append(result)
            rates = ", ".join(f"{k} {v:.3f}" for k, v in result["images_per_second"].items())
            print(f"round {round_index + 1}: {rates} images/s, ratio {result['ratio']:.4f} "
                  f"(load {result['load_average']})", flush=True)  # fmt: skip
    ratios = [r["ratio"] for r in rounds]
    low, high = bootstrap_median(ratios)
    summary = {
        "config": vars(args) | {"out": str(args.out) if args.out else None},
        "cpus": os.cpu_count(),
        "priority": priority | {"child_cgroups_cpu_shares": CHILD_SHARES},
        "wall_seconds": round(time.monotonic() - started, 1),
        "load_average_range": spread([r["load_average"] for r in rounds]),
        "rounds": rounds,
        "_vs_".join(labels_of(args.pair)): {
            "median_of_round_ratios": statistics.median(ratios),
            "bootstrap_95": [low, high],
            "range": [min(ratios), max(ratios)],
            "rounds_top_slower": sum(r < 1.0 for r in ratios),
        },
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
