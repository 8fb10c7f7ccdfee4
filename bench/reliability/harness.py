"""Real processes for the reliability experiments: ``collector serve`` and ``agent run``.

Shared by the bench scripts in this folder and by ``tests/test_reliability*.py`` (the short
versions of the same experiments). Nothing here is mocked: the collector is the real
server on a loopback port writing a real SQLite file, each agent is a real ``agent run``
process with its own disk spool, /metrics port and config file (0600, token inside).

The agents sample a captured host tree (``procfs-mlx-hfi`` from ../shared/fixtures) plus
their own process (the ``agent`` self sampler), so every tick produces the same, known
number of points: the accounting of "sent" versus "stored" is exact.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from agent.spool import verified_lines

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("EPOCHSCOPE_SHARED", REPO_ROOT.parent / "shared"))
if not SHARED.is_dir():  # a worktree under /work/wt: shared/ sits two levels up
    SHARED = Path("/work/shared")
FIXTURE_TREE = SHARED / "fixtures" / "roots" / "procfs-mlx-hfi"
_LISTENING = re.compile(r"listening on https?://([\d.]+):(\d+)")
_STOPPED = re.compile(r"agent stopped after (\d+) samples")

# (host, measurement, tags as sorted key=value pairs, time_ns): one point.
PointKey = tuple[str, str, tuple[tuple[str, str], ...], int]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def repo_env(**extra: str) -> dict[str, str]:
    """Environment for subprocesses that import this checkout's packages."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def wait_until(predicate, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def set_autogroup_nice(pid: int | str, nice: int) -> bool:
    """Give a process's scheduler autogroup (its session) a nice value.

    With ``kernel.sched_autogroup_enabled`` (Debian's default) CPU is shared fairly between
    sessions first: a nice value only orders processes within their own session. A process
    started in a session of its own and given an autogroup nice really runs ahead of the
    machine's other work. False when the kernel has no autogroups (or we may not).
    """
    try:
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))
    except OSError:
        return False
    return True


def write_token_file(directory: Path, token: str | None = None) -> tuple[str, Path]:
    token = token or "tok-" + secrets.token_hex(16)
    path = directory / "token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    return token, path


@dataclass
class Collector:
    """One ``collector serve`` process; ``start()`` again after ``stop()`` reuses db and port."""

    db: Path
    token_file: Path | None
    log: Path
    port: int = 0
    extra_args: tuple[str, ...] = ()
    log_level: str = "INFO"
    nice: int = 0  # run it under `nice -n` (negative: ahead of the machine's other work)
    # its own session, hence its own autogroup: the scheduler shares CPU between sessions
    # first, as between a collector service and whatever else runs on its host
    own_session: bool = False
    process: subprocess.Popen | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        args = [sys.executable, "-m", "collector", "serve", "--db", str(self.db)]
        if self.nice:
            args = ["nice", "-n", str(self.nice), *args]
        args += ["--listen", f"127.0.0.1:{self.port}", *self.extra_args]
        if self.token_file is not None:
            args += ["--token-file", str(self.token_file)]
        offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log_file:
            self.process = subprocess.Popen(
                args,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=repo_env(EPOCHSCOPE_LOG_LEVEL=self.log_level),
                start_new_session=bool(self.nice) or self.own_session,
            )
        if self.nice:
            set_autogroup_nice(self.process.pid, self.nice)
        self.starts += 1
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.log.open("rb") as log_file:
                log_file.seek(offset)
                match = _LISTENING.search(log_file.read().decode(errors="replace"))
            if match:
                self.port = int(match[2])
                return
            if self.process.poll() is not None:
                raise RuntimeError(f"collector serve exited: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)
        self.process.kill()
        raise RuntimeError(f"collector serve did not start in {timeout} s")

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, then SIGKILL if it does not stop; returns the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode

    def kill(self) -> None:
        """kill -9: no flush, no goodbye."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)


@dataclass
class Agent:
    """One ``agent run`` process with its own config, spool, log and /metrics port."""

    host: str
    workdir: Path
    push_url: str
    token: str | None
    interval_seconds: float = 1.0
    batch_seconds: float = 5.0
    spool_max_bytes: int = 512 * 2**20
    samplers: tuple[str, ...] | None = None
    tree: Path = FIXTURE_TREE
    metrics_port: int = field(default_factory=free_port)
    log_level: str = "info"
    process: subprocess.Popen | None = None
    ticks_reported: list[int] = field(default_factory=list)  # one per run that stopped cleanly

    @property
    def spool_dir(self) -> Path:
        return self.workdir / "spool"

    @property
    def log(self) -> Path:
        return self.workdir / "agent.log"

    @property
    def config(self) -> Path:
        return self.workdir / "agent.toml"

    def write_config(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        lines = [
            f'host = "{self.host}"',
            f"interval_seconds = {self.interval_seconds}",
            f'proc_root = "{self.tree / "proc"}"',
            f'sys_root = "{self.tree / "sys"}"',
        ]
        if self.samplers is not None:
            lines.append("samplers = [" + ", ".join(f'"{s}"' for s in self.samplers) + "]")
        lines += [
            "",
            "[push]",
            f'url = "{self.push_url}"',
            f'spool_dir = "{self.spool_dir}"',
            f"spool_max_bytes = {self.spool_max_bytes}",
            f"batch_seconds = {self.batch_seconds}",
        ]
        if self.token is not None:
            lines.append(f'token = "{self.token}"')
        lines += ["", "[metrics]", f'listen = "127.0.0.1:{self.metrics_port}"', ""]
        self.config.write_text("\n".join(lines))
        self.config.chmod(0o600)

    def start(self) -> None:
        self.write_config()
        with self.log.open("ab") as log_file:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "agent",
                    "--log-level",
                    self.log_level,
                    "run",
                    "--config",
                    str(self.config),
                ],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=repo_env(),
            )

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (the agent flushes for up to 5 s); records the ticks it reports."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout)
        found = _STOPPED.findall(self.log.read_text(errors="replace"))
        if len(found) > len(self.ticks_reported):
            self.ticks_reported.append(int(found[-1]))
        return self.process.returncode

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def scrape(self) -> dict[str, float]:
        """The agent's own gauges and counters from its /metrics (empty when unreachable)."""
        try:
            url = f"http://127.0.0.1:{self.metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=2) as response:
                text = response.read().decode()
        except OSError:
            return {}
        found = {}
        for line in text.splitlines():
            if line.startswith("epochscope_agent_"):
                # name{labels} value timestamp_ms (the labels may hold spaces)
                if "{" in line:
                    name, rest = line.partition("{")[0], line.rpartition("}")[2]
                else:
                    name, _, rest = line.partition(" ")
                found[name] = float(rest.split()[0])
        return found

    def spooled_lines(self) -> list[str]:
        """Every complete line waiting in the spool, oldest segment first.

        The newest segment may be being appended to: a line not yet ended by its newline
        is left out (the agent has not finished writing it).
        """
        lines = []
        for path in sorted(self.spool_dir.glob("*.lp")):
            try:
                data = path.read_bytes()
            except FileNotFoundError:  # delivered (or dropped) while we listed
                continue
            complete = verified_lines(data[: data.rfind(b"\n") + 1])[0].decode()
            lines += [line for line in complete.split("\n") if line]
        return lines


def lines_per_tick(lines: Iterable[str]) -> Counter:
    """How many ticks had how many lines: every point of a tick has the tick's time."""
    from collections import Counter

    per_time = Counter(line.rsplit(" ", 1)[1] for line in lines)
    return Counter(per_time.values())


# ---------------------------------------------------------------- accounting


def point_key(line: str) -> tuple[PointKey, dict[str, float]]:
    """The key and numeric field values of one agent line (as the agent wrote it)."""
    from collector.lineprotocol import parse_line_full

    measurement, tags, fields, time_ns = parse_line_full(line)
    host = tags.pop("host", "")
    numeric = {name: float(value) for name, value in fields.items() if not isinstance(value, str)}
    assert time_ns is not None, line
    return (host, measurement, tuple(sorted(tags.items())), time_ns), numeric


def stored_points(db: Path, hosts: Iterable[str] | None = None) -> dict[PointKey, dict[str, float]]:
    """Every point in the store as readers see it: key -> {field: value}."""
    import sqlite3

    from collector.store import SqliteStore
    from collector.store.api import SeriesInfo

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT series.id, tagsets.measurement, tagsets.host, tagsets.tags, series.field"
            " FROM series JOIN tagsets ON tagsets.id = series.tagset_id"
        ).fetchall()
    finally:
        conn.close()
    wanted = set(hosts) if hosts is not None else None
    infos = [
        SeriesInfo(series_id, measurement, host, name, json.loads(tags))
        for series_id, measurement, host, tags, name in rows
        if wanted is None or host in wanted
    ]
    points: dict[PointKey, dict[str, float]] = {}
    with SqliteStore(db) as store:
        for data in store.read_series(infos, -(2**62), 2**62):
            info = data.info
            tags = tuple(sorted(info.tags.items()))
            for time_ns, value in zip(data.times_ns.tolist(), data.values.tolist(), strict=True):
                points.setdefault((info.host, info.measurement, tags, time_ns), {})[info.field] = (
                    value
                )
    return points


def raw_times(db: Path) -> dict[int, list]:
    """Every time stored per tag set, copies included, as int64 arrays: from the ``blocks``
    table and, where the store has one, the ``batches`` table of writes not yet folded
    into blocks (rows of ``groups`` (tag set, points, fields) and the groups' times)."""
    import sqlite3

    import numpy as np

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        by_tagset: dict[int, list] = {}
        for tagset_id, times in conn.execute("SELECT tagset_id, times FROM blocks"):
            by_tagset.setdefault(tagset_id, []).append(np.frombuffer(times, dtype=np.int64))
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
        if "batches" in tables:
            for groups, times in conn.execute("SELECT groups, times FROM batches"):
                index = np.frombuffer(groups, dtype=np.int64).reshape(-1, 3)
                all_times = np.frombuffer(times, dtype=np.int64)
                start = 0
                for tagset_id, count, _ in index.tolist():
                    by_tagset.setdefault(tagset_id, []).append(all_times[start : start + count])
                    start += count
        return by_tagset
    finally:
        conn.close()


def raw_copies(db: Path) -> tuple[int, int]:
    """(point copies in the raw tables, distinct points) over all tag sets.

    Re-sent points stay as separate copies until compaction merges them; readers always
    see one. More copies than points means some point was delivered twice.
    """
    import numpy as np

    copies = distinct = 0
    for parts in raw_times(db).values():
        joined = np.concatenate(parts)
        copies += joined.size
        distinct += np.unique(joined).size
    return copies, distinct


def agent_tick_times(db: Path, host: str) -> list[int]:
    """Times of the ``agent`` self-sampler points of one host: one per tick."""
    from collector.store import SqliteStore
    from contract.schema import AgentSelf

    try:
        with SqliteStore(db) as store:
            series = store.list_series(AgentSelf.NAME, AgentSelf.CPU_SECONDS, host)
            if not series:
                return []
            (data,) = store.read_series(series[:1], -(2**62), 2**62)
            return data.times_ns.tolist()
    except Exception:  # the collector may hold the file mid-checkpoint: try again later
        return []


def save_results(results: dict, results_path: Path, figure: Path, plot, summary) -> None:
    """Write an experiment's results as JSON, draw its figure and print its summary."""
    results_path.parent.mkdir(parents=True, exist_ok=True)
    results_path.write_text(json.dumps(results, indent=1))
    plot(results, figure)
    print(summary(results))
    print(f"results: {results_path}\nfigure: {figure}")


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def machine() -> str:
    import platform

    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{platform.node()}: {os.cpu_count()} cores ({cpu}), {memory:.0f} GiB, " + (
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}"
    )
