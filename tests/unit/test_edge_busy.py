"""Edge samples are bounded (docs/edges.md): a tick stuck in a slow sampler (NVML) makes
the agent answer 503 after ``EDGE_LOCK_WAIT_SECONDS`` instead of holding the rank, and the
rank loses that one edge, not the rest of the run's. Real HTTP on loopback; the samplers
are stand-ins (what matters is when they run, not their values). The rest of the edge
tests are in test_edges.py."""

from __future__ import annotations

import json
import threading
import time

import pytest

from agent.config import AgentConfig
from agent.daemon import Daemon, EdgeBusy
from agent.exposition import MetricsServer
from agent.samplers.agent import AgentStats
from contract.point import Point
from tests.support.loopback import http_post
from workloads.record.events import AgentEdges, EventWriter, MemorySink

pytestmark = pytest.mark.timeout(60)


class StandIn:
    """A sampler that records when it ran; ``gate`` (if set) holds a tick inside it."""

    def __init__(self, name: str, gate: threading.Event | None = None) -> None:
        self.name = name
        self.gate = gate
        self.inside = threading.Event()
        self.times: list[int] = []

    def available(self) -> bool:
        return True

    def sample(self, now_ns: int) -> list[Point]:
        self.times.append(now_ns)
        if self.gate is not None:
            self.inside.set()
            self.gate.wait(30)
        return [Point(self.name, {}, {"value": 1.0}, now_ns)]


class Collected:
    def __init__(self) -> None:
        self.points: list[Point] = []

    def submit(self, points: list[Point]) -> None:
        self.points.extend(points)


def daemon_with(*samplers: StandIn) -> tuple[Daemon, Collected]:
    shipped = Collected()
    clock = iter(range(1_000, 10**9, 1_000))
    daemon = Daemon(
        AgentConfig(host="h1"), samplers, AgentStats(), (), [shipped], lambda: next(clock)
    )
    return daemon, shipped


def test_an_edge_sample_waits_for_a_slow_tick_only_briefly():
    gate = threading.Event()
    slow = StandIn("gpu", gate)  # a tick stuck in NVML
    disk = StandIn("disk")
    daemon, _ = daemon_with(disk, slow)
    tick = threading.Thread(target=daemon.tick)
    tick.start()
    try:
        assert slow.inside.wait(30)
        with pytest.raises(EdgeBusy):
            daemon.edge_sample()
    finally:
        gate.set()
        tick.join(30)
    assert daemon.edge_sample() > 0  # free again once the tick is done


def test_the_edge_endpoint_answers_the_instant_and_503_when_busy():
    server = MetricsServer("127.0.0.1", 0)
    answers = iter([1_234_567_890, EdgeBusy("a tick is sampling")])

    def take() -> int:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    server.serve_edge_samples(take)
    try:
        status, body = http_post(server.port, "/edge", b"")
        assert (status, json.loads(body)) == (200, {"time_ns": 1_234_567_890})
        status, _ = http_post(server.port, "/edge", b"")
        assert status == 503
    finally:
        server.close()


def test_a_busy_agent_costs_the_rank_one_edge_only():
    server = MetricsServer("127.0.0.1", 0)
    answers = iter([EdgeBusy("busy"), 42, 43])

    def take() -> int:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    server.serve_edge_samples(take)
    try:
        edges = AgentEdges(server.port)
        sink = MemorySink()
        writer = EventWriter(sink, "r", 0, "pytorch", host="h1", clock_ns=lambda: 7, edges=edges)
        assert writer.emit("epoch_start", {"epoch": 1}).time_ns == 7  # busy: own clock
        assert writer.emit("epoch_end", {"epoch": 1}).time_ns == 42  # asked again
        assert writer.emit("step", {"epoch": 1}).time_ns == 7  # steps are no edges
        assert writer.emit("run_end", {}).time_ns == 43
        assert edges.answering is True
    finally:
        server.close()


class CountingLock:
    """The daemon's sampling lock, counting who has asked for it (so the test knows the
    other ranks are waiting before it lets the first sample finish)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.asked = 0

    def acquire(self, timeout: float = -1) -> bool:
        self.asked += 1
        return self.lock.acquire(timeout=timeout)

    def release(self) -> None:
        self.lock.release()

    __enter__ = acquire

    def __exit__(self, *exc) -> None:
        self.release()


def test_ranks_asking_at_once_share_one_edge_sample():
    """Every rank of a node asks at the same epoch edge: the requests that waited while a
    sample was taken get that sample's time; only one sample is taken."""
    gate = threading.Event()
    disk = StandIn("disk", gate)  # the first edge sample is held until all have asked
    daemon, _ = daemon_with(disk)
    daemon._sampling = lock = CountingLock()
    answers: list[int] = []

    def ask() -> None:
        answers.append(daemon.edge_sample())

    threads = [threading.Thread(target=ask) for _ in range(3)]
    threads[0].start()
    assert disk.inside.wait(30)
    for thread in threads[1:]:
        thread.start()
    deadline = time.monotonic() + 30
    while lock.asked < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    gate.set()
    for thread in threads:
        thread.join(30)
    assert len(answers) == 3 and len(set(answers)) == 1
    assert daemon.edge_samples == 1 and daemon.edges_coalesced == 2
    assert len(disk.times) == 1


def test_an_edge_flood_is_bounded_and_logged_once_a_minute(caplog):
    """A local process posting /edge in a loop (the hardening report: 219 a second for 20 s
    stored 4,467 samples): the node's budget answers 503 past it, one log line a minute."""
    disk = StandIn("disk")
    daemon, shipped = daemon_with(disk)
    server = MetricsServer("127.0.0.1", 0)
    server.serve_edge_samples(daemon.edge_sample)
    statuses: list[int] = []
    try:
        with caplog.at_level("WARNING"):
            for _ in range(300):
                statuses.append(http_post(server.port, "/edge", b"")[0])
    finally:
        server.close()
    taken = statuses.count(200)
    budget = daemon.edge_budget
    # the burst, plus what the rate refilled while the loop ran (well under a second a
    # hundred requests on loopback; allow a slow machine 10 s)
    assert budget.burst <= taken <= budget.burst + 10 * budget.rate
    assert statuses.count(503) == 300 - taken == daemon.edges_over_budget
    assert daemon.edge_samples == taken == len(disk.times)
    refusals = [r for r in caplog.records if "over the node's edge-sample budget" in r.message]
    assert len(refusals) == 1
    daemon.ship_edge_samples()
    assert len(shipped.points) == taken
