"""Zero-touch profiling against a real Slurm: the site's TaskProlog alone profiles a job.

``tests/support/slurm_cluster.py`` starts munged, slurmctld and slurmd with
``TaskProlog=`` the script ``workloads.autoprofile.slurm.hook_script`` writes (what the
Ansible role installs) and ``Epilog=`` its epilog, whose ``collector job`` command does not
exist yet. A real ``collector serve`` listens on loopback with a token file. Jobs run as
``nobody``, whose own 0600 token file the site's file names with ``{user}``:

- a batch job with ``EPOCHSCOPE_PROFILE=1`` whose script is a plain PyTorch loop
  (``tests/scripts/torch_random_train.py`` with a ``#!`` line, no epochscope in its
  command) becomes run ``slurm-<job>``: run_start naming the job, 2 epochs of 4 steps;
- the same job without opting in sends nothing;
- a shell job that opts in with ``--comment=epochscope`` gets the exports (the comment is
  asked of slurmctld), its ``srun`` step gets its own run id, and neither environment holds
  the token;
- the epilog, missing its command, leaves the node idle (a failing Epilog drains it).

The jobs run the system's ``/usr/bin/python3`` (the test's own Python lives under
``/root``, which ``nobody`` cannot enter) with PyTorch from the test environment's
site-packages on their ``PYTHONPATH``, as a site's ``module load pytorch`` would put it:
there is no epochscope in the user's environment, so the site's sitecustomize finds
epochscope's packages beside itself (its fallback finder), and the TaskProlog keeps the
user's ``PYTHONPATH`` after its site directory. The TaskProlog and Epilog run the same
system Python, as ``python -I``.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from collector.store import SqliteStore
from contract.schema import Event, RunState, Workload
from tests.conftest import REPO_ROOT
from tests.support.slurm_cluster import ClusterUnavailable, SlurmCluster, make_cluster
from workloads.autoprofile.slurm import hook_script

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
USER_PYTHON = "/usr/bin/python3"  # the jobs' and the hooks' Python (nobody can run it)
JOB_TIMEOUT = 300


def torch_site_packages() -> str:
    """The site-packages holding the test environment's torch, once the system Python (the
    same minor version) imports it from there; skips the test otherwise."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        pytest.skip("torch is not installed: make frameworks")
    packages = str(Path(spec.origin).resolve().parent.parent)
    probe = subprocess.run([USER_PYTHON, "-c", "import torch"], capture_output=True,
                           env={"PATH": "/usr/bin:/bin", "PYTHONPATH": packages})  # fmt: skip
    if probe.returncode != 0:
        pytest.skip(f"{USER_PYTHON} cannot import torch from {packages}")
    return packages


@dataclass
class Site:
    cluster: SlurmCluster
    directory: Path
    db: Path
    token: str
    collector: subprocess.Popen[bytes]


def project_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.pop("EPOCHSCOPE_PROFILE", None)
    return env


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    from workloads.launch.local_stack import free_port, stop, wait_for_port

    if not Path(USER_PYTHON).is_file():
        pytest.skip(f"no {USER_PYTHON}")
    # /tmp, 0755: the jobs run as nobody and read the site's file and the scripts
    directory = Path(tempfile.mkdtemp(prefix="epochscope-site-", dir="/tmp"))
    directory.chmod(0o755)
    token = secrets.token_hex(16)
    collector_token = directory / "collector.token"
    collector_token.write_text(token + "\n")
    collector_token.chmod(0o600)
    tokens = directory / "tokens"
    tokens.mkdir(mode=0o755)
    nobody = tokens / "nobody"  # the job user's own copy: 0600, owned by it
    nobody.write_text(token + "\n")
    nobody.chmod(0o600)
    os.chown(nobody, 65534, 65534)
    spool = directory / "spool"
    spool.mkdir()
    spool.chmod(0o1777)
    port = free_port()
    config = directory / "slurm.toml"
    config.write_text(
        f'collector_url = "http://127.0.0.1:{port}"\n'
        f'token_file = "{tokens}/{{user}}"\n'
        f'spool_root = "{spool}/{{user}}"\n'
        "step_every = 1\n"
        "agent_port = 0\n"  # no agent on this node: no edge samples asked
        f'summary_dir = "{directory / "summaries"}"\n'
        f'collector_command = ["{sys.executable}", "-m", "collector"]\n'
    )
    config.chmod(0o644)
    hooks = {}
    for kind in ("task-prolog", "epilog"):
        hooks[kind] = directory / f"epochscope-{kind}"
        hooks[kind].write_text(hook_script(kind, USER_PYTHON, str(config), str(REPO_ROOT)))
        hooks[kind].chmod(0o755)
    db = directory / "collector.sqlite"
    log = directory / "collector.log"
    collector = subprocess.Popen(
        [sys.executable, "-m", "collector", "serve", "--db", str(db),
         "--listen", f"127.0.0.1:{port}", "--token-file", str(collector_token)],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, env=project_env(),
    )  # fmt: skip
    cluster = None
    try:
        wait_for_port(port, collector, "collector", log)
        try:
            cluster = make_cluster(
                [f"TaskProlog={hooks['task-prolog']}", f"Epilog={hooks['epilog']}"]
            )
            cluster.start()
        except ClusterUnavailable as why:
            pytest.skip(f"no Slurm cluster here: {why}")
        yield Site(cluster, directory, db, token, collector)
    finally:
        if cluster is not None:
            cluster.stop()
        stop(collector)
        shutil.rmtree(directory, ignore_errors=True)


def wait_done(cluster: SlurmCluster, jobs: list[str]) -> None:
    deadline = time.monotonic() + JOB_TIMEOUT
    while time.monotonic() < deadline:
        if not set(jobs) & set(cluster.job_states()):
            return
        time.sleep(0.5)
    raise AssertionError(f"jobs still queued: {cluster.job_states()}\n{cluster.logs()}")


def output(cluster: SlurmCluster, job: str) -> str:
    return (cluster.base / "jobs" / f"{job}.out").read_text(errors="replace")


def stored_events(db: Path, run_id: str, until_end: float = 30.0) -> list:
    deadline = time.monotonic() + until_end
    while True:
        store = SqliteStore(db)
        try:
            found = store.events(run_id)
        finally:
            store.close()
        if any(e.event == Event.RUN_END for e in found) or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def test_an_opted_in_batch_job_is_profiled_and_another_is_not(site: Site):
    cluster = site.cluster
    script = cluster.base / "jobs" / "train.py"
    text = (REPO_ROOT / "tests" / "scripts" / "torch_random_train.py").read_text()
    script.write_text(f"#!{USER_PYTHON}\n{text}")
    script.chmod(0o755)
    path = f"PYTHONPATH={torch_site_packages()}"  # the user's: torch, no epochscope
    opted = cluster.sbatch(script, "--ntasks=1", "--mem=2G",
                           f"--export=ALL,EPOCHSCOPE_PROFILE=1,{path}")  # fmt: skip
    plain = cluster.sbatch(script, "--ntasks=1", "--mem=2G", f"--export=ALL,{path}")
    wait_done(cluster, [opted, plain])
    for job in (opted, plain):
        assert output(cluster, job).rstrip().endswith("done"), output(cluster, job)
        assert site.token not in output(cluster, job)

    rank = stored_events(site.db, f"slurm-{opted}")
    kinds = [e.event for e in rank if e.event != Event.STEP]
    assert kinds == [Event.RUN_START] + [Event.EPOCH_START, Event.EPOCH_END] * 2 + [
        Event.RUN_END
    ], (kinds, output(cluster, opted))
    start = rank[0]
    assert start.fields[Workload.SLURM_JOB_ID] == opted
    assert Workload.SLURM_STEP_ID not in start.fields  # the batch script: no step
    assert start.framework == "pytorch" and start.fields[Workload.BATCH_SIZE] == 4
    ends = [e for e in rank if e.event == Event.EPOCH_END]
    assert [e.fields[Workload.EPOCH] for e in ends] == [1, 2]
    assert [e.fields[Workload.STEP] for e in ends] == [4, 8]
    assert [e.fields[Workload.IMAGES] for e in ends] == [16, 16]
    assert len([e for e in rank if e.event == Event.STEP]) == 8  # step_every = 1
    assert rank[-1].fields[Workload.STATE] == RunState.FINISHED

    assert stored_events(site.db, f"slurm-{plain}", until_end=0) == []
    assert cluster.run("sinfo", "--noheader", "--format=%T").strip() == "idle", cluster.logs()
    assert not (site.directory / "summaries").exists()  # no `collector job` yet: no summary


def decode_run(value: str) -> dict:
    return json.loads(base64.urlsafe_b64decode(value.encode()))


def test_a_comment_opts_in_every_task_and_no_environment_holds_the_token(site: Site):
    cluster = site.cluster
    script = cluster.base / "jobs" / "env.sh"
    # Constant text: the batch script's environment, then a step's.
    script.write_text("#!/bin/sh\nenv\necho ---\nexec srun env\n")
    script.chmod(0o755)
    job = cluster.sbatch(script, "--ntasks=1", "--mem=128M", "--comment=epochscope")
    wait_done(cluster, [job])
    text = output(cluster, job)
    assert site.token not in text
    batch, step = ({line.split("=", 1)[0]: line.split("=", 1)[1] for line in part.splitlines()
                    if "=" in line} for part in text.split("---\n"))  # fmt: skip
    for environ in (batch, step):
        assert environ["EPOCHSCOPE_WORKLOAD_TOKEN_FILE"] == str(site.directory / "tokens/nobody")
        assert "EPOCHSCOPE_WORKLOAD_TOKEN" not in environ
        assert environ["PYTHONPATH"].split(":")[0].endswith("workloads/autoprofile/site")
        assert environ["PYTHONPATH"].count("autoprofile/site") == 1  # not again in the step
    assert decode_run(batch["EPOCHSCOPE_PROFILE_RUN"])["run_id"] == f"slurm-{job}"
    assert decode_run(step["EPOCHSCOPE_PROFILE_RUN"])["run_id"] == f"slurm-{job}.0"
    assert decode_run(step["EPOCHSCOPE_PROFILE_RUN"])["step_every"] == 1
