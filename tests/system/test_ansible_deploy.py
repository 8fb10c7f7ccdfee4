"""ansible/site.yml (deploy-collector.yml, then deploy-agents.yml) on a small real cluster.

Three inventory hosts are reached through one real sshd started here (see
test_ansible_harness.py) with Ansible's default ssh connection: `head` (127.0.0.1) gets the
collector and the dashboard, `node1` (127.0.0.1) and `node2` (127.0.0.2) an agent each. Every
host has its own prefix, config dir, state dir, ports and account (they share this machine's
/etc/passwd), and the `process` service manager (systemd is not PID 1 here). The agents find
the collector through the inventory group alone (no epochscope_push_url), and the agent
play's last check reads the collector's store on `head` with the head's venv Python, as it
would on a cluster.

One deployment serves every test, in order (each playbook run costs tens of seconds, so the
runs are few and each answers several questions):
  0. site.yml --check --diff (deploy-collector.yml's play, then deploy-agents.yml's) on the
     fresh targets: rc 0, changes reported, nothing on the targets changed, no account made.
  1. site.yml: collector, dashboard (basic auth) and both agents up; samples of both nodes in
     the collector's store under their own host tags; secrets never in Ansible's output;
     epochscope-servicectl runs as docs/deploy.md types it.
  2. site.yml again: changed=0 on every host, nothing restarted; then site.yml --check
     --diff: changed=0, nothing on the targets changed.
  3. deploy-agents.yml with node2's interval changed and an unreachable node3: node3 fails
     (UNREACHABLE), node2's agent alone restarts, node1 changes nothing.
  4. site.yml --tags uninstall, twice: no file, process, port or account left; the second
     run changes nothing.

What is and is not exercised, honestly: the nodes install with `pip install --no-index` from
the wheels in the tar the play copies to them, as offline nodes would. The play downloads
those dependency wheels on the controller (epochscope_wheelhouse_download, cached under
~/.cache/epochscope across runs; the fixture fills the cache first so that a machine
without a package index skips here instead of failing in a play). The epochscope wheel is
built once per test session by the role's own build script and handed to the plays as
epochscope_wheel, so the plays' own build step (`pip wheel`, same function) is skipped.
"""

from __future__ import annotations

import base64
import grp
import json
import os
import pwd
import shutil
import stat
import subprocess
import time
import tomllib
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from test_ansible_harness import (
    WHEELHOUSE_CACHE,
    Controller,
    Node,
    PlaybookRun,
    SshServer,
    build_epochscope_wheel,
    download_wheelhouse,
    fetch_metrics,
    free_port,
    fresh_account_name,
    pid_alive,
    port_is_open,
    readable_base_dir,
    remove_account,
    stop_leftover_agents,
    store_hosts,
    wait_until,
    write_inventory,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

HEAD_ADDRESS = "127.0.0.1"
NODE_ADDRESSES = {"node1": "127.0.0.1", "node2": "127.0.0.2"}


class Head:
    """The head node's directories and ports (its own root, like each Node)."""

    def __init__(self, root: Path, port: int, dashboard_port: int) -> None:
        self.root = root
        self.port = port
        self.dashboard_port = dashboard_port
        self.account = fresh_account_name()
        self.prefix = root / "opt" / "epochscope-server"
        self.config_dir = root / "etc" / "epochscope"
        self.state_dir = root / "var" / "lib" / "epochscope-collector"
        self.log_dir = root / "var" / "log" / "epochscope-collector"
        self.run_dir = root / "run" / "epochscope-collector"
        self.db = self.state_dir / "epochscope.sqlite"
        for path in (self.prefix, self.config_dir, self.state_dir, self.log_dir, self.run_dir):
            path.parent.mkdir(parents=True, exist_ok=True)
        for path in [root, *root.rglob("*")]:
            path.chmod(0o755)

    def inventory_vars(self, dashboard_auth: str) -> dict[str, str]:
        return {
            "ansible_host": HEAD_ADDRESS,
            "epochscope_collector_prefix": str(self.prefix),
            "epochscope_collector_config_dir": str(self.config_dir),
            "epochscope_collector_state_dir": str(self.state_dir),
            "epochscope_collector_log_dir": str(self.log_dir),
            "epochscope_collector_run_dir": str(self.run_dir),
            "epochscope_collector_listen": f"{HEAD_ADDRESS}:{self.port}",
            "epochscope_collector_user": self.account,
            "epochscope_dashboard_auth": dashboard_auth,
            "epochscope_dashboard_host": HEAD_ADDRESS,
            "epochscope_dashboard_port": str(self.dashboard_port),
        }

    def pids(self) -> list[int]:
        if not self.run_dir.is_dir():
            return []
        return sorted(int(p.read_text().splitlines()[0]) for p in self.run_dir.glob("*.pid"))


@dataclass
class Cluster:
    controller: Controller
    sshd: SshServer
    inventory: Path
    head: Head
    nodes: dict[str, Node]
    token: str
    dashboard_auth: str
    connection: dict[str, str]
    agent_vars: dict[str, str]
    runs: list[PlaybookRun] = field(default_factory=list)
    # site.yml --check --diff on the fresh targets, with the targets' state before and after.
    fresh_check: PlaybookRun | None = None
    fresh_states: tuple[dict, dict] | None = None
    # The first real site.yml run.
    deployed: PlaybookRun | None = None
    # CPU seconds the nodes spent (SSH sessions) during each run.
    nodes_cpu: list[float] = field(default_factory=list)

    def write_inventory(self, extra_agents: dict[str, dict[str, str]] | None = None) -> None:
        agents = {name: node.inventory_vars() for name, node in self.nodes.items()}
        agents.update(extra_agents or {})
        write_inventory(
            self.inventory,
            {
                "epochscope_collector": {"head": self.head.inventory_vars(self.dashboard_auth)},
                "epochscope_agents": agents,
            },
            # The token in [all:vars], where both playbooks see it (a vault file in
            # group_vars/all/ on a real cluster).
            {
                "all": self.connection | {"epochscope_token": self.token},
                "epochscope_agents": self.agent_vars,
            },
        )

    def play(self, playbook: str, *args: str) -> PlaybookRun:
        before = self.sshd.sessions_cpu_seconds()
        run = self.controller.run(playbook, self.inventory, *args)
        self.runs.append(run)
        self.nodes_cpu.append(self.sshd.sessions_cpu_seconds() - before)
        return run

    def timings(self) -> str:
        """Where the time went, run by run (printed at the end; pytest -s shows it)."""
        lines = ["run  wall s  controller cpu s  nodes cpu s  command"]
        for number, (run, nodes_cpu) in enumerate(zip(self.runs, self.nodes_cpu, strict=True), 1):
            lines.append(
                f"{number:>3}  {run.wall_seconds:6.1f}  {run.cpu_seconds:16.1f}"
                f"  {nodes_cpu:11.1f}  {' '.join(run.args)}"
            )
        return "\n".join(lines)

    def agent_pids(self) -> dict[str, int | None]:
        return {name: node.agent_pid() for name, node in self.nodes.items()}

    @property
    def accounts(self) -> list[str]:
        return [self.head.account, *(node.account for node in self.nodes.values())]

    def target_state(self) -> dict:
        """What the playbooks manage on the targets: every path under each host's root (type,
        mode, owner; a file's size, mtime and inode too), except what the daemons write
        themselves (the contents of the state and log directories: spool, store, logs);
        whether each account exists; the daemons' pids."""
        data_dirs = {self.head.state_dir, self.head.log_dir}
        data_dirs |= {d for node in self.nodes.values() for d in (node.state_dir, node.log_dir)}
        paths = {}
        for root in (self.head.root, *(node.root for node in self.nodes.values())):
            for path in [root, *root.rglob("*")]:
                if data_dirs & set(path.parents):
                    continue
                st = path.lstat()
                entry = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
                if stat.S_ISREG(st.st_mode):
                    entry += (st.st_size, st.st_mtime_ns, st.st_ino)
                elif stat.S_ISLNK(st.st_mode):
                    entry += (os.readlink(path),)
                paths[str(path)] = entry
        accounts = {name: account_exists(name) for name in self.accounts}
        return {"paths": paths, "accounts": accounts, "pids": (self.agent_pids(), self.head.pids())}


def account_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def differences(before: dict, after: dict) -> list[str]:
    """Readable differences between two target_state() results (for assertion messages)."""
    changed = [
        f"{path}: {before['paths'].get(path)} -> {after['paths'].get(path)}"
        for path in sorted(set(before["paths"]) | set(after["paths"]))
        if before["paths"].get(path) != after["paths"].get(path)
    ]
    for key in ("accounts", "pids"):
        if before[key] != after[key]:
            changed.append(f"{key}: {before[key]} -> {after[key]}")
    return changed


def process_uid(pid: int) -> str:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return next(line for line in status if line.startswith("Uid:")).split()[1]


def process_argv(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("wheels")
    wheel = build_epochscope_wheel(scratch)
    for extras in ("", "server"):
        download_wheelhouse(wheel, extras, scratch)
    base = readable_base_dir("epochscope-deploy-")
    sshd = SshServer(tmp_path_factory.mktemp("sshd"), (HEAD_ADDRESS, "127.0.0.2")).start()
    controller = Controller.make(
        tmp_path_factory.mktemp("controller"), sshd.known_hosts_lines(), dict(os.environ)
    )
    head = Head(base / "head", free_port(HEAD_ADDRESS), free_port(HEAD_ADDRESS))
    nodes = {
        name: Node(name, address, base / name, free_port(address))
        for name, address in NODE_ADDRESSES.items()
    }
    for node in nodes.values():
        node.make_skeleton()
    connection = {
        **sshd.login_vars(controller),
        # The node's system Python (a login shell here would find pyenv's under /root).
        "epochscope_python": "/usr/bin/python3",
        "epochscope_become": "false",
        "epochscope_service_manager": "process",
        "epochscope_wheel": str(wheel),
        "epochscope_wheelhouse_download": "true",
        # The controller's HOME is a temporary directory here; keep the real user's cache.
        "epochscope_wheelhouse_cache": str(WHEELHOUSE_CACHE),
        # The three "hosts" share this machine's /etc/passwd: one useradd at a time.
        "epochscope_account_throttle": "1",
    }
    agent_vars = {"epochscope_push_batch_seconds": "1", "epochscope_verify_timeout_seconds": "60"}
    cluster = Cluster(
        controller,
        sshd,
        base / "inventory.ini",
        head,
        nodes,
        token="tok-" + os.urandom(12).hex(),
        dashboard_auth="admin:pw-" + os.urandom(12).hex(),
        connection=connection,
        agent_vars=agent_vars,
    )
    cluster.write_inventory()
    try:
        before = cluster.target_state()
        cluster.fresh_check = cluster.play("site.yml", "--check", "--diff")
        cluster.fresh_states = (before, cluster.target_state())
        cluster.deployed = cluster.play("site.yml")
        yield cluster
    finally:
        print(cluster.timings())
        stop_leftover_agents(nodes)
        for pid in head.pids():
            if pid_alive(pid):
                os.kill(pid, 15)
                wait_until(lambda pid=pid: not pid_alive(pid), 30, "collector to exit")
        sshd.stop()
        for account in cluster.accounts:
            remove_account(account)
        shutil.rmtree(base, ignore_errors=True)


def test_check_mode_on_fresh_targets_reports_changes_and_changes_nothing(cluster):
    run = cluster.fresh_check
    assert run.returncode == 0, run.describe()
    # Both playbooks' plays ran (site.yml imports deploy-collector.yml, then deploy-agents.yml).
    assert "PLAY [Deploy the epochscope collector and dashboard]" in run.output
    assert "PLAY [Deploy the epochscope agent]" in run.output
    for host in ("head", *cluster.nodes):
        assert run.recap[host].failed == 0 and run.recap[host].unreachable == 0, run.describe()
        assert run.recap[host].changed > 0, run.describe()
    # --diff shows what would be written (agent.toml itself is no_log: it holds the token).
    assert "+++ after:" in run.output and "#!" + str(cluster.nodes["node1"].prefix) in run.output
    before, after = cluster.fresh_states
    assert differences(before, after) == []
    assert not any(after["accounts"].values())
    password = cluster.dashboard_auth.split(":", 1)[1]
    assert cluster.token not in run.output and password not in run.output


def test_first_run_deploys_the_collector_the_dashboard_and_both_agents(cluster):
    run = cluster.deployed
    assert run.returncode == 0, run.describe()
    for host in ("head", *cluster.nodes):
        assert run.recap[host].failed == 0 and run.recap[host].unreachable == 0, run.describe()
        assert run.recap[host].changed > 0
    # no_log: neither secret ever shows in Ansible's output.
    password = cluster.dashboard_auth.split(":", 1)[1]
    assert cluster.token not in run.output
    assert password not in run.output


def test_collector_runs_with_its_token_as_its_own_account(cluster):
    head = cluster.head
    with urllib.request.urlopen(f"http://{HEAD_ADDRESS}:{head.port}/health", timeout=5) as answer:
        assert answer.status == 200
    account = pwd.getpwnam(head.account)
    token_file = head.config_dir / "collector.token"
    assert token_file.read_text().strip() == cluster.token
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert token_file.stat().st_uid == account.pw_uid
    pids = head.pids()
    assert len(pids) == 2  # collector and dashboard
    password = cluster.dashboard_auth.split(":", 1)[1]
    for pid in pids:
        assert process_argv(pid)[0] == str(head.prefix / "bin" / "python")
        assert password not in Path(f"/proc/{pid}/cmdline").read_text()
        assert process_uid(pid) == str(account.pw_uid)


def test_dashboard_asks_for_the_password(cluster):
    url = f"http://{HEAD_ADDRESS}:{cluster.head.dashboard_port}/"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10)
    assert refused.value.code == 401
    request = urllib.request.Request(url)
    credentials = base64.b64encode(cluster.dashboard_auth.encode()).decode()
    request.add_header("Authorization", f"Basic {credentials}")
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200


def test_both_agents_serve_metrics_and_push_to_the_deployed_collector(cluster):
    for node in cluster.nodes.values():
        account = pwd.getpwnam(node.account)
        metrics = fetch_metrics(node)
        assert f'host="{node.name}"' in metrics
        assert "epochscope_" in metrics

        config_path = node.config_dir / "agent.toml"
        stat = config_path.stat()
        assert stat.st_mode & 0o777 == 0o600
        assert stat.st_uid == account.pw_uid
        config = tomllib.loads(config_path.read_text())
        assert config["host"] == node.name
        assert config["push"]["token"] == cluster.token
        # Found through the inventory group epochscope_collector and its listen port.
        assert config["push"]["url"] == f"http://{HEAD_ADDRESS}:{cluster.head.port}"
        assert config["push"]["spool_dir"] == str(node.state_dir / "spool")
        assert config["metrics"]["listen"] == f"{node.address}:{node.metrics_port}"

        # The agent runs from the node's venv, as the unprivileged account.
        pid = node.agent_pid()
        assert pid is not None and pid_alive(pid)
        assert process_argv(pid) == [
            str(node.prefix / "bin" / "python"),
            "-m",
            "agent",
            "run",
            "--config",
            str(config_path),
        ]
        assert process_uid(pid) == str(account.pw_uid)
        installed = subprocess.run(
            [str(node.prefix / "bin" / "python"), "-c", "import agent; print(agent.__file__)"],
            capture_output=True,
            text=True,
            check=True,
            cwd="/",
        ).stdout.strip()
        assert installed.startswith(str(node.prefix)), installed

    # The play waited for both nodes in the store, on the head node with the head's venv
    # Python; check the store independently too: one host tag per node.
    # The play waited for both nodes' samples through the collector's read API, from each
    # node, at the URL its agent pushes to; check the store independently too.
    output = cluster.deployed.output
    collector_url = f"http://{HEAD_ADDRESS}:{cluster.head.port}"
    assert f"Wait for the node's samples at the collector ({collector_url})" in output
    assert {"node1", "node2"} <= store_hosts(cluster.head.db)


def test_servicectl_runs_as_the_docs_show_it(cluster):
    """docs/deploy.md: `/opt/epochscope/bin/epochscope-servicectl SPEC status`, typed at a
    bash prompt, on every node and on the head."""
    daemons = [
        (node.prefix, node.config_dir / "epochscope-agent.service.json", node.agent_pid())
        for node in cluster.nodes.values()
    ]
    head = cluster.head
    for name in ("epochscope-collector", "epochscope-dashboard"):
        pid = int((head.run_dir / f"{name}.pid").read_text().splitlines()[0])
        daemons.append((head.prefix, head.config_dir / f"{name}.service.json", pid))
    for prefix, spec, pid in daemons:
        servicectl = prefix / "bin" / "epochscope-servicectl"
        assert servicectl.read_text().splitlines()[0] == f"#!{prefix}/bin/python"
        assert servicectl.stat().st_mode & 0o777 == 0o755
        typed = subprocess.run(
            ["bash", "-c", '"$0" "$1" status', str(servicectl), str(spec)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert (typed.returncode, typed.stdout.strip()) == (0, f"running pid {pid}"), typed.stderr


def test_second_run_changes_nothing(cluster):
    agent_pids, head_pids = cluster.agent_pids(), cluster.head.pids()
    run = cluster.play("site.yml")
    assert run.returncode == 0, run.describe()
    for host in ("head", *cluster.nodes):
        assert run.recap[host].changed == 0, run.describe()
        assert run.recap[host].failed == 0
    assert cluster.agent_pids() == agent_pids
    assert cluster.head.pids() == head_pids


def test_check_mode_on_the_installed_cluster_changes_nothing(cluster):
    before = cluster.target_state()
    run = cluster.play("site.yml", "--check", "--diff")
    after = cluster.target_state()
    assert run.returncode == 0, run.describe()
    assert "PLAY [Deploy the epochscope agent]" in run.output
    for host in ("head", *cluster.nodes):
        assert run.recap[host].failed == 0, run.describe()
        assert run.recap[host].changed == 0, run.describe()
    assert differences(before, after) == []
    password = cluster.dashboard_auth.split(":", 1)[1]
    assert cluster.token not in run.output and password not in run.output


def test_config_change_restarts_only_that_agent_and_an_unreachable_host_fails_clearly(cluster):
    node1, node2 = cluster.nodes["node1"], cluster.nodes["node2"]
    pid1, pid2 = node1.agent_pid(), node2.agent_pid()
    node2.interval_seconds = 2.0
    closed_port = free_port("127.0.0.3")  # nothing listens there
    cluster.write_inventory(
        {"node3": {"ansible_host": "127.0.0.3", "ansible_port": str(closed_port)}}
    )
    try:
        run = cluster.play("deploy-agents.yml")
    finally:
        cluster.write_inventory()
    assert run.returncode != 0
    assert run.recap["node3"].unreachable == 1, run.describe()
    assert "UNREACHABLE!" in run.output and "node3" in run.output
    for name in cluster.nodes:
        assert run.recap[name].failed == 0 and run.recap[name].unreachable == 0, run.describe()
    assert run.recap["node1"].changed == 0, run.describe()
    assert node1.agent_pid() == pid1
    assert run.recap["node2"].changed > 0
    assert node2.agent_pid() != pid2 and not pid_alive(pid2)
    assert tomllib.loads((node2.config_dir / "agent.toml").read_text())["interval_seconds"] == 2
    for name, node in cluster.nodes.items():
        assert f'host="{name}"' in fetch_metrics(node)


def test_ceilings_measured_on_every_node_are_reported_by_the_running_agents(cluster):
    """`--tags ceilings` runs `agent ceilings` on each node (a small scratch file here);
    the running agent reports them from its next tick, without a restart. With
    epochscope_ceilings_peer, node1 (the play's first host) receives on 127.0.0.1 (the
    default bind) and node2 sends to it: node2 keeps the measured peer throughput, and
    the receiver has exited at the end of the play (its port free for the next run)."""
    pids = cluster.agent_pids()
    peer_port = free_port(HEAD_ADDRESS)
    run = cluster.play(
        "deploy-agents.yml", "--tags", "ceilings",
        "-e", '{"epochscope_ceilings_args": ["--disk-mib", "8", "--disk-seconds", "1", '
        '"--cpu-seconds", "0.2"], "epochscope_ceilings_peer": true, '
        f'"epochscope_ceilings_peer_port": {peer_port}, "epochscope_ceilings_peer_seconds": 1}}',
    )  # fmt: skip
    assert run.returncode == 0, run.describe()
    assert not port_is_open(HEAD_ADDRESS, peer_port)  # the receiver exited
    peers = {}
    for name, node in cluster.nodes.items():
        sent = 1 if name == "node2" else 0  # the measurement, and node2's sending
        assert run.recap[name].changed == 1 + sent, run.describe()
        assert run.recap[name].failed == 0, run.describe()
        kept = json.loads((node.state_dir / "ceilings.json").read_text())
        peers[name] = [
            (c["device"], c["value"])
            for c in kept["ceilings"]
            if c["field"] == "peer_throughput_bytes_per_second"
        ]
        assert {c["field"] for c in kept["ceilings"]} >= {
            "disk_sequential_read_bytes_per_second",
            "disk_random_read_bytes_per_second",
        }
        deadline = time.monotonic() + 60
        while "epochscope_ceiling_disk_sequential_read" not in fetch_metrics(node):
            assert time.monotonic() < deadline, "the agent never reported its ceilings"
            time.sleep(1)
    assert cluster.agent_pids() == pids  # picked up, not restarted
    assert peers["node1"] == []
    ((device, rate),) = peers["node2"]
    assert device == f"{HEAD_ADDRESS}:{peer_port}" and rate > 1e6  # loopback: well above


def test_uninstall_leaves_nothing_behind(cluster):
    agent_pids, head_pids = cluster.agent_pids(), cluster.head.pids()
    run = cluster.play("site.yml", "--tags", "uninstall")
    assert run.returncode == 0, run.describe()
    for host in ("head", *cluster.nodes):
        assert run.recap[host].failed == 0, run.describe()
    assert not any(pid_alive(pid) for pid in [*agent_pids.values(), *head_pids])
    assert not port_is_open(HEAD_ADDRESS, cluster.head.port)
    for node in cluster.nodes.values():
        assert not port_is_open(node.address, node.metrics_port)
        for path in (node.prefix, node.config_dir, node.state_dir, node.log_dir, node.run_dir):
            assert not path.exists(), path
    for root in (cluster.head.root, *(node.root for node in cluster.nodes.values())):
        assert [p for p in root.rglob("*") if not p.is_dir()] == []
    for account in cluster.accounts:
        with pytest.raises(KeyError):
            pwd.getpwnam(account)
        with pytest.raises(KeyError):
            grp.getgrnam(account)

    again = cluster.play("site.yml", "--tags", "uninstall")
    assert again.returncode == 0, again.describe()
    for host in ("head", *cluster.nodes):
        assert again.recap[host].changed == 0, again.describe()
