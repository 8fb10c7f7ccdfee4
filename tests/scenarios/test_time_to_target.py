"""Time to accuracy across a 1-rank and a 2-rank PyTorch run of one scaling group, both
real, both written to one collector: the scaling table's time-to-target speed-up is the
smallest run's seconds to target over the larger's, and the ``extra_epochs_to_target``
finding fires exactly when the larger run needed more epochs (each rank keeps its batch
of 16, so two ranks take half the steps per epoch: they often, not always, need an epoch
more to reach the same top-1)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.reliability import harness
from tests.scenarios.conftest import REPO
from tests.scenarios.test_causes import free_port

TOKEN = "time-to-target-TOKEN-5e1"
TARGET = "0.9"


def test_the_speed_up_in_time_to_target_and_the_extra_epochs(tmp_path, scenario_data):
    data = scenario_data("pytorch")
    _, token_file = harness.write_token_file(tmp_path, TOKEN)
    db = tmp_path / "c.sqlite"
    collector = harness.Collector(db=db, token_file=token_file, log=tmp_path / "c.log")
    collector.start()
    env = harness.repo_env()
    try:
        for ranks in (1, 2):
            result = subprocess.run(
                [sys.executable, "-m", "workloads", "run", "--framework", "pytorch",
                 "--data-dir", str(data), "--np", str(ranks), "--epochs", "3",
                 "--batch-size", "16", "--image-size", "32", "--target-top1", TARGET,
                 "--collector", collector.url, "--token-file", str(token_file),
                 "--samples-wait", "0", "--run-id", f"tta-{ranks}",
                 "--runs-dir", str(tmp_path / "runs")],
                capture_output=True, text=True, env=env, timeout=900,
            )  # fmt: skip
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    finally:
        collector.stop()

    def collector_json(*argv: str):
        out = subprocess.run([sys.executable, "-m", "collector", *argv, "--db", str(db),
                              "--format", "json"], capture_output=True, text=True, env=env,
                             timeout=300)  # fmt: skip
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    rows = {row["run_id"]: row for row in collector_json("scaling")}
    one, two = rows["tta-1"], rows["tta-2"]
    if one["seconds_to_target"] is None or two["seconds_to_target"] is None:
        pytest.skip(f"a run did not reach top-1 {TARGET} in 3 epochs: {one}, {two}")
    assert two["time_to_target_baseline"] == "tta-1"
    assert two["time_to_target_speedup"] == pytest.approx(
        one["seconds_to_target"] / two["seconds_to_target"], rel=1e-3
    )
    findings = collector_json("report", "tta-2", "--findings")["findings"]
    extra = [f for f in findings if f["rule"] == "extra_epochs_to_target"]
    print(f"epochs to target: 1 rank {one['epochs_to_target']}, 2 ranks "
          f"{two['epochs_to_target']}; speed-up {two['time_to_target_speedup']}")  # fmt: skip
    if two["epochs_to_target"] > one["epochs_to_target"]:
        (finding,) = extra
        evidence = finding["evidence"]
        assert evidence["time_to_target_speedup_ratio"] == pytest.approx(
            two["time_to_target_speedup"], rel=1e-2
        )
    else:
        assert extra == []


SCRIPT = REPO / "tests" / "scripts" / "cause_train.py"
TORCHRUN = Path(sys.executable).parent / "torchrun"
OWN_LR = "0.003"  # the user's learning rate, the same for 1 and 2 processes


def test_a_larger_run_that_kept_its_learning_rate_needed_more_epochs(tmp_path, sized_data):
    """A user's script (tests/scripts/cause_train.py, 32 of 128 pictures, batch 8 per
    process, SGD at lr 0.003 chosen by the user, stopping once top-1 reaches 0.9) under
    ``workloads profile --target-top1 0.9``, alone and under torchrun with 2 processes,
    both into one collector. The 2-process run keeps the learning rate (no linear scaling
    with the global batch): each process takes half the steps per epoch at the same step
    size, so it needs more epochs to reach the target (4 against 7 here). The learning is
    seeded and does not depend on the machine's load; the timings that the speed-ups use
    do, so the test holds the finding to the table's figures, not to values."""
    data = sized_data("pytorch", 128, 64, 32)
    _, token_file = harness.write_token_file(tmp_path, TOKEN)
    db = tmp_path / "c.sqlite"
    collector = harness.Collector(db=db, token_file=token_file, log=tmp_path / "c.log")
    collector.start()
    env = harness.repo_env()
    env.pop("OMP_NUM_THREADS", None)
    try:
        for ranks in (1, 2):
            launcher = [sys.executable]
            if ranks > 1:
                launcher = [str(TORCHRUN), "--nproc-per-node", str(ranks),
                            "--master-port", str(free_port())]  # fmt: skip
            result = subprocess.run(
                [sys.executable, "-m", "workloads", "profile", "--collector", collector.url,
                 "--token-file", str(token_file), "--samples-wait", "0",
                 "--run-id", f"own-lr-{ranks}", "--runs-dir", str(tmp_path / "runs"),
                 "--data-dir", str(data), "--target-top1", TARGET, "--",
                 *launcher, str(SCRIPT), str(data), "--images", "32", "--batch-size", "8",
                 "--lr", OWN_LR, "--validate", "--stop-top1", TARGET, "--epochs", "12"],
                capture_output=True, text=True, env=env, timeout=600,
            )  # fmt: skip
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    finally:
        collector.stop()

    def collector_json(*argv: str):
        out = subprocess.run([sys.executable, "-m", "collector", *argv, "--db", str(db),
                              "--format", "json"], capture_output=True, text=True, env=env,
                             timeout=300)  # fmt: skip
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    rows = {row["run_id"]: row for row in collector_json("scaling")}
    one, two = rows["own-lr-1"], rows["own-lr-2"]
    assert one["epochs_to_target"] is not None and two["epochs_to_target"] is not None
    assert two["epochs_to_target"] > one["epochs_to_target"], (one, two)
    assert two["time_to_target_baseline"] == "own-lr-1"
    findings = collector_json("report", "own-lr-2", "--findings")["findings"]
    (finding,) = [f for f in findings if f["rule"] == "extra_epochs_to_target"]
    evidence = finding["evidence"]
    assert (evidence["epochs"], evidence["baseline_epochs"]) == (
        two["epochs_to_target"], one["epochs_to_target"])  # fmt: skip
    assert evidence["time_to_target_speedup_ratio"] == pytest.approx(
        two["time_to_target_speedup"], rel=1e-2
    )
    # the extra epochs' part of the gap: the throughput speed-up times (1 - E_B / E_L)
    ratio = one["epochs_to_target"] / two["epochs_to_target"]
    assert evidence["explained_by_epochs_ratio"] == pytest.approx(
        evidence["throughput_speedup_ratio"] * (1 - ratio), abs=2e-3
    )
    assert f"{two['epochs_to_target']} epochs to reach top-1 90%" in finding["title"]
    assert "the extra epochs explain" in finding["explanation"] or (
        evidence["explained_share"] is None
    )
    # the smaller run is the baseline: it gets no such finding
    baseline = collector_json("report", "own-lr-1", "--findings")["findings"]
    assert "extra_epochs_to_target" not in {f["rule"] for f in baseline}
