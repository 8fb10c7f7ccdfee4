"""Clients that leave before their reply, and a port already in use, against ``collector
serve`` as a real process. Before the fix each early leaver logged a 36-line traceback
(2,000 of them wrote 133k lines and stalled the writers), and a port in use ended the
start with a traceback."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import time

import pytest

from tests.integration.test_collector_ingest_server import (
    REPO_ROOT,
    SERVE,
    TOKEN,
    start_server,
    stored,
)


@pytest.fixture(scope="module")
def env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


@pytest.fixture(scope="module")
def served(tmp_path_factory, env):
    tmp_path = tmp_path_factory.mktemp("client_gone")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    server = start_server(tmp_path, env, "--token-file", str(token_file))
    yield server
    server.stop()


def leave_with_reset(served, request: bytes) -> None:
    """Send a request and hang up at once with a reset (SO_LINGER 0), before any reply."""
    conn = socket.create_connection((served.host, served.port), timeout=10)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.sendall(request)
    conn.close()


def test_clients_that_leave_before_their_reply_log_no_traceback(served):
    body = b"cpu,host=gone user_seconds=1i 1\n" * 2000
    wrong_token = (
        b"POST /api/v2/write?bucket=b HTTP/1.1\r\nHost: x\r\nAuthorization: Token wrong\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    )
    mid_body = (
        b"POST /api/v2/write?bucket=b HTTP/1.1\r\nHost: x\r\nAuthorization: Token %s\r\n"
        b"Content-Length: %d\r\n\r\n" % (TOKEN.encode(), len(body) * 2)
    )
    for _ in range(150):
        leave_with_reset(served, wrong_token + body)
        leave_with_reset(served, mid_body + body)  # gone in the middle of its body
    # The server still serves writers, and its log has no traceback from any of them.
    status, _, _ = served.request(
        "POST",
        "/api/v2/write?bucket=b",
        b"cpu,host=stays user_seconds=1i 1",
        {"Authorization": f"Token {TOKEN}"},
    )
    assert status == 204
    time.sleep(1)  # the last leavers' threads finish
    log = served.log.read_text()
    assert "Traceback" not in log
    assert len(log.splitlines()) < 3 * 300  # a few lines each at DEBUG, not 36
    assert stored(served.db, "cpu", "user_seconds", "gone") == {}


def test_a_port_in_use_is_one_line_with_the_fix(served, env, tmp_path):
    result = subprocess.run(
        [*SERVE, "--db", str(tmp_path / "c.sqlite"), "--listen", f"127.0.0.1:{served.port}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr
    (last,) = [line for line in lines if "cannot listen" in line]
    assert f"127.0.0.1:{served.port}" in last and "--listen" in last and "in use" in last
    assert len(lines) <= 2, result.stderr
