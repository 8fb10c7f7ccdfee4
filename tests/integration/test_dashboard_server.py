"""``dashboard serve``'s server (dashboard/server.py) against slow or many clients, over
real loopback sockets: the real Dash app over a real SQLite file, behind HTTP basic auth,
in the guarded werkzeug server the command runs (small limits here so that it is quick).

A head trickled a byte at a time or never sent is cut at the head deadline while pages,
assets and a callback's POST are served; at the cap the longest-waiting connection makes
room, and when every connection has a request in hand a newcomer gets 503 + Retry-After;
the refusals are logged once a minute per client, with no traceback and no werkzeug error
line per connection. The Chromium tests (tests/system/test_dashboard_browser.py) run every page
through this same server.
"""

from __future__ import annotations

import base64
import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest

pytest.importorskip("collector.store", reason="the SQLite store is not in this tree")

from collector.store import SqliteStore
from dashboard import ids
from dashboard.app import create_app
from dashboard.auth import parse_credentials
from dashboard.server import make_dashboard_server
from dashboard.source import DataSource
from netserve.http_guard import ConnectionLimits
from tests.support.slow_clients import read_until_closed, silent_client, trickle_head

AUTH = "Basic " + base64.b64encode(b"alice:s3cret").decode()
CAP = 4  # (the slow-head test has room for every client: 8)
HEADER_TIMEOUT = 3.0  # not less: a page request's own head must be read in time when loaded


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    store = SqliteStore(tmp_path_factory.mktemp("store") / "epochscope.sqlite")
    yield create_app(DataSource(store), credentials=parse_credentials("alice:s3cret"))
    store.close()


@contextmanager
def serving(app, cap: int):
    limits = ConnectionLimits(max_connections=cap, header_timeout=HEADER_TIMEOUT)
    server = make_dashboard_server("127.0.0.1", 0, app.server, limits)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def server(app):
    """At most CAP connections."""
    with serving(app, CAP) as server:
        yield server


def fetch(server, path: str, body: dict | None = None, auth: bool = True) -> tuple[int, bytes]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.port}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"} if body is not None else {},
    )
    if auth:
        request.add_header("Authorization", AUTH)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def routing_callback(server) -> dict:
    """The body Dash's renderer POSTs for the page-routing callback of ``/``."""
    status, raw = fetch(server, "/_dash-dependencies")
    assert status == 200
    routing = next(
        d
        for d in json.loads(raw)
        if [(i["id"], i["property"]) for i in d["inputs"]]
        == [(ids.URL, "pathname"), (ids.URL, "search")]
    )
    outputs = [
        dict(zip(("id", "property"), name.rsplit(".", 1), strict=True))
        for name in routing["output"].strip(".").split("...")
    ]
    return {
        "output": routing["output"],
        "outputs": outputs,
        "inputs": [
            {"id": ids.URL, "property": "pathname", "value": "/"},
            {"id": ids.URL, "property": "search", "value": ""},
        ],
        "changedPropIds": [f"{ids.URL}.pathname"],
        "state": [],
    }


def page_load(server, callback: dict) -> None:
    """What a browser asks for to show the runs page, with the credentials."""
    status, page = fetch(server, "/")
    assert status == 200 and b"<title>epochscope</title>" in page
    for path in ("/_dash-layout", "/assets/style.css"):
        assert fetch(server, path)[0] == 200, path
    status, answer = fetch(server, "/_dash-update-component", callback)
    assert status == 200, answer[:200]
    assert ids.PAGE in json.loads(answer)["response"]


def refusal_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused ")]


def test_slow_heads_are_cut_at_the_deadline_while_pages_and_callbacks_are_served(app, caplog):
    """Two clients trickle a head that never ends (a byte every 0.5 s), one sends nothing:
    they hold a thread each for the 3 s head deadline, then get 408 (the silent one a
    close). Page loads (page, layout, asset, the routing callback's POST) go on meanwhile,
    and credentials are still required."""
    with (
        serving(app, cap=8) as server,
        caplog.at_level(logging.DEBUG),
        ThreadPoolExecutor(3) as pool,
    ):
        callback = routing_callback(server)
        slow = [pool.submit(trickle_head, server.port, 0.5) for _ in range(2)]
        silent = pool.submit(silent_client, server.port)
        loads = 0
        while not all(future.done() for future in [*slow, silent]):
            page_load(server, callback)
            loads += 1
        for future in slow:
            reply, seconds = future.result()
            assert reply.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), reply[:80]
            assert HEADER_TIMEOUT - 0.1 <= seconds < 60
        reply, seconds = silent.result()
        assert reply == b"" and HEADER_TIMEOUT - 0.1 <= seconds < 60
        assert loads >= 1
        assert fetch(server, "/", auth=False)[0] == 401
        assert server.guard.timed_out == 3 and server.guard.evicted == 0
    lines = refusal_lines(caplog)
    assert len(lines) == 1 and "408 request head not received in time" in lines[0], lines
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


def test_at_the_cap_the_longest_waiting_connection_makes_room(server, caplog):
    """CAP silent connections, then a page load: each of its requests closes the
    connection that has waited longest (nothing sent: closed without an answer), and the
    page is served. Threads stay bounded by the cap."""
    callback = routing_callback(server)
    baseline = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(CAP)]
    try:
        time.sleep(0.3)
        page_load(server, callback)
        assert server.guard.evicted >= 1
        assert read_until_closed(idle[0]) == b""  # the longest waiting went first
        assert threading.active_count() - baseline <= CAP + 1
    finally:
        for sock in idle:
            sock.close()
    assert refusal_lines(caplog) == []  # silent connections closed: nothing to log


def test_every_connection_busy_a_newcomer_gets_503_and_one_log_line(server, caplog):
    """CAP callback POSTs whose bodies never finish arriving (each has a request in hand:
    never evicted) fill the cap; newcomers get 503 with Retry-After and the reason, one log
    line for all of them. Once the POSTs end, pages are served again."""
    busy = []
    try:
        for _ in range(CAP):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            sock.sendall(
                b"POST /_dash-update-component HTTP/1.1\r\nHost: x\r\nAuthorization: "
                + AUTH.encode()
                + b"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
            )
            busy.append(sock)
        deadline = time.monotonic() + 30
        while server.guard.open < CAP or len(server.guard.cap.waiting):
            assert time.monotonic() < deadline, "the POSTs never got in hand"
            time.sleep(0.05)
        with caplog.at_level(logging.DEBUG):
            for _ in range(5):
                with socket.create_connection(("127.0.0.1", server.port), timeout=30) as extra:
                    extra.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                    reply = read_until_closed(extra)
                assert reply.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), reply[:80]
                assert b"\r\nRetry-After: 5\r\n" in reply and b"too many connections" in reply
        assert server.guard.refused == 5
        lines = refusal_lines(caplog)
        assert len(lines) == 1 and "503 too many connections" in lines[0], lines
    finally:
        for sock in busy:
            sock.close()
    deadline = time.monotonic() + 30
    while server.guard.open:
        assert time.monotonic() < deadline, "the closed POSTs still hold their threads"
        time.sleep(0.05)
    assert fetch(server, "/")[0] == 200
