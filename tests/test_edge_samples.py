"""Edge samples (docs/edges.md): what the agent reads at a run/epoch event, and that a
rank is never held up by a slow or missing agent. Real HTTP on loopback; the samplers are
stand-ins (what matters is which run and when, not their values)."""

from __future__ import annotations

import json
import threading

import pytest

from agent.config import AgentConfig
from agent.daemon import Daemon, EdgeBusy
from agent.exposition import MetricsServer
from agent.point import Point
from agent.samplers.agent import AgentStats
from tests.loopback import free_port, http_post
from workloads.events import AgentEdges, EventWriter, MemorySink

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


def test_an_edge_sample_reads_every_sampler_but_the_gpu_at_its_instant_and_ships_it():
    disk, memory, gpu = StandIn("disk"), StandIn("memory"), StandIn("gpu")
    daemon, shipped = daemon_with(disk, memory, gpu)
    time_ns = daemon.edge_sample()
    assert disk.times == memory.times == [time_ns] and gpu.times == []
    assert {(p.measurement, p.time_ns, p.tags["host"]) for p in shipped.points} == {
        ("disk", time_ns, "h1"),
        ("memory", time_ns, "h1"),
    }
    assert daemon.edge_samples == 1


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


def test_a_busy_agent_costs_one_edge_a_missing_agent_is_not_asked_again():
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

    nobody = AgentEdges(free_port())
    assert nobody.sample() is None and nobody.answering is False
    assert nobody.sample() is None  # not asked again: no connection attempt at all
