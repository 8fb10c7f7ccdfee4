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

import pytest

from bench.reliability import harness

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
