"""DDP's all-reduce timed around ``backward`` (``workloads.record.anatomy.BackwardMarks``) and a
script's own DDP communication hook under ``workloads profile`` (#16): real 2-process gloo
runs (``torch.multiprocessing.spawn``); the hook's script writes what its hook did; the
run's anatomy is read back from its SQLite store."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from contract.schema import Event, Workload
from tests.conftest import REPO_ROOT
from tests.system.test_workloads_profile import (
    SCRIPTS,
    TIMEOUT,
    USER_VENV,
    assert_parts_add_up,
    by_rank,
    events,
    needs_torch,
    profile,
    project_env,
    spawn_port,
)

IMAGES, BATCH, EPOCHS = 32, 4, 2
STEPS = IMAGES // 2 // BATCH  # per rank and epoch

pytestmark = pytest.mark.timeout(TIMEOUT)


@pytest.mark.frameworks
@needs_torch
@pytest.mark.parametrize("environment", ["project", "user"])
def test_backward_marks_end_of_compute_comes_before_ddps_all_reduce(environment):
    """What ``BackwardMarks`` relies on, on the project's torch 2.13 and the user-like
    torch 2.14: its final callback sees every gradient computed and still local; DDP's
    averaged gradients are in place when ``backward`` returns."""
    python = sys.executable if environment == "project" else str(USER_VENV / "bin" / "python")
    if not (USER_VENV / "bin" / "python").exists() and environment == "user":
        pytest.skip(f"{USER_VENV} is missing: `make user-torch-env` makes it")
    env = project_env()  # this checkout's workloads.record.anatomy, whatever the venv has installed
    result = subprocess.run(
        [python, str(SCRIPTS / "ddp_backward_marks_check.py"), str(spawn_port())],
        capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=REPO_ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 6  # 2 ranks x 3 steps
    for line in lines:
        del line["torch"], line["rank"], line["step"]
        assert all(line.values()), line


@pytest.mark.slow
@pytest.mark.frameworks
@needs_torch
@pytest.mark.parametrize("hook", ["counting-fp16", "powersgd", "builtin-fp16"])
def test_the_scripts_own_comm_hook_runs_and_the_all_reduce_is_timed(tmp_path, hook):
    runs, markers = tmp_path / "runs", tmp_path / "markers"
    runs.mkdir()
    markers.mkdir()
    command = [sys.executable, str(SCRIPTS / "ddp_comm_hook_train.py"), str(markers),
               "--hook", hook, "--port", str(spawn_port()), "--images", str(IMAGES),
               "--batch-size", str(BATCH), "--epochs", str(EPOCHS)]  # fmt: skip
    result = profile(sys.executable, runs, "hook", *command, env=project_env())
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "can only be called once" not in result.stderr
    for rank in (0, 1):  # the script's hook ran at every step of both ranks
        did = json.loads((markers / f"rank-{rank}.json").read_text())
        if hook == "counting-fp16":
            assert did["calls"] >= STEPS * EPOCHS  # one bucket or more per step
        elif hook == "powersgd":
            assert did["iterations"] == STEPS * EPOCHS
    ranks = by_rank(events(runs, "hook"))
    assert sorted(ranks) == [0, 1]
    for rank_events in ranks.values():
        ends = [e for e in rank_events if e.event == Event.EPOCH_END]
        steps = [e for e in rank_events if e.event == Event.STEP]
        assert len(ends) == EPOCHS and len(steps) == STEPS * EPOCHS
        for event in ends + steps:
            assert_parts_add_up(event)
            assert event.fields[Workload.COMPUTE_SECONDS] > 0
        assert all(e.fields[Workload.COMMUNICATION_SECONDS] > 0 for e in ends), ends
