"""Ctrl-C on `workloads profile -- COMMAND` (issue 45, item 2): what it prints agrees with
the store and the docs (docs/usage.md: "stopped by SIGINT: marked interrupted", status
130). Before, it said "marked failed" where its ranks' run_end said interrupted. The real
command with its embedded collector and agent, on a loop told to epochscope with
``workloads.track`` (no framework), stopped by SIGINT in its second epoch."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from collector.store import SqliteStore
from contract.schema import Event, RunState, Workload
from tests.support.real_runs import ctrl_c_once_logged

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

LOOP = """
import time
from workloads import track

track.run(model="hand-rolled", batch_size=4)
for epoch in range(1, 1000):
    with track.epoch():
        for step in range(5):
            time.sleep(0.1)
            track.step(images=4, loss=1.0, input_wait=0.01)
            print(f"epoch {epoch} step {step}", flush=True)
"""


def test_ctrl_c_on_profile_says_interrupted_as_the_store_does(tmp_path, repo_env):
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    runs, run_id, log = tmp_path / "runs", "stopped-profile", tmp_path / "profile.log"
    argv = [sys.executable, "-m", "workloads", "profile", "--runs-dir", str(runs), "--run-id",
            run_id, "--step-every", "1", "--", sys.executable, str(script)]  # fmt: skip
    status, output = ctrl_c_once_logged(argv, repo_env, log, "epoch 2 step 1", 300, 120, 0.2)
    assert status == 128 + signal.SIGINT, output[-4000:]
    assert f"profile {run_id} stopped by SIGINT: marked interrupted" in output, output[-4000:]
    assert "marked failed" not in output and "Traceback" not in output, output[-4000:]
    # a directory named for undelivered events exists (before: one that did not)
    for named in re.findall(r"(?:wait in|stay in) (\S+?)[;:,]?\s", output):
        assert Path(named).exists(), (named, output[-4000:])

    with SqliteStore(runs / f"{run_id}.sqlite") as store:
        (end,) = store.events(run_id, kinds=(Event.RUN_END,))
    assert end.fields[Workload.STATE] == RunState.INTERRUPTED
    listed = subprocess.run(
        [sys.executable, "-m", "collector", "runs", "--db", str(runs / f"{run_id}.sqlite"),
         "--format", "json"],
        capture_output=True, text=True, env=repo_env, timeout=120, check=True,
    ).stdout  # fmt: skip
    (run,) = json.loads(listed)
    assert run["run_id"] == run_id and run["state"] == RunState.INTERRUPTED
