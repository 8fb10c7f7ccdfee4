"""``workloads profile -- COMMAND`` against the same COMMAND run plainly, side by side, on
users' scripts: a PyTorch ImageFolder-style loop (``torch_folder.py``, one process), the
same under ``torchrun --nproc-per-node 2`` (DDP over gloo) and Keras ``fit`` on a tf.data
TFRecord pipeline (``keras_fit.py``), on a synthetic data set made by ``workloads dataset
make``. Plain and profiled runs alternate round by round (A B, B A, ...:
``bench/side_by_side.py``).

What is compared: images/s by the project's one definition (``contract.throughput``: each
rank's timed images over its timed seconds, summed over ranks), computed in both variants
from the script's own stamps (``steplog.py``: the epoch's start and every step's end on
``perf_counter``, a step running from the previous step's end, the profile session's rule);
the first ``--warmup-steps`` steps of the run are left out as warm-up, as the bundled
workloads leave theirs. In a profiled run the collector's own figure for the last epoch is
read from its store beside the script's figure for that epoch (the same steps timed by the
instrumentation's clock): they should agree.

    flock /work/bench.lock nice -n -10 .venv/bin/python bench/profile_overhead/user_scripts.py \\
        --script torch --rounds 6 --out bench/profile_overhead/results-user-torch.json
"""

from __future__ import annotations

import argparse
import json
import os
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
from contract.schema import Event, Workload  # noqa: E402
from contract.throughput import TimedWork, images_per_second  # noqa: E402

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
VARIANTS = ["plain", "profiled"]


def env(steplog: Path) -> dict[str, str]:
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), environment.get("PYTHONPATH")])
    )
    environment["TF_CPP_MIN_LOG_LEVEL"] = "2"
    environment["STEPLOG_DIR"] = str(steplog)
    return environment


def make_data(kind: str, images: int, scratch: Path) -> Path:
    out = scratch / f"data-{kind}"
    if not out.exists():
        subprocess.run(
            [sys.executable, "-m", "workloads", "dataset", "make", "--format", kind,
             "--images", str(images), "--val-images", "32", "--classes", "10",
             "--image-size", "40", "--shards", "4", "--out", str(out)],
            check=True, cwd=ROOT, capture_output=True,
        )  # fmt: skip
    return out


def script_command(args, data: Path) -> list[str]:
    common = ["--epochs", str(args.epochs), "--batch-size", str(args.batch_size)]
    if args.script == "torch":
        return [sys.executable, str(HERE / "torch_folder.py"), str(data), *common]
    if args.script == "torchrun":
        return [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2",
                str(HERE / "torch_folder.py"), str(data), *common, "--distributed"]  # fmt: skip
    return [sys.executable, str(HERE / "keras_fit.py"), str(data), *common]


def step_works(epochs: list[dict], warmup: int) -> tuple[TimedWork, TimedWork]:
    """A rank's timed work over the run (the first ``warmup`` steps left out) and over its
    last epoch (every step), from its stamps."""
    durations: list[tuple[float, int]] = []
    last = TimedWork(0.0, 0.0)
    for epoch in epochs:
        mark = epoch["start"]
        last = TimedWork(0.0, 0.0)
        for end, images in epoch["steps"]:
            durations.append((end - mark, images))
            last = last + TimedWork(images, end - mark)
            mark = end
    timed = durations[warmup:]
    return TimedWork(sum(i for _, i in timed), sum(s for s, _ in timed)), last


def collector_last_epoch(db: Path, run_id: str, epoch: int) -> float | None:
    """The profiled run's images/s in ``epoch`` as the collector stores it (every rank's
    ``epoch_end``, summed over ranks by the one definition)."""
    from collector.store import SqliteStore

    store = SqliteStore(db)
    try:
        works = [
            (e.rank, TimedWork(e.fields[Workload.TIMED_IMAGES], e.fields[Workload.TIMED_SECONDS]))
            for e in store.events(run_id)
            if e.event == Event.EPOCH_END and e.fields.get(Workload.EPOCH) == epoch
        ]
    finally:
        store.close()
    return images_per_second(works)


def once(args, data: Path, scratch: Path, profiled: bool, index: int) -> dict[str, object]:
    steplog = scratch / f"steps-{index}-{int(profiled)}"
    steplog.mkdir()
    run_id = f"overhead-{args.script}-{index}"
    command = script_command(args, data)
    if profiled:
        command = [sys.executable, "-m", "workloads", "profile", "--runs-dir",
                   str(scratch / "runs"), "--run-id", run_id, "--", *command]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, env=env(steplog), cwd=ROOT)
    wall = time.monotonic() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise RuntimeError(result.stdout[-3000:] + result.stderr[-3000:])
    ranks = {path.stem: json.loads(path.read_text()) for path in sorted(steplog.glob("*.json"))}
    if len(ranks) != args.ranks:
        raise RuntimeError(f"{len(ranks)} step logs for {args.ranks} ranks")
    works = {rank: step_works(epochs, args.warmup_steps) for rank, epochs in ranks.items()}
    timed_images = sum(w.images for w, _ in works.values())
    figure: dict[str, object] = {
        "images_per_second": images_per_second((r, w) for r, (w, _) in works.items()),
        "last_epoch_images_per_second": images_per_second(
            (r, last) for r, (_, last) in works.items()
        ),
        "seconds_per_step": statistics.median(
            w.seconds / (w.images / args.batch_size) for w, _ in works.values()
        ),
        "timed_images": timed_images,
        "process_wall_seconds": wall,
        # every process the command started, the profile's agent and collector included
        "cpu_seconds": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
    }
    if profiled:
        figure["collector_last_epoch_images_per_second"] = collector_last_epoch(
            scratch / "runs" / f"{run_id}.sqlite", run_id, args.epochs
        )
    return figure


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--script", choices=("torch", "torchrun", "keras"), default="torch")
    parser.add_argument("--images", type=int, default=384, help="training images")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    parser.add_argument("--warmup-steps", type=int, default=4, help="per rank, left out")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    priority = take_priority()
    args.ranks = 2 if args.script == "torchrun" else 1

    runs: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    loads: dict[str, list[float]] = {name: [] for name in VARIANTS}
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        data = make_data("tfrecord" if args.script == "keras" else "jpeg", args.images, scratch)
        for index, (round_index, name) in enumerate(interleaved(args.rounds, VARIANTS)):
            loads[name].append(load_average())
            figure = once(args, data, scratch, name == "profiled", index)
            runs[name].append(figure)
            print(f"round {round_index + 1} {name}: {figure['images_per_second']:.3f} "
                  f"images/s, {figure['seconds_per_step']:.3f} s/step, "
                  f"{figure['cpu_seconds']:.1f} CPU s, load {loads[name][-1]}",
                  flush=True)  # fmt: skip
    rates = {name: [r["images_per_second"] for r in runs[name]] for name in VARIANTS}
    agreement = [
        r["collector_last_epoch_images_per_second"] / r["last_epoch_images_per_second"]
        for r in runs["profiled"]
    ]
    summary = {
        "config": vars(args) | {"out": str(args.out) if args.out else None},
        "cpus": os.cpu_count(),
        "priority": priority,
        "load_average": loads,
        "load_average_range": spread(loads["plain"] + loads["profiled"]),
        "wall_seconds": round(time.monotonic() - started, 1),
        "runs": runs,
        "images_per_second": rates,
        "median_images_per_second": {name: statistics.median(v) for name, v in rates.items()},
        "spread_images_per_second": {name: spread(v) for name, v in rates.items()},
        "median_seconds_per_step": {
            name: statistics.median(r["seconds_per_step"] for r in runs[name]) for name in VARIANTS
        },
        "profiled_vs_plain": ratio_summary(rates, "profiled", "plain"),
        # the collector's last-epoch figure over the script's own for the same run
        "collector_vs_script_last_epoch": spread(agreement),
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
