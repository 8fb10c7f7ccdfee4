"""Reads do not starve writes (issue 44, item 8): a real collector on loopback whose read
API is busy answers writes all the same, and tells the reads beyond its queue to come back
(503 with Retry-After and the reason).

The reads are held inside the store by a ``SqliteStore`` whose ``runs()`` waits for the
test (a stand-in for a request that takes 30 s on 3,000 runs, which this 2-vCPU machine
cannot time reliably); before the gate, 20 such reads took all 16 request threads and the
write waited behind them. Latency under 40 real heavy reads is bench/read_api/reads_and_writes.py's
(docs/reliability.md).
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import threading

import pytest

from collector.api.server import ReadGate
from collector.ingest.server import CollectorServer, Sink
from collector.store import SqliteStore

TOKEN = "gate-token-0123456789"
HEADERS = {"Authorization": f"Token {TOKEN}"}


class HeldStore(SqliteStore):
    """A real store whose run list waits until ``release`` is set."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.release = threading.Event()
        self.inside = threading.Semaphore(0)

    def runs(self):
        self.inside.release()
        self.release.wait(30)
        return super().runs()


@pytest.fixture
def served(tmp_path):
    store = HeldStore(tmp_path / "gate.sqlite")
    server = CollectorServer(
        ("127.0.0.1", 0), Sink(store), token=TOKEN, read_gate=ReadGate(1, 2, wait_seconds=30)
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, store
    store.release.set()
    server.shutdown()
    thread.join(10)
    server.server_close()
    store.close()


def request(server, method: str, path: str, body: bytes | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=20)
    try:
        conn.request(method, path, body=body, headers=HEADERS)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def test_twenty_held_reads_leave_writes_their_threads(served):
    server, store = served
    with concurrent.futures.ThreadPoolExecutor(20) as readers:
        reads = [readers.submit(request, server, "GET", "/api/v1/runs") for _ in range(20)]
        assert store.inside.acquire(timeout=10)  # one read is being built, held
        refused = [f.result() for f in _first_done(reads, 17)]
        # one builds, two wait: the other 17 are told to come back
        assert len(refused) == 17
        for status, headers, body in refused:
            assert status == 503 and headers["Retry-After"] == "2"
            assert "1 reads are being built and 2 wait" in json.loads(body)["message"]
        line = b"cpu,host=node01 busy=1.0 1700000000000000000"
        status, _, _ = request(server, "POST", "/api/v2/write?bucket=b&org=o", line)
        assert status == 204  # while the reads are held
        store.release.set()
        answered = [f.result(timeout=20) for f in reads if f.result()[0] == 200]
    assert len(answered) == 3 and server.read_gate.refused == 17


def _first_done(futures: list[concurrent.futures.Future], count: int) -> list:
    """The first ``count`` of ``futures`` to finish (within 20 s), and no more: the rest
    stay pending."""
    done: set = set()
    for future in concurrent.futures.as_completed(futures, timeout=20):
        done.add(future)
        if len(done) == count:
            break
    concurrent.futures.wait([f for f in futures if f not in done], timeout=0.5)
    assert sum(f.done() for f in futures) == count  # the rest are held or waiting
    return [f for f in futures if f in done]
