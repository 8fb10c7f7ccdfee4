"""What timing DDP's all-reduce costs: 2-rank gloo DDP on CPU, variants side by side.

Every rank holds one ResNet-50 per variant (same weights, one DistributedDataParallel
each, one gloo group) and trains them in blocks of steps, the variants' order rotated
round by round, so load changes hit every variant alike:

- ``builtin``: DDP's own C++ all-reduce (no communication hook);
- ``python_hook``: the stock Python hook ``default_hooks.allreduce_hook``;
- ``timed_hook``: the communication hook epochscope timed DDP's all-reduce with until
  this measurement (``timed_allreduce_hook`` below, as it was in ``workloads.record.anatomy``:
  every bucket's launch and completion noted, for the overlap), read every step;
- ``backward_marks``: no hook (DDP's C++ all-reduce) and the end of backward compute
  noted by ``workloads.record.anatomy.BackwardMarks`` (a final callback of the autograd engine
  queued before DDP's own), the all-reduce's end when ``backward`` returns.

Per step and rank: wall seconds (``zero_grad`` to ``optimizer.step``), the process's CPU
seconds (every thread: gloo's too) and the training thread's. Per round and variant the
median step; the ratios to ``builtin`` are per round, summarised by their median and a
bootstrap 95% interval over rounds.

    flock /work/bench.lock nice -n -10 .venv/bin/python bench/anatomy/ddp_hook_cost.py \
        --out bench/anatomy/results/ddp-hook-cost.json
    .venv/bin/python bench/anatomy/ddp_hook_cost.py --pool RESULTS.json... --out POOLED.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

VARIANTS = ("builtin", "python_hook", "timed_hook", "backward_marks")


class TimedAllreduce:
    """The state of ``timed_allreduce_hook``: each bucket's (launch, completion)."""

    def __init__(self) -> None:
        self.intervals: list[tuple[float, float]] = []
        self.last_launch: float | None = None

    def take(self) -> tuple[float | None, list[tuple[float, float]]]:
        taken = self.last_launch, self.intervals
        self.last_launch, self.intervals = None, []
        return taken


def timed_allreduce_hook(state: TimedAllreduce, bucket):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    launched = state.last_launch = time.perf_counter()
    future = default_hooks.allreduce_hook(None, bucket)

    def finished(done):
        state.intervals.append((launched, time.perf_counter()))
        return done.value()

    return future.then(finished)


def rank_main(rank: int, args: argparse.Namespace, port: int, out: str) -> None:
    import copy

    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from workloads.record.anatomy import BackwardMarks
    from workloads.train.torch_resnet import ResNet50

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)  # two ranks on two cores, as the bundled workload does
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    base = ResNet50(10).to(memory_format=torch.channels_last)
    shape = (args.batch, 3, args.image_size, args.image_size)
    images = torch.randn(shape).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 10, (args.batch,))
    loss_fn = torch.nn.CrossEntropyLoss()

    reduction = TimedAllreduce()
    marks = BackwardMarks(time.perf_counter)
    models, optimizers = {}, {}
    for name in VARIANTS:
        model = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(base))
        if name == "python_hook":
            model.register_comm_hook(None, default_hooks.allreduce_hook)
        elif name == "timed_hook":
            model.register_comm_hook(reduction, timed_allreduce_hook)
        models[name] = model
        optimizers[name] = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(name: str) -> tuple[float, float, float]:
        model, optimizer = models[name], optimizers[name]
        wall, cpu, thread = time.perf_counter(), time.process_time(), time.thread_time()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(images), labels)
        if name == "backward_marks":
            marks.watch(loss)
        loss.backward()
        if name == "backward_marks":
            marks.backward_returned()
            assert marks.compute_done is not None
        elif name == "timed_hook":
            last_launch, intervals = reduction.take()
            assert last_launch is not None and intervals
        optimizer.step()
        return (
            time.perf_counter() - wall,
            time.process_time() - cpu,
            time.thread_time() - thread,
        )

    for name in VARIANTS:  # warm-up: DDP rebuilds its buckets after the first step
        for _ in range(2):
            step(name)
    rows = []
    for round_index in range(args.rounds):
        shift = round_index % len(VARIANTS)
        for name in VARIANTS[shift:] + VARIANTS[:shift]:
            step(name)  # untimed: the first step after a switch reloads this model
            for _ in range(args.steps):
                rows.append((round_index, name, *step(name)))
        if rank == 0:
            print(f"round {round_index + 1}/{args.rounds}", file=sys.stderr, flush=True)
    gathered = [None, None]
    dist.all_gather_object(gathered, rows)
    if rank == 0:
        Path(out).write_text(json.dumps(gathered))
    dist.destroy_process_group()


def bootstrap(values: list[float], draws: int = 2000) -> tuple[float, float]:
    rng = random.Random(1)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    return medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]


def summarise(ranks: list[list[list]], rounds: int) -> dict:
    # per step: wall = the slower rank's (they wait for each other), CPU = both ranks' sum
    per_round: dict[str, dict[str, list[list[float]]]] = {
        v: {
            "wall": [[] for _ in range(rounds)],
            "cpu": [[] for _ in range(rounds)],
            "thread": [[] for _ in range(rounds)],
        }
        for v in VARIANTS
    }
    for first, second in zip(*ranks, strict=True):
        round_index, name = first[0], first[1]
        cell = per_round[name]
        cell["wall"][round_index].append(max(first[2], second[2]))
        cell["cpu"][round_index].append(first[3] + second[3])
        cell["thread"][round_index].append(first[4] + second[4])
    result: dict = {}
    for name in VARIANTS:
        entry: dict = {}
        for measure in ("wall", "cpu", "thread"):
            medians = [statistics.median(r) for r in per_round[name][measure]]
            entry[f"{measure}_seconds_per_step_median"] = statistics.median(medians)
            entry[f"{measure}_round_medians"] = medians
            if name != "builtin":
                base = [statistics.median(r) for r in per_round["builtin"][measure]]
                ratios = [m / b for m, b in zip(medians, base, strict=True)]
                entry[f"{measure}_ratio_to_builtin_median"] = statistics.median(ratios)
                entry[f"{measure}_ratio_to_builtin_ci95"] = bootstrap(ratios)
                entry[f"{measure}_ratio_to_builtin_range"] = (min(ratios), max(ratios))
        result[name] = entry
    return result


def pooled(results: list[Path]) -> dict:
    """The per-round ratios of several runs of this bench pooled: median, 95% interval."""
    runs = [json.loads(path.read_text())["variants"] for path in results]
    pool: dict = {}
    for name in VARIANTS[1:]:
        for measure in ("wall", "cpu", "thread"):
            ratios = [
                mine / base
                for run in runs
                for mine, base in zip(run[name][f"{measure}_round_medians"],
                                      run["builtin"][f"{measure}_round_medians"], strict=True)
            ]  # fmt: skip
            pool[f"{name} {measure}"] = {
                "rounds": len(ratios),
                "ratio_to_builtin_median": statistics.median(ratios),
                "ratio_to_builtin_ci95": bootstrap(ratios),
            }
    return pool


def same_priority_across_sessions() -> str | None:
    """With the kernel's autogroup scheduling on, a nice value weighs only against the
    processes of its own session; the other sessions' jobs share the cores with this one
    as equals whatever their nice. The session's group gets this process's nice (root
    may lower it), so ``nice -n -10`` does what it says. Returns the group's line."""
    path = Path("/proc/self/autogroup")
    try:
        if os.nice(0) < 0:
            path.write_text(str(os.nice(0)))
        return path.read_text().strip()
    except OSError:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per block")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--port", type=int, default=29631)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--pool", type=Path, nargs="+", help="pool these results into --out")
    args = parser.parse_args()
    if args.pool:
        pool = pooled(args.pool)
        args.out.write_text(json.dumps({"pooled": [str(p) for p in args.pool], **pool}, indent=1))
        for key, entry in pool.items():
            low, high = entry["ratio_to_builtin_ci95"]
            print(f"{key:22s} x{entry['ratio_to_builtin_median']:.3f} [{low:.3f}, {high:.3f}]")
        return
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before the ranks load libgomp
    import torch
    import torch.multiprocessing as mp

    autogroup = same_priority_across_sessions()
    raw = args.out.with_suffix(".raw.json")
    load_start = os.getloadavg()
    started = time.time()
    mp.spawn(rank_main, args=(args, args.port, str(raw)), nprocs=2, join=True)
    ranks = json.loads(raw.read_text())
    raw.unlink()
    report = {
        "torch": torch.__version__,
        "model": f"ResNet-50, batch {args.batch}, {args.image_size} px, 2 ranks x 1 thread",
        "rounds": args.rounds,
        "timed_steps_per_block": args.steps,
        "nice": os.nice(0),
        "autogroup": autogroup,
        "load_average_at_start": load_start,
        "load_average_at_end": os.getloadavg(),
        "minutes": (time.time() - started) / 60,
        "variants": summarise(ranks, args.rounds),
    }
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for name, entry in report["variants"].items():
        line = f"{name:15s} {entry['wall_seconds_per_step_median'] * 1e3:7.1f} ms/step"
        line += f" {entry['cpu_seconds_per_step_median'] * 1e3:7.1f} CPU ms/step"
        if "wall_ratio_to_builtin_median" in entry:
            low, high = entry["wall_ratio_to_builtin_ci95"]
            clow, chigh = entry["cpu_ratio_to_builtin_ci95"]
            line += f"  wall x{entry['wall_ratio_to_builtin_median']:.3f} [{low:.3f}, {high:.3f}]"
            line += f"  cpu x{entry['cpu_ratio_to_builtin_median']:.3f} [{clow:.3f}, {chigh:.3f}]"
        print(line)


if __name__ == "__main__":
    main()
