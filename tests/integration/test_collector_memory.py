"""Memory a client can make ``collector serve`` hold, against the real process on loopback.

Before (issue 30): 40 connections with the token, each sending 63 of 64 MiB and stalling,
took +3.0 GiB and 3.5 GiB stayed after they closed (the body deadline grew a second per
KiB: 18 h for 64 MiB); without a token, each connection sending an unfinished 62 KiB head
held ~75 KiB. Now (collector.ingest.connections): one memory budget for the bodies of all
connections (503 + Retry-After beyond it), a minimum transfer rate, memory handed back
after large bodies, and a 16 KiB head limit.

The RSS bounds (anonymous memory) are the budget plus what Python and the stream buffers
need, measured on the shared 2-core VM (load 6 to 20); they hold the same on an idle
machine (memory does not depend on load, only how long each step takes).
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.integration.test_collector_ingest_server import REPO_ROOT, start_server, stored

MIB = 1 << 20
HEADS = 1200  # unauthenticated connections each holding an unfinished head


@pytest.fixture(scope="module")
def env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def rss_bytes(pid: int) -> int:
    """The process's anonymous resident memory (``RssAnon``: its heap and stacks). The
    file pages SQLite maps to read the store (``mmap_size``) are left out: they are page
    cache, and grow with the store, not with what a client sends."""
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^RssAnon:\s+(\d+) kB", status, re.MULTILINE)
    return int(found[1]) * 1024 if found else 0  # none once the process has exited


class PeakRss(threading.Thread):
    """The highest RSS of ``pid`` while it runs, sampled every 20 ms."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = rss_bytes(pid)
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.02):
            self.peak = max(self.peak, rss_bytes(self.pid))

    def stop(self) -> int:
        self.stopping.set()
        self.join()
        return self.peak


def settled_rss(pid: int, seconds: float = 4.0) -> int:
    """RSS once it stops falling (trims run a second after the last large body)."""
    time.sleep(1.5)
    low = rss_bytes(pid)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.25)
        low = min(low, rss_bytes(pid))
    return low


def write(port: int, body: bytes) -> bytes:
    """One write on its own connection: what was answered (b"" when the server closed on
    a refused body before the client could read its 503)."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        with contextlib.suppress(ConnectionError):
            sock.sendall(
                b"POST /api/v2/write?bucket=b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
        return read_answer(sock, 60)


CLOSED = b"<closed by the server>"


def send_most_then_stall(port: int, length: int, sending: int) -> tuple[socket.socket, bytes]:
    """Open a connection, announce a body of ``length`` bytes, send ``sending`` of them in
    256 KiB pieces (stopping at the first answer) and stall: the socket, and what was
    answered by then (``CLOSED`` when the server refused and closed before its answer could
    be read: on a loaded machine the reset can overtake the 503)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(
        b"POST /api/v2/write?bucket=b HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % length
    )
    piece = b"flood,host=f v=1i 1\n" * (256 * 1024 // 20)
    sent = 0
    while sent < sending:
        sock.setblocking(False)
        try:
            reply = sock.recv(65536)
            return sock, reply
        except BlockingIOError:
            pass
        except ConnectionError:
            return sock, CLOSED
        finally:
            sock.setblocking(True)
        try:
            sock.sendall(piece[: sending - sent])
        except ConnectionError:
            return sock, read_answer(sock, 1) or CLOSED
        sent += len(piece[: sending - sent])
    return sock, b""


def read_answer(sock: socket.socket, timeout: float) -> bytes:
    sock.settimeout(timeout)
    reply = b""
    try:
        while chunk := sock.recv(65536):
            reply += chunk
    except (ConnectionError, TimeoutError):
        pass
    return reply


@pytest.mark.slow
def test_a_flood_of_stalled_large_bodies_is_held_to_the_budget_and_handed_back(tmp_path, env):
    """8 connections each announce 16 MiB, send 15 MiB and stall, under a 40 MiB budget:
    two fit (30 MiB), the third crosses the budget and each one after it gets 503 with
    Retry-After at once; the two stalled ones are cut by the minimum rate (408) within
    the 2 s window; RSS grows by at most the budget plus 24 MiB, and is back within
    12 MiB of where it started once they are gone. Meanwhile a writer waits its turn:
    after the flood, 204."""
    server = start_server(
        tmp_path,
        env,
        "--max-body-bytes",
        str(16 * MIB),
        "--body-memory-bytes",
        str(40 * MIB),
        "--body-timeout",
        "2",
        "--parse-workers",
        "1",
    )
    sockets: list[socket.socket] = []
    try:
        assert write(server.port, b"warm,host=w v=1i 1").startswith(b"HTTP/1.1 204")
        baseline = settled_rss(server.process.pid, 1.0)
        peak = PeakRss(server.process.pid)
        peak.start()
        early: list[bytes] = []
        for _ in range(8):
            sock, reply = send_most_then_stall(server.port, 16 * MIB, 15 * MIB)
            sockets.append(sock)
            early.append(reply)
        answered = [r for r in early if r.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")]
        refused = answered + [r for r in early if r == CLOSED]
        assert len(refused) >= 5, [r[:60] for r in early]
        assert answered, "no refusal's answer could be read at all"
        assert all(b"\r\nRetry-After: 5\r\n" in r for r in answered)
        assert all(b"memory budget" in r for r in answered)
        late = [read_answer(sock, 10) for sock, r in zip(sockets, early, strict=True) if not r]
        timed_out = [r for r in late if r.startswith(b"HTTP/1.1 408 Request Timeout\r\n")]
        assert len(timed_out) >= 2, [r[:60] for r in late]
        for sock in sockets:
            sock.close()
        flood_peak = peak.stop()
        after = settled_rss(server.process.pid)
        assert flood_peak - baseline <= 40 * MIB + 24 * MIB, (baseline, flood_peak)
        assert after - baseline <= 12 * MIB, (baseline, after)
        assert write(server.port, b"after,host=w v=2i 2").startswith(b"HTTP/1.1 204")
        assert stored(server.db, "after", "v", "w") == {("w", ()): ([2], [2.0])}
        assert stored(server.db, "flood", "v", "f") == {}
        print(
            f"flood: baseline {baseline / MIB:.0f} MiB, peak +{(flood_peak - baseline) / MIB:.0f}"
            f" MiB, after +{(after - baseline) / MIB:.1f} MiB, load {os.getloadavg()[0]:.1f}"
        )
    finally:
        for sock in sockets:
            sock.close()
        server.stop()


def disk_lines(size: int) -> bytes:
    """Lines like an agent's (a measurement, three tags, six fields; ~150 bytes each),
    ``size`` bytes at most."""
    line = (
        b"full,host=node%02d,device=nvme%dn1,job=j%d reads=%di,writes=%di,read_bytes=%di,"
        b"write_bytes=%di,busy=0.%d,queue=%d.5 %d\n"
    )
    lines, total, i = [], 0, 0
    while True:
        text = line % (i % 50, i % 4, i % 7, i, i * 3, i * 4096, i * 8192, i % 10, i % 9, i + 1)
        if total + len(text) > size:
            return b"".join(lines)
        lines.append(text)
        total += len(text)
        i += 1


@pytest.mark.slow
def test_full_bodies_at_once_stay_within_the_budget_and_memory_comes_back(tmp_path, env):
    """12 complete 8 MiB bodies (agent-like lines) at once under a 32 MiB budget, parsed in
    the server: the ones that fit are stored (204), the rest 503; RSS peaks at no more
    than the budget plus one parse (parsing holds ~15x a body: 120 MiB for one of these,
    measured alone; large bodies are parsed one at a time) and comes back within 24 MiB
    (what stays: the request threads started for them, parser caches).
    Before: 16 bodies of 64 MiB peaked at 5.9 GiB, 5.6x the bytes received."""
    server = start_server(
        tmp_path,
        env,
        "--max-body-bytes",
        str(8 * MIB),
        "--body-memory-bytes",
        str(32 * MIB),
        "--parse-workers",
        "1",
    )
    try:
        body = disk_lines(8 * MIB)
        # one body first: what a first large parse leaves for good (the parser's templates,
        # the store's caches, lazily imported code: ~25 MiB) is in the baseline
        assert write(server.port, body).startswith(b"HTTP/1.1 204")
        baseline = settled_rss(server.process.pid, 1.0)
        peak = PeakRss(server.process.pid)
        peak.start()
        answers: list[bytes] = []
        threads = [
            threading.Thread(target=lambda: answers.append(write(server.port, body)))
            for _ in range(12)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        full_peak = peak.stop()
        after = settled_rss(server.process.pid)
        statuses = sorted(a[9:12] for a in answers)
        assert len(statuses) == 12 and set(statuses) <= {b"204", b"503", b""}, statuses
        assert statuses.count(b"204") >= 1, statuses
        assert full_peak - baseline <= 32 * MIB + 20 * 8 * MIB, (baseline, full_peak)
        assert after - baseline <= 24 * MIB, (baseline, after)  # 12 request threads now
        print(
            f"full bodies: {statuses}, peak +{(full_peak - baseline) / MIB:.0f} MiB, "
            f"after +{(after - baseline) / MIB:.1f} MiB, load {os.getloadavg()[0]:.1f}"
        )
    finally:
        server.stop()


def test_the_minimum_rate_cuts_a_drip_and_a_stall_and_passes_a_slow_steady_body(tmp_path, env):
    """With a 1 s window at 4 KiB/s: a body dripped at 1 KiB/s gets 408 within about a
    second; one sent fast, then stalled, too (before, its first 512 KiB bought it 512 s
    more); one sent at 8 KiB/s for 3 s (three windows: no deadline for the whole body)
    is stored."""
    server = start_server(tmp_path, env, "--body-timeout", "1", "--body-min-rate", "4096")
    head = b"POST /api/v2/write?bucket=b HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as drip:
            drip.sendall(head % (1 * MIB))
            started = time.monotonic()
            drip.settimeout(0.1)
            reply = b""
            while not reply and time.monotonic() - started < 10:
                try:
                    drip.send(b"x" * 100)
                    reply = drip.recv(65536)
                except TimeoutError:
                    continue
                except ConnectionError:
                    break
            took = time.monotonic() - started
            assert reply.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), reply[:100]
            assert took < 4, took

        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as stall:
            stall.sendall(head % (2 * MIB) + b"x" * (512 * 1024))
            started = time.monotonic()
            reply = read_answer(stall, 10)
            assert reply.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), reply[:100]
            assert time.monotonic() - started < 4

        lines = b"".join(b"steady,host=s v=%di %d\n" % (i, i + 1) for i in range(1200))
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as steady:
            steady.sendall(head % len(lines))
            for offset in range(0, len(lines), 1024):  # 8 KiB/s
                steady.sendall(lines[offset : offset + 1024])
                time.sleep(0.125)
            reply = steady.recv(65536)
        assert reply.startswith(b"HTTP/1.1 204 No Content\r\n"), reply[:100]
        ((times, _),) = stored(server.db, "steady", "v", "s").values()
        assert len(times) == 1200
    finally:
        server.stop()


@pytest.mark.slow
def test_1200_unfinished_heads_without_a_token_cost_little_and_are_given_back(tmp_path, env):
    """1,200 connections without a token each send all but the end of a head just under
    the 16 KiB limit and wait. Before (64 KiB limit and buffer): ~75 KiB a connection.
    Now at most 32 KiB a connection; a head over the limit gets 431; once they close, RSS
    returns within 12 MiB."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < HEADS + 500:
        pytest.skip(f"the hard open-file limit is {hard}; this test needs {HEADS + 500}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, HEADS + 500), hard))
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    token_file.chmod(0o600)
    server = start_server(tmp_path, env, "--token-file", str(token_file), "--header-timeout", "120")
    sockets: list[socket.socket] = []
    try:
        head = b"POST /api/v2/write?bucket=b HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 16_000
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as too_long:
            too_long.sendall(head + b"a" * 1000 + b"\r\n\r\n")
            assert read_answer(too_long, 20).startswith(b"HTTP/1.1 431 ")
        baseline = settled_rss(server.process.pid, 1.0)
        for _ in range(HEADS):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            sock.sendall(head)
            sockets.append(sock)
        time.sleep(2)
        held = rss_bytes(server.process.pid) - baseline
        per_connection = held / HEADS
        assert per_connection <= 32 * 1024, f"{per_connection / 1024:.1f} KiB a connection"
        for sock in sockets:
            sock.close()
        sockets.clear()
        after = settled_rss(server.process.pid)
        assert after - baseline <= 12 * MIB, (baseline, after)
        print(
            f"heads: {per_connection / 1024:.1f} KiB a connection, +{held / MIB:.1f} MiB for "
            f"{HEADS}, after +{(after - baseline) / MIB:.1f} MiB, load {os.getloadavg()[0]:.1f}"
        )
    finally:
        for sock in sockets:
            sock.close()
        server.stop()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
