"""Edge samples are bounded (docs/edges.md): a tick stuck in a slow sampler (NVML) makes
the agent answer 503 after ``EDGE_LOCK_WAIT_SECONDS`` instead of holding the rank, and the
rank loses that one edge, not the rest of the run's. Real HTTP on loopback; the samplers
are stand-ins (what matters is when they run, not their values). The rest of the edge
tests are in test_edges.py."""

from __future__ import annotations

import json
import threading

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
