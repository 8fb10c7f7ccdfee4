"""deploy-collector.yml with TLS (epochscope_tls, epochscope_tls_client_certs) on a head
reached through the real sshd of test_ansible_harness.py, with the `process` service
manager.

The site's CA is made here (certificate and key on the controller, as a site keeps them);
the play issues the head's certificate with it (openssl on the controller), puts it, its
key and the CA in the head's config directory, starts the collector with
``--tls-cert-file --tls-key-file --tls-client-ca-file`` and the dashboard over HTTPS, and
checks both with the CA (the role's own check).

  1. deploy-collector.yml: a writer with a certificate of the site CA and the token
     writes over https (204, stored); without a client certificate, with one of another
     CA, or in plain HTTP it is refused; the dashboard answers over https (basic auth).
     Neither secret shows in Ansible's output.
  2. --tags uninstall: the certificate, key and CA files are gone, the processes stopped.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_ansible_deploy import HEAD_ADDRESS, Head
from test_ansible_harness import (
    WHEELHOUSE_CACHE,
    Controller,
    SshServer,
    build_epochscope_wheel,
    download_wheelhouse,
    free_port,
    pid_alive,
    readable_base_dir,
    remove_account,
    store_hosts,
    wait_until,
    write_inventory,
)

from tests.support.tls_certs import TestCa

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

LINE = b"tls_check,host=writer1 value=1i 1700000000000000000\n"
TLS_FILES = ("collector-ca.pem", "collector-tls.pem", "collector-tls.key")


@dataclass
class Setup:
    controller: Controller
    inventory: Path
    head: Head
    token: str
    dashboard_auth: str
    ca: TestCa
    writer: object  # an Issued client certificate of the site CA
    stranger: object  # a client certificate of another CA

    def context(self, client=None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca.ca_file))
        if client is not None:
            context.load_cert_chain(client.cert_file, client.key_file)
        return context

    def write(self, client) -> int:
        request = urllib.request.Request(
            f"https://{HEAD_ADDRESS}:{self.head.port}/api/v2/write?org=o&bucket=b",
            data=LINE,
            headers={"Authorization": f"Token {self.token}"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10, context=self.context(client)) as reply:
            return reply.status


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("wheels")
    wheel = build_epochscope_wheel(scratch)
    for extras in ("", "server"):
        download_wheelhouse(wheel, extras, scratch)
    base = readable_base_dir("epochscope-ansible-collector-tls-")
    ca = TestCa(base / "site-ca", "site CA")
    writer = ca.issue("writer1", server=False)
    stranger = TestCa(base / "other-ca", "another CA").issue("writer1", server=False)
    sshd = SshServer(tmp_path_factory.mktemp("sshd"), (HEAD_ADDRESS,)).start()
    controller = Controller.make(
        tmp_path_factory.mktemp("controller"), sshd.known_hosts_lines(), dict(os.environ)
    )
    head = Head(base / "head", free_port(HEAD_ADDRESS), free_port(HEAD_ADDRESS))
    token = "tok-" + os.urandom(12).hex()
    dashboard_auth = "admin:pw-" + os.urandom(12).hex()
    inventory = base / "inventory.ini"
    write_inventory(
        inventory,
        {"epochscope_collector": {"head": head.inventory_vars(dashboard_auth)}},
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
            }
        },
    )
    try:
        yield Setup(controller, inventory, head, token, dashboard_auth, ca, writer, stranger)
    finally:
        for pid in head.pids():
            if pid_alive(pid):
                os.kill(pid, 15)
                wait_until(lambda pid=pid: not pid_alive(pid), 30, "collector to exit")
        sshd.stop()
        remove_account(head.account)
        shutil.rmtree(base, ignore_errors=True)


def test_the_collector_and_dashboard_serve_tls_requiring_client_certificates(setup):
    run = setup.controller.run("deploy-collector.yml", setup.inventory)
    assert run.returncode == 0, run.describe()
    assert run.recap["head"].failed == 0, run.describe()
    password = setup.dashboard_auth.split(":", 1)[1]
    assert setup.token not in run.output and password not in run.output
    for name in TLS_FILES:
        assert (setup.head.config_dir / name).is_file(), name
    assert (setup.head.config_dir / "collector-tls.key").stat().st_mode & 0o777 == 0o600

    assert setup.write(setup.writer) == 204
    assert "writer1" in store_hosts(setup.head.db)
    refused = (urllib.error.URLError, ConnectionError, ssl.SSLError, socket.timeout)
    for client in (None, setup.stranger):  # no client certificate; another CA's
        with pytest.raises(refused):
            setup.write(client)
    with pytest.raises((*refused, http_client_errors())):  # plain HTTP: 400, not served
        urllib.request.urlopen(f"http://{HEAD_ADDRESS}:{setup.head.port}/health", timeout=10)

    credentials = base64.b64encode(setup.dashboard_auth.encode()).decode()
    page = urllib.request.Request(
        f"https://{HEAD_ADDRESS}:{setup.head.dashboard_port}/",
        headers={"Authorization": f"Basic {credentials}"},
    )
    with urllib.request.urlopen(page, timeout=30, context=setup.context()) as reply:
        assert reply.status == 200


def test_uninstall_removes_the_tls_files(setup):
    pids = setup.head.pids()
    run = setup.controller.run("deploy-collector.yml", setup.inventory, "--tags", "uninstall")
    assert run.returncode == 0, run.describe()
    for name in TLS_FILES:
        assert not (setup.head.config_dir / name).exists(), name
    assert all(wait_until(lambda p=pid: not pid_alive(p), 30, "exit") for pid in pids)


def http_client_errors() -> type[Exception]:
    import http.client

    return http.client.HTTPException
