"""ansible/deploy-agents.yml against two real SSH targets, end to end.

Two inventory hosts, node1 (127.0.0.1) and node2 (127.0.0.2), are reached through a real
sshd started here (see test_ansible_harness.py) with ansible_connection=paramiko; each gets
its own prefix, config dir, spool, metrics port and host tag, and the `process` service
manager (systemd is not PID 1 on this machine). A real collector (`python -m collector
serve`) on loopback receives the pushes. The tests run in order on one deployment:
deploy, redeploy (changed=0), change one node's config (only it restarts), add an
unreachable node (it fails, the others stay), uninstall (nothing left).

What is and is not exercised, honestly: the nodes install the agent's dependencies with
`pip install --no-index --find-links` from a wheelhouse, as an offline node would; that
wheelhouse is built here on the controller with `pip download` (from the package index, or
pip's cache), and the controller builds the epochscope wheel with build isolation, which
fetches setuptools the same way. The nodes themselves never reach an index.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from test_ansible_harness import (
    REPO_ROOT,
    Controller,
    Node,
    PlaybookRun,
    SshServer,
    build_wheelhouse,
    fetch_metrics,
    free_port,
    pid_alive,
    port_is_open,
    readable_base_dir,
    remove_account,
    stop_leftover_agents,
    store_hosts,
    wait_for_port,
    write_inventory,
)

# Opt-in until these end-to-end deploys pass reliably on the 2-core CI machine (issue 6
# is open: the collector play timed out under load there). Run them with
# EPOCHSCOPE_DEPLOY_TESTS=1 .venv/bin/python -m pytest tests/test_ansible_*.py \
#     tests/test_cluster_netns.py
DEPLOY_TESTS_OPT_IN = pytest.mark.skipif(
    not os.environ.get("EPOCHSCOPE_DEPLOY_TESTS"),
    reason="end-to-end deploy test: opt in with EPOCHSCOPE_DEPLOY_TESTS=1 (issue 6 open)",
)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800), DEPLOY_TESTS_OPT_IN]

NODE_ADDRESSES = {"node1": "127.0.0.1", "node2": "127.0.0.2"}


@dataclass
class Deployment:
    controller: Controller
    sshd: SshServer
    base: Path
    inventory: Path
    nodes: dict[str, Node]
    token: str
    collector_db: Path
    group_vars: dict[str, dict[str, str]]
    head_vars: dict[str, str]
    first_run: PlaybookRun | None = None
    runs: list[PlaybookRun] = field(default_factory=list)

    def write_inventory(self, extra_nodes: dict[str, dict[str, str]] | None = None) -> Path:
        agents = {name: node.inventory_vars() for name, node in self.nodes.items()}
        agents.update(extra_nodes or {})
        write_inventory(
            self.inventory,
            {"epochscope_agents": agents, "epochscope_collector": {"head": self.head_vars}},
            self.group_vars,
        )
        return self.inventory

    def deploy(self, *args: str) -> PlaybookRun:
        run = self.controller.run("deploy-agents.yml", self.inventory, *args)
        self.runs.append(run)
        return run


def start_collector(
    base: Path, token: str, env: dict[str, str]
) -> tuple[subprocess.Popen, Path, int]:
    db = base / "collector" / "epochscope.sqlite"
    db.parent.mkdir(parents=True)
    token_file = base / "collector" / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    port = free_port()
    log = open(base / "collector" / "collector.log", "wb")  # noqa: SIM115 - closed with the process
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "collector",
            "serve",
            "--db",
            str(db),
            "--listen",
            f"127.0.0.1:{port}",
            "--token-file",
            str(token_file),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    wait_for_port("127.0.0.1", port, 30, process)
    return process, db, port


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    base = readable_base_dir("epochscope-deploy-")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    wheelhouse = build_wheelhouse()
    token = "tok-" + os.urandom(12).hex()
    sshd = SshServer(tmp_path_factory.mktemp("sshd"), tuple(NODE_ADDRESSES.values())).start()
    collector, db, collector_port = start_collector(base, token, env)
    controller = Controller.make(
        tmp_path_factory.mktemp("controller"), sshd.known_hosts_lines(), env
    )
    nodes = {
        name: Node(name, address, base / name, free_port(address))
        for name, address in NODE_ADDRESSES.items()
    }
    for node in nodes.values():
        node.make_skeleton()
    group_vars = {
        "epochscope_agents": {
            "ansible_connection": "paramiko",
            "ansible_port": str(sshd.port),
            "ansible_user": sshd.user,
            "ansible_ssh_private_key_file": str(sshd.client_key),
            "ansible_python_interpreter": "/usr/bin/python3",
            # The node's system Python (a login shell here would find pyenv's under /root).
            "epochscope_python": "/usr/bin/python3",
            "epochscope_become": "false",
            "epochscope_service_manager": "process",
            "epochscope_push_url": f"http://127.0.0.1:{collector_port}",
            "epochscope_token": token,
            "epochscope_wheelhouse": str(wheelhouse),
            "epochscope_push_batch_seconds": "1",
            # The two "nodes" share this machine's /etc/passwd.
            "epochscope_account_throttle": "1",
            "epochscope_verify_timeout_seconds": "60",
        }
    }
    # The collector check runs on the head node with the collector's Python: here the
    # controller itself, whose venv runs `python -m collector serve` above.
    head_vars = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "epochscope_collector_prefix": str(Path(sys.executable).parent.parent),
        "epochscope_collector_db": str(db),
    }
    deployment = Deployment(
        controller,
        sshd,
        base,
        base / "inventory.ini",
        nodes,
        token,
        db,
        group_vars,
        head_vars,
    )
    deployment.write_inventory()
    try:
        deployment.first_run = deployment.deploy()
        yield deployment
    finally:
        stop_leftover_agents(nodes)
        collector.terminate()
        collector.wait(10)
        sshd.stop()
        for node in nodes.values():
            remove_account(node.account)
        shutil.rmtree(base, ignore_errors=True)


def test_first_deploy_starts_both_agents_and_their_samples_reach_the_collector(deployment):
    run = deployment.first_run
    assert run.returncode == 0, run.describe()
    for name in deployment.nodes:
        assert run.recap[name].failed == 0 and run.recap[name].unreachable == 0, run.describe()
        assert run.recap[name].changed > 0
    # no_log: the token never shows in Ansible's output.
    assert deployment.token not in run.output

    for node in deployment.nodes.values():
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
        assert config["push"]["token"] == deployment.token
        assert config["push"]["spool_dir"] == str(node.state_dir / "spool")
        assert config["metrics"]["listen"] == f"{node.address}:{node.metrics_port}"

        # The agent runs from the node's venv, as the unprivileged account.
        pid = node.agent_pid()
        assert pid is not None and pid_alive(pid)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")
        assert cmdline == [
            str(node.prefix / "bin" / "python"),
            "-m",
            "agent",
            "run",
            "--config",
            str(config_path),
        ]
        uid_line = next(
            line
            for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if line.startswith("Uid:")
        )
        assert uid_line.split()[1:3] == [str(account.pw_uid)] * 2
        installed = subprocess.run(
            [str(node.prefix / "bin" / "python"), "-c", "import agent; print(agent.__file__)"],
            capture_output=True,
            text=True,
            check=True,
            cwd="/",
        ).stdout.strip()
        assert installed.startswith(str(node.prefix)), installed

    # The play itself waited for both hosts in the store; check it independently too.
    assert {"node1", "node2"} <= store_hosts(deployment.collector_db)


def test_second_run_changes_nothing(deployment):
    pids = {name: node.agent_pid() for name, node in deployment.nodes.items()}
    run = deployment.deploy()
    assert run.returncode == 0, run.describe()
    for name in deployment.nodes:
        assert run.recap[name].changed == 0, run.describe()
        assert run.recap[name].failed == 0
    assert {name: node.agent_pid() for name, node in deployment.nodes.items()} == pids


def test_config_change_restarts_only_that_agent(deployment):
    node1, node2 = deployment.nodes["node1"], deployment.nodes["node2"]
    pid1, pid2 = node1.agent_pid(), node2.agent_pid()
    node2.interval_seconds = 2.0
    deployment.write_inventory()
    run = deployment.deploy()
    assert run.returncode == 0, run.describe()
    assert run.recap["node1"].changed == 0, run.describe()
    assert run.recap["node2"].changed > 0
    assert node1.agent_pid() == pid1
    assert node2.agent_pid() != pid2 and not pid_alive(pid2)
    assert tomllib.loads((node2.config_dir / "agent.toml").read_text())["interval_seconds"] == 2
    assert 'host="node2"' in fetch_metrics(node2)


def test_unreachable_host_fails_clearly_and_the_others_stay_deployed(deployment):
    closed_port = free_port("127.0.0.3")  # nothing listens there
    deployment.write_inventory(
        {"node3": {"ansible_host": "127.0.0.3", "ansible_port": str(closed_port)}}
    )
    try:
        run = deployment.deploy()
    finally:
        deployment.write_inventory()
    assert run.returncode != 0
    assert run.recap["node3"].unreachable == 1, run.describe()
    assert "UNREACHABLE!" in run.output and "node3" in run.output
    for name, node in deployment.nodes.items():
        assert run.recap[name].failed == 0 and run.recap[name].unreachable == 0, run.describe()
        assert run.recap[name].changed == 0
        assert f'host="{name}"' in fetch_metrics(node)


def test_uninstall_leaves_nothing_behind(deployment):
    pids = {name: node.agent_pid() for name, node in deployment.nodes.items()}
    run = deployment.deploy("--tags", "uninstall")
    assert run.returncode == 0, run.describe()
    for name, node in deployment.nodes.items():
        assert run.recap[name].failed == 0, run.describe()
        assert not pid_alive(pids[name])
        assert not port_is_open(node.address, node.metrics_port)
        for path in (node.prefix, node.config_dir, node.state_dir, node.log_dir, node.run_dir):
            assert not path.exists(), path
        leftovers = [p for p in node.root.rglob("*") if not p.is_dir()]
        assert leftovers == []
    for node in deployment.nodes.values():
        with pytest.raises(KeyError):
            pwd.getpwnam(node.account)
        with pytest.raises(KeyError):
            grp.getgrnam(node.account)

    again = deployment.deploy("--tags", "uninstall")
    assert again.returncode == 0, again.describe()
    for name in deployment.nodes:
        assert again.recap[name].changed == 0, again.describe()
