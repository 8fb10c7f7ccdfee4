"""TLS in transit (netserve.tls) against the real processes, with real certificates made
here (tests/support/tls_certs.py): ``collector serve``, the agent's ``/metrics`` scraped by
Debian's real Prometheus, ``dashboard serve``.

- a client without the CA is refused (certificate verify failed), one with it is served;
- with ``--tls-client-ca-file`` a client without a certificate, or with one another CA
  signed, is refused at the handshake; the right one writes (the agent's shipper);
- a renewed certificate is served from the next connection on (no restart, no signal);
- Prometheus scrapes ``/metrics`` over TLS with a client certificate and a bearer token;
  a raw TCP proxy between them records every byte, and the token is not among them (a
  plain-HTTP control through the same proxy shows the capture would have seen it).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from netserve.tls import client_context
from tests.support.loopback import free_port
from tests.support.tls_certs import TestCa, peer_serial

PROMETHEUS = Path(shutil.which("prometheus") or "/usr/bin/prometheus")
TOKEN = "s3cret-scrape-token-7f1e"
WRITE_TOKEN = "s3cret-write-token-91ab"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A site CA with a server and a client certificate, and a stranger CA with its own
    client certificate (the wrong one)."""
    root = tmp_path_factory.mktemp("pki")
    ca = TestCa(root / "site", "site CA")
    stranger = TestCa(root / "stranger", "stranger CA")
    return {
        "ca": ca,
        "server": ca.issue("server"),
        "client": ca.issue("client", server=False),
        "wrong_client": stranger.issue("wrong-client", server=False),
    }


def start(command: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def wait_for(pattern: str, log: Path, process: subprocess.Popen, seconds: float = 60.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text(errors="replace"))
        if found:
            return found
        if process.poll() is not None:
            break
        time.sleep(0.1)
    pytest.fail(f"{pattern!r} not in the log: {log.read_text(errors='replace')[-3000:]}")


def write(port: int, context: ssl.SSLContext | None, token: str = WRITE_TOKEN) -> int:
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}/api/v2/write?bucket=b&org=o",
        data=b"tls_probe value=1 1700000000000000000\n",
        headers={"Authorization": f"Token {token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


def refused_at_handshake(port: int, context: ssl.SSLContext) -> str:
    """What a client that sends a request meets on ``port``: an error, or what it read.
    (In TLS 1.3 the client's certificate is checked after the client has finished its
    side of the handshake: the refusal shows on the first read, as an alert or a close.)"""
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            tls.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = tls.recv(100)
    except (ssl.SSLError, ConnectionError) as error:
        return type(error).__name__ + ": " + str(error)
    return f"served: {answer!r}" if answer else "closed without an answer"


@pytest.fixture
def collector(pki, tmp_path, repo_env):
    """``collector serve`` over TLS with a token; yields a function that starts it with
    extra arguments and returns its port."""
    token_file = tmp_path / "token"
    token_file.write_text(WRITE_TOKEN)
    token_file.chmod(0o600)
    processes = []

    def serve(*extra: str) -> int:
        log = tmp_path / f"collector{len(processes)}.log"
        process = start(
            [
                sys.executable, "-m", "collector", "serve",
                "--db", str(tmp_path / "epochscope.sqlite"),
                "--listen", "127.0.0.1:0", "--parse-workers", "1",
                "--token-file", str(token_file),
                "--tls-cert-file", str(pki["server"].cert_file),
                "--tls-key-file", str(pki["server"].key_file),
                *extra,
            ],
            log,
            repo_env,
        )  # fmt: skip
        processes.append(process)
        found = wait_for(r"listening on https://127\.0\.0\.1:(\d+)", log, process)
        return int(found.group(1))

    yield serve
    for process in processes:
        stop(process)
        assert process.returncode == 0


def test_collector_refuses_a_client_without_the_ca_and_serves_one_with_it(
    pki, collector, tmp_path, repo_env
):
    ca = pki["ca"]
    port = collector()
    # the system's CAs do not know the site's CA
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        write(port, ssl.create_default_context())
    assert write(port, client_context(ca.ca_file)) == 204
    assert write(port, client_context(ca.ca_file), token="wrong") == 401
    # plain HTTP to the TLS port: a 400 in clear that says so, nothing else
    assert plain_http_answer(port, b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n") == PLAIN_ANSWER
    # `collector runs --collector https://...`: refused without --ca-file, served with it
    token_file = tmp_path / "token"
    base = [sys.executable, "-m", "collector", "runs", "--collector", f"https://127.0.0.1:{port}"]
    base += ["--token-file", str(token_file), "--format", "json"]
    env = {k: v for k, v in repo_env.items() if k != "EPOCHSCOPE_CA_FILE"}
    refused = subprocess.run(base, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "CERTIFICATE_VERIFY_FAILED" in refused.stderr
    served = subprocess.run(
        [*base, "--ca-file", str(ca.ca_file)], env=env, capture_output=True, text=True, timeout=60
    )
    assert served.returncode == 0, served.stderr
    assert json.loads(served.stdout) == []  # a probe point is no run

    # renewal: new files renamed into place are served from the next connection on
    assert peer_serial(port, ca.ca_file) == pki["server"].serial
    renewed = ca.issue("server")
    time.sleep(1.2)  # the files are looked at once a second at most
    assert peer_serial(port, ca.ca_file) == renewed.serial != pki["server"].serial
    assert write(port, client_context(ca.ca_file)) == 204


def test_collector_with_client_ca_refuses_missing_and_wrong_client_certificates(
    pki, collector, tmp_path
):
    from agent.shipper import Shipper
    from contract.point import Point

    ca = pki["ca"]
    port = collector("--tls-client-ca-file", str(ca.ca_file))
    no_cert = refused_at_handshake(port, client_context(ca.ca_file))
    assert not no_cert.startswith("served"), no_cert
    wrong = pki["wrong_client"]
    wrong_cert = refused_at_handshake(
        port, client_context(ca.ca_file, wrong.cert_file, wrong.key_file)
    )
    assert not wrong_cert.startswith("served"), wrong_cert
    with pytest.raises((urllib.error.URLError, ConnectionError)):  # closed, no answer
        write(port, client_context(ca.ca_file, wrong.cert_file, wrong.key_file))
    right = pki["client"]
    assert write(port, client_context(ca.ca_file, right.cert_file, right.key_file)) == 204

    # the agent's shipper with push.ca_file, cert_file and key_file delivers
    shipper = Shipper(
        f"https://127.0.0.1:{port}", WRITE_TOKEN, "o", "b", tmp_path / "spool",
        tls=lambda: client_context(ca.ca_file, right.cert_file, right.key_file),
    )  # fmt: skip
    shipper.start()
    try:
        shipper.submit([Point("tls_probe", {"host": "n1"}, {"value": 2.0}, 1_700_000_001 * 10**9)])
        assert shipper.flush(20)
        assert shipper.delivered_points == 1
    finally:
        shipper.close()


# ------------------------------------------------------------------------------ capture


class RecordingProxy:
    """A raw TCP proxy on loopback that forwards to ``127.0.0.1:target`` and keeps every
    byte that crosses it, both ways (what a capture on the wire would see)."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.seen = bytearray()
        self._lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection(("127.0.0.1", self.target))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                with self._lock:
                    self.seen += data
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()


def test_capture_sees_a_token_sent_in_clear(tmp_path):
    """The control: the proxy does see a bearer token that crosses without TLS."""
    from agent.exposition import MetricsServer
    from netserve.tokens import WatchedToken

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    server = proxy = None
    try:
        server = MetricsServer("127.0.0.1", 0, bearer_token=WatchedToken(token_file))
        proxy = RecordingProxy(server.port)
        request = urllib.request.Request(
            f"http://127.0.0.1:{proxy.port}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert reply.status == 200
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(f"http://127.0.0.1:{proxy.port}/metrics", timeout=10)
        assert TOKEN.encode() in proxy.seen
    finally:
        if proxy:
            proxy.close()
        if server:
            server.close()


def prometheus_query(port: int, promql: str) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as reply:
        return json.loads(reply.read())["data"]["result"]


@pytest.mark.slow
@pytest.mark.skipif(not PROMETHEUS.exists(), reason="Debian package prometheus is missing")
def test_prometheus_scrapes_the_agent_over_tls_with_a_token_never_in_clear(pki, tmp_path, repo_env):
    ca, server, client = pki["ca"], pki["server"], pki["client"]
    token_file = tmp_path / "metrics-token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    wrong_token = tmp_path / "wrong-token"
    wrong_token.write_text("not-the-token")
    agent_port, prom_port = free_port(), free_port()
    config = tmp_path / "agent.toml"
    config.write_text(
        'host = "tls-node"\ninterval_seconds = 1\nsamplers = ["cpu"]\n[metrics]\n'
        f'listen = "127.0.0.1:{agent_port}"\n'
        f'tls_cert_file = "{server.cert_file}"\ntls_key_file = "{server.key_file}"\n'
        f'tls_client_ca_file = "{ca.ca_file}"\nbearer_token_file = "{token_file}"\n'
    )
    agent = start(
        [sys.executable, "-m", "agent", "run", "--config", str(config)],
        tmp_path / "agent.log",
        repo_env,
    )
    proxy = RecordingProxy(agent_port)
    jobs = {"agent": token_file, "agent-wrong-token": wrong_token}
    scrape_configs = "".join(
        f"  - job_name: {job}\n    scheme: https\n"
        f"    tls_config:\n      ca_file: {ca.ca_file}\n"
        f"      cert_file: {client.cert_file}\n      key_file: {client.key_file}\n"
        f"    authorization:\n      type: Bearer\n      credentials_file: {credentials}\n"
        f'    static_configs:\n      - targets: ["127.0.0.1:{proxy.port}"]\n'
        for job, credentials in jobs.items()
    )
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n" + scrape_configs
    )
    prometheus = start(
        [
            str(PROMETHEUS),
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
            "--log.level=warn",
        ],
        tmp_path / "prometheus.log",
        repo_env,
    )
    try:
        wait_for(r"metrics=https://127\.0\.0\.1", tmp_path / "agent.log", agent)
        deadline = time.monotonic() + 60
        up: dict[str, float] = {}
        cpus: list = []
        while time.monotonic() < deadline and not (len(up) == 2 and cpus):
            time.sleep(1)
            try:
                up = {
                    r["metric"]["job"]: float(r["value"][1])
                    for r in prometheus_query(prom_port, "up")
                }
                cpus = prometheus_query(prom_port, 'epochscope_cpu_cpus_online{job="agent"}')
            except OSError:
                continue
        log = (tmp_path / "prometheus.log").read_text()
        assert up == {"agent": 1.0, "agent-wrong-token": 0.0}, log
        assert cpus and float(cpus[0]["value"][1]) >= 1, log
        assert cpus[0]["metric"]["host"] == "tls-node"
    finally:
        stop(prometheus)
        stop(agent)
        proxy.close()
    captured = bytes(proxy.seen)
    assert proxy.connections >= 2 and len(captured) > 4000
    assert captured[:1] == b"\x16"  # a TLS handshake record, not "GET "
    assert TOKEN.encode() not in captured and b"not-the-token" not in captured
    assert b"epochscope_cpu" not in captured and b"Bearer" not in captured
    assert "401" in (tmp_path / "agent.log").read_text()  # the wrong token, refused


def test_dashboard_serves_over_tls(pki, tmp_path, repo_env):
    from collector.store import SqliteStore

    db = tmp_path / "epochscope.sqlite"
    SqliteStore(db).close()
    ca, server, client = pki["ca"], pki["server"], pki["client"]
    log = tmp_path / "dashboard.log"
    dashboard = start(
        [
            sys.executable, "-m", "dashboard", "serve", "--db", str(db), "--port", "0",
            "--prepare-runs", "0",
            "--tls-cert-file", str(server.cert_file), "--tls-key-file", str(server.key_file),
            "--tls-client-ca-file", str(ca.ca_file),
        ],
        log,
        repo_env,
    )  # fmt: skip
    try:
        port = int(wait_for(r"dashboard on https://127\.0\.0\.1:(\d+)", log, dashboard).group(1))
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(f"https://127.0.0.1:{port}/", timeout=10)
        no_cert = refused_at_handshake(port, client_context(ca.ca_file))
        assert not no_cert.startswith("served"), no_cert
        right = client_context(ca.ca_file, client.cert_file, client.key_file)
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/", timeout=30, context=right) as r:
            assert r.status == 200 and b"<html" in r.read().lower()
        # plain HTTP to the TLS port: 400 in clear saying so, and a log line (#44 low)
        assert plain_http_answer(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n") == PLAIN_ANSWER
        wait_for(r"400 plain HTTP sent to the TLS port: the client must use https", log, dashboard)
    finally:
        stop(dashboard)


def test_a_half_renewed_pair_keeps_the_old_certificate_until_the_pair_loads(pki, tmp_path):
    """A renewal caught half-way (the new certificate beside the old key) does not load: the
    server keeps serving the old pair, then takes the new one once its key arrives."""
    from agent.exposition import MetricsServer
    from netserve.tls import ServerTls, TlsFiles

    ca = TestCa(tmp_path / "ca", "renewal CA")
    first = ca.issue("node")
    cert_file, key_file = first.cert_file, first.key_file
    tls = ServerTls(TlsFiles(cert_file, key_file), check_seconds=0.0)
    server = MetricsServer("127.0.0.1", 0, tls=tls)
    try:
        assert peer_serial(server.port, ca.ca_file) == first.serial
        saved_key = key_file.read_bytes()
        second = ca.issue("node")  # writes both; put the old key back: a half renewal
        new_key = key_file.read_bytes()
        key_file.write_bytes(saved_key)
        assert peer_serial(server.port, ca.ca_file) == first.serial
        assert tls.reloads == 0
        key_file.write_bytes(new_key)
        assert peer_serial(server.port, ca.ca_file) == second.serial
        assert tls.reloads == 1
    finally:
        server.close()


def test_agent_config_takes_the_tls_keys_and_refuses_half_of_a_pair(tmp_path):
    from agent.config import ConfigError, build

    token = tmp_path / "token"
    token.write_text("t")
    token.chmod(0o600)
    config = build(
        {
            "push": {"url": "https://head:8086", "ca_file": "/ca.pem"},
            "metrics": {
                "listen": "127.0.0.1:9711",
                "tls_cert_file": "/c.pem",
                "tls_key_file": "/c.key",
                "bearer_token_file": str(token),
            },
        }
    )
    assert config.push is not None and str(config.push.ca_file) == "/ca.pem"
    assert config.metrics is not None and config.metrics.tls is not None
    assert config.metrics.bearer_token_file == token
    with pytest.raises(ConfigError, match="tls_cert_file"):
        build({"metrics": {"tls_cert_file": "/c.pem"}})
    with pytest.raises(ConfigError, match="https"):
        build({"push": {"url": "http://head:8086", "ca_file": "/ca.pem"}})


def test_silent_sockets_in_the_tls_handshake_make_room_for_writers(pki, collector):
    """Sockets that connect and never start the handshake hold a descriptor each; at the
    cap they are the first to go, so a writer with the token is served (issue 44, item 2:
    45 silent sockets at a cap of 40 failed 4 writes of 4)."""
    port = collector("--max-connections", "40", "--header-timeout", "60")
    silent = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(45)]
    try:
        time.sleep(0.5)  # all accepted, each waiting in its handshake
        context = client_context(pki["ca"].ca_file)
        assert [write(port, context) for _ in range(4)] == [204, 204, 204, 204]
        # the oldest silent sockets were closed to make room
        closed = 0
        for sock in silent:
            sock.settimeout(0.2)
            with contextlib.suppress(TimeoutError, OSError):
                closed += sock.recv(1) == b""
        assert closed >= 4
    finally:
        for sock in silent:
            sock.close()


PLAIN_ANSWER = (
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: 73\r\nConnection: close\r\n\r\n"
    b"The plain HTTP request was sent to HTTPS port: use https://, not http://\n"
)


def plain_http_answer(port: int, request: bytes) -> bytes:
    """All a real socket reads back, to its end, after sending ``request`` in clear."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as plain:
        plain.sendall(request)
        answer = b""
        while chunk := plain.recv(4096):
            answer += chunk
    return answer


def test_plain_http_to_the_tls_port_is_answered_and_logged(pki, collector, tmp_path):
    """A client that sends plain HTTP to the TLS port (http:// for https://) gets a plain
    400 saying so, as nginx answers, then the connection closes (before: closed without an
    answer, issue 44 item 4), and the collector logs why. TLS writers are served as before."""
    port = collector()
    request = b"POST /api/v2/write?bucket=b HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
    assert plain_http_answer(port, request) == PLAIN_ANSWER
    # a body sent with the head is read before the answer, so closing does not reset it
    body = b"cpu,host=a busy=1 1\n" * 2000
    head = f"POST /api/v2/write HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
    assert plain_http_answer(port, head.encode() + body) == PLAIN_ANSWER
    assert write(port, client_context(pki["ca"].ca_file)) == 204
    log = (tmp_path / "collector0.log").read_text()
    logged = "refused - from 127.0.0.1: 400 plain HTTP sent to the TLS port: the client must use"
    assert f"{logged} https://, not http://" in log, log[-2000:]
