"""A cluster of N "hosts" on this machine: network namespaces joined by a switch.

Each host is a network namespace with one interface, ``eth0`` (one name on every host, as
on a cluster), addressed ``SUBNET.<i+1>/24``; a further namespace holds a Linux bridge, the
switch, each host's link a veth pair from its ``eth0`` to a port of the bridge. The switch
namespace has ``SUBNET.254`` on the bridge, a place for a head node's services (a
collector) that every host reaches over its own link. Processes started on a host run in
its network namespace and in a UTS namespace named after the host (``socket.gethostname()``
is ``h1``, ``h2``, ...), with ``/etc/netns/<ns>/hosts`` naming every host (``ip netns exec``
mounts it over ``/etc/hosts``).

``shape(rate_mbit)`` puts a ``tc`` token bucket on both ends of every link (the host's egress
and the switch port's egress towards it), so each host sends and receives at that rate at
once, as on a switched fabric; it replaces the previous one, so one cluster serves runs at
several rates. ``PAYLOAD_SHARE`` is TCP's share of a full frame, what a peer measurement
reads of the rate.

Needs root, iproute2 (``ip``, ``tc``), util-linux ``unshare`` and the kernel's bridge;
``missing()`` says which is absent. Used by bench/forecast/netns.py and bench/findings.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

INTERFACE = "eth0"
NETNS_ETC = Path("/etc/netns")  # `ip netns exec NS` mounts /etc/netns/NS/hosts on /etc/hosts
PAYLOAD_SHARE = 1448 / 1514  # TCP payload in a full Ethernet frame (MSS 1448 with timestamps)
SWITCH_HOST_NUMBER = 254
# The hostname of the new UTS namespace is set, then the command exec'd (argument lists only).
SET_HOSTNAME_AND_EXEC = (
    "import os, socket, sys; socket.sethostname(sys.argv[1]); os.execvp(sys.argv[2], sys.argv[2:])"
)


def run_checked(argv: Sequence[str], **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(list(argv), capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"{list(argv)} exited {result.returncode}:\n{result.stderr[-4000:]}")
    return result


def missing() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (iproute2 / util-linux)"
    probe = f"esprobe{secrets.token_hex(3)}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot make a network namespace here: {made.stderr.strip()}"
    try:
        bridge = subprocess.run(
            ["ip", "-n", probe, "link", "add", "br0", "type", "bridge"],
            capture_output=True,
            text=True,
        )
        if bridge.returncode != 0:
            return f"cannot make a bridge in a namespace: {bridge.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def token_bucket(rate_mbit: float) -> list[str]:
    """A tbf qdisc's arguments for ``rate_mbit``: a burst of 10 ms at the rate (at least
    64 kB; less starves a fast link between timer ticks), 50 ms of queue."""
    burst_bytes = max(64 * 1024, int(rate_mbit * 1e6 / 8 * 0.010))
    return ["tbf", "rate", f"{rate_mbit:g}mbit", "burst", str(burst_bytes), "latency", "50ms"]


class NetnsCluster:
    """``hosts`` namespaces behind one switch; ``with NetnsCluster(...) as cluster``."""

    def __init__(self, hosts: Sequence[str], base: Path) -> None:
        tag = secrets.token_hex(2)
        self.hosts = tuple(hosts)
        self.base = base
        self.subnet = f"10.214.{secrets.randbelow(250) + 1}"
        self.namespaces = {host: f"es{host}-{tag}" for host in self.hosts}
        self.switch_namespace = f"essw-{tag}"
        self.addresses = {host: f"{self.subnet}.{i + 1}" for i, host in enumerate(self.hosts)}
        self.switch_address = f"{self.subnet}.{SWITCH_HOST_NUMBER}"
        # made in this namespace under unique names (<= 15 characters), renamed once moved
        self.host_ends = {host: f"eh{i}{tag}" for i, host in enumerate(self.hosts)}
        self.switch_ends = {host: f"es{i}{tag}" for i, host in enumerate(self.hosts)}
        self.made_netns_dir = not NETNS_ETC.exists()
        self.processes: list[subprocess.Popen] = []
        self.logs: list = []
        self.rate_mbit: float | None = None

    def __enter__(self) -> NetnsCluster:
        try:
            self.create()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.destroy()

    # --- the network ---

    def create(self) -> None:
        switch = self.switch_namespace
        run_checked(["ip", "netns", "add", switch])
        run_checked(["ip", "-n", switch, "link", "add", "br0", "type", "bridge"])
        run_checked(["ip", "-n", switch, "addr", "add", f"{self.switch_address}/24", "dev", "br0"])
        run_checked(["ip", "-n", switch, "link", "set", "br0", "up"])
        run_checked(["ip", "-n", switch, "link", "set", "lo", "up"])
        names = "127.0.0.1 localhost\n" + "".join(f"{self.addresses[h]} {h}\n" for h in self.hosts)
        names += f"{self.switch_address} switch\n"
        for host in self.hosts:
            ns, host_end, switch_end = (
                self.namespaces[host],
                self.host_ends[host],
                self.switch_ends[host],
            )
            run_checked(["ip", "netns", "add", ns])
            run_checked(["ip", "link", "add", host_end, "type", "veth", "peer", "name", switch_end])
            run_checked(["ip", "link", "set", host_end, "netns", ns])
            run_checked(["ip", "link", "set", switch_end, "netns", switch])
            run_checked(["ip", "-n", ns, "link", "set", host_end, "name", INTERFACE])
            run_checked(
                ["ip", "-n", ns, "addr", "add", f"{self.addresses[host]}/24", "dev", INTERFACE]
            )
            run_checked(["ip", "-n", ns, "link", "set", INTERFACE, "up"])
            run_checked(["ip", "-n", ns, "link", "set", "lo", "up"])
            run_checked(["ip", "-n", switch, "link", "set", switch_end, "master", "br0"])
            run_checked(["ip", "-n", switch, "link", "set", switch_end, "up"])
            hosts_dir = NETNS_ETC / ns
            hosts_dir.mkdir(parents=True, exist_ok=True)
            (hosts_dir / "hosts").write_text(names)

    def shape(self, rate_mbit: float | None) -> None:
        """Every link at ``rate_mbit`` each way (None: the veths as they are, unshaped)."""
        for host in self.hosts:
            for ns, device in (
                (self.namespaces[host], INTERFACE),
                (self.switch_namespace, self.switch_ends[host]),
            ):
                if rate_mbit is None:
                    subprocess.run(
                        ["tc", "-n", ns, "qdisc", "del", "dev", device, "root"],
                        capture_output=True,
                    )
                else:
                    run_checked(
                        ["tc", "-n", ns, "qdisc", "replace", "dev", device, "root",
                         *token_bucket(rate_mbit)]
                    )  # fmt: skip
        self.rate_mbit = rate_mbit

    def payload_bytes_per_second(self) -> float | None:
        """What TCP carries of the shaped rate each way (bytes/s), None unshaped."""
        return None if self.rate_mbit is None else self.rate_mbit * 1e6 / 8 * PAYLOAD_SHARE

    def stop_processes(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        self.processes.clear()
        for log in self.logs:
            log.close()
        self.logs.clear()

    def destroy(self) -> None:
        self.stop_processes()
        for ns in [*self.namespaces.values(), self.switch_namespace]:
            # deleting a namespace deletes the veth ends inside it, and so the pairs
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)
        if self.made_netns_dir and NETNS_ETC.is_dir() and not any(NETNS_ETC.iterdir()):
            NETNS_ETC.rmdir()

    # --- processes inside a host ---

    def on_host(self, host: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run in the host's network namespace and a UTS namespace named after it."""
        in_namespaces = ["ip", "netns", "exec", self.namespaces[host], "unshare", "--uts", "--"]
        return [*in_namespaces, sys.executable, "-c", SET_HOSTNAME_AND_EXEC, host, *argv]

    def on_switch(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run in the switch's namespace (the head node's services)."""
        return ["ip", "netns", "exec", self.switch_namespace, *argv]

    def start(
        self, name: str, argv: Sequence[str], env: dict[str, str], host: str | None = None
    ) -> tuple[subprocess.Popen, Path]:
        """A process on ``host`` (None: on the switch), its output in base/<host>-<name>.log;
        stopped by ``stop_processes`` or ``destroy``."""
        where = host or "switch"
        log_path = self.base / f"{where}-{name}.log"
        log = open(log_path, "wb")  # noqa: SIM115 - closed in stop_processes()
        self.logs.append(log)
        command = self.on_host(host, argv) if host else self.on_switch(argv)
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.processes.append(process)
        return process, log_path

    def start_agent(
        self,
        host: str,
        push_url: str,
        token: str,
        env: dict[str, str],
        samplers: Sequence[str],
        metrics_port: int,
        ceilings_file: Path | None = None,
        batch_seconds: float | None = None,
    ) -> Path:
        """``agent run`` at 1 Hz on ``host`` with ``samplers``, pushing to ``push_url``
        (its spool in base/spool-<host>), /metrics on ``metrics_port`` of every address;
        its config (0600, it holds the token) is base/agent-<host>.toml, returned."""
        config = self.base / f"agent-{host}.toml"
        text = f'host = "{host}"\ninterval_seconds = 1\nsamplers = {json.dumps(list(samplers))}\n'
        if ceilings_file is not None:
            text += f'ceilings_file = "{ceilings_file}"\n'
        text += f'[push]\nurl = "{push_url}"\ntoken = "{token}"\n'
        text += f'spool_dir = "{self.base / ("spool-" + host)}"\n'
        if batch_seconds is not None:
            text += f"batch_seconds = {batch_seconds:g}\n"
        text += f'[metrics]\nlisten = "0.0.0.0:{metrics_port}"\n'
        config.write_text(text)
        config.chmod(0o600)
        self.start("agent", [sys.executable, "-m", "agent", "run", "--config", str(config)],
                   env, host)  # fmt: skip
        return config


def wait_for_log(path: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in path.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise TimeoutError(f"{text!r} not in {path} after {timeout} s:\n{path.read_text()[-3000:]}")
