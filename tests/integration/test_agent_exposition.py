"""/metrics: schema names, kinds and help; timestamps; the latest sample only; HTTP."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from agent.exposition import LatestSample, MetricsServer, render
from contract.point import Point
from netserve.http_guard import ConnectionLimits


def families_by_name(text: str) -> dict:
    return {family.name: family for family in text_string_to_metric_families(text)}


SAMPLE = [
    Point(
        "disk",
        {"host": "n1", "device": "sda", "kind": "disk"},
        {"read_bytes": 4096, "in_flight": 3, "reads": 2},
        1,
    ),
    Point(
        "disk",
        {"host": "n1", "device": "sda1", "kind": "partition"},
        {"read_bytes": 1024, "in_flight": 0, "reads": 1},
        1,
    ),
    Point(
        "infiniband",
        {"host": "n1", "device": "mlx5_0", "port": "1"},
        {"rcv_bytes": 400, "hw_out_of_buffer": 7, "state": 4},
        1,
    ),
    Point(
        "nfs",
        {"host": "n1", "mountpoint": "/a", "server": "s", "duplicate_of": ""},
        {"app_read_bytes": 10},
        1,
    ),
    Point(
        "nfs",
        {"host": "n1", "mountpoint": "/b", "server": "s", "duplicate_of": "/a"},
        {"app_read_bytes": 10},
        1,
    ),
    Point("workload", {"host": "n1"}, {"event": "epoch_end", "epoch": 3}, 1),
    Point("disk", {"host": "n1", "device": "sdb", "kind": "disk"}, {"nonsense": 1}, 1),
]


def test_counters_gauges_help_and_labels():
    text = render(SAMPLE)
    families = families_by_name(text)
    read = families["epochscope_disk_read_bytes"]  # the parser strips _total
    assert read.type == "counter"
    assert read.documentation == "Bytes read (sectors x 512)"
    assert [(s.name, s.labels, s.value) for s in read.samples] == [
        ("epochscope_disk_read_bytes_total", {"host": "n1", "device": "sda", "kind": "disk"}, 4096),
        (
            "epochscope_disk_read_bytes_total",
            {"host": "n1", "device": "sda1", "kind": "partition"},
            1024,
        ),
    ]
    in_flight = families["epochscope_disk_in_flight"]
    assert in_flight.type == "gauge" and in_flight.documentation == "I/Os currently in progress"
    assert [s.value for s in in_flight.samples] == [3, 0]
    assert "# TYPE epochscope_disk_read_bytes_total counter" in text
    # Integers exactly as they are; every sample with its sample's time in ms.
    assert 'epochscope_disk_read_bytes_total{device="sda",host="n1",kind="disk"} 4096 0\n' in text


def test_hw_counters_empty_tags_text_and_unknown_fields():
    families = families_by_name(render(SAMPLE))
    hw = families["epochscope_infiniband_hw_out_of_buffer"]
    assert hw.type == "counter" and hw.samples[0].value == 7
    assert hw.documentation == "Driver hardware counter out_of_buffer"
    assert families["epochscope_infiniband_state"].type == "gauge"
    nfs = families["epochscope_nfs_app_read_bytes"]
    # An empty tag is no label (as in line protocol), a set one is.
    assert [s.labels for s in nfs.samples] == [
        {"host": "n1", "mountpoint": "/a", "server": "s"},
        {"host": "n1", "mountpoint": "/b", "server": "s", "duplicate_of": "/a"},
    ]
    # Text fields are not exposed; numeric workload fields are gauges.
    assert "epochscope_workload_event" not in families
    assert families["epochscope_workload_epoch"].samples[0].value == 3
    # A field the schema does not know is left out.
    assert not [name for name in families if "nonsense" in name]


def test_empty_sample_is_an_empty_page():
    assert render([]) == ""
    assert LatestSample().page() == b""


def test_samples_carry_their_own_timestamp_in_ms():
    time_ns = 1_700_000_000_123_456_789
    text = render([Point("memory", {"host": "n1"}, {"cached_bytes": 2.5e9}, time_ns)])
    [family] = text_string_to_metric_families(text)
    [sample] = family.samples
    assert sample.value == 2.5e9
    assert sample.timestamp == 1_700_000_000.123  # the parser gives seconds
    assert text.endswith(" 2500000000.0 1700000000123\n")


def test_cpu_modes_are_one_family_with_a_mode_label():
    fields = {"user_seconds": 10.5, "idle_seconds": 80.25, "iowait_seconds": 1.0}
    fields["cpus_online"] = 2.0
    text = render([Point("cpu", {"host": "n1"}, fields, 5_000_000)])
    families = families_by_name(text)
    assert set(families) == {"epochscope_cpu_seconds", "epochscope_cpu_cpus_online"}
    seconds = families["epochscope_cpu_seconds"]
    assert seconds.type == "counter"
    assert [(s.name, s.labels, s.value) for s in seconds.samples] == [
        ("epochscope_cpu_seconds_total", {"host": "n1", "mode": "user"}, 10.5),
        ("epochscope_cpu_seconds_total", {"host": "n1", "mode": "idle"}, 80.25),
        ("epochscope_cpu_seconds_total", {"host": "n1", "mode": "iowait"}, 1.0),
    ]
    assert text.count("# TYPE epochscope_cpu_seconds_total counter") == 1


def test_label_values_and_help_are_escaped():
    point = Point("disk", {"host": 'a"b\\c\nd', "device": "x"}, {"reads": 1}, 0)
    text = render([point])
    assert 'host="a\\"b\\\\c\\nd"' in text
    [family] = text_string_to_metric_families(text)
    assert family.samples[0].labels["host"] == 'a"b\\c\nd'


def test_non_finite_gauges():
    text = render([Point("gpu", {"gpu": "0"}, {"power_watts": float("nan")}, 0)])
    assert 'epochscope_gpu_power_watts{gpu="0"} NaN 0' in text


def test_scrape_over_http_serves_the_latest_published_sample():
    server = MetricsServer("127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        server.publish(SAMPLE[:1])
        first = urllib.request.urlopen(url, timeout=5).read().decode()
        assert families_by_name(first)["epochscope_disk_reads"].samples[0].value == 2
        # Scraping again without a new sample gives the same page: nothing is re-read.
        assert urllib.request.urlopen(url, timeout=5).read().decode() == first
        server.publish(
            [Point("disk", {"host": "n1", "device": "sda", "kind": "disk"}, {"reads": 9}, 2)]
        )
        second = families_by_name(urllib.request.urlopen(url, timeout=5).read().decode())
        assert second["epochscope_disk_reads"].samples[0].value == 9
        # Only our families: no python_gc_* / process_* from a client library.
        assert list(second) == ["epochscope_disk_reads"]
        with urllib.request.urlopen(url, timeout=5) as response:
            assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/other", timeout=5)
            raise AssertionError("expected 404")
        except urllib.error.HTTPError as error:
            assert error.code == 404
    finally:
        server.close()


def test_a_page_is_rendered_once_per_sample_whatever_the_scrapes(monkeypatch):
    latest = LatestSample()
    rendered = []
    original = latest._renderer.render
    monkeypatch.setattr(latest._renderer, "render", lambda p: rendered.append(1) or original(p))
    latest.publish(SAMPLE)
    first = latest.page()
    assert latest.page() is first and latest.page() is first
    latest.publish(SAMPLE)
    assert latest.page() == first
    assert len(rendered) == 2


def test_http_keep_alive_head_and_refusals():
    import http.client
    import socket

    server = MetricsServer("127.0.0.1", 0)
    try:
        server.publish(SAMPLE[:1])
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        pages = []
        for _ in range(3):  # one connection, several scrapes (as Prometheus does)
            connection.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
            reply = connection.getresponse()
            assert reply.status == 200 and reply.getheader("Connection") is None
            pages.append(reply.read())
        assert pages[0] == pages[1] == pages[2] and b"epochscope_disk_reads_total" in pages[0]
        connection.request("HEAD", "/metrics")
        reply = connection.getresponse()
        assert reply.status == 200 and reply.read() == b""
        assert int(reply.getheader("Content-Length")) == len(pages[0])
        connection.request("POST", "/metrics", body=b"x")
        reply = connection.getresponse()
        assert reply.status == 405 and reply.getheader("Connection") == "close"
        connection.close()
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
            raw.sendall(b"nonsense\r\n\r\n")
            assert raw.recv(100).startswith(b"HTTP/1.1 400 ")
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
            raw.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")  # 1.0: answered, then closed
            data = b""
            while chunk := raw.recv(65536):
                data += chunk
            assert data.startswith(b"HTTP/1.1 200 OK\r\n") and data.endswith(pages[0])
    finally:
        server.close()


def threads_settle_at(most: int, seconds: float = 5.0) -> bool:
    """Whether this process's threads fall to ``most`` or fewer within ``seconds``."""
    deadline = time.monotonic() + seconds
    while threading.active_count() > most:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_idle_and_slow_connections_cannot_hold_threads_or_lock_out_a_scrape(caplog):
    """300 connections to /metrics that send nothing or half a request line. Before: a
    thread each (300 threads, and under a 1,024-descriptor limit a scraper locked out). Now
    at most 64 are held; each new one (the scrape too) closes the longest-waiting one, and
    when all have a request in hand a newcomer gets 503 + Retry-After."""
    import socket

    server = MetricsServer("127.0.0.1", 0, ConnectionLimits(max_connections=64))
    idle: list[socket.socket] = []
    try:
        server.publish(SAMPLE[:1])
        baseline = threading.active_count()
        for n in range(300):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            if n % 2:
                sock.sendall(b"GET /metr")  # a request line that never ends
            idle.append(sock)
        time.sleep(1)  # every connection accepted by now
        # an evicted connection's thread is gone a moment after its socket is closed
        assert threads_settle_at(baseline + 64)
        page = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10)
        assert page.status == 200 and b"epochscope_disk_reads" in page.read()
        assert server._server.guard.evicted >= 300 - 64
        assert threads_settle_at(baseline + 64)
        # 150 half requests evicted with a 503: one log line (once a minute per client)
        assert len(refusal_lines(caplog)) == 1
    finally:
        for sock in idle:
            sock.close()
        server.close()


def test_a_newcomer_at_the_cap_with_every_connection_busy_gets_503():
    import socket

    server = MetricsServer("127.0.0.1", 0, ConnectionLimits(max_connections=2))
    started = threading.Event()
    release = threading.Event()

    def slow_edge() -> int:  # a request in hand that takes its time
        started.set()
        release.wait(10)
        return 1

    server.serve_edge_samples(slow_edge)
    busy = []
    try:
        for _ in range(2):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            sock.sendall(b"POST /edge HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            busy.append(sock)
        assert started.wait(10)
        time.sleep(0.5)
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as extra:
            reply = b""
            while chunk := extra.recv(65536):
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), reply[:100]
        assert b"\r\nRetry-After: 5\r\n" in reply and b"too many connections" in reply
        release.set()
        for sock in busy:
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    finally:
        release.set()
        for sock in busy:
            sock.close()
        server.close()


def refusal_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused ")]


def test_a_head_trickled_a_byte_at_a_time_is_cut_at_its_deadline_while_scrapes_go_on(caplog):
    """Two clients send a head that never ends, a byte every 0.5 s (a timeout per read,
    what the server had, never fires on them), one sends nothing. With a 3 s deadline for
    the whole head, the tricklers get 408 and the silent one is closed, all after at least
    3 s; scrapes are served all the while. Two 408s from one address: one log line. (3 s,
    not less: a scrape's own head must be read within it on a loaded machine.)"""
    from concurrent.futures import ThreadPoolExecutor

    from tests.support.slow_clients import silent_client, trickle_head

    limits = ConnectionLimits(max_connections=8, header_timeout=3.0, idle_timeout=30.0)
    server = MetricsServer("127.0.0.1", 0, limits)
    url = f"http://127.0.0.1:{server.port}/metrics"
    try:
        server.publish(SAMPLE[:1])
        with caplog.at_level("DEBUG", "agent.exposition"), ThreadPoolExecutor(3) as pool:
            slow = [pool.submit(trickle_head, server.port, 0.5) for _ in range(2)]
            silent = pool.submit(silent_client, server.port)
            scrapes = 0
            while not all(future.done() for future in [*slow, silent]):
                with urllib.request.urlopen(url, timeout=30) as page:
                    assert page.status == 200 and b"epochscope_disk_reads" in page.read()
                scrapes += 1
                time.sleep(0.1)
            for future in slow:
                reply, seconds = future.result()
                assert reply.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), reply[:80]
                assert b"request head not received in time" in reply
                assert 2.9 <= seconds < 60
            reply, seconds = silent.result()
            assert reply == b"" and 2.9 <= seconds < 60
        assert scrapes >= 3
        assert server._server.guard.timed_out == 3
        lines = refusal_lines(caplog)
        assert len(lines) == 1, lines
        assert "408 request head not received in time" in lines[0]
        warnings = [r for r in caplog.records if r.levelname not in ("DEBUG",)]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]  # no traceback, no more
    finally:
        server.close()


def test_a_kept_alive_connection_gets_the_idle_timeout_and_a_fresh_head_deadline():
    """A later request's head deadline counts from its first byte (a scrape 3 s after
    the last one, with a 2 s head deadline, is served); with no request the connection
    is closed after the idle timeout."""
    import http.client

    limits = ConnectionLimits(max_connections=8, header_timeout=2.0, idle_timeout=6.0)
    server = MetricsServer("127.0.0.1", 0, limits)
    try:
        server.publish(SAMPLE[:1])
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        connection.request("GET", "/metrics")
        assert connection.getresponse().read()
        time.sleep(3.0)
        connection.request("GET", "/metrics")
        reply = connection.getresponse()
        assert reply.status == 200 and reply.read()
        answered = time.monotonic()
        assert connection.sock is not None
        assert connection.sock.recv(1) == b""  # closed by the server, nothing sent
        assert 5.9 <= time.monotonic() - answered < 60
        connection.close()
    finally:
        server.close()
