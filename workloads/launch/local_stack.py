"""``workloads run --profile`` with no ``--collector``: a collector and an agent for one run.

Starts ``python -m collector serve --db <runs>/<run_id>.sqlite --listen 127.0.0.1:<free>``
and ``python -m agent run --config <generated>`` pushing to it every second, both bound to
loopback, each in a session of its own (a Ctrl-C at the terminal reaches the launcher
only, which stops the ranks first); stops them after the run (the agent first, so its
last samples land), then prints the per-epoch table (the input columns of ``collector
report RUN_ID``) and the findings, and the command that opens the dashboard on the run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 30.0
AGENT_INTERVAL_SECONDS = 1.0
# what `dashboard serve` imports beyond what a run needs: the `server` extra (pyproject.toml);
# looked up, not imported (dash takes seconds)
DASHBOARD_EXTRA = "server"
DASHBOARD_MODULES = ("dash", "flask", "plotly")


class ProfileError(RuntimeError):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, what: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise ProfileError(f"{what} exited with {process.returncode}:\n{tail}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise ProfileError(f"{what} did not listen on 127.0.0.1:{port} in {START_TIMEOUT_SECONDS}s")


def child_env() -> dict[str, str]:
    """This environment, with this checkout's packages importable by the children."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


def agent_config(host: str, collector_url: str, spool_dir: Path, metrics_port: int) -> str:
    return (
        f'host = "{host}"\n'
        f"interval_seconds = {AGENT_INTERVAL_SECONDS}\n"
        "\n[push]\n"
        f'url = "{collector_url}"\n'
        f'spool_dir = "{spool_dir}"\n'
        "\n[metrics]\n"
        f'listen = "127.0.0.1:{metrics_port}"\n'
    )


def stop(process: subprocess.Popen | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def start_collector(db: Path, log: Path) -> tuple[subprocess.Popen, int]:
    """``collector serve`` on a free loopback port, once it listens: (process, port). One
    run's agent and ranks send small bodies: no parse worker processes beside the
    training."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "collector", "serve", "--db", str(db),
         "--listen", f"127.0.0.1:{port}", "--parse-workers", "1"],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, env=child_env(),
        start_new_session=True,
    )  # fmt: skip
    try:
        wait_for_port(port, process, "collector", log)
    except ProfileError:
        stop(process)
        raise
    return process, port


@dataclass
class EmbeddedProfile:
    run_id: str
    runs_dir: Path
    host: str = field(default_factory=socket.gethostname)
    collector_port: int = 0
    agent_port: int = 0
    collector: subprocess.Popen | None = None
    agent: subprocess.Popen | None = None

    @property
    def db(self) -> Path:
        return self.runs_dir / f"{self.run_id}.sqlite"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.collector_port}"

    @property
    def workdir(self) -> Path:
        return self.runs_dir / self.run_id

    def start(self) -> EmbeddedProfile:
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = child_env()
        self.collector, self.collector_port = start_collector(
            self.db, self.workdir / "collector.log"
        )
        self.agent_port = free_port()
        config = self.workdir / "agent.toml"
        config.write_text(
            agent_config(self.host, self.url, self.workdir / "agent-spool", self.agent_port)
        )
        config.chmod(0o600)
        agent_log = self.workdir / "agent.log"
        self.agent = subprocess.Popen(
            [sys.executable, "-m", "agent", "run", "--config", str(config)],
            stdout=agent_log.open("ab"), stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )  # fmt: skip
        try:
            wait_for_port(self.agent_port, self.agent, "agent", agent_log)
        except ProfileError:
            self.stop()
            raise
        return self

    def pids(self) -> tuple[int, ...]:
        return tuple(p.pid for p in (self.collector, self.agent) if p is not None)

    def running(self) -> bool:
        return self.collector is not None and self.collector.poll() is None

    def stop(self) -> None:
        stop(self.agent)  # first: its last samples go to the collector
        stop(self.collector)

    def report(self) -> int:
        """Print the per-epoch table (the input columns of ``collector report``) and the
        findings of the run, from the embedded store."""
        from workloads.launch.summary import format_findings, format_profile_table, format_run_rate

        command = [
            sys.executable, "-m", "collector", "report", self.run_id,
            "--db", str(self.db), "--format", "json", "--findings",
        ]  # fmt: skip
        result = subprocess.run(command, env=child_env(), capture_output=True, text=True)
        if result.returncode != 0:
            print(f"workloads: collector report: {result.stderr.strip()}", file=sys.stderr)
            return result.returncode
        report = json.loads(result.stdout)
        print(f"run {self.run_id}: per epoch (MB = 10^6 bytes; disk, cache and CPU are the "
              f"whole host's)")  # fmt: skip
        print(format_profile_table(report["rows"]))
        print(format_run_rate(report["throughput"]["images_per_second"]))
        print()
        print(format_findings(report["findings"]))
        print(f"every column: collector report {self.run_id} --db {self.db}", flush=True)
        return 0

    def dashboard_command(self) -> str:
        """The command that opens the dashboard on this run, as it works here; when this
        environment cannot run the dashboard (``workloads profile`` needs only the
        ``profile`` extra), also what to install first."""
        own = Path(sys.executable).parent / "dashboard"  # this environment's script
        found = shutil.which("dashboard")
        if found and Path(found).parent == own.parent:
            program = ["dashboard"]
        elif own.is_file():  # not first on PATH (`.venv/bin/workloads` run as such)
            program = [str(own)]
        else:
            program = [sys.executable, "-m", "dashboard"]
        command = shlex.join([*program, "serve", "--db", str(self.db)])
        missing = [name for name in DASHBOARD_MODULES if importlib.util.find_spec(name) is None]
        if missing:
            return (
                f"pip install 'epochscope[{DASHBOARD_EXTRA}]' (this environment has no "
                f"{', '.join(missing)}), then {command}"
            )
        return command
