"""What ``--profile`` takes from the training, in CPU seconds: every thread of a profiled
run read from ``/proc`` while it trains, the CPU each kind of thread used over the timed
epochs, and the share of the node that the profile's own threads took.

Why CPU seconds and not only images/s side by side: the side-by-side ratio (``run.py``)
cannot resolve 1% on this shared VM (an A/A check, the same bare run twice, spreads
more than that round by round); a process's CPU time does not drift with the
neighbours' load. On a node whose ranks use every core (the case here: two ranks of one
thread on two cores), whatever CPU the profile's threads use during the steps is taken
from the training, so their CPU seconds over the window, divided by the window and the
node's CPUs, bound the images/s the profile costs (the anatomy's few clock reads per step
on the training thread aside: ``bench/anatomy/step_cost.py``).

The threads, by what they are:
- ``collector``, ``agent``: the embedded ``collector serve`` and ``agent run`` (and any
  child they start);
- ``rank events``: the ranks' threads that deliver events (``es-events``: spooling;
  ``es-shipper``: sending to the collector; named by ``agent.thread_names``);
- ``training``: every other thread of the ranks (the training, gloo's, torch's);
- ``launcher``: ``workloads run`` and ``torchrun`` / ``horovodrun`` (a bare run has them too).

The window: from the latest start of an epoch 2 to the earliest end of the last epoch
(the collector's epoch events), so start-up, warm-up and the end-of-run report are out.

    python bench/workload_throughput/side_cpu.py --framework pytorch --np 2 \
        --steps-per-epoch 20 --epochs 4 \
        --out bench/workload_throughput/results-side-cpu-pytorch.json
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agent.shipper import SHIPPER_THREAD  # noqa: E402
from bench.side_by_side import load_average, take_priority  # noqa: E402
from bench.workload_throughput.run import add_size_arguments, env, workload_argv  # noqa: E402
from contract.schema import Event, Workload  # noqa: E402
from workloads.record.events import EVENTS_THREAD  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
SAMPLE_SECONDS = 0.25
KINDS = ("training", "rank events", "collector", "agent", "launcher")
PROFILE_KINDS = ("rank events", "collector", "agent")  # what --profile adds


LAUNCHERS = ("workloads run", "workloads profile", "torch.distributed.run", "torchrun",
             "horovodrun", "gloo_run")  # fmt: skip


def process_kind(argv: list[str]) -> str:
    """collector, agent, launcher, or training (a rank, its loader workers)."""
    joined = " ".join(argv)
    if "collector serve" in joined or "collector.lineprotocol" in joined:
        return "collector"
    if "agent run" in joined:
        return "agent"
    if "workloads worker" in joined and "torch.distributed.run" not in joined:
        return "training"
    if any(launcher in joined for launcher in LAUNCHERS):
        return "launcher"
    return "training"


def descendants(pid: int) -> list[int]:
    found, queue = [], [pid]
    while queue:
        parent = queue.pop()
        try:
            tasks = list(Path(f"/proc/{parent}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found.extend(children)
            queue.extend(children)
    return found


def thread_cpu(pid: int) -> list[tuple[int, str, float]]:
    """(tid, kernel name, CPU seconds) of each thread of ``pid``."""
    threads = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return threads
    for task in tasks:
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        threads.append((int(task.name), name, (int(fields[11]) + int(fields[12])) / TICK))
    return threads


def thread_kind(process: str, name: str) -> str:
    if process == "training" and name in (EVENTS_THREAD, SHIPPER_THREAD):
        return "rank events"
    return process


def sample(root: int, kinds: dict[int, str]) -> dict[tuple[int, int], tuple[str, float]]:
    """Every thread under ``root`` now: (pid, tid) -> (kind, CPU seconds so far)."""
    now: dict[tuple[int, int], tuple[str, float]] = {}
    for pid in [root, *descendants(root)]:
        if pid not in kinds:
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            kinds[pid] = process_kind(argv.split("\0"))
        for tid, name, seconds in thread_cpu(pid):
            now[(pid, tid)] = (thread_kind(kinds[pid], name), seconds)
    return now


def cpu_in_window(samples: list[tuple[int, dict]], window: tuple[int, int]) -> dict[str, float]:
    """CPU seconds of each kind between the window's edges: each thread's counter read at
    the samples nearest inside the window (a thread that started or ended inside it
    counts from its first or to its last sample)."""
    times = [t for t, _ in samples]
    first = bisect.bisect_left(times, window[0])
    last = bisect.bisect_right(times, window[1]) - 1
    if last <= first:
        raise RuntimeError("fewer than two samples inside the window")
    first_reading: dict[tuple[int, int], float] = {}
    last_reading: dict[tuple[int, int], tuple[str, float]] = {}
    for _, threads in samples[first : last + 1]:
        for key, (kind, seconds) in threads.items():
            first_reading.setdefault(key, seconds)
            last_reading[key] = (kind, seconds)
    used: dict[str, float] = defaultdict(float)
    for key, (kind, seconds) in last_reading.items():
        used[kind] += seconds - first_reading[key]
    return {kind: round(used.get(kind, 0.0), 3) for kind in KINDS}


def window_of(db: Path, run_id: str) -> tuple[int, int]:
    from collector.store import SqliteStore

    store = SqliteStore(db)
    try:
        events = store.events(run_id, kinds=(Event.EPOCH_START, Event.EPOCH_END))
    finally:
        store.close()
    starts = [e.time_ns for e in events if e.event == Event.EPOCH_START]
    last_epoch = max(int(e.fields[Workload.EPOCH]) for e in events)
    second = [
        e.time_ns
        for e in events
        if e.event == Event.EPOCH_START and int(e.fields[Workload.EPOCH]) == 2
    ]
    ends = [
        e.time_ns
        for e in events
        if e.event == Event.EPOCH_END and int(e.fields[Workload.EPOCH]) == last_epoch
    ]
    if not second or not ends or not starts:
        raise RuntimeError(f"{run_id}: no epoch 2 or no last epoch_end in the store")
    return max(second), min(ends)


def workload_command(args, tmp: Path, run_id: str) -> list[str]:
    every = ["--step-every", str(args.step_every)] if args.step_every else []
    return workload_argv(args, tmp, run_id, args.steps_per_epoch, args.epochs, "--profile", *every)


def user_script_command(args, tmp: Path, run_id: str) -> list[str]:
    """``workloads profile -- COMMAND`` of a user's script of bench/profile_overhead."""
    from bench.profile_overhead.user_scripts import make_data, script_command

    data = make_data("tfrecord" if args.user_script == "keras" else "jpeg", args.images, tmp)
    script = argparse.Namespace(
        script=args.user_script, epochs=args.epochs, batch_size=args.batch_size
    )
    return [
        sys.executable, "-m", "workloads", "profile", "--runs-dir", str(tmp),
        "--run-id", run_id,
        *(["--step-every", str(args.step_every)] if args.step_every else []),
        "--", *script_command(script, data),
    ]  # fmt: skip


def one_run(args, tmp: Path, index: int) -> dict:
    run_id = f"side-cpu-{index}"
    if args.user_script:
        command = user_script_command(args, tmp, run_id)
    else:
        command = workload_command(args, tmp, run_id)
    environment = env()
    load = load_average()
    log = tmp / f"{run_id}.log"
    process = subprocess.Popen(
        command, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=environment, cwd=ROOT
    )
    kinds: dict[int, str] = {}
    samples: list[tuple[int, dict]] = []
    while process.poll() is None:
        samples.append((time.time_ns(), sample(process.pid, kinds)))
        time.sleep(SAMPLE_SECONDS)
    if process.returncode != 0:
        raise RuntimeError(f"{run_id} failed:\n{log.read_text(errors='replace')[-3000:]}")
    window = window_of(tmp / f"{run_id}.sqlite", run_id)
    seconds = (window[1] - window[0]) / 1e9
    used = cpu_in_window(samples, window)
    cpus = len(os.sched_getaffinity(0))
    profile = sum(used[kind] for kind in PROFILE_KINDS)
    return {
        "load_average": load,
        "window_seconds": round(seconds, 2),
        "cpu_seconds": used,
        "cpu_per_second": {kind: round(value / seconds, 5) for kind, value in used.items()},
        "profile_share_of_node": profile / seconds / cpus,
        "profile_share_of_training_cpu": profile / used["training"] if used["training"] else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_size_arguments(parser, framework="pytorch")
    parser.add_argument("--steps-per-epoch", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument(
        "--step-every", type=int, default=0,
        help="a step event every N steps (default: the workload's, 20 per epoch)",
    )  # fmt: skip
    parser.add_argument(
        "--user-script", choices=("torch", "torchrun", "keras"),
        help="profile a user's script of bench/profile_overhead (workloads profile -- ...) "
        "instead of the bundled workload",
    )  # fmt: skip
    parser.add_argument("--images", type=int, default=384, help="--user-script's data set")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    priority = take_priority()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.runs):
            result = one_run(args, Path(tmp), index)
            runs.append(result)
            share = result["profile_share_of_node"]
            per_second, load = result["cpu_per_second"], result["load_average"]
            print(f"run {index + 1}: the profile's threads took {share:.4%} of the node "
                  f"({per_second}; load {load})", flush=True)  # fmt: skip
    shares = sorted(r["profile_share_of_node"] for r in runs)
    summary = {
        "config": vars(args) | {"out": str(args.out) if args.out else None},
        "cpus": len(os.sched_getaffinity(0)),
        "priority": priority,
        "runs": runs,
        "profile_share_of_node": {"min": shares[0], "max": shares[-1]},
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
