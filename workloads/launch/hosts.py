"""The hosts of a run: ``--hosts h1:4,h2:4`` parsing, and preparing each host over SSH.

Before a multi-host launch every host is prepared with paramiko: its RAM and CPU count
are read, its page cache is optionally emptied of the data set (``workloads cache drop``
run there), and the launcher checks that the host's agent answers on its /metrics port.
Remote commands are argument lists joined with ``shlex.join``: nothing a user typed is
ever interpreted by a remote shell.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import socket
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
SSH_TIMEOUT_SECONDS = 15.0
AGENT_TIMEOUT_SECONDS = 2.0


class HostError(ValueError):
    """A --hosts value or a host that cannot be used."""


@dataclass(frozen=True)
class HostSlots:
    name: str
    slots: int

    @property
    def is_local(self) -> bool:
        return is_local_name(self.name)


def is_local_name(name: str) -> bool:
    return name in LOCAL_NAMES or name in {socket.gethostname(), socket.getfqdn()}


def parse_hosts(text: str) -> list[HostSlots]:
    """``"h1:4,h2:4"`` -> [HostSlots("h1", 4), HostSlots("h2", 4)]; a bare name has 1 slot."""
    hosts = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, slots_text = part.rpartition(":") if ":" in part else (part, "", "1")
        if not name or not slots_text.isdigit() or int(slots_text) < 1:
            raise HostError(f"--hosts entry {part!r} is not host:slots (e.g. node01:4)")
        hosts.append(HostSlots(name, int(slots_text)))
    if not hosts:
        raise HostError("--hosts names no host")
    names = [host.name for host in hosts]
    if len(set(names)) != len(names):
        raise HostError(f"--hosts names a host twice: {text}")
    return hosts


def check_slots(hosts: list[HostSlots], processes: int) -> None:
    slots = sum(host.slots for host in hosts)
    if processes > slots:
        listed = ",".join(f"{host.name}:{host.slots}" for host in hosts)
        raise HostError(f"--np {processes} is more than the {slots} slots of --hosts {listed}")


def placement(hosts: list[HostSlots], processes: int) -> list[tuple[HostSlots, int]]:
    """How many processes go to each host, filling hosts in order (horovodrun's way)."""
    left, plan = processes, []
    for host in hosts:
        take = min(host.slots, left)
        if take:
            plan.append((host, take))
        left -= take
    return plan


@dataclass
class HostReport:
    name: str
    memory_bytes: int = 0
    cpus: int = 0
    agent_answers: bool = False
    agent_embedded: bool = False  # --profile starts one for the run
    cache: dict = field(default_factory=dict)  # workloads cache --json output
    warnings: list[str] = field(default_factory=list)  # printed before training

    def describe(self) -> str:
        if self.agent_embedded:
            agent = "agent started for the run (--profile)"
        else:
            agent = f"agent {'answers' if self.agent_answers else 'does NOT answer'}"
        text = f"{self.name}: {self.memory_bytes / 2**30:.1f} GiB RAM, {self.cpus} CPUs, {agent}"
        if self.cache:
            total = self.cache.get("total_bytes", 0) or 1
            before = self.cache.get("before_resident_bytes", 0) / total
            text += f"; data set cached {before:.0%}"
            if "after_resident_bytes" in self.cache:
                after = self.cache["after_resident_bytes"] / total
                text += f" -> {after:.0%}: {self.cache.get('method')}"
        return text


def agent_answers(host: str, port: int) -> bool:
    address = "127.0.0.1" if is_local_name(host) else host
    url = f"http://{address}:{port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=AGENT_TIMEOUT_SECONDS) as response:
            return response.status == 200
    except OSError:
        return False


class RemoteHost:
    """One SSH connection (paramiko) to a host of the run."""

    def __init__(
        self, name: str, user: str | None = None, port: int = 22, key: Path | None = None
    ) -> None:
        import paramiko

        self.name = name
        self.client = paramiko.SSHClient()
        self.client.load_system_host_keys()
        # Like horovodrun's own ssh (StrictHostKeyChecking=no): warn, do not refuse.
        self.client.set_missing_host_key_policy(paramiko.WarningPolicy())
        try:
            self.client.connect(
                name,
                port=port,
                username=user,
                key_filename=str(key) if key else None,
                timeout=SSH_TIMEOUT_SECONDS,
            )
        except (OSError, paramiko.SSHException) as error:
            raise HostError(f"cannot SSH to {name}:{port}: {error}") from None

    def run(self, argv: list[str], timeout: float = 120.0) -> tuple[int, str, str]:
        _, stdout, stderr = self.client.exec_command(shlex.join(argv), timeout=timeout)
        out = stdout.read().decode(errors="replace")
        err = stderr.read().decode(errors="replace")
        return stdout.channel.recv_exit_status(), out, err

    def start(self, argv: list[str]) -> RemoteProcess:
        """Start ``argv`` on the host and learn its pid (a fixed ``sh`` line prints it and
        execs the command; the command's words stay positional arguments, never parsed
        by the remote shell), so that it can be signalled when the run is stopped."""
        wrapped = ["sh", "-c", 'echo "$$"; exec "$@"', "sh", *argv]
        _, stdout, stderr = self.client.exec_command(shlex.join(wrapped))
        first = stdout.readline().strip()
        if not first.isdigit():
            raise HostError(f"{self.name}: cannot start {argv[0]}: {stderr.read().decode()}")
        return RemoteProcess(self, int(first), stdout, stderr)

    def put_private(self, text: str, remote_path: str, python: str) -> None:
        """Write a secret to the absolute remote_path, mode 0600 from creation, through
        stdin (never on a command line, no SFTP subsystem needed)."""
        argv = [python, "-c", WRITE_PRIVATE, remote_path]
        stdin, stdout, stderr = self.client.exec_command(shlex.join(argv), timeout=60)
        stdin.write(text)
        stdin.channel.shutdown_write()
        if stdout.channel.recv_exit_status() != 0:
            error = stderr.read().decode(errors="replace").strip()
            raise HostError(f"{self.name}: cannot write {remote_path}: {error}")

    def remove_private(self, remote_path: str, python: str) -> None:
        status, _, err = self.run([python, "-c", REMOVE_PRIVATE, remote_path], timeout=60)
        if status != 0:
            raise HostError(f"{self.name}: cannot remove {remote_path}: {err.strip()}")

    def close(self) -> None:
        self.client.close()


class RemoteProcess:
    """A command running on a remote host (``RemoteHost.start``): its output is copied to
    ours line by line as it comes, and it can be signalled by pid. Once ``divert(log)`` is
    called (the run is being stopped), its stderr goes to that file instead, as
    ``launcher.StopRelay`` does for horovodrun: torchrun's ChildFailedError traceback about
    a rank that ended when its peer on another host left mid all-reduce (gloo aborts that
    rank) is no news to a user who asked for the stop."""

    def __init__(self, host: RemoteHost, pid: int, stdout, stderr) -> None:
        self.host, self.pid = host, pid
        self._stdout, self._stderr = stdout, stderr
        self.stop_log: Path | None = None
        self.diverted = 0

    def divert(self, log: Path) -> None:
        """From now on, its stderr lines are appended to ``log``."""
        log.parent.mkdir(parents=True, exist_ok=True)
        self.stop_log = log

    def _copy_stderr(self) -> None:
        for line in self._stderr:
            if self.stop_log is not None:
                with self.stop_log.open("a") as log:
                    log.write(line)
                self.diverted += 1
                continue
            sys.stderr.write(line)
            sys.stderr.flush()

    def relay_and_wait(self) -> int:
        """Copy its stderr (in a thread) and stdout to ours until it exits; its status."""
        import threading

        def copy(stream, to) -> None:
            for line in stream:
                to.write(line)
                to.flush()

        errors = threading.Thread(target=self._copy_stderr, daemon=True)
        errors.start()
        copy(self._stdout, sys.stdout)
        errors.join(timeout=5)
        return self._stdout.channel.recv_exit_status()

    def signal_children(self, name: str = "TERM") -> None:
        """Signal its children (torchrun's ranks: stopped first, they write their last
        events and exit, and torchrun then exits quietly)."""
        with contextlib.suppress(Exception):  # gone already, or the host unreachable
            self.host.run(["pkill", f"-{name}", "-P", str(self.pid)], timeout=10)


# The same steps as write_private() and remove_private() below, run by a remote Python.
WRITE_PRIVATE = (
    "import os, sys; path = sys.argv[1]; "
    "os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True); "
    "fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600); "
    "os.fchmod(fd, 0o600); os.write(fd, sys.stdin.buffer.read()); os.close(fd)"
)
REMOVE_PRIVATE = (
    "import contextlib, os, sys; path = sys.argv[1]\n"
    "with contextlib.suppress(FileNotFoundError): os.unlink(path)\n"
    "with contextlib.suppress(OSError): os.rmdir(os.path.dirname(path))"
)


def write_private(path: Path, text: str) -> None:
    """Write a secret readable by its owner only (0600 from creation, also when the file
    was there before with another mode; a symlink in its place is refused)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def remove_private(path: Path) -> None:
    """Remove a secret written by write_private, and its directory when nothing else is
    left in it."""
    path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        path.parent.rmdir()


MEMORY_AND_CPUS = (
    "import os; print(os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE'), os.cpu_count())"
)


def prepare_host(
    remote: RemoteHost,
    python: str,
    data_dir: Path | None,
    drop_caches: str | None,
    agent_port: int,
) -> HostReport:
    report = HostReport(remote.name)
    status, out, err = remote.run([python, "-c", MEMORY_AND_CPUS])
    if status != 0:
        raise HostError(f"{remote.name}: {python} does not run there: {err.strip()}")
    memory, cpus = out.split()
    report.memory_bytes, report.cpus = int(memory), int(cpus)
    if data_dir is not None:
        action = "drop" if drop_caches else "report"
        argv = [python, "-m", "workloads", "cache", action, str(data_dir), "--json"]
        if drop_caches == "node":
            argv.append("--node")
        status, out, err = remote.run(argv, timeout=600)
        if status != 0:
            raise HostError(f"{remote.name}: data set {data_dir} unusable there: {err.strip()}")
        report.cache = json.loads(out.strip().splitlines()[-1])
    report.agent_answers = agent_answers(remote.name, agent_port)
    return report


def prepare_local(
    data_paths: list[Path] | None, drop_caches: str | None, agent_port: int
) -> HostReport:
    """``drop_caches``: None, ``dataset`` (evict the data set) or ``node`` (the whole cache)."""
    from workloads.train import pagecache

    report = HostReport(socket.gethostname())
    report.memory_bytes = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    report.cpus = os.cpu_count() or 0
    if data_paths:
        before = pagecache.residency(data_paths)
        report.cache = {
            "before_resident_bytes": before.resident_bytes,
            "total_bytes": before.total_bytes,
        }
        if drop_caches:
            report.cache["method"] = pagecache.drop(data_paths, node=drop_caches == "node")
            report.cache["after_resident_bytes"] = pagecache.residency(data_paths).resident_bytes
    report.agent_answers = agent_answers("localhost", agent_port)
    return report


def remote_python() -> str:
    """The interpreter the remote hosts run: the same path as here (a shared install)."""
    return sys.executable
