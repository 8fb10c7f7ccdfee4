"""Authentication on every route of ``collector serve``, and the token in no log.

The routes are read from the server itself (its ``do_<METHOD>`` handlers and the paths they
compare against), so a route added later, a query API say, is checked here without anyone
remembering to: without the token it must answer 401, unless it is one of the documented
open probes (``/ping``, ``/health``, ``/ready``, as InfluxDB leaves them open for load
balancers), which must then disclose nothing and change nothing.

The token must never appear in the collector's log (DEBUG level, requests that carry the
token in every accepted place and in wrong ones) nor in an agent's log (debug level), its
spool, its /metrics page or its error messages, whether the token is accepted or refused.
"""

from __future__ import annotations

import base64
import http.client
import inspect
import json
import re
import socket
import time
import urllib.request

import pytest

from bench.reliability import harness
from collector.api import routes as read_api
from collector.ingest import server as collector_server

TOKEN = "sec-TOKEN-3f9a1c77e0"
WRONG = "sec-WRONG-0000000000"
OPEN_PROBES = {"/ping", "/health", "/ready"}
METHODS_PROBED = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]


def server_routes() -> tuple[set[str], set[str]]:
    """(HTTP methods the handler implements, paths it routes), read from its source."""
    handler = collector_server.WriteHandler
    methods = {name[3:] for name in dir(handler) if name.startswith("do_")}
    source = inspect.getsource(collector_server)
    paths = set(re.findall(r'path == "(/[^"]*)"', source))
    paths |= {read_api.PREFIX + view for view in read_api.VIEWS}  # routed by view_of
    return methods, paths


@pytest.fixture(scope="module")
def collector(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("security")
    _, token_file = harness.write_token_file(workdir, TOKEN)
    served = harness.Collector(
        db=workdir / "sec.sqlite",
        token_file=token_file,
        log=workdir / "collector.log",
        log_level="DEBUG",
    )
    served.start()
    yield served
    served.stop()


def request(collector, method, path, body=b"", headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", collector.port, timeout=30)
    try:
        conn.request(
            method,
            path,
            body=body if method not in ("GET", "HEAD") else None,
            headers=headers or {},
        )
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def test_the_route_list_is_what_the_server_routes():
    methods, paths = server_routes()
    # If this fails, the server grew a method or a route: the tests below cover it already;
    # update this list and docs/reliability.md to say whether it is open.
    assert methods == {"GET", "HEAD", "POST"}
    assert paths == {"/api/v2/write", "/write", "/ping", "/health", "/ready",
                     "/api/v1/runs", "/api/v1/report", "/api/v1/scaling",
                     "/api/v1/inference", "/api/v1/jobs", "/api/v1/job",
                     "/api/v1/hosts", "/api/v1/forecast", "/api/v1/compare",
                     "/metrics"}  # fmt: skip


CREDENTIALS = {
    "none": ({}, ""),
    "wrong-token": ({"Authorization": f"Token {WRONG}"}, ""),
    "wrong-bearer": ({"Authorization": f"Bearer {WRONG}"}, ""),
    "wrong-basic": (
        {"Authorization": "Basic " + base64.b64encode(f"u:{WRONG}".encode()).decode()},
        "",
    ),
    "wrong-p": ({}, f"&u=u&p={WRONG}"),
    "token-too-long": ({"Authorization": f"Token {TOKEN}x"}, ""),
    "token-prefix": ({"Authorization": f"Token {TOKEN[:-1]}"}, ""),
    # the right token where no route reads it: a cookie, a custom header
    "token-in-wrong-place": ({"Cookie": f"token={TOKEN}", "X-Token": TOKEN}, ""),
}
CANDIDATE_PATHS = ["/api/v2/query", "/query", "/api/v2/buckets", "/metrics", "/api/v2/delete"]


@pytest.fixture(scope="module")
def routes(collector):
    """Every (method, path) that does something with the right token: not 404 or 501."""
    _, paths = server_routes()
    found = {}
    for method in METHODS_PROBED:
        for path in sorted(paths) + CANDIDATE_PATHS:
            line = f"secure,host=authorized v=1i {len(found)}".encode()
            status, _, _ = request(
                collector,
                method,
                path + "?bucket=b&org=o&db=d",
                line,
                {"Authorization": f"Token {TOKEN}"},
            )
            assert status != 500, (method, path)
            if status not in (404, 501):
                found[(method, path)] = status
    return found


def test_the_routes_that_answer(routes):
    # With the token: the two write routes store (204); the probes answer.
    assert routes == {
        ("GET", "/ping"): 204,
        ("GET", "/health"): 200,
        ("GET", "/ready"): 200,
        ("HEAD", "/ping"): 204,
        ("POST", "/api/v2/write"): 204,
        ("POST", "/write"): 204,
        # the read API takes no bucket/org/db (400 after the token is checked)
        ("GET", "/api/v1/runs"): 400,
        ("GET", "/api/v1/report"): 400,
        ("GET", "/api/v1/scaling"): 400,
        ("GET", "/api/v1/inference"): 400,
        ("GET", "/api/v1/jobs"): 400,
        ("GET", "/api/v1/job"): 400,
        ("GET", "/api/v1/hosts"): 400,
        ("GET", "/api/v1/forecast"): 400,
        ("GET", "/api/v1/compare"): 400,
        ("GET", "/metrics"): 400,  # the live findings as gauges: it takes no query
    }


@pytest.mark.parametrize("credentials", sorted(CREDENTIALS))
def test_every_route_refuses_without_the_right_token(collector, routes, credentials):
    headers, extra_query = CREDENTIALS[credentials]
    line = f"secure,host=intruder-{credentials} v=1i 1".encode()
    for method in METHODS_PROBED:
        for path in sorted(server_routes()[1]) + CANDIDATE_PATHS:
            target = path + "?bucket=b&org=o&db=d" + extra_query
            status, response_headers, reply = request(collector, method, target, line, headers)
            assert status != 500, (method, path)
            assert TOKEN.encode() not in reply and WRONG.encode() not in reply
            if (method, path) not in routes:
                assert status in (404, 501), (method, path, status)  # no such route either way
            elif path in OPEN_PROBES:
                assert status == routes[(method, path)], (method, path, status)
            else:
                assert status == 401, (method, path, status, reply)
                assert json.loads(reply) == {
                    "code": "unauthorized",
                    "message": "unauthorized access",
                }
                assert response_headers["WWW-Authenticate"] == 'Token realm="epochscope"'
    assert harness.stored_points(collector.db, hosts=[f"intruder-{credentials}"]) == {}


def test_open_probes_disclose_nothing(collector):
    for path in sorted(OPEN_PROBES):
        status, _, reply = request(collector, "GET", path)
        assert status in (200, 204)
        text = reply.decode()
        assert TOKEN not in text and str(collector.db) not in text
        assert "sec.sqlite" not in text and "Traceback" not in text


def test_the_right_token_works_in_every_accepted_form(collector):
    basic = base64.b64encode(f"user:{TOKEN}".encode()).decode()
    forms = [
        ("/api/v2/write?bucket=b", {"Authorization": f"Token {TOKEN}"}),
        ("/api/v2/write?bucket=b", {"Authorization": f"Bearer {TOKEN}"}),
        ("/write?db=d", {"Authorization": f"Token {TOKEN}"}),
        ("/write?db=d", {"Authorization": f"Basic {basic}"}),
        (f"/write?db=d&u=user&p={TOKEN}", {}),
    ]
    for number, (path, headers) in enumerate(forms):
        line = f"secure,host=allowed v={number}i {number}".encode()
        assert request(collector, "POST", path, line, headers)[0] == 204, path
    stored = harness.stored_points(collector.db, hosts=["allowed"])
    assert sorted(key[3] for key in stored) == list(range(len(forms)))


def test_the_token_is_in_no_collector_log_line(collector):
    """Requests that put the token where a careless server would log it: the query string
    of a request that fails to parse, an over-long request line, a bad header, a body the
    parser rejects (its message quotes the line back to the client, not to the log)."""
    basic = base64.b64encode(f"user:{TOKEN}".encode()).decode()
    request(collector, "POST", f"/write?db=d&p={TOKEN}", b"bad line no fields")
    request(collector, "POST", f"/write?db=d&p={TOKEN}&precision=zz", b"x v=1 1")
    request(collector, "GET", f"/nowhere?p={TOKEN}")
    request(collector, "POST", "/write?db=d", b"x v=1 1", {"Authorization": f"Basic {basic}x"})
    request(
        collector,
        "POST",
        "/api/v2/write",
        f"m,tok={TOKEN} v=oops 1".encode(),
        {"Authorization": f"Token {TOKEN}"},
    )
    with socket.create_connection(("127.0.0.1", collector.port), timeout=10) as sock:
        # a request line http.server refuses (too long): it logs an error about it
        sock.sendall(f"POST /write?p={TOKEN}{'A' * 70000} HTTP/1.1\r\n\r\n".encode())
        sock.recv(4096)
    with socket.create_connection(("127.0.0.1", collector.port), timeout=10) as sock:
        sock.sendall(f"POST /write?p={TOKEN} HTTP/9.9\r\n\r\n".encode())  # bad version
        sock.recv(4096)
    with socket.create_connection(("127.0.0.1", collector.port), timeout=10) as sock:
        sock.sendall(f"GARBAGE /write?p={TOKEN} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        sock.recv(4096)
    time.sleep(0.3)
    log = collector.log.read_text()
    assert "POST /write" in log  # DEBUG request logging is on ...
    assert TOKEN not in log  # ... and the token is never in it
    assert basic not in log


def _agent(tmp_path, url, token, name):
    agent = harness.Agent(
        host=name,
        workdir=tmp_path / name,
        push_url=url,
        token=token,
        interval_seconds=0.5,
        batch_seconds=0.5,
        samplers=("cpu", "memory", "agent"),
        log_level="debug",
    )
    agent.start()
    return agent


def test_the_token_is_in_no_agent_log_spool_or_metrics(collector, tmp_path):
    """Two agents at debug level: one with the right token (its points arrive), one with a
    wrong one (401: it keeps spooling and says the token was refused). Neither's log,
    spool files or /metrics holds its token."""
    good = _agent(tmp_path, collector.url, TOKEN, "sec-good")
    bad = _agent(tmp_path, collector.url, WRONG, "sec-bad")
    try:
        assert harness.wait_until(
            lambda: len(harness.agent_tick_times(collector.db, "sec-good")) >= 2, 60
        ), good.log.read_text()[-2000:]
        assert harness.wait_until(lambda: "token was refused" in bad.log.read_text(), 60), (
            bad.log.read_text()[-2000:]
        )
        pages = {agent.host: _metrics_page(agent) for agent in (good, bad)}
    finally:
        for agent in (good, bad):
            agent.stop()
    assert harness.agent_tick_times(collector.db, "sec-bad") == []
    for agent, token in ((good, TOKEN), (bad, WRONG)):
        log = agent.log.read_text()
        assert "agent started" in log
        assert token not in log, agent.host
        assert f"Token {token}" not in log
        for path in agent.spool_dir.iterdir():
            assert token not in path.read_text(errors="replace")
        assert token not in pages[agent.host]
    assert "***" in bad.log.read_text() or "token was refused" in bad.log.read_text()


def _metrics_page(agent) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{agent.metrics_port}/metrics") as reply:
        return reply.read().decode()


def test_a_bad_token_setting_is_reported_without_the_token(tmp_path):
    """A token given twice (token and token_file) or of the wrong type is a configuration
    error that names the key, never the value."""
    import subprocess
    import sys

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o644)  # readable by others: a warning, without the token
    configs = {
        "both": f'[push]\nurl = "http://127.0.0.1:9"\ntoken = "{TOKEN}"\n'
        f'token_file = "{token_file}"\n',
        "type": '[push]\nurl = "http://127.0.0.1:9"\ntoken = 12345678\n',
        "readable": f'[push]\nurl = "http://127.0.0.1:9"\ntoken_file = "{token_file}"\n'
        f'spool_dir = "{tmp_path / "spool"}"\n[metrics]\nlisten = ""\n',
    }
    for name, text in configs.items():
        config = tmp_path / f"{name}.toml"
        config.write_text(text)
        config.chmod(0o600)
        output_path = tmp_path / f"{name}.out"
        with output_path.open("wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "agent", "run", "--config", str(config)],
                stdout=output,
                stderr=subprocess.STDOUT,
                env=harness.repo_env(),
            )
        try:
            if name == "readable":  # a valid config: it runs; stop it once it has started
                assert harness.wait_until(
                    lambda path=output_path: "agent started" in path.read_text(), 60
                )
                process.terminate()
            process.wait(60)
        finally:
            if process.poll() is None:
                process.kill()
        text_out = output_path.read_text()
        assert TOKEN not in text_out and "12345678" not in text_out, (name, text_out)
        if name == "readable":
            assert "readable by group/others" in text_out
        else:
            assert process.returncode == 2 and "push.token" in text_out, (name, text_out)
