"""docs/slurm.md's "Try it on one machine", run as written (issue 45, item 8, and the
Epilog's summary at the end of a profiled job's output file): ``bench/slurm/one_node.sh
start`` brings up Slurm 22.05 (munged, slurmctld, slurmd, no systemd), a collector, an agent
and the zero-touch TaskProlog and Epilog; a job opted in with EPOCHSCOPE_PROFILE=1 becomes
run ``slurm-<job>``, ``collector jobs`` lists it, and its output file ends with
``collector job <job> --summary``; a job not opted in gets neither. Skipped where the
script cannot start the cluster (not root, no Slurm, no cgroup v1), with its reason."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "bench" / "slurm" / "one_node.sh"
TRAIN = REPO_ROOT / "tests" / "scripts" / "torch_random_train.py"


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture()
def one_node(repo_env):
    pytest.importorskip("torch", reason="the job's training is a PyTorch loop")
    if os.geteuid() != 0 or shutil.which("slurmd", path="/usr/sbin:/usr/bin") is None:
        pytest.skip("needs root and Debian's slurm-wlm")
    base = Path(tempfile.mkdtemp(prefix="es-one-node-", dir="/tmp")) / "cluster"
    env = {**repo_env, "COLLECTOR_PORT": str(free_port()), "AGENT_METRICS_PORT": str(free_port())}
    started = subprocess.run([str(SCRIPT), "start", str(base)], capture_output=True, text=True,
                             env=env, timeout=180)  # fmt: skip
    if started.returncode == 2 and "one_node.sh: " in started.stderr and not base.exists():
        pytest.skip(started.stderr.strip())
    try:
        assert started.returncode == 0, started.stderr + started.stdout
        yield base, started.stdout, env
    finally:
        subprocess.run([str(SCRIPT), "stop", str(base)], env=env, timeout=120, check=False)
        shutil.rmtree(base.parent, ignore_errors=True)


def test_the_documented_commands_on_one_node(one_node):
    base, printed, env = one_node
    env = {**env, "SLURM_CONF": str(base / "etc" / "slurm.conf"),
           "PATH": f"{base / 'bin'}:{env['PATH']}:/usr/sbin"}  # fmt: skip
    assert f"export SLURM_CONF={base / 'etc' / 'slurm.conf'}" in printed

    def run(*argv: str) -> str:
        result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout

    command = f"{env.get('EPOCHSCOPE_PYTHON', REPO_ROOT / '.venv' / 'bin' / 'python')} {TRAIN}"
    output = f"--output={base / 'jobs' / '%j.out'}"
    profiled = run("sbatch", "--parsable", "--export=ALL,EPOCHSCOPE_PROFILE=1", output,
                   f"--wrap={command}").strip()  # fmt: skip
    plain = run("sbatch", "--parsable", output, f"--wrap={command}").strip()
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and run("squeue", "--noheader").strip():
        time.sleep(1)
    assert not run("squeue", "--noheader").strip(), "the jobs did not end"

    assert "slurm-" + profiled in run("collector", "jobs", "--format", "json")
    summary = json.loads(run("collector", "job", profiled, "--summary"))
    assert [r["run_id"] for r in summary["runs"]] == [f"slurm-{profiled}"]
    # the Epilog runs after the job's end: give it its summary_timeout_seconds
    job_output = base / "jobs" / f"{profiled}.out"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "epochscope:" not in job_output.read_text():
        time.sleep(0.5)
    text = job_output.read_text()
    assert text.startswith("epoch 1: loss ")
    head, tail = text.split(f"\nepochscope: collector job {profiled} --summary\n")
    assert head.endswith("done\n")
    assert json.loads(tail)["runs"] == summary["runs"]
    assert "epochscope" not in (base / "jobs" / f"{plain}.out").read_text()
    assert json.loads(run("collector", "job", plain, "--summary")).get("runs", []) == []
