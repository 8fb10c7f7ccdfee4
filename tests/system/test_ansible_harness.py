"""Real SSH targets and ansible-playbook runs for the deployment tests.

Nothing is mocked: a Debian OpenSSH server (/usr/sbin/sshd) runs in the foreground on
loopback with its own host key and config, the controller checks that host key against a
known_hosts file the test writes, and ansible-playbook logs in with OpenSSH's client (Ansible's
default `ssh` connection, its ControlPersist sessions reused from task to task) with a key the
test generated. Every "node" is a set of directories on this machine (its own prefix, config
dir, spool...), reached at its own loopback address.
"""

from __future__ import annotations

import getpass
import json
import os
import pwd
import re
import resource
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = REPO_ROOT / "ansible"
SSHD = Path("/usr/sbin/sshd")
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
RECAP_LINE = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)",
    re.MULTILINE,
)


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def wait_for_port(address: str, port: int, timeout: float, process: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"process exited with {process.returncode} before listening")
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {address}:{port} after {timeout} s")


def port_is_open(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass
class SshServer:
    """sshd -D -e on loopback with a throwaway host key; stopped by ``stop()``."""

    workdir: Path
    addresses: tuple[str, ...]
    port: int = 0
    user: str = field(default_factory=getpass.getuser)
    process: subprocess.Popen | None = None

    @property
    def client_key(self) -> Path:
        return self.workdir / "id_ed25519"

    def start(self) -> SshServer:
        if not SSHD.exists():
            pytest.skip(f"{SSHD} is missing (Debian package openssh-server)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        host_key = self.workdir / "ssh_host_ed25519_key"
        for key in (host_key, self.client_key):
            subprocess.run(
                [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", "epochscope-test", "-f", key],
                check=True,
            )
        authorized = self.workdir / "authorized_keys"
        authorized.write_text(self.client_key.with_suffix(".pub").read_text())
        authorized.chmod(0o600)
        self.port = free_port()
        config = self.workdir / "sshd_config"
        config.write_text(
            "\n".join(
                [f"Port {self.port}"]
                + [f"ListenAddress {address}" for address in self.addresses]
                + [
                    f"HostKey {host_key}",
                    f"AuthorizedKeysFile {authorized}",
                    f"AllowUsers {self.user}",
                    "PidFile none",
                    "PermitRootLogin prohibit-password",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    # The key files live in a temporary directory, not in ~/.ssh.
                    "StrictModes no",
                    "MaxStartups 64",
                    "MaxSessions 64",
                    "Subsystem sftp internal-sftp",
                    "LogLevel INFO",
                    # bash started by sshd sources the login user's ~/.bashrc, unless it is
                    # a nested shell (SHLVL >= 2 once bash counts itself). The developer
                    # root's .bashrc on a workstation (here: `pyenv init`, ~1 s of CPU) is
                    # not part of any node, and Ansible runs ~5 commands per task.
                    "SetEnv SHLVL=1",
                ]
            )
            + "\n"
        )
        # sshd refuses to start without its privilege separation directory (normally made
        # by the init script, which nobody runs here).
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        self.log = open(self.workdir / "sshd.log", "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", config], stdout=self.log, stderr=subprocess.STDOUT
        )
        try:
            for address in self.addresses:
                wait_for_port(address, self.port, 10, self.process)
        except (RuntimeError, TimeoutError) as exc:
            self.stop()
            raise RuntimeError(f"sshd did not come up: {exc}\n{self.log_text()}") from exc
        return self

    def sessions_cpu_seconds(self) -> float:
        """CPU of the SSH sessions that ended so far (what the nodes ran), from sshd's
        /proc stat: cutime + cstime."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")

    def log_text(self) -> str:
        return (self.workdir / "sshd.log").read_text(errors="replace")

    def known_hosts_lines(self) -> list[str]:
        public = (self.workdir / "ssh_host_ed25519_key.pub").read_text().split()
        return [f"[{address}]:{self.port} {public[0]} {public[1]}" for address in self.addresses]

    def login_vars(self, controller: Controller) -> dict[str, str]:
        """The inventory variables that log in to this server from ``controller``: Ansible's
        default ``ssh`` connection, as on a real cluster. OpenSSH reads ~/.ssh from the
        account's passwd entry, not $HOME, so the controller's known_hosts is named here."""
        known_hosts = controller.home / ".ssh" / "known_hosts"
        return {
            "ansible_connection": "ssh",
            "ansible_port": str(self.port),
            "ansible_user": self.user,
            "ansible_ssh_private_key_file": str(self.client_key),
            "ansible_ssh_common_args": (
                f"-o UserKnownHostsFile={known_hosts} -o GlobalKnownHostsFile=/dev/null"
                " -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes"
            ),
            "ansible_python_interpreter": "/usr/bin/python3",
        }

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            # Its sessions first: Ansible's ControlPersist client would otherwise keep one
            # open for a minute after the test.
            subprocess.run(["pkill", "-TERM", "-P", str(self.process.pid)], check=False)
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.log.close()


@dataclass
class Recap:
    ok: int
    changed: int
    unreachable: int
    failed: int


@dataclass
class PlaybookRun:
    returncode: int
    output: str
    recap: dict[str, Recap]
    args: tuple[str, ...] = ()
    wall_seconds: float = 0.0
    # CPU of ansible-playbook and what it ran on the controller (not on the nodes).
    cpu_seconds: float = 0.0

    def describe(self) -> str:
        return f"ansible-playbook exited {self.returncode}\n{self.output[-6000:]}"


def parse_recap(output: str) -> dict[str, Recap]:
    recap_start = output.rfind("PLAY RECAP")
    return {
        m["host"]: Recap(int(m["ok"]), int(m["changed"]), int(m["unreachable"]), int(m["failed"]))
        for m in RECAP_LINE.finditer(output[recap_start:] if recap_start >= 0 else "")
    }


@dataclass
class Controller:
    """Where ansible-playbook runs from: its own HOME (known_hosts, ~/.ansible)."""

    home: Path
    env: dict[str, str]

    @classmethod
    def make(cls, home: Path, known_hosts: list[str], base_env: dict[str, str]) -> Controller:
        ssh_dir = home / ".ssh"
        ssh_dir.mkdir(parents=True, mode=0o700)
        (ssh_dir / "known_hosts").write_text("\n".join(known_hosts) + "\n")
        # No ANSIBLE_CONFIG: the plays run from the repository root, as the README's
        # command does, and read its ansible.cfg (a link to ansible/ansible.cfg).
        env = {k: v for k, v in base_env.items() if k != "ANSIBLE_CONFIG"}
        env.update(
            HOME=str(home),
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_FORCE_COLOR="0",
            ANSIBLE_RETRY_FILES_ENABLED="0",
            ANSIBLE_LOCAL_TEMP=str(home / ".ansible" / "tmp"),
            # Timestamped log of every run (for finding slow tasks after a failure).
            ANSIBLE_LOG_PATH=str(home / "ansible.log"),
            # Host keys are checked (against the known_hosts above), never learnt.
            ANSIBLE_HOST_KEY_CHECKING="1",
            ANSIBLE_PARAMIKO_RECORD_HOST_KEYS="0",
        )
        return cls(home, env)

    def run(self, playbook: str, inventory: Path, *args: str, timeout: float = 900) -> PlaybookRun:
        command = [str(ANSIBLE_PLAYBOOK), "-i", str(inventory), str(ANSIBLE_DIR / playbook), *args]
        started, cpu_before = time.monotonic(), children_cpu_seconds()
        # Its own session, so a timeout stops ansible-playbook's forked workers too.
        process = subprocess.Popen(
            command,
            env=self.env,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGTERM)
            output, _ = process.communicate(timeout=30)
            raise AssertionError(
                f"ansible-playbook {playbook} ran past {timeout} s; the end of its output:\n"
                + output[-6000:]
            ) from None
        return PlaybookRun(
            process.returncode,
            output,
            parse_recap(output),
            args=(playbook, *args),
            wall_seconds=time.monotonic() - started,
            cpu_seconds=children_cpu_seconds() - cpu_before,
        )


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def readable_base_dir(prefix: str) -> Path:
    """A temporary directory other accounts can traverse (pytest's tmp_path is 0700, and the
    agent runs as its own account)."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    base.chmod(0o755)
    return base


def fresh_account_name() -> str:
    # Unique per run, so two test runs on one machine never share (or delete) an account.
    return "estest" + secrets.token_hex(4)


def write_inventory(path: Path, groups: dict[str, dict[str, dict[str, str]]], group_vars) -> None:
    """groups: name -> host -> vars; group_vars: name -> vars."""
    lines: list[str] = []
    for group, hosts in groups.items():
        lines.append(f"[{group}]")
        for host, host_vars in hosts.items():
            lines.append(" ".join([host, *(f"{k}={v}" for k, v in host_vars.items())]))
        lines.append("")
    for group, variables in group_vars.items():
        lines.append(f"[{group}:vars]")
        lines.extend(f"{k}={v}" for k, v in variables.items())
        lines.append("")
    path.write_text("\n".join(lines))


def wait_until(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def pid_alive(pid: int) -> bool:
    try:
        return bool(Path(f"/proc/{pid}/cmdline").read_bytes())
    except OSError:
        return False


SERVICE = "epochscope-agent"


@dataclass
class Node:
    name: str
    address: str
    root: Path
    metrics_port: int
    interval_seconds: float = 1.0
    # Its own account: the "nodes" share this machine's /etc/passwd, where one account
    # name cannot have two home directories (real nodes each have their own).
    account: str = field(default_factory=fresh_account_name)

    @property
    def prefix(self) -> Path:
        return self.root / "opt" / "epochscope"

    @property
    def config_dir(self) -> Path:
        return self.root / "etc" / "epochscope"

    @property
    def state_dir(self) -> Path:
        return self.root / "var" / "lib" / "epochscope"

    @property
    def log_dir(self) -> Path:
        return self.root / "var" / "log" / "epochscope"

    @property
    def run_dir(self) -> Path:
        return self.root / "run" / "epochscope"

    @property
    def pidfile(self) -> Path:
        return self.run_dir / f"{SERVICE}.pid"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.address}:{self.metrics_port}/metrics"

    def inventory_vars(self) -> dict[str, str]:
        return {
            "ansible_host": self.address,
            "epochscope_host_tag": self.name,
            "epochscope_prefix": str(self.prefix),
            "epochscope_config_dir": str(self.config_dir),
            "epochscope_state_dir": str(self.state_dir),
            "epochscope_log_dir": str(self.log_dir),
            "epochscope_run_dir": str(self.run_dir),
            "epochscope_metrics_listen": f"{self.address}:{self.metrics_port}",
            "epochscope_interval_seconds": str(self.interval_seconds),
            "epochscope_user": self.account,
        }

    def make_skeleton(self) -> None:
        """The directories every real node already has (/opt, /etc, /var/lib...)."""
        for parent in (self.prefix, self.config_dir, self.state_dir, self.log_dir, self.run_dir):
            parent.parent.mkdir(parents=True, exist_ok=True)
        for path in [self.root, *self.root.rglob("*")]:
            path.chmod(0o755)

    def agent_pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None


BUILD_WHEEL = ANSIBLE_DIR / "roles" / "epochscope_package" / "files" / "build_wheel.py"
# Where the roles keep dependency wheelhouses by default (epochscope_wheelhouse_cache): the
# tests share it with the user running them, so they download each wheelhouse once.
WHEELHOUSE_CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "epochscope" / "wheelhouses"
)


def build_epochscope_wheel(out_dir: Path) -> Path:
    """The epochscope wheel of this checkout, built by the role's own build script (the
    plays are then given it as epochscope_wheel, so they do not each build it again)."""
    result = subprocess.run(
        [sys.executable, str(BUILD_WHEEL), "wheel", str(REPO_ROOT), str(out_dir)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode != 0:
        # Building fetches setuptools (build isolation) from the package index or pip's cache.
        pytest.skip(f"cannot build the epochscope wheel: {result.stderr[-2000:]}")
    return Path(result.stdout.strip())


def download_wheelhouse(wheel: Path, extras: str, out_dir: Path) -> None:
    """Fill WHEELHOUSE_CACHE for wheel[extras] the way the plays do with
    epochscope_wheelhouse_download (same script, same key), so a machine that cannot reach
    a package index skips these tests with the reason instead of failing inside a play."""
    command = [sys.executable, str(BUILD_WHEEL), "bundle", str(out_dir), "--wheel", str(wheel)]
    result = subprocess.run(
        [*command, "--download", str(WHEELHOUSE_CACHE), "--extras", extras],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot download the dependency wheelhouse with pip: {result.stderr[-2000:]}")


def stop_leftover_agents(nodes: dict[str, Node]) -> None:
    """After a failed test: stop agents the uninstall did not, by their verified pidfiles,
    and wait for them (userdel refuses an account that still runs processes)."""
    stopped = []
    for node in nodes.values():
        try:
            lines = node.pidfile.read_text().splitlines()
            pid, argv = int(lines[0]), json.loads(lines[1])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")
        except (OSError, ValueError, IndexError):
            continue
        if cmdline == argv:
            os.kill(pid, signal.SIGTERM)
            stopped.append(pid)
    for pid in stopped:
        try:
            wait_until(lambda pid=pid: not pid_alive(pid), 30, f"agent {pid} to exit")
        except AssertionError:
            os.kill(pid, signal.SIGKILL)


def remove_account(name: str) -> None:
    """Remove a test account the playbooks left (after a failure). userdel refuses while a
    process of the account still exits, so it gets a few tries."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        pass
    else:
        wait_until(
            lambda: subprocess.run(["userdel", name], capture_output=True).returncode == 0,
            30,
            f"userdel {name}",
            interval=0.5,
        )
    subprocess.run(["groupdel", name], capture_output=True, check=False)


def fetch_metrics(node: Node) -> str:
    with urllib.request.urlopen(node.metrics_url, timeout=5) as response:
        assert response.status == 200
        return response.read().decode()


def store_hosts(db: Path) -> set[str]:
    from collector.store import SqliteStore

    return set(SqliteStore(db).hosts())


# --- tests of the harness itself (fast) ---


def test_parse_recap_reads_every_host_of_the_last_recap():
    output = """PLAY RECAP *********************************************************************
node1                      : ok=30   changed=0    unreachable=0    failed=0    skipped=9
node3                      : ok=0    changed=0    unreachable=1    failed=0    skipped=0
"""
    assert parse_recap(output) == {
        "node1": Recap(ok=30, changed=0, unreachable=0, failed=0),
        "node3": Recap(ok=0, changed=0, unreachable=1, failed=0),
    }
