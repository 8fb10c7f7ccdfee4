"""The agent's self-cost sampler, on this very test process."""

from __future__ import annotations

import os
import time
from dataclasses import fields as dataclass_fields

import psutil

from agent.samplers import make_sampler
from agent.samplers.agent import AgentSampler, AgentStats
from agent.samplers.base import Roots
from contract.point import encode_line
from contract.schema import AgentSelf, Kind
from tests.conftest import FIXTURE_ROOTS


def test_agent_stats_is_the_agreed_dataclass():
    assert [(f.name, f.type, f.default) for f in dataclass_fields(AgentStats)] == [
        ("sample_duration_seconds", "float", 0.0),
        ("spool_bytes", "int", 0),
        ("spool_points", "int", 0),
        ("points_dropped", "int", 0),
        ("spool_error", "int", 0),
        ("memory_points", "int", 0),
        ("edge_samples", "int", 0),
        ("gpus_hung", "int | None", None),
        ("gpus_failing", "int | None", None),
        ("gpus_lost", "int | None", None),
        ("gpu_reading_age_seconds", "float | None", None),
        ("otlp_points_dropped", "int | None", None),
    ]


def test_always_available_even_on_a_captured_tree():
    # It measures the running process, never the --proc-root tree.
    tree = FIXTURE_ROOTS / "pcp-meminfo-001"
    sampler = make_sampler("agent", Roots(proc=tree / "proc", sys=tree / "sys"))
    assert sampler.available()
    assert sampler.sample(0)[0].fields["rss_bytes"] > 0


def test_fields_types_and_defaults():
    sampler = AgentSampler(Roots())
    [point] = sampler.sample(123)
    assert (point.measurement, point.tags, point.time_ns) == ("agent", {}, 123)
    # The gpu fields are reported only where the gpu sampler runs
    # (tests/integration/test_sampler_gpu.py).
    gpu_fields = {
        AgentSelf.GPUS_HUNG,
        AgentSelf.GPUS_FAILING,
        AgentSelf.GPUS_LOST,
        AgentSelf.GPU_READING_AGE_SECONDS,
    }
    # otlp_points_dropped only where [otlp] export is on (tests/integration/test_agent_otlp.py)
    assert set(point.fields) == set(AgentSelf.fields()) - gpu_fields - {
        AgentSelf.OTLP_POINTS_DROPPED
    }
    for name, value in point.fields.items():
        spec = AgentSelf.fields()[name]
        # cpu_seconds is a float counter, like the cpu measurement's seconds.
        if spec.kind is Kind.COUNTER and name != AgentSelf.CPU_SECONDS:
            assert type(value) is int, name
        else:
            assert type(value) is float, name
    assert point.fields["sample_duration_seconds"] == 0.0
    assert point.fields["spool_bytes"] == 0.0
    assert point.fields["spool_points"] == 0.0
    assert point.fields["points_dropped"] == 0


def test_stats_are_copied_from_the_replaceable_attribute():
    sampler = AgentSampler(Roots())
    daemon_stats = AgentStats()
    sampler.stats = daemon_stats  # what the daemon does
    daemon_stats.sample_duration_seconds = 0.0125
    daemon_stats.spool_bytes = 4096
    daemon_stats.spool_points = 17
    daemon_stats.points_dropped = 3
    [point] = sampler.sample(1)
    assert point.fields["sample_duration_seconds"] == 0.0125
    assert point.fields["spool_bytes"] == 4096.0
    assert point.fields["spool_points"] == 17.0
    assert point.fields["points_dropped"] == 3
    line = encode_line(point)
    assert "points_dropped=3i" in line and "spool_bytes=4096.0" in line
    # Updates the daemon makes later show in the next sample.
    daemon_stats.points_dropped = 5
    assert sampler.sample(2)[0].fields["points_dropped"] == 5
    assert AgentSampler(Roots(), stats=daemon_stats).stats is daemon_stats


def test_cpu_and_rss_track_this_process():
    sampler = AgentSampler(Roots())
    first = sampler.sample(1)[0].fields["cpu_seconds"]
    burnt = 0.1
    deadline = time.process_time() + burnt
    while time.process_time() < deadline:  # bounded: burn 100 ms of CPU
        pass
    [point] = sampler.sample(2)
    own = psutil.Process(os.getpid())
    cpu = own.cpu_times()
    # /proc counts CPU in clock ticks (10 ms): the two readings may each lose up to one
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    assert point.fields["cpu_seconds"] - first >= burnt - 2 * tick - 1e-9
    assert abs(point.fields["cpu_seconds"] - (cpu.user + cpu.system)) < 0.05
    rss = own.memory_info().rss
    assert 1e6 < point.fields["rss_bytes"] < 4e9
    assert abs(point.fields["rss_bytes"] - rss) < 16 * 2**20
