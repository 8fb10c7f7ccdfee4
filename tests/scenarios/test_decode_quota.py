"""A CPU quota sets a known decode ceiling (issue 29): a small PyTorch run on JPEG files,
started inside a cgroup v1 CPU cgroup allowed one CPU of the machine's two, with the
node's decode rate per core measured by ``agent ceilings`` and given to the run's agent.
Its ranks' ``run_start`` carries the quota, so the host's decode ceiling is the rate per
core times one core (not the two CPUs the ranks may run on), and every epoch's
``decode_ceiling_percent`` is its images/s over that. Measured at load 10-16 on 2 cores:
3.3-5.5 images/s, 2.6-4.0% of 126-138 pictures per CPU second x 1 core; 100-160 s.

The share's size is not asserted: on these CPU-only ranks the one core decodes and
computes ResNet-50 at once (and the run's agent and collector share the quota), so the
share says how much of the core decoding could have had, not that decoding was the
limit; the 256 px pictures also decode faster than the measured 500x375 one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contract.schema import Ceiling
from tests.integration.test_ceilings_cgroups import CGROUP_CPU, cpu_quota
from tests.scenarios.conftest import REPO, run_training

QUOTA_CPUS = 1.0
ENTER = "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); os.execvp(sys.argv[2], sys.argv[2:])"  # noqa: E501


@pytest.mark.skipif(not os.access(CGROUP_CPU, os.W_OK), reason="needs root and cgroup v1 cpu")
def test_a_quota_of_one_cpu_is_the_decode_ceiling_of_one_core(tmp_path, sized_data):
    kept = tmp_path / "ceilings.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "EPOCHSCOPE_CEILINGS_FILE": str(kept)}
    measured = subprocess.run(
        [sys.executable, "-m", "agent", "ceilings", "--data-dir", str(tmp_path),
         "--disk-mib", "4", "--disk-seconds", "0.2", "--cpu-seconds", "1.5"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert measured.returncode == 0, measured.stderr[-3000:]
    (decode,) = [
        c for c in json.loads(kept.read_text())["ceilings"]
        if c["field"] == str(Ceiling.JPEG_DECODE)
    ]  # fmt: skip
    per_core = decode["value"]
    with cpu_quota(QUOTA_CPUS) as cgroup:
        run = run_training(
            tmp_path / "runs", "quota", "--framework", "pytorch", "--np", "1",
            "--epochs", "2", "--image-size", "32", "--batch-size", "8",
            "--data-dir", str(sized_data("pytorch", images=48, val_images=4, image_size=256)),
            "--no-validate",
            env=env, prefix=(sys.executable, "-c", ENTER, str(Path(cgroup) / "tasks")),
        )  # fmt: skip
    rows = [r for r in run.rows if r["host"] != "*"]
    assert len(os.sched_getaffinity(0)) > QUOTA_CPUS  # the quota, not the CPU list, caps
    for row in rows:
        print(row["epoch"], row["images_per_second"], row["decode_ceiling_percent"], per_core)
        expected = 100 * row["images_per_second"] / (per_core * QUOTA_CPUS)
        assert row["decode_ceiling_percent"] == pytest.approx(expected, rel=0.01, abs=0.1)
