"""The step anatomy on real trainings: a 1-process and a 2-process run of each framework
with ``--profile`` into one collector (an agent beside it pushing this host's samples),
then each run's per-epoch shares and the anatomy findings.

Tiny on purpose (64 pictures of 40 px trained at 32 px, batch 8, 2 epochs): the point is
that the parts are measured and add up, that two processes all-reduce (communication > 0)
and that the scaling-loss finding attributes the 2-process run's lower per-rank rate.

    nice .venv/bin/python bench/anatomy/real_runs.py --out bench/anatomy/results.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from collector.analysis.epochs import build_report  # noqa: E402
from collector.findings.engine import ANATOMY_RULES, run_findings  # noqa: E402
from collector.store import SqliteStore  # noqa: E402
from workloads.launch.local_stack import EmbeddedProfile  # noqa: E402
from workloads.train.datasets import make_dataset  # noqa: E402

FORMATS = {"tensorflow": "tfrecord", "mxnet": "recordio", "pytorch": "jpeg"}
# the anatomy's own rules, and the scaling loss it explains
ANATOMY_RULE_NAMES = {rule.__name__ for rule in ANATOMY_RULES} | {"scaling_loss"}
SHARE_COLUMNS = (
    "images_per_second",
    "input_wait_percent",
    "compute_percent",
    "communication_percent",
    "training_read_bytes",
    "training_cache_read_bytes",
)


def env() -> dict[str, str]:
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), environment.get("PYTHONPATH")])
    )
    environment["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return environment


def train(framework: str, data: Path, processes: int, profile: EmbeddedProfile, run_id: str,
          args) -> float:  # fmt: skip
    command = [
        "nice", sys.executable, "-m", "workloads", "run", "--framework", framework,
        "--data-dir", str(data), "--epochs", str(args.epochs), "--batch-size", "8",
        "--image-size", "32", "--warmup-steps", "1", "--step-every", "1",
        "--loader-workers", "1", "--np", str(processes), "--collector", profile.url,
        "--profile", "--agent-port", str(profile.agent_port),
        "--run-id", run_id, "--no-validate", "--runs-dir", str(args.runs_dir),
    ]  # fmt: skip
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, env=env(), cwd=ROOT)
    if result.returncode != 0:
        raise RuntimeError(f"{run_id} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frameworks", default="pytorch,mxnet,tensorflow")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--db", type=Path, help="keep the store here (default: a temp dir)")
    parser.add_argument("--suffix", default="", help="added to the run ids (a second round)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        args.runs_dir = work / "runs"
        # one collector for every run, and an agent beside it (--profile: node metrics)
        kept = args.db.resolve() if args.db else work / "anatomy.sqlite"
        profile = EmbeddedProfile(kept.stem, kept.parent)  # its store: kept
        db = profile.db
        profile.start()
        runs: dict[str, dict] = {}
        try:
            for framework in args.frameworks.split(","):
                data = work / FORMATS[framework]
                make_dataset(data, FORMATS[framework], images=64, classes=4, image_size=40,
                             val_images=8, shards=4, progress=False)  # fmt: skip
                for processes in (1, 2):
                    run_id = f"{framework}-{processes}p{args.suffix}"
                    seconds = train(framework, data, processes, profile, run_id, args)
                    runs[run_id] = {"framework": framework, "processes": processes,
                                    "wall_seconds": round(seconds, 1)}  # fmt: skip
                    print(f"{run_id}: {seconds:.0f} s", flush=True)
            time.sleep(2)  # the last events and samples reach the store
        finally:
            profile.stop()
        store = SqliteStore(db)
        try:
            for run_id, facts in runs.items():
                rows = [r for r in build_report(store, run_id).rows if r.host == "*"]
                facts["epochs"] = [
                    {"epoch": r.epoch} | {c: getattr(r, c) for c in SHARE_COLUMNS} for r in rows
                ]
                ends = [e for e in store.events(run_id) if e.event == "epoch_end"]
                facts["epoch_end"] = [
                    {"rank": e.rank} | {k: v for k, v in e.fields.items() if k != "event"}
                    for e in ends
                ]
                facts["findings"] = [
                    f.to_dict() for f in run_findings(store, run_id) if f.rule in ANATOMY_RULE_NAMES
                ]
        finally:
            store.close()
    summary = {"load_average_at_end": os.getloadavg(), "runs": runs}
    for run_id, facts in runs.items():  # what the README and docs quote
        for row in facts["epochs"]:
            print(f"{run_id} epoch {row['epoch']}: {row['images_per_second']} images/s, input "
                  f"{row['input_wait_percent']}%, compute {row['compute_percent']}%, "
                  f"comm {row['communication_percent']}%")  # fmt: skip
        for finding in facts["findings"]:
            print(f"{run_id} {finding['rule']}: {finding['title']}\n  {finding['explanation']}")
    text = json.dumps(summary, indent=1, default=str)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
