"""ansible/deploy-agents.yml alone, against a collector the playbooks did not install.

The README offers it: "Agents alone, with an existing collector: ansible-playbook -i
inventory.ini ansible/deploy-agents.yml". Here that collector is `python -m collector serve`
started by the test on loopback, with a token; the inventory names it as the first host of
epochscope_collector (its address and listen port), and that host's SSH port is closed, so
nothing may log in there. One node, `node1`, is reached through the real sshd of
test_ansible_harness.py with the `process` service manager.

  1. deploy-agents.yml: the agent is installed and started, and the play's last check finds
     node1 in the collector's read API (GET /api/v1/hosts, with the token), asked from the
     node at the URL its agent pushes to; the token never shows in Ansible's output.
  2. The collector stopped, deploy-agents.yml --tags verify fails for node1 with a message
     naming the URL it asked and what came back (no answer).
  3. deploy-agents.yml --tags uninstall leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
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
    readable_base_dir,
    remove_account,
    stop_leftover_agents,
    store_hosts,
    write_inventory,
)

from bench.reliability import harness as collector_harness

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ADDRESS = "127.0.0.1"


@dataclass
class Setup:
    controller: Controller
    inventory: Path
    node: Node
    collector: collector_harness.Collector
    token: str

    @property
    def collector_url(self) -> str:
        return f"http://{ADDRESS}:{self.collector.port}"

    def play(self, *args: str) -> PlaybookRun:
        return self.controller.run("deploy-agents.yml", self.inventory, *args)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("wheels")
    wheel = build_epochscope_wheel(scratch)
    download_wheelhouse(wheel, "", scratch)
    base = readable_base_dir("epochscope-agents-alone-")
    token, token_file = collector_harness.write_token_file(base, "tok-" + os.urandom(12).hex())
    collector = collector_harness.Collector(
        db=base / "collector.sqlite", token_file=token_file, log=base / "collector.log"
    )
    collector.start()
    sshd = SshServer(tmp_path_factory.mktemp("sshd"), (ADDRESS,)).start()
    controller = Controller.make(
        tmp_path_factory.mktemp("controller"), sshd.known_hosts_lines(), dict(os.environ)
    )
    node = Node("node1", ADDRESS, base / "node1", free_port(ADDRESS))
    node.make_skeleton()
    inventory = base / "inventory.ini"
    write_inventory(
        inventory,
        {
            # The existing collector: the agents find it here; nothing logs in to it.
            "epochscope_collector": {
                "head": {
                    "ansible_host": ADDRESS,
                    "ansible_port": str(free_port(ADDRESS)),  # closed
                    "epochscope_collector_listen": f"{ADDRESS}:{collector.port}",
                }
            },
            "epochscope_agents": {"node1": node.inventory_vars()},
        },
        {
            "all": {
                **sshd.login_vars(controller),
                "epochscope_python": "/usr/bin/python3",
                "epochscope_become": "false",
                "epochscope_service_manager": "process",
                "epochscope_wheel": str(wheel),
                "epochscope_wheelhouse_download": "true",
                "epochscope_wheelhouse_cache": str(WHEELHOUSE_CACHE),
                "epochscope_token": token,
            },
            "epochscope_agents": {
                "epochscope_push_batch_seconds": "1",
                "epochscope_verify_timeout_seconds": "60",
            },
        },
    )
    try:
        yield Setup(controller, inventory, node, collector, token)
    finally:
        stop_leftover_agents({"node1": node})
        collector.stop()
        sshd.stop()
        remove_account(node.account)
        shutil.rmtree(base, ignore_errors=True)


def test_agents_alone_verify_through_the_collectors_read_api(setup):
    run = setup.play()
    assert run.returncode == 0, run.describe()
    assert run.recap["node1"].failed == 0 and run.recap["node1"].changed > 0, run.describe()
    # Nothing logged in to the collector's host (its SSH port is closed).
    assert "head" not in run.recap
    assert f"Wait for the node's samples at the collector ({setup.collector_url})" in run.output
    assert setup.token not in run.output
    assert 'host="node1"' in fetch_metrics(setup.node)
    assert "node1" in store_hosts(setup.collector.db)


def test_verify_names_the_collector_url_when_the_collector_is_down(setup):
    setup.collector.stop()
    run = setup.play("--tags", "verify", "-e", "epochscope_verify_timeout_seconds=3")
    assert run.returncode != 0
    assert run.recap["node1"].failed == 1, run.describe()
    message = next(line for line in run.output.splitlines() if line.startswith("fatal: [node1]"))
    assert f"GET {setup.collector_url}/api/v1/hosts?format=json got no answer" in message
    assert "Connection refused" in message
    assert setup.token not in run.output


def test_uninstall_leaves_nothing_behind(setup):
    run = setup.play("--tags", "uninstall")
    assert run.returncode == 0, run.describe()
    node = setup.node
    for path in (node.prefix, node.config_dir, node.state_dir, node.log_dir, node.run_dir):
        assert not path.exists(), path
