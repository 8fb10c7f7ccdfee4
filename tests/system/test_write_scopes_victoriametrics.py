"""Scoped tokens in front of VictoriaMetrics (issue 44, item 1): a node token's lines for
another host are not forwarded either (the forwarder gets what is left, re-encoded, not the
body as sent), and its own lines are."""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import time
from urllib.parse import quote

import pytest
from test_victoriametrics import VICTORIA_METRICS, pytestmark, victoria, wait_for  # noqa: F401

from bench.reliability import harness
from netserve.tokens import mint_token
from tests.support.loopback import free_port, http_get

T0 = 1_700_000_000


def post(port: int, path: str, body: bytes, token: str) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", path, body=body, headers={"Authorization": f"Token {token}"})
        response = conn.getresponse()
        text = response.read()
        return response.status, json.loads(text) if text else {}
    finally:
        conn.close()


def exported(victoria_port: int, host: str) -> list[dict]:
    assert http_get(victoria_port, "/internal/force_flush")[0] == 200
    match = quote(f'{{host="{host}"}}')
    status, body = http_get(victoria_port, f"/api/v1/export?match[]={match}")
    assert status == 200
    return [json.loads(line) for line in body.decode().splitlines() if line.strip()]


@pytest.fixture
def scoped_collector(tmp_path, victoria):  # noqa: F811
    tokens_file = tmp_path / "tokens.json"
    token = mint_token(tokens_file, "node", "node01")
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "collector", "serve", "--db", str(tmp_path / "e.sqlite"),
             "--listen", f"127.0.0.1:{port}", "--tokens-file", str(tokens_file),
             "--backend", f"victoriametrics=http://127.0.0.1:{victoria}"],
            stdout=out, stderr=subprocess.STDOUT, env=harness.repo_env(),
        )  # fmt: skip
    wait_for(port, "/ping", process, log)
    yield port, token
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)


def test_another_hosts_lines_are_not_forwarded(scoped_collector, victoria):  # noqa: F811
    port, token = scoped_collector
    body = (
        f"job,host=node01,job_id=7 cpu_seconds=3.0 {T0}\n"
        f"job,host=node02,job_id=8 cpu_seconds=99999.0 {T0}"
    ).encode()
    status, error = post(port, "/api/v2/write?bucket=b&precision=s", body, token)
    assert status == 403 and "node:node01 may write host='node01' only" in error["message"]
    deadline = time.monotonic() + 10
    while not exported(victoria, "node01"):
        assert time.monotonic() < deadline, "node01's own line never reached VictoriaMetrics"
        time.sleep(0.2)
    [series] = exported(victoria, "node01")
    assert series["values"] == [3.0]
    assert exported(victoria, "node02") == []
