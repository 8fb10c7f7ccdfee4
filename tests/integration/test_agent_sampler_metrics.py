"""Per-sampler duration and success, as node_exporter's ``node_scrape_collector_*``.

The real daemon samples a captured host tree, publishes to the real /metrics server
scraped over loopback HTTP and pushes through the real shipper to a loopback write
endpoint. The real samplers never raise on a damaged file (they log it and give no
point), so the failing one is the real cpu sampler with a bug put in.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.config import AgentConfig
from agent.daemon import Daemon, SampleRound, build_samplers
from agent.exposition import MetricsServer
from agent.samplers import Roots, Sampler
from agent.samplers.agent import AgentStats
from agent.samplers.cpu import SAMPLER as CpuSampler
from agent.shipper import Shipper
from contract.point import Point
from tests.conftest import fixture_root
from tests.integration.test_agent_shipper import Endpoint

SAMPLERS = ["cpu", "memory", "disk", "infiniband", "nfs", "agent"]  # what the tree holds
DURATION = "epochscope_agent_sampler_duration_seconds"
SUCCESS = "epochscope_agent_sampler_success"


@pytest.fixture
def tree() -> Path:
    return fixture_root("procfs-mlx-hfi")


class BuggyCpu(CpuSampler):
    """The real cpu sampler, which raises once ``broken`` is set."""

    broken = False

    def sample(self, now_ns: int) -> list[Point]:
        if self.broken:
            raise KeyError("a bug in the sampler")
        return super().sample(now_ns)


class Agent:
    """The daemon with /metrics on loopback and a shipper pushing to ``endpoint``."""

    def __init__(
        self, root: Path, spool_dir: Path, endpoint: Endpoint, cpu: Sampler | None = None
    ) -> None:
        stats = AgentStats()
        self.samplers = build_samplers(Roots(root / "proc", root / "sys"), SAMPLERS, stats)
        if cpu is not None:
            self.samplers[0] = cpu
        self.server = MetricsServer("127.0.0.1", 0)
        self.shipper = Shipper(endpoint.url, None, "o", "b", spool_dir, stats=stats)
        self.shipper.start()
        self.daemon = Daemon(
            AgentConfig(host="n1"), self.samplers, stats, [self.server], [self.shipper]
        )

    def scrape(self) -> dict[str, dict[str, float]]:
        """``{family sample name: {sampler label: value}}`` of the agent_sampler series."""
        url = f"http://127.0.0.1:{self.server.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        found: dict[str, dict[str, float]] = {DURATION: {}, SUCCESS: {}}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in found:
                    assert sample.labels["host"] == "n1"
                    found[sample.name][sample.labels["sampler"]] = sample.value
        return found

    def close(self) -> None:
        self.shipper.close(5)
        self.server.close()


@pytest.fixture
def endpoint():
    server = Endpoint()
    yield server
    server.stop()


def pushed(endpoint: Endpoint) -> dict[str, str]:
    """sampler -> the fields of the last agent_sampler line pushed for it."""
    lines = {}
    for line in endpoint.lines():
        if line.startswith("agent_sampler,"):
            tags, fields, _time = line.split(" ")
            sampler = dict(tag.split("=") for tag in tags.split(",")[1:])["sampler"]
            lines[sampler] = fields
    return lines


def test_every_enabled_sampler_has_a_duration_and_success_on_metrics_and_pushed(
    tree, tmp_path, endpoint
):
    agent = Agent(tree, tmp_path / "spool", endpoint)
    try:
        assert [sampler.name for sampler in agent.samplers] == SAMPLERS
        agent.daemon.tick()
        agent.daemon.tick()
        found = agent.scrape()
        assert sorted(found[DURATION]) == sorted(SAMPLERS)
        assert all(0 < seconds < 5 for seconds in found[DURATION].values())
        assert found[SUCCESS] == dict.fromkeys(SAMPLERS, 1.0)
        assert agent.shipper.flush(10)
    finally:
        agent.close()
    lines = pushed(endpoint)
    assert sorted(lines) == sorted(SAMPLERS)
    assert all(fields.startswith("duration_seconds=") for fields in lines.values())
    assert all(fields.endswith(",success=1.0") for fields in lines.values())


def test_a_failing_sampler_reports_success_0_and_its_duration_and_the_others_go_on(
    tree, tmp_path, endpoint
):
    buggy = BuggyCpu(Roots(tree / "proc", tree / "sys"))
    agent = Agent(tree, tmp_path / "spool", endpoint, cpu=buggy)
    try:
        agent.daemon.tick()
        buggy.broken = True
        points = agent.daemon.tick()
        found = agent.scrape()
        assert found[SUCCESS] == {**dict.fromkeys(SAMPLERS, 1.0), "cpu": 0.0}
        assert sorted(found[DURATION]) == sorted(SAMPLERS)
        assert 0 < found[DURATION]["cpu"] < 5
        measurements = {point.measurement for point in points}
        assert "cpu" not in measurements and {"memory", "disk", "nfs"} <= measurements
        assert agent.shipper.flush(10)
    finally:
        agent.close()
    assert pushed(endpoint)["cpu"].endswith(",success=0.0")
    assert pushed(endpoint)["memory"].endswith(",success=1.0")


def test_no_sampler_series_without_the_agent_sampler_nor_for_edge_samples(tree):
    samplers = build_samplers(Roots(tree / "proc", tree / "sys"), ["cpu", "memory"])
    assert not SampleRound(samplers, "n1").reports_samplers
    daemon = Daemon(AgentConfig(host="n1"), samplers, AgentStats())
    assert {point.measurement for point in daemon.tick()} == {"cpu", "memory"}

    with_self = build_samplers(Roots(tree / "proc", tree / "sys"), ["cpu", "agent"])
    daemon = Daemon(AgentConfig(host="n1"), with_self, AgentStats())
    daemon.edge_sample()
    assert "agent_sampler" not in {point.measurement for point in daemon._edge_points}
