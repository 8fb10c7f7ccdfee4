"""Real runs on this machine, for the scenarios (tests/scenarios/) and the findings' labelled
matrix (bench/findings/): a training under ``workloads run --profile`` or a user's script
under ``workloads profile``, its report as ``collector report --format json --findings``
gives it, small data sets in each framework's format, and the causes injected for real
(cgroup v1 read throttles, memory limits and CPU quotas, a CPU hog, the page cache dropped
or warmed, a loop device).

Everything here depends only on the commands' public output, so it holds across the
collector's internals being moved."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "tests" / "scripts"
BLKIO = Path("/sys/fs/cgroup/blkio")
MEMORY = Path("/sys/fs/cgroup/memory")
CGROUP_CPU = Path("/sys/fs/cgroup/cpu")
FORMATS = {"pytorch": "jpeg", "mxnet": "recordio", "tensorflow": "tfrecord"}


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


class RunFailed(RuntimeError):
    """A training or its report exited with an error; the message holds its output's end."""


def repo_env(**extra: str) -> dict[str, str]:
    """This environment with the checkout importable, OMP_NUM_THREADS left to the launcher
    (torchrun sets it per rank) unless ``extra`` sets it."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def collector_report(db: Path, run_id: str, env: dict[str, str]) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "collector", "report", run_id, "--db", str(db),
         "--format", "json", "--findings"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    if result.returncode != 0:
        raise RunFailed(result.stderr[-4000:])
    return json.loads(result.stdout)


def _finish(command: list[str], db: Path, run_id: str, env: dict[str, str], timeout: float):
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    if result.returncode != 0:
        raise RunFailed(result.stdout[-4000:] + result.stderr[-4000:])
    run = ScenarioRun(run_id, db, result.stdout, result.stderr)
    run.report = collector_report(db, run_id, env)
    return run


def training_command(runs_dir: Path, run_id: str, *workload_args: str) -> list[str]:
    return [sys.executable, "-m", "workloads", "run", *workload_args,
            "--profile", "--run-id", run_id, "--runs-dir", str(runs_dir)]  # fmt: skip


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
    command = [*prefix, *training_command(runs_dir, run_id, *workload_args)]
    try:
        return _finish(command, runs_dir / f"{run_id}.sqlite", run_id, env, timeout)
    except RunFailed as failed:
        raise AssertionError(str(failed)) from None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def profile_command(
    runs_dir: Path,
    run_id: str,
    data: Path | None,
    script: list[str],
    *,
    ranks: int = 1,
    step_every: int = 1,
    python: str = sys.executable,
) -> list[str]:
    """``workloads profile -- [torchrun --nproc-per-node RANKS] SCRIPT...``, the script run
    by ``python`` (a user's own venv's, where Lightning lives)."""
    if ranks > 1:
        torchrun = str(Path(python).parent / "torchrun")
        launcher = [torchrun, "--nproc-per-node", str(ranks), "--master-port", str(free_port())]
    else:
        launcher = [python]
    data_args = ["--data-dir", str(data)] if data is not None else []
    return [sys.executable, "-m", "workloads", "profile", "--runs-dir", str(runs_dir),
            "--run-id", run_id, *data_args, "--step-every", str(step_every), "--",
            *launcher, *script]  # fmt: skip


def profile_script(
    runs_dir: Path,
    run_id: str,
    data: Path | None,
    script: list[str],
    *,
    env: dict[str, str],
    ranks: int = 1,
    step_every: int = 1,
    python: str = sys.executable,
    timeout: float = 500,
) -> ScenarioRun:
    command = profile_command(runs_dir, run_id, data, script, ranks=ranks,
                              step_every=step_every, python=python)  # fmt: skip
    return _finish(command, runs_dir / f"{run_id}.sqlite", run_id, env, timeout)


def make_data(root: Path, framework: str, images: int, val_images: int, image_size: int) -> Path:
    """A data set of 4 classes in ``framework``'s native format under ``root``, made once
    (a later call with the same sizes finds it)."""
    from workloads.train.datasets import make_dataset

    path = root / f"{FORMATS[framework]}-{images}-{val_images}-{image_size}"
    done = path / ".made"
    if not done.exists():
        make_dataset(path, FORMATS[framework], images=images, classes=4, image_size=image_size,
                     val_images=val_images, shards=4, progress=False)  # fmt: skip
        done.write_text("")
    return path


APP15 = b"\xff\xef"  # an application segment a JPEG reader reads and skips
SEGMENT_BYTES = 65_000


def pad_jpegs(root: Path, extra_bytes: int) -> None:
    """Grow every picture by ``extra_bytes`` of APP15 segments after its start marker (as a
    camera's metadata would), so reading it takes long while decoding it stays cheap; the
    manifest's byte counts follow."""
    filler = bytes(range(256)) * (SEGMENT_BYTES // 256 + 1)
    for path in root.rglob("*.JPEG"):
        picture = path.read_bytes()
        segments = bytearray()
        left = extra_bytes
        while left > 0:
            size = min(SEGMENT_BYTES, left)
            segments += APP15 + (size + 2).to_bytes(2, "big") + filler[:size]
            left -= size + 4
        path.write_bytes(picture[:2] + bytes(segments) + picture[2:])
    manifest_path = root / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for split in ("train", "val"):
        files = manifest[split]["files"]
        manifest[split]["bytes"] = sum((root / name).stat().st_size for name in files)
    manifest_path.write_text(json.dumps(manifest))


def data_files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*") if path.is_file())


def warm_cache(root: Path) -> None:
    """Read every file of the data set: it is in the page cache after."""
    from tests.support.page_in import read_files

    read_files(data_files(root))


def drop_from_cache(root: Path) -> None:
    """Evict the data set's pages only (fadvise DONTNEED), never the node's page cache: other
    people's work shares this machine."""
    from workloads.train.pagecache import evict

    evict(data_files(root))


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


def enter_group(tasks: Path) -> tuple[str, ...]:
    """The command prefix that runs a command inside the cgroup whose ``tasks`` file this is
    (a small Python wrapper writes its own pid into it, then execs the command: children,
    the data loader's workers among them, inherit the group). Prefixes nest."""
    enter = (
        "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); "
        "os.execvp(sys.argv[2], sys.argv[2:])"
    )
    return (sys.executable, "-c", enter, str(tasks))


def remove_group(group: Path, root: Path) -> None:
    """Move what is left in ``group`` to the hierarchy's root, then remove it (retried: the
    ranks' exit may still be under way)."""
    for _ in range(50):
        for pid in (group / "tasks").read_text().split():
            with contextlib.suppress(OSError):  # it exited meanwhile
                (root / "tasks").write_text(pid)
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.1)
    group.rmdir()


def _new_group(root: Path, name: str) -> Path:
    group = root / f"{name}-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    return group


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
        yield group, enter_group(group / "tasks")
    finally:
        remove_group(group, MEMORY)
        group.parent.rmdir()
        slurm.rmdir()


@contextmanager
def blkio_read_limit(name: str, path: Path, bytes_per_second: int):
    """A cgroup v1 blkio group whose processes read the device holding ``path`` at most at
    ``bytes_per_second``; yields the command prefix that runs a command inside it
    (``enter_group``). Removed afterwards."""
    group = BLKIO / name
    group.mkdir()
    try:
        (group / "blkio.throttle.read_bps_device").write_text(
            f"{block_device_of(path)} {bytes_per_second}\n"
        )
        yield enter_group(group / "tasks")
    finally:
        remove_group(group, BLKIO)


@contextmanager
def memory_limit(limit_bytes: int | None) -> Iterator[tuple[Path, tuple[str, ...]]]:
    """A plain cgroup v1 memory group (as Docker or a pod sets; no Slurm) holding its
    processes and their page cache to ``limit_bytes`` (None: no limit, to measure what a run
    uses); yields (its directory, the command prefix that runs a command inside it)."""
    group = _new_group(MEMORY, "epochscope-limit")
    try:
        if limit_bytes is not None:
            (group / "memory.limit_in_bytes").write_text(str(limit_bytes))
        yield group, enter_group(group / "tasks")
    finally:
        remove_group(group, MEMORY)


def memory_stat(group: Path) -> dict[str, int]:
    """A memory cgroup's ``memory.stat`` counters."""
    pairs = (line.split() for line in (group / "memory.stat").read_text().splitlines())
    return {name: int(value) for name, value in pairs}


@contextmanager
def cpu_quota_group(cpus: float) -> Iterator[Path]:
    """A cgroup v1 CPU group allowed ``cpus`` of one CPU; yields its directory (a rank moves
    itself in: tests/scripts/cause_train.py's ``--cgroup-rank``; or ``enter_group`` of its
    ``tasks`` for a whole run). Removed afterwards."""
    group = _new_group(CGROUP_CPU, "epochscope-quota")
    try:
        period = int((group / "cpu.cfs_period_us").read_text())
        (group / "cpu.cfs_quota_us").write_text(str(int(period * cpus)))
        yield group
    finally:
        remove_group(group, CGROUP_CPU)


CPU_HOG_NAME = "epochscope-hog"
# one spinning thread, its process named so a finding can be checked to name it
CPU_HOG = (
    "import ctypes, sys\n"
    "ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)\n"
    "while True: pass\n"
)


@contextmanager
def cpu_hog(name: str = CPU_HOG_NAME) -> Iterator[int]:
    """One process spinning a core beside the run; yields its pid. Killed afterwards."""
    hog = subprocess.Popen([sys.executable, "-c", CPU_HOG, name])
    try:
        time.sleep(1.0)
        yield hog.pid
    finally:
        hog.kill()
        hog.wait()


@contextmanager
def loop_device(size_mib: int, image: Path) -> Iterator[Path]:
    """An ext4 file system of ``size_mib`` on a loop device backed by ``image``, mounted
    beside it; yields the mount point (the data set's own disk, which blkio can throttle
    alone). Unmounted and detached afterwards."""
    with open(image, "wb") as backing:
        backing.truncate(size_mib * 1024 * 1024)
    device = subprocess.run(["losetup", "--find", "--show", str(image)], check=True,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    mount = image.with_suffix(".mnt")
    mount.mkdir(exist_ok=True)
    try:
        subprocess.run(["mkfs.ext4", "-q", "-F", device], check=True, capture_output=True)
        subprocess.run(["mount", device, str(mount)], check=True)
        try:
            yield mount
        finally:
            subprocess.run(["umount", str(mount)], check=True)
    finally:
        subprocess.run(["losetup", "--detach", device], check=True)
        image.unlink(missing_ok=True)


def ctrl_c_once_logged(
    argv: list[str],
    env: dict[str, str],
    log: Path,
    marker: str,
    start_seconds: float,
    stop_seconds: float,
    poll_seconds: float = 0.5,
    before_signal: Callable[[], None] | None = None,
) -> tuple[int, str]:
    """Start ``argv`` with its output in ``log``, send it SIGINT (a user's Ctrl-C) once
    ``marker`` appears there, and return its exit status and whole output; it is killed if
    it has not stopped within ``stop_seconds``. ``before_signal`` may assert on the running
    processes first."""
    with log.open("wb") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + start_seconds
        while marker not in log.read_text(errors="replace"):
            assert process.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(poll_seconds)
        if before_signal is not None:
            before_signal()
        process.send_signal(signal.SIGINT)
        status = process.wait(stop_seconds)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return status, log.read_text(errors="replace")
