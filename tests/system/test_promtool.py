"""The agent's /metrics passes ``promtool check metrics`` and gives exact rates.

``promtool`` is Debian's (package ``prometheus``, ``make system-packages``). Checked:
every field the schema can expose (a point per measurement holding every field), what
the samplers expose over every captured host tree and the live host, and a real
``agent run`` scraped over HTTP. Then the reason for timestamps: the summed rates of
the CPU modes between consecutive scrapes, computed as Prometheus' ``rate()`` does
from the samples' timestamps, equal the number of CPUs within 2 %.
"""

from __future__ import annotations

import itertools
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.daemon import SampleRound, build_samplers
from agent.exposition import render
from agent.samplers import SAMPLER_NAMES, Roots
from contract import schema
from contract.point import Point
from tests.conftest import FIXTURE_ROOTS
from tests.integration.test_agent_shipper import free_port, wait_until

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
if not Path(PROMTOOL).exists():
    print(f"test_promtool: skipped, {PROMTOOL} is missing (Debian package prometheus)")
pytestmark = pytest.mark.skipif(
    not Path(PROMTOOL).exists(), reason="promtool missing: make system-packages"
)
TREES = (
    sorted(p.name for p in FIXTURE_ROOTS.iterdir() if p.is_dir()) if FIXTURE_ROOTS.is_dir() else []
)


def promtool_check(text: str) -> None:
    result = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert (result.returncode, result.stdout + result.stderr) == (0, ""), text[:2000]


def every_schema_field() -> list[Point]:
    """One point per sample measurement with every field the schema names (and an
    InfiniBand driver counter), each tag set."""
    points = []
    for measurement in schema.SAMPLE_MEASUREMENTS:
        fields: dict[str, int | float] = {
            name: (1 if spec.is_counter and spec.unit not in ("seconds", "joules") else 1.5)
            for name, spec in measurement.fields().items()
            if spec.kind is not schema.Kind.TEXT
        }
        if measurement is schema.Infiniband:
            fields["hw_out_of_buffer"] = 3
        tags = {tag: f"{tag}-value" for tag in measurement.TAGS}
        points.append(Point(measurement.NAME, tags, fields, 1_700_000_000_000_000_000))
    return points


def test_every_schema_field_passes_promtool():
    text = render(every_schema_field())
    assert "epochscope_disk_read_time_seconds_total" in text
    assert 'epochscope_cpu_seconds_total{host="host-value",mode="iowait"}' in text
    promtool_check(text)


@pytest.mark.parametrize("tree", TREES)
def test_captured_trees_pass_promtool(tree):
    root = FIXTURE_ROOTS / tree
    wanted = [name for name in SAMPLER_NAMES if name not in ("gpu", "agent")]
    samplers = build_samplers(Roots(root / "proc", root / "sys"), wanted)
    points = SampleRound(samplers, "golden")(1_700_000_000_000_000_000)
    assert points
    promtool_check(render(points))


def test_captured_slurm_cgroup_tree_passes_promtool():
    root = FIXTURE_ROOTS.parent / "cgroups" / "cgroup-exporter-slurm"
    samplers = build_samplers(Roots(root / "proc", root / "sys", root), ["jobs"])
    text = render(SampleRound(samplers, "golden")(1_700_000_000_000_000_000))
    assert 'epochscope_job_cpu_seconds_total{host="golden",job_id="11"} 33146.523011972' in text
    assert 'epochscope_slurm_job_info{host="golden",job_id="4",uid="20821"} 1.0' in text
    promtool_check(text)


def test_live_host_passes_promtool():
    samplers = build_samplers(Roots(), None)
    promtool_check(render(SampleRound(samplers, "live")(time.time_ns())))


def start_live_agent(tmp_path: Path, repo_env, port: int, interval: float) -> subprocess.Popen:
    config = tmp_path / "agent.toml"
    config.write_text(
        f'host = "live"\ninterval_seconds = {interval}\nsamplers = ["cpu", "memory", "disk",'
        f' "net", "agent"]\n[metrics]\nlisten = "127.0.0.1:{port}"\n'
    )
    log = (tmp_path / "agent.log").open("ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "agent", "run", "--config", str(config)],
        env=repo_env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    return process


def scrape(port: int) -> str | None:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            return reply.read().decode()
    except OSError:
        return None


def cpu_reading(text: str) -> tuple[float, float, float]:
    """(sample time in s, CPU seconds summed over modes, CPUs online) of one scrape."""
    families = {family.name: family for family in text_string_to_metric_families(text)}
    modes = families["epochscope_cpu_seconds"].samples
    assert {sample.labels["mode"] for sample in modes} >= {"user", "system", "idle", "iowait"}
    times = {sample.timestamp for sample in modes}
    assert len(times) == 1 and None not in times, "every sample carries the tick's time"
    [cpus] = families["epochscope_cpu_cpus_online"].samples
    return float(times.pop()), sum(sample.value for sample in modes), cpus.value


@pytest.mark.slow
def test_real_agent_scrapes_pass_promtool_and_cpu_rates_sum_to_the_cpu_count(tmp_path, repo_env):
    port = free_port()
    agent = start_live_agent(tmp_path, repo_env, port, interval=1)
    try:
        assert wait_until(lambda: "epochscope_cpu_seconds_total" in (scrape(port) or ""), 60), (
            tmp_path / "agent.log"
        ).read_text()
        promtool_check(scrape(port))
        # Scrapes that do not line up with the ticks (every 2.37 s): without the samples'
        # own times, rate() would divide 2 or 3 s of counting by the 2.37 s between
        # scrapes (-16 % to +27 %). (Consecutive samples 2-3 s apart keep the counters'
        # own 10 ms tick rounding, +-2 ticks per CPU per pair, under 1 %.)
        readings = []
        for _ in range(10):
            readings.append(cpu_reading(scrape(port)))
            time.sleep(2.37)
    finally:
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(30) == 0, (tmp_path / "agent.log").read_text()
    pairs = [(a, b) for a, b in itertools.pairwise(readings) if b[0] > a[0]]
    assert len(pairs) >= 7
    for (t0, busy0, cpus), (t1, busy1, _) in pairs:
        summed_rate = (busy1 - busy0) / (t1 - t0)
        assert summed_rate == pytest.approx(cpus, rel=0.02), (t0, t1, summed_rate)
