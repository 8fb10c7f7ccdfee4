"""Real-run scenarios: each effect a finding explains is produced for real on this machine
(a data set dropped from or kept in the page cache, a CPU hog beside the run, a cgroup
limit on one rank, ...), a real training runs under ``workloads run --profile`` with its
local agent and collector, and the test asserts the right finding fires and no wrong one.

``make scenarios`` runs this folder; ``make test`` calls it after the rest of the suite, so
the scenarios get a machine no other test is loading (they are about contention).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from workloads.train.datasets import make_dataset


def pytest_collection_modifyitems(items) -> None:
    """Every scenario is slow and needs the frameworks (a conftest's ``pytestmark`` would
    mark nothing)."""
    for item in items:
        if "tests/scenarios/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.frameworks)


REPO = Path(__file__).resolve().parents[2]


@dataclass
class ScenarioRun:
    """One finished real run: its command's output and its report as ``collector report
    --format json --findings`` gives it."""

    run_id: str
    db: Path
    stdout: str
    stderr: str
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def findings(self) -> list[dict[str, Any]]:
        return self.report["findings"]

    @property
    def rules(self) -> set[str]:
        return {finding["rule"] for finding in self.findings}

    def finding(self, rule: str) -> dict[str, Any]:
        (found,) = [f for f in self.findings if f["rule"] == rule]
        return found

    @property
    def rows(self) -> list[dict[str, Any]]:
        return self.report["rows"]


def collector_report(db: Path, run_id: str, env: dict[str, str]) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "collector", "report", run_id, "--db", str(db),
         "--format", "json", "--findings"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def run_training(
    runs_dir: Path,
    run_id: str,
    *workload_args: str,
    env: dict[str, str],
    prefix: tuple[str, ...] = (),
    timeout: float = 900,
) -> ScenarioRun:
    """``workloads run --profile`` with ``workload_args`` (framework, data, sizes), its
    embedded store under ``runs_dir``; ``prefix`` wraps the command (e.g. ``cgexec``)."""
    command = [*prefix, sys.executable, "-m", "workloads", "run", *workload_args,
               "--profile", "--run-id", run_id, "--runs-dir", str(runs_dir)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    db = runs_dir / f"{run_id}.sqlite"
    run = ScenarioRun(run_id, db, result.stdout, result.stderr)
    run.report = collector_report(db, run_id, env)
    return run


FORMATS = {"pytorch": "jpeg", "mxnet": "recordio", "tensorflow": "tfrecord"}


@pytest.fixture(scope="session")
def scenario_data(tmp_path_factory):
    """``scenario_data(framework)``: a small data set in that framework's native format,
    made once per session: 256 training and 64 validation pictures of 4 classes, stored at
    256 px (trained at 32 px) so reading it is visible beside the libraries a rank loads."""
    root = tmp_path_factory.mktemp("scenario-data")
    made: dict[str, Path] = {}

    def data_for(framework: str) -> Path:
        if framework not in made:
            path = root / FORMATS[framework]
            make_dataset(path, FORMATS[framework], images=256, classes=4, image_size=256,
                         val_images=64, shards=4, progress=False)  # fmt: skip
            made[framework] = path
        return made[framework]

    return data_for


@pytest.fixture(scope="session")
def sized_data(tmp_path_factory):
    """``sized_data(framework, images, val_images, image_size)``: like ``scenario_data`` but
    of the size asked for (a set one epoch reads whole, pictures large enough for a read
    throttle to hold the loader back), made once per session."""
    root = tmp_path_factory.mktemp("sized-data")
    made: dict[tuple[str, int, int, int], Path] = {}

    def data_for(framework: str, images: int, val_images: int, image_size: int) -> Path:
        key = (framework, images, val_images, image_size)
        if key not in made:
            path = root / f"{FORMATS[framework]}-{images}-{val_images}-{image_size}"
            make_dataset(path, FORMATS[framework], images=images, classes=4,
                         image_size=image_size, val_images=val_images, shards=4,
                         progress=False)  # fmt: skip
            made[key] = path
        return made[key]

    return data_for


BLKIO = Path("/sys/fs/cgroup/blkio")
MEMORY = Path("/sys/fs/cgroup/memory")

# What a throttled PyTorch run loads: the launcher, its agent and collector, the trainer
# and the picture decoder its loader's workers call.
PYTORCH_RUN_MODULES = ("workloads.cli", "agent.cli", "collector.cli",
                       "workloads.train.worker", "workloads.train.torch_train",
                       "workloads.train.torch_resnet", "torch", "torch.distributed",
                       "torch.utils.data", "PIL.JpegImagePlugin")  # fmt: skip


def cache_code(modules: tuple[str, ...] = PYTORCH_RUN_MODULES) -> None:
    """Read whole, into the page cache, every package and mapped library that importing
    ``modules`` loads (torch's 750 MB among them). A run inside a read throttle on the
    root disk would otherwise read its code through the throttle too: pages of the
    libraries it touches first in epoch 1 (tens of MB when the machine's cache was cold)
    counted as the training's reads, beside the data set the test is about.

    Call it right before each throttled run: pages leave the cache between runs even with
    memory free. These machines' kernel runs DAMON with a ``pageout`` scheme
    (``/sys/kernel/mm/damon/admin/kdamonds``) that evicts file pages no process maps once
    they have gone unread for 60 s, a little at a time (of 100 MB read once, 3% had gone
    2 minutes later): when a run ends, library pages it touched only at start-up start to
    go. In CI, a cached run read 9.7 MB of them in epoch 1. Cheap once cached."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-m", "tests.support.page_in", *modules], check=True,
                   env=env, timeout=600)  # fmt: skip


def block_device_of(path: Path) -> str:
    """``major:minor`` of the block device holding ``path`` (what blkio's files take)."""
    device = path.stat().st_dev
    return f"{os.major(device)}:{os.minor(device)}"


def _enter(tasks: Path) -> tuple[str, ...]:
    """The command prefix that runs a command inside the cgroup whose ``tasks`` file this is
    (a small Python wrapper writes its own pid into it, then execs the command: children,
    the data loader's workers among them, inherit the group). Prefixes nest."""
    enter = (
        "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); "
        "os.execvp(sys.argv[2], sys.argv[2:])"
    )
    return (sys.executable, "-c", enter, str(tasks))


def _remove_group(group: Path, root: Path) -> None:
    for pid in (group / "tasks").read_text().split():  # none left once the run ended
        (root / "tasks").write_text(pid)
    group.rmdir()


@contextmanager
def slurm_job_memory_group(job_id: str):
    """A cgroup v1 memory group without a limit where Slurm's cgroup plugin puts a job's
    (``memory/slurm_<node>/uid_<uid>/job_<id>``), so the agent's jobs sampler reads it as
    that job's; yields (its directory, the command prefix that runs a command inside it).
    Removed afterwards, with the parents it made."""
    slurm = MEMORY / f"slurm_epochscope{os.getpid()}"
    group = slurm / f"uid_{os.getuid()}" / f"job_{job_id}"
    group.mkdir(parents=True)
    try:
        yield group, _enter(group / "tasks")
    finally:
        _remove_group(group, MEMORY)
        group.parent.rmdir()
        slurm.rmdir()


@contextmanager
def blkio_read_limit(name: str, path: Path, bytes_per_second: int):
    """A cgroup v1 blkio group whose processes read the device holding ``path`` at most at
    ``bytes_per_second``; yields the command prefix that runs a command inside it
    (``_enter``). Removed afterwards."""
    group = BLKIO / name
    group.mkdir()
    try:
        (group / "blkio.throttle.read_bps_device").write_text(
            f"{block_device_of(path)} {bytes_per_second}\n"
        )
        yield _enter(group / "tasks")
    finally:
        _remove_group(group, BLKIO)
