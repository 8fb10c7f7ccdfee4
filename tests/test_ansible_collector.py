"""ansible/deploy-collector.yml, then deploy-agents.yml pushing to what it deployed.

The head node (127.0.0.1) and one compute node (127.0.0.2) are reached over a real sshd
with paramiko, as in test_ansible_deploy.py. The collector play installs epochscope[server]
into its own venv from a wheelhouse (--no-index), writes the token file, and starts
`collector serve` and `dashboard serve` under the `process` service manager as its own
account; the dashboard asks for HTTP basic auth, whose password reaches it through its
environment (never its command line, nor Ansible's output). The agent play then finds the
collector through the inventory group alone (no epochscope_push_url) and its end-of-play
check reads the store with the head node's venv Python, as it would on a cluster.
Redeploying the collector changes nothing; uninstalling both leaves no file, process or
account behind.
"""

from __future__ import annotations

import base64
import os
import pwd
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from test_ansible_harness import (
    Controller,
    Node,
    SshServer,
    build_wheelhouse,
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

# Opt-in until these end-to-end deploys pass reliably on the 2-core CI machine (issue 6
# is open: the collector play timed out under load there). Run them with
# EPOCHSCOPE_DEPLOY_TESTS=1 .venv/bin/python -m pytest tests/test_ansible_*.py \
#     tests/test_cluster_netns.py
DEPLOY_TESTS_OPT_IN = pytest.mark.skipif(
    not os.environ.get("EPOCHSCOPE_DEPLOY_TESTS"),
    reason="end-to-end deploy test: opt in with EPOCHSCOPE_DEPLOY_TESTS=1 (issue 6 open)",
)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800), DEPLOY_TESTS_OPT_IN]

HEAD, NODE = "127.0.0.1", "127.0.0.2"


class Head:
    def __init__(self, root: Path, port: int, dashboard_port: int) -> None:
        self.root = root
        self.port = port
        self.dashboard_port = dashboard_port
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

    def inventory_vars(self, token: str, account: str, dashboard_auth: str) -> dict[str, str]:
        return {
            "ansible_host": HEAD,
            "epochscope_collector_prefix": str(self.prefix),
            "epochscope_collector_config_dir": str(self.config_dir),
            "epochscope_collector_state_dir": str(self.state_dir),
            "epochscope_collector_log_dir": str(self.log_dir),
            "epochscope_collector_run_dir": str(self.run_dir),
            "epochscope_collector_listen": f"{HEAD}:{self.port}",
            "epochscope_collector_user": account,
            "epochscope_dashboard_auth": dashboard_auth,
            "epochscope_dashboard_host": HEAD,
            "epochscope_dashboard_port": str(self.dashboard_port),
            "epochscope_token": token,
        }

    def pids(self) -> list[int]:
        pids = []
        for pidfile in self.run_dir.glob("*.pid"):
            pids.append(int(pidfile.read_text().splitlines()[0]))
        return pids


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = readable_base_dir("epochscope-head-")
    wheelhouse = build_wheelhouse(extras=("server",))
    sshd = SshServer(tmp_path_factory.mktemp("sshd"), (HEAD, NODE)).start()
    controller = Controller.make(
        tmp_path_factory.mktemp("controller"), sshd.known_hosts_lines(), dict(os.environ)
    )
    head = Head(base / "head", free_port(HEAD), free_port(HEAD))
    node = Node("node1", NODE, base / "node1", free_port(NODE))
    node.make_skeleton()
    collector_account = fresh_account_name()
    token = "tok-" + os.urandom(12).hex()
    dashboard_auth = "admin:pw-" + os.urandom(12).hex()
    connection = {
        "ansible_connection": "paramiko",
        "ansible_port": str(sshd.port),
        "ansible_user": sshd.user,
        "ansible_ssh_private_key_file": str(sshd.client_key),
        "ansible_python_interpreter": "/usr/bin/python3",
        "epochscope_python": "/usr/bin/python3",
        "epochscope_become": "false",
        "epochscope_service_manager": "process",
        "epochscope_wheelhouse": str(wheelhouse),
    }
    inventory = base / "inventory.ini"
    node_vars = node.inventory_vars() | {
        "epochscope_token": token,
        "epochscope_push_batch_seconds": "1",
        # The agent needs only the base dependencies, not the server's.
        "epochscope_wheelhouse": str(build_wheelhouse()),
    }
    write_inventory(
        inventory,
        {
            "epochscope_collector": {
                "head": head.inventory_vars(token, collector_account, dashboard_auth)
            },
            "epochscope_agents": {"node1": node_vars},
        },
        {"all": connection},
    )
    state = {
        "controller": controller,
        "inventory": inventory,
        "head": head,
        "node": node,
        "token": token,
        "dashboard_auth": dashboard_auth,
        "accounts": (collector_account, node.account),
    }
    try:
        yield state
    finally:
        stop_leftover_agents({"node1": node})
        for pid in head.pids() if head.run_dir.exists() else []:
            if pid_alive(pid):
                os.kill(pid, 15)
                wait_until(lambda pid=pid: not pid_alive(pid), 30, "collector to exit")
        sshd.stop()
        for account in state["accounts"]:
            remove_account(account)
        shutil.rmtree(base, ignore_errors=True)


def test_collector_play_starts_the_collector_with_its_token(cluster):
    head: Head = cluster["head"]
    run = cluster["controller"].run("deploy-collector.yml", cluster["inventory"])
    assert run.returncode == 0, run.describe()
    assert run.recap["head"].failed == 0 and run.recap["head"].changed > 0
    assert cluster["token"] not in run.output
    password = cluster["dashboard_auth"].split(":", 1)[1]
    assert password not in run.output
    with urllib.request.urlopen(f"http://{HEAD}:{head.port}/health", timeout=5) as response:
        assert response.status == 200
    token_file = head.config_dir / "collector.token"
    account = pwd.getpwnam(cluster["accounts"][0])
    assert token_file.read_text().strip() == cluster["token"]
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert token_file.stat().st_uid == account.pw_uid
    pids = head.pids()
    assert len(pids) == 2
    for pid in pids:
        assert password not in Path(f"/proc/{pid}/cmdline").read_text()
        uid = next(
            line
            for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if line.startswith("Uid:")
        ).split()[1]
        assert uid == str(account.pw_uid)


def test_dashboard_asks_for_the_password(cluster):
    head: Head = cluster["head"]
    url = f"http://{HEAD}:{head.dashboard_port}/"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10)
    assert refused.value.code == 401
    user, password = cluster["dashboard_auth"].split(":", 1)
    request = urllib.request.Request(url)
    credentials = base64.b64encode(f"{user}:{password}".encode()).decode()
    request.add_header("Authorization", f"Basic {credentials}")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def test_agent_play_finds_the_collector_through_the_inventory(cluster):
    head: Head = cluster["head"]
    node: Node = cluster["node"]
    run = cluster["controller"].run("deploy-agents.yml", cluster["inventory"])
    assert run.returncode == 0, run.describe()
    assert run.recap["node1"].failed == 0
    # The push URL came from the epochscope_collector group and its listen port.
    config = (node.config_dir / "agent.toml").read_text()
    assert f'url = "http://{HEAD}:{head.port}"' in config
    assert 'host="node1"' in fetch_metrics(node)
    assert "node1" in store_hosts(head.db)
    # The play's own check ran on the head node, with the head node's venv Python.
    assert "Wait for the node's samples in the collector's store" in run.output
    assert "[node1 -> head" in run.output


def test_collector_second_run_changes_nothing(cluster):
    pids = sorted(cluster["head"].pids())
    run = cluster["controller"].run("deploy-collector.yml", cluster["inventory"])
    assert run.returncode == 0, run.describe()
    assert run.recap["head"].changed == 0, run.describe()
    assert sorted(cluster["head"].pids()) == pids


def test_uninstall_both_leaves_nothing_behind(cluster):
    head: Head = cluster["head"]
    pids = head.pids()
    controller = cluster["controller"]
    for playbook in ("deploy-agents.yml", "deploy-collector.yml"):
        run = controller.run(playbook, cluster["inventory"], "--tags", "uninstall")
        assert run.returncode == 0, run.describe()
    assert not any(pid_alive(pid) for pid in pids)
    assert not port_is_open(HEAD, head.port)
    for root in (head.root, cluster["node"].root):
        assert [p for p in root.rglob("*") if not p.is_dir()] == []
    for account in cluster["accounts"]:
        with pytest.raises(KeyError):
            pwd.getpwnam(account)
