"""Where the node's agent pushes: for ``workloads run --profile --collector URL``.

With an external collector, the run's node metrics come from the agent already running on
each node (its /metrics on ``--agent-port``, 9711 by default). If that agent pushes to
another collector, or nowhere, the run trains and its per-epoch table has no node metrics
for that node: the launcher warns before training, for every host of the run (a remote
host answers ``workloads check-collector --agent-port P`` over SSH, which looks there).
The agent is found the way ``ss -ltnp`` finds it: the listening socket's inode in
/proc/net/tcp{,6} (the network namespace of the process that reads it), the process
holding it, its command line (``--config``) and environment, read through the agent's own
config loader.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

LISTEN_STATE = "0A"
WARNING_PREFIX = "workloads: warning: "  # how `check-collector` writes it on stderr


@dataclass(frozen=True)
class AgentProcess:
    pid: int
    config: Path | None
    push_url: str | None  # None: the agent pushes nowhere


def listening_inodes(port: int, proc: Path = Path("/proc")) -> set[str]:
    """Inodes of the TCP sockets listening on ``port`` (any address)."""
    inodes = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            lines = (proc / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            listening = len(fields) > 9 and fields[3] == LISTEN_STATE
            if listening and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def process_with_socket(inodes: set[str], proc: Path = Path("/proc")) -> int | None:
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) in wanted:
                    return int(entry.name)
        except OSError:  # gone, or not ours to read
            continue
    return None


def find_agent(port: int, proc: Path = Path("/proc")) -> AgentProcess | None:
    """The agent process listening on ``port`` and where it pushes; None when no process
    of ours listens there or it is not an agent."""
    pid = process_with_socket(listening_inodes(port, proc), proc)
    if pid is None:
        return None
    try:
        argv = (proc / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")
        raw_env = (proc / str(pid) / "environ").read_bytes().decode(errors="replace")
    except OSError:
        return None
    if "agent" not in " ".join(argv) or "run" not in argv:
        return None
    config = None
    for index, arg in enumerate(argv):
        if arg == "--config" and index + 1 < len(argv):
            config = Path(argv[index + 1])
        elif arg.startswith("--config="):
            config = Path(arg.partition("=")[2])
    if config is not None and not config.is_absolute():
        try:
            config = Path(os.readlink(proc / str(pid) / "cwd")) / config
        except OSError:
            return None
    environ = dict(item.partition("=")[::2] for item in raw_env.split("\0") if "=" in item)
    from agent.config import load

    try:
        loaded = load(config, environ)
    except Exception:  # a config we cannot read or parse: say nothing rather than guess
        return None
    return AgentProcess(pid, config, loaded.push.url if loaded.push else None)


def _endpoint(url: str) -> tuple[str, int] | None:
    parts = urlsplit(url)
    if not parts.hostname:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        return socket.gethostbyname(parts.hostname), port
    except OSError:
        return parts.hostname, port


def push_warning(port: int, collector_url: str) -> str | None:
    """A warning when the agent on ``port`` pushes elsewhere than ``collector_url``."""
    agent = find_agent(port)
    if agent is None:
        return None
    where = f"the agent on :{port} (pid {agent.pid}"
    where += f", --config {agent.config})" if agent.config else ")"
    fix = f'set [push] url = "{collector_url}"'
    fix += f" in {agent.config}" if agent.config else ""
    if agent.push_url is None:
        return (f"{where} pushes nowhere: this run's node metrics will not reach "
                f"{collector_url}; {fix} and restart it")  # fmt: skip
    if _endpoint(agent.push_url) != _endpoint(collector_url):
        return (f"{where} pushes to {agent.push_url}, not to {collector_url}: this run's "
                f"node metrics will not be in its report; {fix} and restart it")  # fmt: skip
    return None
