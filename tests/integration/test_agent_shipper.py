"""The shipper and its disk spool against a real HTTP endpoint on loopback.

``Endpoint`` is a small InfluxDB-v2-write-shaped server: it records every body it accepts
and answers 204, or whatever status the test sets; ``stop()`` closes its socket so that
the shipper sees "connection refused", ``start()`` listens again on the same port.
"""

from __future__ import annotations

import logging
import shutil
import ssl
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agent.samplers.agent import AgentStats
from agent.shipper import HttpWriter, Shipper, line_number_in, lines_rejected_in
from agent.spool import CHECKSUM_BYTES, Spool, verified_lines
from contract.point import Point
from tests.integration.test_collector_ingest_server import start_server, stored
from tests.support.loopback import free_port


class Endpoint:
    """Records accepted write bodies; answers ``status`` (204 unless told otherwise)."""

    def __init__(
        self,
        port: int | None = None,
        *,
        keep_alive: bool = False,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.port = port or free_port()
        self.keep_alive = keep_alive  # HTTP/1.1 connections kept open (else 1.0: one request)
        self.tls = tls
        self.status = 204
        self.decide: Callable[[bytes], int] | None = None  # status from the body
        self.error_body = b""
        self.bodies: list[bytes] = []
        self.requests: list[dict] = []  # every request, accepted or not
        self._server: ThreadingHTTPServer | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> None:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if self.keep_alive else "HTTP/1.0"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(length)
                parsed = urllib.parse.urlsplit(self.path)
                status = endpoint.decide(body) if endpoint.decide else endpoint.status
                endpoint.requests.append(
                    {
                        "path": parsed.path,
                        "query": urllib.parse.parse_qs(parsed.query),
                        "authorization": self.headers.get("Authorization"),
                        "client_port": self.client_address[1],
                        "status": status,
                    }
                )
                if status == 204:
                    endpoint.bodies.append(body)
                self.send_response(status)
                payload = endpoint.error_body if status != 204 else b""
                self.send_header("Content-Length", str(len(payload)))
                if payload:
                    self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        if self.tls:
            self._server.socket = self.tls.wrap_socket(self._server.socket, server_side=True)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def lines(self) -> list[str]:
        return [line for body in self.bodies for line in body.decode().split("\n") if line]


@pytest.fixture
def endpoint():
    server = Endpoint()
    yield server
    server.stop()


def points_for(tick: int, per_tick: int = 3) -> list[Point]:
    """``per_tick`` points per tick, each with a unique (tick, n) so order can be checked."""
    return [
        Point("disk", {"host": "n1", "device": f"sd{n}"}, {"reads": tick}, tick * 10**9 + n)
        for n in range(per_tick)
    ]


def expected_lines(ticks: range, per_tick: int = 3) -> list[str]:
    return [
        f"disk,device=sd{n},host=n1 reads={tick}i {tick * 10**9 + n}"
        for tick in ticks
        for n in range(per_tick)
    ]


def wait_until(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_points_arrive_with_token_bucket_org_precision(endpoint, tmp_path):
    shipper = Shipper(endpoint.url, "s3cret", "my-org", "my-bucket", tmp_path / "spool")
    shipper.start()
    shipper.submit(points_for(1))
    assert shipper.flush(10)
    shipper.close()
    assert endpoint.lines() == expected_lines(range(1, 2))
    request = endpoint.requests[0]
    assert request["path"] == "/api/v2/write"
    assert request["query"] == {"org": ["my-org"], "bucket": ["my-bucket"], "precision": ["ns"]}
    assert request["authorization"] == "Token s3cret"
    assert list((tmp_path / "spool").iterdir()) == []


def test_writes_go_over_one_kept_connection_to_a_path_prefix(tmp_path):
    """Several batches, one TCP connection (each new connection costs the sender a
    handshake); a URL with a path (a reverse proxy's prefix) keeps its path."""
    server = Endpoint(keep_alive=True)
    try:
        shipper = Shipper(f"{server.url}/influx/", "t", "o", "b", tmp_path / "spool")
        shipper.start()
        for tick in range(3):
            shipper.submit(points_for(tick))
            assert shipper.flush(10)
        shipper.close()
        assert endpoint_paths(server) == ["/influx/api/v2/write"] * 3
        assert len({request["client_port"] for request in server.requests}) == 1
        assert server.lines() == expected_lines(range(3))
    finally:
        server.stop()


def endpoint_paths(server: Endpoint) -> list[str]:
    return [request["path"] for request in server.requests]


def test_a_kept_connection_the_collector_closed_when_idle_is_replaced_unnoticed(tmp_path, repo_env):
    """``collector serve --idle-timeout 1`` closes a kept connection after 1 s idle; the
    next write finds it closed, sends again on a new connection and is delivered: no
    outage, no retry after a backoff."""
    collector = start_server(tmp_path, repo_env, "--idle-timeout", "1")
    try:
        writer = HttpWriter(collector.url, None, "o", "b")
        first = writer.write(b"idle,host=n1 v=1i 1000000000\n")
        time.sleep(2.5)  # the collector closes the idle connection
        second = writer.write(b"idle,host=n1 v=2i 2000000000\n")
        writer.close()
        assert (first.delivered, second.delivered) == (True, True), second
        assert stored(collector.db, "idle", "v", "n1") == {
            ("n1", ()): ([10**9, 2 * 10**9], [1.0, 2.0])
        }
    finally:
        collector.stop()


def test_https_is_verified_against_the_trusted_certificates(tmp_path, monkeypatch):
    """An https endpoint with a self-signed certificate: refused (and retried, the data
    kept) until that certificate is trusted, then delivered."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = Endpoint(tls=context)
    try:
        writer = HttpWriter(server.url, "s3cret", "o", "b")
        refused = writer.write(b"tls,host=n1 v=1i 1\n")
        assert not refused.delivered and refused.retry
        assert "CERTIFICATE_VERIFY_FAILED" in refused.message
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # read when the next context is made
        delivered = writer.write(b"tls,host=n1 v=1i 1\n")
        writer.close()
        assert delivered.delivered, delivered
        assert server.lines() == ["tls,host=n1 v=1i 1"]
        assert server.requests[-1]["authorization"] == "Token s3cret"
    finally:
        server.stop()


def test_the_token_is_never_in_the_log_whatever_the_answer(endpoint, tmp_path, caplog):
    shipper = Shipper(
        endpoint.url, "s3cret-token", "o", "b", tmp_path / "spool", backoff_max_seconds=0.2
    )
    with caplog.at_level(logging.DEBUG):
        shipper.start()
        endpoint.status = 401
        endpoint.error_body = b'{"code": "unauthorized", "message": "unauthorized access"}'
        shipper.submit(points_for(1))
        assert wait_until(lambda: len(endpoint.requests) >= 2)
        endpoint.stop()  # refused
        time.sleep(0.5)
        endpoint.start()
        endpoint.status = 204
        assert shipper.flush(10)
        shipper.close()
    text = "\n".join(record.getMessage() for record in caplog.records)
    assert "401" in text and "unauthorized access" in text  # the outage was logged ...
    assert "s3cret" not in text  # ... without the token
    assert endpoint.lines() == expected_lines(range(1, 2))


@pytest.mark.parametrize("token", ["s3cret\nX-Injected: 1", "s3cret-caf\u00e9-\u2026"])
def test_a_token_no_header_can_carry_keeps_points_and_is_never_logged(
    endpoint, tmp_path, caplog, token
):
    """http.client refuses such a header value with the value in its error text; the
    writer answers a retryable outcome that names the problem, never the token."""
    shipper = Shipper(endpoint.url, token, "o", "b", tmp_path / "spool", backoff_max_seconds=0.1)
    with caplog.at_level(logging.DEBUG):
        shipper.start()
        shipper.submit(points_for(1))
        assert wait_until(lambda: "cannot be sent in an HTTP header" in caplog.text)
        shipper.close(timeout=0.2)
    assert "s3cret" not in caplog.text  # formatted records, tracebacks included
    assert endpoint.requests == []
    assert shipper.queue.spool.points == 3  # kept, for a corrected token


def test_outage_refused_then_503_then_back_every_point_once_in_order(endpoint, tmp_path):
    from agent.samplers.agent import AgentStats

    stats = AgentStats()
    shipper = Shipper(
        endpoint.url, "t", "o", "b", tmp_path / "spool", stats=stats, backoff_max_seconds=0.2
    )
    shipper.start()
    shipper.submit(points_for(0))
    assert shipper.flush(10)

    endpoint.stop()  # connection refused
    for tick in range(1, 6):
        shipper.submit(points_for(tick))
    time.sleep(0.5)  # several refused attempts
    assert stats.spool_points == 15  # 5 ticks x 3 points wait in the spool
    # Every line is spooled with its newline.
    spooled = sum(CHECKSUM_BYTES + len(line) + 1 for line in expected_lines(range(1, 6)))
    assert stats.spool_bytes == spooled

    endpoint.start()
    endpoint.status = 503  # up, but unavailable
    for tick in range(6, 9):
        shipper.submit(points_for(tick))
    assert wait_until(lambda: len(endpoint.requests) >= 3)
    assert endpoint.lines() == expected_lines(range(0, 1))  # nothing accepted during 503

    endpoint.status = 204
    for tick in range(9, 12):
        shipper.submit(points_for(tick))
    assert shipper.flush(10)
    shipper.close()
    assert endpoint.lines() == expected_lines(range(0, 12))  # all, once each, in order
    assert stats.spool_points == 0 and stats.spool_bytes == 0 and stats.points_dropped == 0


def test_once_caught_up_ticks_gather_for_batch_seconds_then_go_in_one_request(endpoint, tmp_path):
    shipper = Shipper(endpoint.url, "t", "o", "b", tmp_path / "spool", batch_seconds=60)
    shipper.start()
    shipper.submit(points_for(0))
    # The first goes at once.
    assert wait_until(lambda: len(endpoint.bodies) == 1 and shipper.queue.spool.points == 0)
    for tick in range(1, 4):
        shipper.submit(points_for(tick))
    time.sleep(0.3)
    assert len(endpoint.bodies) == 1  # ticks 1-3 wait in the spool for the batch window
    assert shipper.queue.spool.points == 9
    assert shipper.flush(10)  # a flush cuts the window short
    shipper.close()
    assert len(endpoint.bodies) == 2  # ticks 1-3 went in one request
    assert endpoint.lines() == expected_lines(range(4))


def test_restart_while_endpoint_down_replays_the_spool(endpoint, tmp_path):
    spool_dir = tmp_path / "spool"
    endpoint.stop()
    first = Shipper(endpoint.url, "t", "o", "b", spool_dir, backoff_max_seconds=0.2)
    first.start()
    for tick in range(3):
        first.submit(points_for(tick))
    first.close(timeout=0.5)  # cannot flush: the points stay on disk
    on_disk = b"".join(p.read_bytes() for p in sorted(spool_dir.iterdir()))
    expected = "".join(line + "\n" for line in expected_lines(range(3)))
    assert verified_lines(on_disk)[0].decode() == expected

    second = Shipper(endpoint.url, "t", "o", "b", spool_dir, backoff_max_seconds=0.2)
    assert second.queue.spool.points == 9
    second.start()
    second.submit(points_for(3))  # a new tick goes after the replayed ones
    endpoint.start()
    assert second.flush(10)
    second.close()
    assert endpoint.lines() == expected_lines(range(4))


def test_spool_full_drops_oldest_and_counts_them(tmp_path, caplog):
    # A tick of points_for(t), 1 <= t <= 9, is 3 lines and 3 newlines: each line is
    # "#<crc32>\n" (10) + "disk,device=sd0,host=n1" (23) + " reads=1i" (9) + " 1000000000"
    # (11) = 53 bytes, so 3 x 54 = 162 bytes. The spool holds 3 ticks; its segments hold
    # one tick each (segment_max_bytes is capped at a quarter of the spool).
    tick_bytes = sum(CHECKSUM_BYTES + len(line) + 1 for line in expected_lines(range(1, 2)))
    assert tick_bytes == 162
    from agent.samplers.agent import AgentStats

    stats = AgentStats()
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    shipper = Shipper(
        down, None, "o", "b", tmp_path / "spool", spool_max_bytes=3 * 162, stats=stats
    )  # not started: nothing is sent, nothing is in flight
    with caplog.at_level(logging.WARNING):
        for tick in range(1, 8):
            shipper.submit(points_for(tick))
    # Room for 3 segments: ticks 5, 6, 7 remain; ticks 1-4 (12 points) were dropped.
    assert stats.points_dropped == 12
    assert stats.spool_points == 9 and stats.spool_bytes == 3 * 162
    shipper.queue.spool.close()
    remaining = Spool(tmp_path / "spool", 3 * 162)
    assert [segment.read().decode() for segment in remaining._segments] == [
        "".join(line + "\n" for line in expected_lines(range(tick, tick + 1))) for tick in (5, 6, 7)
    ]
    full_warnings = [r for r in caplog.records if "is full" in r.getMessage()]
    assert len(full_warnings) == 1  # once per episode


def test_rejected_segment_is_dropped_with_line_number_and_the_rest_arrive(
    endpoint, tmp_path, caplog
):
    shipper = Shipper(
        endpoint.url,
        "t",
        "o",
        "b",
        tmp_path / "spool",
        backoff_max_seconds=0.2,
        segment_max_bytes=1,  # one tick per segment
    )
    for tick in range(4):
        shipper.submit(points_for(tick))
    # The second segment (tick 1) is poisoned: 400 for any body holding it.
    endpoint.decide = lambda body: 400 if b"reads=1i" in body else 204
    endpoint.error_body = (
        b'{"code":"invalid","message":"unable to parse points: line 2: invalid field format"}'
    )
    with caplog.at_level(logging.INFO):
        shipper.start()
        assert shipper.flush(10)
    shipper.close()
    assert endpoint.lines() == expected_lines(range(0, 1)) + expected_lines(range(2, 4))
    assert shipper.queue.spool.points_dropped == 3
    rejected = [r.getMessage() for r in caplog.records if "rejected" in r.getMessage()]
    assert len(rejected) == 1
    assert "rejected 3 points with HTTP 400 at line 2 of 00000000000000000002.lp" in rejected[0]
    # The batch of 4 segments was refused once, then resent one segment at a time.
    assert [request["status"] for request in endpoint.requests] == [400, 204, 400, 204, 204]


def test_one_refused_line_counts_one_dropped_point_against_a_real_collector(
    tmp_path, caplog, repo_env
):
    """The collector stores a body's valid lines and answers 400 naming the bad ones (a
    partial write). Before, the shipper counted the whole segment (3 points, 2 of them
    stored) as dropped; now it counts the one refused line, and logs it once."""
    collector = start_server(tmp_path, repo_env)
    try:
        shipper = Shipper(
            collector.url, None, "o", "b", tmp_path / "spool", backoff_max_seconds=0.2
        )
        shipper.submit(points_for(0))
        # One segment of three lines, the second one malformed (as a damaged file or a
        # buggy encoder would leave it), then more good ticks.
        shipper.queue.spool.append(
            b"disk,device=sdx,host=n1 reads=7i 5000000000\n"
            b"disk,device=sdy,host=n1 reads=oops 5000000001\n"
            b"disk,device=sdz,host=n1 reads=9i 5000000002\n",
            3,
        )
        for tick in (6, 7):
            shipper.submit(points_for(tick))
        with caplog.at_level(logging.INFO):
            shipper.start()
            assert shipper.flush(30)
        shipper.close()
        assert shipper.queue.spool.points_dropped == 1
        assert shipper.queue.spool.points == 0
        devices = stored(collector.db, "disk", "reads", "n1")
        assert devices[("n1", (("device", "sdx"),))] == ([5 * 10**9], [7.0])
        assert devices[("n1", (("device", "sdz"),))] == ([5 * 10**9 + 2], [9.0])
        assert ("n1", (("device", "sdy"),)) not in devices
        assert devices[("n1", (("device", "sd0"),))][0] == [0, 6 * 10**9, 7 * 10**9]
        refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        assert len(refused) == 1, refused
        assert "refused 1 of 12 lines" in refused[0] and "line 5" in refused[0]
    finally:
        collector.stop()


def test_lines_rejected_in_partial_write_messages():
    assert lines_rejected_in("partial write: 8 points written, 1 line(s) rejected: line 5: x") == 1
    assert lines_rejected_in("unable to parse points: line 2: invalid field format") is None


def test_401_keeps_points_spooled_and_the_token_never_reaches_the_log(endpoint, tmp_path, caplog):
    token = "tok-DO-NOT-LOG-123"
    endpoint.status = 401
    endpoint.error_body = f'{{"code":"unauthorized","message":"bad token {token}"}}'.encode()
    shipper = Shipper(endpoint.url, token, "o", "b", tmp_path / "spool", backoff_max_seconds=0.1)
    assert token not in repr(shipper)
    with caplog.at_level(logging.DEBUG):
        shipper.start()
        shipper.submit(points_for(1))
        assert wait_until(lambda: len(endpoint.requests) >= 3)
        assert shipper.queue.spool.points == 3 and shipper.queue.spool.points_dropped == 0
        endpoint.status = 204
        assert shipper.flush(10)
        shipper.close()
    assert endpoint.lines() == expected_lines(range(1, 2))
    messages = "\n".join(r.getMessage() for r in caplog.records)
    assert "HTTP 401 (the token was refused)" in messages
    assert token not in messages
    outage_logs = [r for r in caplog.records if "keeping points in the spool" in r.getMessage()]
    assert len(outage_logs) == 1  # once per outage, not once per retry


def test_a_spool_that_cannot_be_written_keeps_points_in_memory_never_raises(tmp_path, caplog):
    spool_dir = tmp_path / "spool"
    shipper = Shipper("http://127.0.0.1:9", None, "o", "b", spool_dir, stats=AgentStats())
    shutil.rmtree(spool_dir)
    spool_dir.write_text("now a file, not a directory")
    with caplog.at_level(logging.ERROR):
        shipper.submit(points_for(1))
        shipper.submit(points_for(2))
    assert shipper.queue.spool.points_dropped == 0
    assert shipper.stats.memory_points == 6 and shipper.stats.spool_error == 1
    assert (
        len([r for r in caplog.records if "cannot write (Not a directory)" in r.getMessage()]) == 1
    )
    spool_dir.unlink()
    spool_dir.mkdir()
    shipper.submit(points_for(3))  # the spool works again: memory moves into it, in order
    assert shipper.stats.memory_points == 0 and shipper.stats.spool_error == 0
    assert shipper.queue.spool.points == 9
    sent = b"".join(segment.read() for segment in shipper.queue.spool.take(1 << 20, 64)[0])
    assert sent.decode().splitlines() == expected_lines(range(1, 4))


def test_a_spool_directory_removed_while_running_is_made_again_spooled_and_delivered(
    endpoint, tmp_path, caplog
):
    spool_dir = tmp_path / "spool"
    stats = AgentStats()
    shipper = Shipper(endpoint.url, None, "o", "b", spool_dir, stats=stats)
    # Not started yet: what is spooled stays on disk to be looked at.
    with caplog.at_level(logging.WARNING):
        shipper.submit(points_for(0))  # into the open segment...
        shutil.rmtree(spool_dir)  # ...which goes with the directory
        shipper.submit(points_for(1))
        assert on_disk(spool_dir) == expected_lines(range(1, 2))
        assert stats.points_dropped == 3 and stats.spool_points == 3

        shipper.queue.spool.close()  # sealed, as when the sender takes it
        shutil.rmtree(spool_dir)  # no open segment this time
        for tick in (2, 3):
            shipper.submit(points_for(tick))
        assert on_disk(spool_dir) == expected_lines(range(2, 4))
    assert stats.points_dropped == 6 and stats.spool_points == 6
    assert stats.spool_error == 0 and stats.memory_points == 0  # never needed memory
    made_again = [r for r in caplog.records if "was removed while the agent ran" in r.message]
    assert len(made_again) == 2
    shipper.start()
    assert shipper.flush(10)
    shipper.close()
    assert endpoint.lines() == expected_lines(range(2, 4))
    assert list(spool_dir.iterdir()) == []


def on_disk(spool_dir: Path) -> list[str]:
    """The lines of every segment file, oldest first."""
    segments = sorted(spool_dir.glob("*.lp"))
    data = b"".join(segment.read_bytes() for segment in segments)
    return verified_lines(data)[0].decode().splitlines()


def test_memory_held_while_the_spool_fails_is_bounded_oldest_dropped_first(tmp_path):
    spool_dir = tmp_path / "spool"
    shipper = Shipper("http://127.0.0.1:9", None, "o", "b", spool_dir, spool_max_bytes=400)
    shutil.rmtree(spool_dir)
    spool_dir.write_text("not a directory")
    for tick in range(10):  # 3 lines of about 34 bytes a tick: 400 bytes hold 3 ticks
        shipper.submit(points_for(tick))
    assert shipper.queue.memory_points == 9
    assert shipper.queue.spool.points_dropped == 21
    assert [body.decode().splitlines() for body, _ in shipper.queue._memory] == [
        expected_lines(range(tick, tick + 1)) for tick in range(7, 10)
    ]


def test_a_line_cut_short_by_a_crash_is_truncated_at_start(tmp_path, caplog):
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    # Two complete lines, then a write cut short mid-line.
    (spool_dir / "00000000000000000006.lp").write_bytes(
        b"disk,host=a reads=1i 1\ndisk,host=a reads=2i 2\ndisk,host=a rea"
    )
    (spool_dir / "00000000000000000007.lp").write_bytes(b"disk,ho")  # nothing complete
    (spool_dir / "notes.txt").write_text("not a segment")
    with caplog.at_level(logging.WARNING):
        spool = Spool(spool_dir, 1000)
    assert sorted(p.name for p in spool_dir.iterdir()) == [
        "00000000000000000006.lp",
        "notes.txt",
    ]
    assert (spool_dir / "00000000000000000006.lp").read_bytes() == (
        b"disk,host=a reads=1i 1\ndisk,host=a reads=2i 2\n"
    )
    assert spool.points == 2 and spool.bytes == 46  # 2 x (22 + newline)
    assert spool.append(b"disk,host=a reads=3i 3", 1)
    assert [segment.seq for segment in spool._segments] == [6, 8]  # numbering carries on
    assert len([r for r in caplog.records if "cut short" in r.getMessage()]) == 2


def test_line_number_in_server_messages():
    assert line_number_in("unable to parse points: line 2: invalid field format") == 2
    assert (
        line_number_in(
            "failed to parse line protocol: errors encountered on line(s):\nline 12: bad timestamp"
        )
        == 12
    )
    assert line_number_in("partial write: field type conflict") is None


VICTORIA_METRICS = Path("/usr/bin/victoria-metrics")


@pytest.mark.slow
@pytest.mark.skipif(
    not VICTORIA_METRICS.exists(),
    reason="VictoriaMetrics is not installed (Debian package victoria-metrics)",
)
def test_victoria_metrics_receives_pushed_points(tmp_path):
    import json

    port = free_port()
    process = subprocess.Popen(
        [
            str(VICTORIA_METRICS),
            f"-httpListenAddr=127.0.0.1:{port}",
            f"-storageDataPath={tmp_path / 'vm'}",
            "-loggerLevel=ERROR",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=1) as response:
                    return response.status == 200
            except OSError:
                return False

        assert wait_until(healthy, 30), "VictoriaMetrics did not start"
        # Whole seconds in the past: export reads up to now.
        then_ms = (int(time.time()) - 10) * 1000
        shipper = Shipper(base, "unused-token", "o", "epochscope", tmp_path / "spool")
        shipper.start()
        shipper.submit(
            [
                Point(
                    "disk",
                    {"host": "n1", "device": "sda", "kind": "disk"},
                    {"read_bytes": 1234567, "in_flight": 2.5},
                    then_ms * 10**6,
                ),
                Point(
                    "disk",
                    {"host": "n1", "device": "sda", "kind": "disk"},
                    {"read_bytes": 1334567, "in_flight": 0.0},
                    (then_ms + 1000) * 10**6,
                ),
            ]
        )
        assert shipper.flush(10)
        shipper.close()
        urllib.request.urlopen(f"{base}/internal/force_flush", timeout=5).read()

        def export() -> list[dict]:
            query = urllib.parse.urlencode({"match[]": '{__name__=~"disk_.*",host="n1"}'})
            with urllib.request.urlopen(f"{base}/api/v1/export?{query}", timeout=5) as r:
                return [json.loads(line) for line in r.read().decode().splitlines() if line]

        assert wait_until(lambda: len(export()) == 2, 10)
        series = {row["metric"]["__name__"]: row for row in export()}
        read = series["disk_read_bytes"]
        assert read["metric"]["device"] == "sda" and read["metric"]["kind"] == "disk"
        assert read["values"] == [1234567, 1334567]
        assert read["timestamps"] == [then_ms, then_ms + 1000]
        assert series["disk_in_flight"]["values"] == [2.5, 0]
    finally:
        process.terminate()
        process.wait(10)
