"""A one-node Slurm cluster of plain processes, for tests: munged, slurmctld, slurmd.

Debian's slurm-wlm 22.05 with munge, no systemd: every daemon runs in the foreground
(``-D`` / ``-F``) as a child of the test, with its configuration, state, spool, logs and
munge key and socket in one fresh directory. cgroup v1 (``CgroupPlugin=cgroup/v1``),
``proctrack/cgroup``, ``task/cgroup`` and ``jobacct_gather/cgroup``: a batch job gets
``/sys/fs/cgroup/{cpuacct,memory,cpuset,freezer}/slurm_<node>/uid_<uid>/job_<id>``.

Ports are picked free, the cluster name and first job id are random, so two of these on
one machine (two test sessions) neither share ports nor job cgroups. ``stop()`` cancels
the jobs, waits for their cgroups to go, ends the daemons (TERM, then KILL) and removes
the directory. Commands are argument lists; nothing goes through a shell.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")
SBIN = (Path("/usr/sbin"), Path("/usr/bin"))
CGROUP = Path("/sys/fs/cgroup")


class ClusterUnavailable(Exception):
    """The cluster could not start here; the message says why."""


def which(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for directory in SBIN:
        if (directory / name).is_file():
            return str(directory / name)
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def node_resources(slurmd: str) -> tuple[str, int, int]:
    """(NodeName, CPUs, RealMemory MB) as ``slurmd -C`` finds this machine."""
    out = subprocess.run([slurmd, "-C"], capture_output=True, text=True, timeout=30, check=True)
    words = dict(
        word.split("=", 1) for word in out.stdout.split() if "=" in word and word[0].isupper()
    )
    return words["NodeName"], int(words["CPUs"]), int(words["RealMemory"])


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path.name}: no log)"


@dataclass
class SlurmCluster:
    base: Path
    node: str
    env: dict[str, str]
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    job_uid: int = 65534  # nobody: jobs run as a user other than the test's

    @property
    def conf(self) -> Path:
        return self.base / "etc" / "slurm.conf"

    def command(self, name: str) -> str:
        path = which(name)
        if path is None:
            raise ClusterUnavailable(f"{name} is not installed (apt-get install slurm-wlm munge)")
        return path

    def run(self, *args: str, user: int | None = None, timeout: float = 30) -> str:
        result = subprocess.run(
            [self.command(args[0]), *args[1:]],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            user=user,
            group=user,
            extra_groups=[] if user is not None else None,
            cwd=self.base / "jobs",
        )
        if result.returncode != 0:
            raise RuntimeError(f"{args}: {result.returncode}: {result.stderr.strip()}")
        return result.stdout

    def sbatch(self, script: Path, *options: str) -> str:
        """Submit ``script`` as the job user; the job id."""
        return self.run(
            "sbatch",
            "--parsable",
            "--output",
            str(self.base / "jobs" / "%j.out"),
            *options,
            str(script),
            user=self.job_uid,
        ).strip()

    def job_states(self) -> dict[str, str]:
        out = self.run("squeue", "--noheader", "--format=%i %T")
        return dict(line.split() for line in out.splitlines() if line.strip())

    def job_cgroup(self, controller: str, job_id: str) -> Path:
        return CGROUP / controller / f"slurm_{self.node}" / f"uid_{self.job_uid}" / f"job_{job_id}"

    def start(self, timeout: float = 60) -> None:
        munge = self.base / "munge"
        key = munge / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        self._spawn(
            "munged",
            "-F",
            "-f",
            f"--socket={munge / 'socket'}",
            f"--key-file={key}",
            f"--log-file={self.base / 'log' / 'munged.log'}",
            f"--pid-file={munge / 'munged.pid'}",
            f"--seed-file={munge / 'seed'}",
        )
        self._wait_for(lambda: (munge / "socket").exists(), 10, "munged made no socket")
        self._spawn("slurmctld", "-D", "-f", str(self.conf))
        self._spawn("slurmd", "-D", "-f", str(self.conf))
        self._wait_for(self._node_idle, timeout, "the node did not come up idle")

    def _node_idle(self) -> bool:
        try:
            return self.run("sinfo", "--noheader", "--format=%T", timeout=10).strip() == "idle"
        except (RuntimeError, subprocess.TimeoutExpired):
            return False

    def _spawn(self, name: str, *args: str) -> None:
        log = (self.base / "log" / f"{name}.out").open("wb")
        self.processes[name] = subprocess.Popen(
            [self.command(name), *args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def _wait_for(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise ClusterUnavailable(
                        f"{name} exited with {process.returncode}:\n{self.logs(name)}"
                    )
            if ready():
                return
            time.sleep(0.2)
        raise ClusterUnavailable(f"{what} within {timeout:g} s:\n{self.logs()}")

    def logs(self, *names: str) -> str:
        chosen = names or tuple(self.processes)
        parts = []
        for name in chosen:
            parts.append(f"--- {name}\n{_tail(self.base / 'log' / f'{name}.out')}")
            parts.append(f"--- {name}.log\n{_tail(self.base / 'log' / f'{name}.log')}")
        return "\n".join(parts)

    def stop(self) -> None:
        try:
            if "slurmctld" in self.processes and self.processes["slurmctld"].poll() is None:
                jobs = self.job_states()
                if jobs:
                    self.run("scancel", *jobs)
                    deadline = time.monotonic() + 30
                    while time.monotonic() < deadline and (
                        self.job_states() or any(self._any_cgroup(job) for job in jobs)
                    ):
                        time.sleep(0.2)
        except (RuntimeError, subprocess.TimeoutExpired, ClusterUnavailable):
            pass
        finally:
            for name in ("slurmd", "slurmctld", "munged"):
                process = self.processes.get(name)
                if process is not None and process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                    try:
                        process.wait(timeout=15)
                    except subprocess.TimeoutExpired:
                        os.killpg(process.pid, signal.SIGKILL)
                        process.wait(timeout=5)
            shutil.rmtree(self.base, ignore_errors=True)

    def _any_cgroup(self, job_id: str) -> bool:
        return any(self.job_cgroup(c, job_id).exists() for c in ("cpuacct", "memory"))


def make_cluster(extra_conf: Sequence[str] = ()) -> SlurmCluster:
    """A configured, not yet started cluster; ClusterUnavailable when it cannot be.

    ``extra_conf``: more slurm.conf lines (``TaskProlog=...``, ``Epilog=...``), written
    before the node and partition lines."""
    missing = [name for name in BINARIES if which(name) is None]
    if missing:
        raise ClusterUnavailable(
            f"not installed: {', '.join(missing)} (apt-get install slurm-wlm munge)"
        )
    if os.geteuid() != 0:
        raise ClusterUnavailable("slurmd must run as root to make job cgroups")
    for controller in ("cpuacct", "memory", "cpuset", "freezer"):
        if not (CGROUP / controller / "cgroup.procs").exists():
            raise ClusterUnavailable(f"no cgroup v1 {controller} hierarchy at {CGROUP}")
    slurmd = which("slurmd")
    assert slurmd is not None
    node, cpus, memory_mb = node_resources(slurmd)
    # Under /tmp, not pytest's 0700 tmp dirs: the jobs run as another user and must
    # reach the munge socket and their output directory.
    base = Path(tempfile.mkdtemp(prefix="epochscope-slurm-", dir="/tmp"))
    base.chmod(0o755)
    for sub in ("etc", "state", "spool", "log", "munge", "jobs"):
        (base / sub).mkdir()
    (base / "munge").chmod(0o755)
    (base / "jobs").chmod(0o1777)
    ctld_port, slurmd_port = free_port(), free_port()
    (base / "etc" / "slurm.conf").write_text(
        "\n".join(
            [
                f"ClusterName=es{secrets.token_hex(4)}",
                f"SlurmctldHost={node}(127.0.0.1)",
                f"SlurmctldPort={ctld_port}",
                f"SlurmdPort={slurmd_port}",
                f"FirstJobId={100000 + secrets.randbelow(800000)}",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={base / 'munge' / 'socket'}",
                f"StateSaveLocation={base / 'state'}",
                f"SlurmdSpoolDir={base / 'spool'}",
                f"SlurmctldPidFile={base / 'slurmctld.pid'}",
                f"SlurmdPidFile={base / 'slurmd.pid'}",
                f"SlurmctldLogFile={base / 'log' / 'slurmctld.log'}",
                f"SlurmdLogFile={base / 'log' / 'slurmd.log'}",
                "MailProg=/bin/true",
                "ProctrackType=proctrack/cgroup",
                "TaskPlugin=task/cgroup",
                "JobAcctGatherType=jobacct_gather/cgroup",
                "JobCompType=jobcomp/none",
                "AccountingStorageType=accounting_storage/none",
                "SchedulerType=sched/builtin",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core_Memory",
                "ReturnToService=2",
                "MpiDefault=none",
                "SwitchType=switch/none",
                "KillWait=5",
                *extra_conf,
                f"NodeName={node} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
                f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )
    )
    # 22.05's names: CgroupPlugin picks v1; Constrain* make the cpuset and memory limit.
    (base / "etc" / "cgroup.conf").write_text(
        "CgroupPlugin=cgroup/v1\nCgroupAutomount=no\nConstrainCores=yes\nConstrainRAMSpace=yes\n"
    )
    env = {**os.environ, "SLURM_CONF": str(base / "etc" / "slurm.conf")}
    return SlurmCluster(base, node, env)


@contextlib.contextmanager
def running_cluster(extra_conf: Sequence[str] = ()) -> Iterator[SlurmCluster]:
    """A started cluster, stopped on the way out; the test is skipped, with the reason,
    when it cannot be made or started here."""
    import pytest

    try:
        made = make_cluster(extra_conf)
    except ClusterUnavailable as why:
        pytest.skip(f"no Slurm cluster here: {why}")
    try:
        made.start()
    except ClusterUnavailable as why:
        made.stop()
        pytest.skip(f"slurmd/slurmctld cannot start here: {why}")
    try:
        yield made
    finally:
        made.stop()
