"""deploy-agents.yml with TLS (role epochscope_tls) against an existing collector that
serves TLS and requires client certificates.

The site's CA is made here (its certificate and key on the controller, as a site would
keep them); the test issues the collector's certificate with it and starts `collector serve
--tls-cert-file --tls-key-file --tls-client-ca-file --token-file`. The play, with
epochscope_tls, epochscope_tls_client_certs and epochscope_metrics_token, issues node1's
certificate with openssl on the controller, deploys it with the CA, and configures the
agent: push over https verified against the CA with node1's certificate as its client
certificate, /metrics over TLS requiring a client certificate and the bearer token. One
node, `node1`, is reached through the real sshd of test_ansible_harness.py with the
`process` service manager.

  1. deploy-agents.yml: node1's samples reach the collector (the play's own check, over
     https with the CA and node1's certificate); /metrics answers over TLS with a client
     certificate and the token, 401 without the token, nothing without a certificate;
     neither token shows in Ansible's output.
  2. deploy-agents.yml again: nothing changes (the certificate is not issued twice).
  3. --tags uninstall: the certificate, key, CA and token files are gone with the rest.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import urllib.error
import urllib.request
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
    free_port,
    readable_base_dir,
    remove_account,
    stop_leftover_agents,
    store_hosts,
    write_inventory,
)

from bench.reliability import harness as collector_harness
from tests.support.tls_certs import TestCa

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ADDRESS = "127.0.0.1"
METRICS_TOKEN = "mtok-" + os.urandom(8).hex()


@dataclass
class Setup:
    controller: Controller
    inventory: Path
    node: Node
    collector: collector_harness.Collector
    token: str
    ca: TestCa
    client: object  # an Issued client certificate of the site CA (a Prometheus's)

    def play(self, *args: str) -> PlaybookRun:
        return self.controller.run("deploy-agents.yml", self.inventory, *args)

    def scrape(self, token: str | None, with_cert: bool = True) -> tuple[int, str]:
        context = ssl.create_default_context(cafile=str(self.ca.ca_file))
        if with_cert:
            context.load_cert_chain(self.client.cert_file, self.client.key_file)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        url = f"https://{ADDRESS}:{self.node.metrics_port}/metrics"
        request = urllib.request.Request(url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10, context=context) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, ""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("wheels")
    wheel = build_epochscope_wheel(scratch)
    download_wheelhouse(wheel, "", scratch)
    base = readable_base_dir("epochscope-ansible-tls-")
    ca = TestCa(base / "site-ca", "site CA")
    server = ca.issue("collector")
    client = ca.issue("prometheus", server=False)
    token, token_file = collector_harness.write_token_file(base, "tok-" + os.urandom(12).hex())
    collector = collector_harness.Collector(
        db=base / "collector.sqlite",
        token_file=token_file,
        log=base / "collector.log",
        extra_args=(
            "--tls-cert-file", str(server.cert_file), "--tls-key-file", str(server.key_file),
            "--tls-client-ca-file", str(ca.ca_file),
        ),
    )  # fmt: skip
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
            "epochscope_collector": {
                "head": {
                    "ansible_host": ADDRESS,
                    "ansible_port": str(free_port(ADDRESS)),  # closed: nothing logs in
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
                "epochscope_tls": "true",
                "epochscope_tls_client_certs": "true",
                "epochscope_tls_ca_cert": str(ca.ca_file),
                "epochscope_tls_ca_key": str(ca.key_file),
                "epochscope_tls_dir": str(base / "issued"),
                "epochscope_metrics_token": METRICS_TOKEN,
            },
            "epochscope_agents": {
                "epochscope_push_batch_seconds": "1",
                "epochscope_verify_timeout_seconds": "60",
            },
        },
    )
    try:
        yield Setup(controller, inventory, node, collector, token, ca, client)
    finally:
        stop_leftover_agents({"node1": node})
        collector.stop()
        sshd.stop()
        remove_account(node.account)
        shutil.rmtree(base, ignore_errors=True)


def test_agents_push_and_serve_metrics_over_tls(setup):
    run = setup.play()
    assert run.returncode == 0, run.describe()
    assert run.recap["node1"].failed == 0, run.describe()
    assert f"https://{ADDRESS}:{setup.collector.port}" in run.output
    assert setup.token not in run.output and METRICS_TOKEN not in run.output
    assert "node1" in store_hosts(setup.collector.db)
    config = (setup.node.config_dir / "agent.toml").read_text()
    assert 'tls_client_ca_file = "' in config and 'bearer_token_file = "' in config
    key = setup.node.config_dir / "agent-tls.key"
    assert key.stat().st_mode & 0o777 == 0o600

    status, page = setup.scrape(METRICS_TOKEN)
    assert status == 200 and 'host="node1"' in page
    assert setup.scrape(None)[0] == 401
    assert setup.scrape("wrong")[0] == 401
    with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError, socket.timeout)):
        setup.scrape(METRICS_TOKEN, with_cert=False)


def test_a_second_run_changes_nothing(setup):
    run = setup.play()
    assert run.returncode == 0, run.describe()
    assert run.recap["node1"].changed == 0, run.describe()


def test_uninstall_removes_the_tls_files(setup):
    run = setup.play("--tags", "uninstall")
    assert run.returncode == 0, run.describe()
    for name in ("agent-ca.pem", "agent-tls.pem", "agent-tls.key", "metrics.token"):
        assert not (setup.node.config_dir / name).exists(), name
    assert not setup.node.config_dir.exists()
