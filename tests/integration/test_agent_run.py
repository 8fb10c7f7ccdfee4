"""``agent run`` as a real process: /metrics scraped over HTTP, push, SIGTERM, crash.

The samplers read the captured ``procfs-mlx-hfi`` tree, so every value is known.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.spool import verified_lines
from tests.conftest import fixture_root
from tests.integration.test_agent_shipper import Endpoint, free_port, wait_until

TOKEN = "run-secret-token-42"
# mlx4_0 port 1: counters/port_rcv_data holds 2221223609 four-byte words and
# port_xmit_data 26509113295: 2221223609 x 4 = 8884894436, 26509113295 x 4 = 106036453180.
MLX4_RCV_BYTES = 8884894436
MLX4_XMIT_BYTES = 106036453180
MLX4_PORT1 = "infiniband,device=mlx4_0,host=testhost,port=1 "


def start_agent(tmp_path: Path, repo_env, endpoint_url: str, metrics_port: int, **extra):
    root = fixture_root("procfs-mlx-hfi")
    config = tmp_path / "agent.toml"
    config.write_text(
        f"""
host = "testhost"
interval_seconds = {extra.get("interval", 0.5)}
samplers = ["infiniband", "nfs"]
proc_root = "{root / "proc"}"
sys_root = "{root / "sys"}"

[push]
url = "{endpoint_url}"
token = "{TOKEN}"
spool_dir = "{tmp_path / "spool"}"
batch_seconds = 1

[metrics]
listen = "127.0.0.1:{metrics_port}"
"""
    )
    config.chmod(0o600)
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
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.read().decode()
    except OSError:
        return None


def infiniband_lines(endpoint: Endpoint) -> list[str]:
    return [line for line in endpoint.lines() if line.startswith(MLX4_PORT1)]


@pytest.mark.slow
def test_run_serves_metrics_pushes_and_stops_cleanly_on_sigterm(tmp_path, repo_env):
    endpoint = Endpoint()
    port = free_port()
    agent = start_agent(tmp_path, repo_env, endpoint.url, port)
    try:
        assert wait_until(lambda: (scrape(port) or "").count("rcv_bytes_total") > 0, 30), (
            tmp_path / "agent.log"
        ).read_text()
        families = {f.name: f for f in text_string_to_metric_families(scrape(port))}
        rcv = families["epochscope_infiniband_rcv_bytes"]
        assert rcv.type == "counter"
        assert rcv.documentation == "Bytes received (4 x port_rcv_data)"
        by_port = {(s.labels["device"], s.labels["port"]): s for s in rcv.samples}
        mlx4 = by_port[("mlx4_0", "1")]
        assert mlx4.name == "epochscope_infiniband_rcv_bytes_total"
        assert mlx4.labels == {"host": "testhost", "device": "mlx4_0", "port": "1"}
        assert mlx4.value == MLX4_RCV_BYTES
        xmit = families["epochscope_infiniband_xmit_bytes"].samples
        assert {(s.labels["device"], s.labels["port"]): s.value for s in xmit}[
            ("mlx4_0", "1")
        ] == MLX4_XMIT_BYTES
        # The NFS mount of the same tree: a gauge with its help line.
        age = families["epochscope_nfs_age_seconds"]
        assert age.type == "gauge" and age.documentation == "Seconds since the mount"

        assert wait_until(lambda: len(infiniband_lines(endpoint)) >= 3, 30)
    finally:
        agent.send_signal(signal.SIGTERM)
        exit_code = agent.wait(15)
    endpoint.stop()
    log = (tmp_path / "agent.log").read_text()
    assert exit_code == 0, log
    assert "SIGTERM: flushing and stopping" in log
    assert TOKEN not in log
    assert list((tmp_path / "spool").iterdir()) == []  # everything was delivered
    lines = infiniband_lines(endpoint)
    assert all(
        f" rcv_bytes={MLX4_RCV_BYTES}i,xmit_bytes={MLX4_XMIT_BYTES}i," in line for line in lines
    )
    times = [int(line.rsplit(" ", 1)[1]) for line in lines]
    assert times == sorted(times)
    # One sample per 0.5 s tick: no two in the same tick.
    slots = [t // 500_000_000 for t in times]
    assert len(set(slots)) == len(slots)
    assert endpoint.requests[0]["authorization"] == f"Token {TOKEN}"


@pytest.mark.slow
def test_a_killed_agent_loses_nothing_spooled_and_the_next_one_replays_it(tmp_path, repo_env):
    endpoint = Endpoint()
    endpoint.stop()  # the receiver is down for the whole first run
    port = free_port()
    first = start_agent(tmp_path, repo_env, endpoint.url, port)
    spool = tmp_path / "spool"

    def spooled_lines() -> list[str]:
        """Complete mlx4_0 port 1 lines on disk, oldest segment first."""
        data = b"".join(p.read_bytes() for p in sorted(spool.glob("*.lp")))
        complete = verified_lines(data[: data.rfind(b"\n") + 1])[0].decode()  # a kill may cut
        return [line for line in complete.split("\n") if line.startswith(MLX4_PORT1)]

    try:
        assert wait_until(lambda: spool.exists() and len(spooled_lines()) >= 3, 30)
    finally:
        first.send_signal(signal.SIGKILL)  # a crash: no flush, no goodbye
        first.wait(10)
    before_restart = spooled_lines()
    assert len(before_restart) >= 3

    endpoint.start()
    second = start_agent(tmp_path, repo_env, endpoint.url, port)
    try:
        assert wait_until(lambda: len(infiniband_lines(endpoint)) >= len(before_restart) + 2, 30)
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(15) == 0
    endpoint.stop()
    received = infiniband_lines(endpoint)
    # The first run's points arrive first, once each, in order; then the second run's.
    assert received[: len(before_restart)] == before_restart
    times = [int(line.rsplit(" ", 1)[1]) for line in received]
    assert times == sorted(times) and len(set(times)) == len(times)
    log = (tmp_path / "agent.log").read_text()
    assert "left by the last run will be sent first" in log
    assert os.listdir(spool) == []
