"""``collector serve`` as a real process on a loopback port, written to by real HTTP clients
(http.client, urllib and influxdb-client), stored in a real SQLite file."""

from __future__ import annotations

import base64
import gzip
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from collector.store import SqliteStore

TOKEN = "s3cr3t-t0ken-value"
SERVE = [sys.executable, "-m", "collector", "serve"]
REPO_ROOT = Path(__file__).resolve().parents[2]
S = 1_000_000_000


@dataclass
class Served:
    process: subprocess.Popen
    url: str
    host: str
    port: int
    db: Path
    log: Path

    def request(self, method, path, body=b"", headers=None):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            conn.close()

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_server(
    tmp_path: Path, env: dict, *args: str, db: Path | None = None, preexec_fn=None
) -> Served:
    db = db or tmp_path / "collector.sqlite"
    log = tmp_path / f"serve-{time.monotonic_ns()}.log"
    env = dict(env, EPOCHSCOPE_LOG_LEVEL="DEBUG")
    with open(log, "wb") as log_file:
        process = subprocess.Popen(
            [*SERVE, "--db", str(db), "--listen", "127.0.0.1:0", *args],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=preexec_fn,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        match = re.search(r"listening on http://([\d.]+):(\d+)", log.read_text())
        if match:
            host, port = match.group(1), int(match.group(2))
            return Served(process, f"http://{host}:{port}", host, port, db, log)
        if process.poll() is not None:
            pytest.fail(f"collector serve exited: {log.read_text()}")
        time.sleep(0.05)
    process.kill()
    pytest.fail(f"collector serve did not start: {log.read_text()}")


@pytest.fixture(scope="module")
def module_env():
    """repo_env for module-scoped servers."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


# One server per module for the tests that only add their own hosts or measurements.
@pytest.fixture(scope="module")
def served(tmp_path_factory, module_env):
    server = start_server(tmp_path_factory.mktemp("served"), module_env)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def served_with_token(tmp_path_factory, module_env):
    tmp_path = tmp_path_factory.mktemp("served_with_token")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    server = start_server(tmp_path, module_env, "--token-file", str(token_file))
    yield server
    server.stop()


def stored(db: Path, measurement: str, field: str, host: str | None = None):
    with SqliteStore(db) as store:
        return {
            (data.info.host, tuple(sorted(data.info.tags.items()))): (
                (data.times_ns).tolist(),
                data.values.tolist(),
            )
            for data in store.read_series(
                store.list_series(measurement, field, host), -(2**62), 2**62
            )
        }


def test_v2_write_stores_points_and_answers_204(served):
    body = "cpu,host=n1 user_seconds=10i,idle_seconds=5.5 1000\ncpu,host=n1 user_seconds=12i 2000"
    status, headers, reply = served.request(
        "POST", "/api/v2/write?bucket=b&org=o&precision=ns", body.encode()
    )
    assert (status, reply) == (204, b"")
    assert "X-Influxdb-Version" in headers
    assert stored(served.db, "cpu", "user_seconds", "n1") == {
        ("n1", ()): ([1000, 2000], [10.0, 12.0])
    }
    assert stored(served.db, "cpu", "idle_seconds", "n1") == {("n1", ()): ([1000], [5.5])}


def test_partial_write_stores_valid_lines_and_names_the_bad_ones(served):
    body = "\n".join(
        [
            "mem,host=n1 free_bytes=1 1",
            "mem,host=n1 free_bytes=oops 2",  # line 2: not a value
            "mem,host=n1 free_bytes=3 3",
            "mem host=n1",  # line 4: no field
            "mem,host=n1 free_bytes=5 5",
        ]
    )
    status, headers, reply = served.request("POST", "/api/v2/write?bucket=b", body.encode())
    assert status == 400
    assert headers["Content-Type"].startswith("application/json")
    error = json.loads(reply)
    assert error["code"] == "invalid"
    assert "line 2" in error["message"] and "line 4" in error["message"]
    assert "3 points written" in error["message"]
    assert stored(served.db, "mem", "free_bytes", "n1") == {
        ("n1", ()): ([1, 3, 5], [1.0, 3.0, 5.0])
    }


def test_precision_and_missing_timestamp(served):
    before = time.time_ns()
    served.request("POST", "/api/v2/write?bucket=b&precision=s", b"net,host=a rx_bytes=1i 7")
    served.request("POST", "/write?db=x&precision=u", b"net,host=b rx_bytes=2i 7")
    served.request("POST", "/api/v2/write?bucket=b&precision=ms", b"net,host=c rx_bytes=3i")
    after = time.time_ns()
    series = stored(served.db, "net", "rx_bytes")
    assert series[("a", ())] == ([7 * S], [1.0])
    assert series[("b", ())] == ([7_000], [2.0])
    (server_time,) = series[("c", ())][0]
    # server time truncated to ms
    assert before // 1_000_000 * 1_000_000 <= server_time <= after
    assert server_time % 1_000_000 == 0
    status, _, reply = served.request("POST", "/api/v2/write?bucket=b&precision=h", b"x v=1 1")
    assert status == 400 and json.loads(reply)["code"] == "invalid"  # v2 knows ns|us|ms|s


def test_gzip_body(served):
    lines = "\n".join(f"disk,host=g,device=sda reads={i}i {i * S}" for i in range(1000))
    status, _, _ = served.request(
        "POST",
        "/api/v2/write?bucket=b",
        gzip.compress(lines.encode()),
        {"Content-Encoding": "gzip"},
    )
    assert status == 204
    ((times, values),) = stored(served.db, "disk", "reads", "g").values()
    assert times == [i * S for i in range(1000)]
    assert values == [float(i) for i in range(1000)]
    status, _, reply = served.request(
        "POST", "/api/v2/write?bucket=b", b"not gzip", {"Content-Encoding": "gzip"}
    )
    assert status == 400 and "gzip" in json.loads(reply)["message"]


def test_chunked_body(served):
    conn = http.client.HTTPConnection(served.host, served.port, timeout=30)
    chunks = [f"cpu,host=ch user_seconds={i}i {i}\n".encode() for i in range(50)]
    conn.request("POST", "/api/v2/write?bucket=b", body=iter(chunks), encode_chunked=True)
    response = conn.getresponse()
    assert response.status == 204
    response.read()
    conn.close()
    ((times, _),) = stored(served.db, "cpu", "user_seconds", "ch").values()
    assert times == list(range(50))


def test_health_ready_ping(served):
    status, _, reply = served.request("GET", "/health")
    health = json.loads(reply)
    assert status == 200
    assert health["status"] == "pass"
    assert set(health) >= {"name", "message", "status", "checks", "version"}
    status, _, reply = served.request("GET", "/ready")
    ready = json.loads(reply)
    assert status == 200 and ready["status"] == "ready"
    assert ready["started"].endswith("Z") and ready["up"].endswith("s")
    assert served.request("GET", "/ping")[0] == 204
    assert served.request("HEAD", "/ping")[0] == 204
    status, _, reply = served.request("GET", "/ping?verbose=true")
    assert status == 200 and "version" in json.loads(reply)
    assert served.request("GET", "/nowhere")[0] == 404
    assert served.request("POST", "/api/v2/query", b"{}")[0] == 404


def test_influxdb_client_writes_with_token_and_gzip(served_with_token):
    from influxdb_client import InfluxDBClient
    from influxdb_client import Point as InfluxPoint
    from influxdb_client.client.exceptions import InfluxDBError
    from influxdb_client.client.write_api import SYNCHRONOUS

    points = [
        InfluxPoint("gpu")
        .tag("host", "n7")
        .tag("gpu", "0")
        .field("utilization_percent", 97.5)
        .field("energy_millijoules", 123)
        .time(t * S)
        for t in range(1, 4)
    ]
    with InfluxDBClient(
        url=served_with_token.url, token=TOKEN, org="epochscope", enable_gzip=True
    ) as client:
        assert client.ping() is True
        client.write_api(write_options=SYNCHRONOUS).write(bucket="metrics", record=points)
        client.write_api(write_options=SYNCHRONOUS).write(
            bucket="metrics",
            record="gpu,host=n7,gpu=0 utilization_percent=50 4",
            write_precision="s",
        )
    assert stored(served_with_token.db, "gpu", "utilization_percent") == {
        ("n7", (("gpu", "0"),)): ([S, 2 * S, 3 * S, 4 * S], [97.5, 97.5, 97.5, 50.0])
    }
    with InfluxDBClient(url=served_with_token.url, token="wrong", org="epochscope") as client:
        with pytest.raises(InfluxDBError) as raised:
            client.write_api(write_options=SYNCHRONOUS).write(
                bucket="metrics", record="gpu,host=x utilization_percent=1 1"
            )
        assert raised.value.response.status == 401
    assert "x" not in {
        host for host, _ in stored(served_with_token.db, "gpu", "utilization_percent")
    }


def test_token_required_in_every_accepted_form_and_never_logged(served_with_token):
    server = served_with_token
    line = b"cpu,host=auth user_seconds=1i 1"
    basic = base64.b64encode(f"user:{TOKEN}".encode()).decode()
    accepted = [
        ("/api/v2/write?bucket=b", {"Authorization": f"Token {TOKEN}"}),
        ("/api/v2/write?bucket=b", {"Authorization": f"Bearer {TOKEN}"}),
        ("/write?db=d", {"Authorization": f"Token {TOKEN}"}),
        (f"/write?db=d&u=user&p={TOKEN}", {}),
        ("/write?db=d", {"Authorization": f"Basic {basic}"}),
    ]
    for path, headers in accepted:
        assert server.request("POST", path, line, headers)[0] == 204, (path, headers)
    refused = [
        ("/api/v2/write?bucket=b", {}),
        ("/api/v2/write?bucket=b", {"Authorization": "Token wrong"}),
        ("/api/v2/write?bucket=b", {"Authorization": f"Token {TOKEN}x"}),
        (f"/api/v2/write?bucket=b&p={TOKEN}", {}),  # ?p= is InfluxDB 1 only
        ("/api/v2/write?bucket=b", {"Authorization": f"Basic {basic}"}),
        ("/write?db=d&u=user&p=wrong", {}),
        ("/write?db=d", {"Authorization": "Basic !!notbase64"}),
    ]
    for path, headers in refused:
        status, _, reply = server.request(
            "POST", path, b"cpu,host=refused user_seconds=1i 1", headers
        )
        assert status == 401, (path, headers)
        assert json.loads(reply) == {"code": "unauthorized", "message": "unauthorized access"}
    assert set(stored(server.db, "cpu", "user_seconds")) == {("auth", ())}
    # health and ping stay open (load balancers and clients probe them)
    assert server.request("GET", "/health")[0] == 200
    log_text = server.log.read_text()
    assert "POST /write" in log_text  # the request log is on (DEBUG) ...
    assert TOKEN not in log_text  # ... and the token is never in it
    assert basic not in log_text


def test_body_limit_from_content_length_before_reading(tmp_path, repo_env):
    server = start_server(tmp_path, repo_env, "--max-body-bytes", "1000")
    try:
        conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
        conn.putrequest("POST", "/api/v2/write?bucket=b")
        conn.putheader("Content-Length", str(10**9))  # announced, never sent
        conn.endheaders()
        response = conn.getresponse()  # answered without waiting for the body
        assert response.status == 413
        assert json.loads(response.read())["code"] == "request too large"
        conn.close()
        # a gzip bomb: 200 kB of line protocol in < 1 kB, over the 1000-byte limit once inflated
        bomb = gzip.compress(b"cpu,host=bomb v=1 1\n" * 10_000)
        assert len(bomb) < 1000
        status, _, _ = server.request(
            "POST", "/api/v2/write?bucket=b", bomb, {"Content-Encoding": "gzip"}
        )
        assert status == 413
        # chunked, growing past the limit while streaming (the whole request fits in the
        # socket buffer, so the client is not still writing when the server hangs up)
        chunk = b"cpu,host=chunk v=1 1\n" * 30  # 630 bytes; the second one crosses 1000
        request = (
            b"POST /api/v2/write?bucket=b HTTP/1.1\r\nHost: x\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
            + b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(3))
            + b"0\r\n\r\n"
        )
        with socket.create_connection((server.host, server.port), timeout=10) as sock:
            sock.sendall(request)
            status_line = sock.makefile("rb").readline()
        assert status_line.split()[1] == b"413"
        # within the limit still works
        status, _, _ = server.request("POST", "/api/v2/write?bucket=b", b"cpu,host=ok v=1 1")
        assert status == 204
        assert set(stored(server.db, "cpu", "v")) == {("ok", ())}
    finally:
        server.stop()


def test_concurrent_writers_all_land(served):
    def send(writer: int):
        conn = http.client.HTTPConnection(served.host, served.port, timeout=60)
        for batch in range(10):
            lines = "\n".join(
                f"infiniband,host=w{writer},device=mlx5_0 rcv_bytes={batch * 100 + i}i "
                f"{(batch * 100 + i) * S}"
                for i in range(100)
            )
            conn.request("POST", "/api/v2/write?bucket=b", body=lines.encode())
            response = conn.getresponse()
            response.read()
            assert response.status == 204
        conn.close()

    threads = [threading.Thread(target=send, args=(w,)) for w in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    series = stored(served.db, "infiniband", "rcv_bytes")
    assert len(series) == 6
    for times, values in series.values():
        assert times == [i * S for i in range(1000)]
        assert values == [float(i) for i in range(1000)]


def test_large_body_parsed_in_worker_processes(served):
    # over 256 KiB: parsed by the worker pool, with a bad line in the middle
    lines = [f"agent,host=big rss_bytes={i}.25 {i}" for i in range(20_000)]
    lines[12_345] = "agent,host=big rss_bytes= 12345"
    status, _, reply = served.request("POST", "/api/v2/write?bucket=b", "\n".join(lines).encode())
    assert status == 400
    assert "line 12346" in json.loads(reply)["message"]
    ((times, values),) = stored(served.db, "agent", "rss_bytes", "big").values()
    assert len(times) == 19_999 and 12_345 not in times
    assert values[:2] == [0.25, 1.25]


def test_acknowledged_points_survive_kill_9(tmp_path, repo_env):
    server = start_server(tmp_path, repo_env)
    acknowledged: list[int] = []
    stop = threading.Event()

    def send():
        conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
        batch = 0
        while not stop.is_set():
            lines = "\n".join(
                f"cpu,host=k9 user_seconds={batch * 50 + i}i {(batch * 50 + i) * S}"
                for i in range(50)
            )
            try:
                conn.request("POST", "/api/v2/write?bucket=b", body=lines.encode())
                response = conn.getresponse()
                response.read()
            except (OSError, http.client.HTTPException):
                return  # the server is gone: this batch was never acknowledged
            if response.status == 204:
                acknowledged.append(batch)
            batch += 1

    sender = threading.Thread(target=send)
    sender.start()
    deadline = time.monotonic() + 60
    while len(acknowledged) < 30 and time.monotonic() < deadline:
        time.sleep(0.001)
    os.kill(server.process.pid, signal.SIGKILL)  # right after a 204, mid-stream
    server.process.wait(timeout=10)
    stop.set()
    sender.join(timeout=30)
    assert len(acknowledged) >= 30
    # restart on the same file: everything acknowledged is there
    restarted = start_server(tmp_path, repo_env, db=server.db)
    try:
        status, _, _ = restarted.request(
            "POST", "/api/v2/write?bucket=b", b"cpu,host=k9 user_seconds=0i 0"
        )
        assert status == 204
        ((times, _),) = stored(server.db, "cpu", "user_seconds", "k9").values()
        have = set(times)
        missing = [
            batch
            for batch in acknowledged
            if not all((batch * 50 + i) * S in have for i in range(50))
        ]
        assert missing == []
    finally:
        restarted.stop()


def test_urllib_client_and_bad_requests(served):
    request = urllib.request.Request(
        f"{served.url}/api/v2/write?bucket=b&org=o",
        data=b"nfs_rpc,host=u calls=5i 1",
        method="POST",
        headers={"Content-Type": "text/plain; charset=utf-8"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 204
    request = urllib.request.Request(
        f"{served.url}/api/v2/write?bucket=b", data=b"nfs_rpc", method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=30)
    assert raised.value.code == 400
    assert json.loads(raised.value.read())["message"].startswith("partial write: 0 points")
    status, _, _ = served.request(
        "POST", "/api/v2/write?bucket=b", b"x v=1 1", {"Content-Encoding": "br"}
    )
    assert status == 415
    assert stored(served.db, "nfs_rpc", "calls", "u") == {("u", ()): ([1], [5.0])}
