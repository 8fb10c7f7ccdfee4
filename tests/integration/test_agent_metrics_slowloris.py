"""A slowloris on a real ``agent run``'s /metrics, with its default limits (64 connections,
a 10 s deadline for a whole head).

400 connections each trickle a head that never ends, one byte per connection every 0.5 s,
and every one that is cut (evicted at the cap, or 408 at its deadline) connects again at
once: the attacker keeps the pressure up for the whole test. Meanwhile a scraper with a
Prometheus-like 5 s timeout scrapes once a second. The agent's threads stay within the cap
(plus its own few), and every scrape is answered in time.

The machine is shared and loaded (load is printed): the 5 s scrape timeout is Prometheus's
default "scrape_timeout" of 10 s halved, not fitted to a quiet machine.
"""

from __future__ import annotations

import os
import selectors
import socket
import threading
import time
import urllib.request

import pytest

from bench.reliability import harness
from contract.schema import AgentSelf
from tests.support.slow_clients import ENDLESS_HEAD

ATTACKERS = 400
GAP_SECONDS = 0.5
SCRAPE_TIMEOUT_SECONDS = 5.0
CAP = 64  # agent.exposition.LIMITS.max_connections, the default


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))


class Slowloris:
    """``count`` sockets trickling endless heads; a socket the server cuts is replaced."""

    def __init__(self, port: int, count: int) -> None:
        self.port = port
        self.count = count
        self.reconnects = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _connect(self, selector: selectors.BaseSelector) -> None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=2)
        except OSError:
            return
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, data=[0])

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        for _ in range(self.count):
            self._connect(selector)
        while not self.stopping.is_set():
            deadline = time.monotonic() + GAP_SECONDS
            while (left := deadline - time.monotonic()) > 0:
                for key, _ in selector.select(left):  # answered or closed: cut
                    selector.unregister(key.fileobj)
                    key.fileobj.close()
            for key in list(selector.get_map().values()):
                sent = key.data[0]
                try:
                    key.fileobj.send(ENDLESS_HEAD[sent : sent + 1] or b"a")
                    key.data[0] += 1
                except OSError:
                    selector.unregister(key.fileobj)
                    key.fileobj.close()
            while len(selector.get_map()) < self.count and not self.stopping.is_set():
                self._connect(selector)
                self.reconnects += 1
        for key in list(selector.get_map().values()):
            key.fileobj.close()

    def __enter__(self) -> Slowloris:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.thread.join(30)


@pytest.mark.slow
def test_a_slowloris_on_metrics_holds_no_more_threads_than_the_cap_and_scrapes_answer(tmp_path):
    agent = harness.Agent(
        host="loris",
        workdir=tmp_path / "agent",
        push_url=f"http://127.0.0.1:{harness.free_port()}",  # nobody: the spool takes it
        token=None,
        interval_seconds=0.5,
        samplers=("cpu", AgentSelf.NAME),
    )
    agent.start()
    url = f"http://127.0.0.1:{agent.metrics_port}/metrics"
    try:
        assert harness.wait_until(lambda: agent.scrape() != {}, 60)
        time.sleep(1)
        baseline = _threads(agent.process.pid)
        scrapes: list[float] = []
        most_threads = baseline
        with Slowloris(agent.metrics_port, ATTACKERS) as attack:
            end = time.monotonic() + 12  # past the 10 s head deadline: 408s and reconnects
            while time.monotonic() < end:
                started = time.monotonic()
                with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_SECONDS) as page:
                    assert page.status == 200 and b"epochscope_cpu" in page.read()
                scrapes.append(time.monotonic() - started)
                most_threads = max(most_threads, _threads(agent.process.pid))
                time.sleep(1)
        load = os.getloadavg()[0]
        assert attack.reconnects >= ATTACKERS - CAP  # the cap cut them, they came back
        # The cap, plus the guard's watchdog thread (started with the first connection) and
        # a few threads of evicted connections still unwinding (their sockets already shut
        # down): not one thread per attacker.
        assert most_threads <= baseline + CAP + 4, (baseline, most_threads)
        assert harness.wait_until(lambda: _threads(agent.process.pid) <= baseline + 1, 15)
        assert len(scrapes) >= 8 and max(scrapes) < SCRAPE_TIMEOUT_SECONDS
        assert agent.process.poll() is None
        print(
            f"load {load:.1f}: {len(scrapes)} scrapes, slowest {max(scrapes):.3f} s, median "
            f"{sorted(scrapes)[len(scrapes) // 2]:.3f} s; threads {baseline} -> at most "
            f"{most_threads}; {attack.reconnects} reconnects by the attacker"
        )
        assert agent.stop() == 0
    finally:
        if agent.process.poll() is None:
            agent.kill()
    assert "Traceback" not in agent.log.read_text()
