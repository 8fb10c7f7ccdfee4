"""The gpu sampler inside the real agent process: ``agent sample --once`` and ``agent run``.

This machine has no GPU, so NVML is mocked (tests/support/fake_nvml.py): the agent process imports
the fake ``pynvml`` from tests/support/fake_nvml_site and finds a stand-in ``libnvidia-ml.so.1``.
Everything else is real: the command line, the daemon's ticks, /metrics over loopback and
the push to a real HTTP endpoint.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_agent_run import scrape
from tests.integration.test_agent_shipper import Endpoint, free_port, wait_until
from tests.support.fake_nvml import A100_MIG, H100_LOAD, MIB, fake_nvml_env

AGENT = [sys.executable, "-m", "agent"]
# Made-up values no capture holds: PCIe byte counters, processes and MIG devices.
H100_WITH_COUNTERS = {
    **H100_LOAD,
    "pcie_bytes": (7_000_000_000, 3_000_000_000),
    "energy_mj": 123_456_789_012,
    "processes": [(4100, 19_000 * MIB)],
    "process_samples": [(4100, 1_000_000, 97, 11)],
}
A100_TWO_MIG_DEVICES = {
    **A100_MIG,
    "migs": [
        {
            "uuid": "MIG-11111111-1111-1111-1111-111111111111",
            "name": "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
            "gi": 1,
            "ci": 0,
            "memory": (40192 * MIB, 30000 * MIB),
            "processes": [(4242, 29000 * MIB)],
        },
        {
            "uuid": "MIG-22222222-2222-2222-2222-222222222222",
            "name": "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
            "gi": 2,
            "ci": 0,
            "memory": (40192 * MIB, 1000 * MIB),
        },
    ],
}


def test_sample_once_reads_gpus_mig_devices_and_processes(tmp_path, repo_env):
    env = fake_nvml_env(tmp_path, [H100_WITH_COUNTERS, A100_TWO_MIG_DEVICES], repo_env)
    result = subprocess.run(
        [*AGENT, "sample", "--once", "--samplers", "gpu,agent", "--host", "gpu-node"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    points = json.loads(result.stdout)
    gpus = [p for p in points if p["measurement"] == "gpu"]
    assert [(p["tags"]["gpu"], p["tags"].get("mig"), p["tags"]["uuid"]) for p in gpus] == [
        ("0", None, "GPU-00000000-0000-0000-0000-000000000000"),
        ("1", None, "GPU-513536b6-7d19-9063-b049-1e69664bb298"),
        ("1", "1/0", "MIG-11111111-1111-1111-1111-111111111111"),
        ("1", "2/0", "MIG-22222222-2222-2222-2222-222222222222"),
    ]
    assert all(p["tags"]["host"] == "gpu-node" for p in points)
    h100 = gpus[0]["fields"]
    assert h100["pcie_rx_bytes"] == 7_000_000_000  # field values: counters, no 20 ms gauge
    assert h100["pcie_tx_bytes"] == 3_000_000_000
    assert "pcie_rx_bytes_per_second" not in h100
    assert h100["energy_joules"] == 123_456_789.012
    assert h100["reading_age_seconds"] >= 0.0
    # The A100 has no field-value counters: the throughput fallback.
    assert gpus[1]["fields"]["pcie_tx_bytes_per_second"] == 4_096_000.0
    processes = [(p["tags"], p["fields"]) for p in points if p["measurement"] == "gpu_process"]
    assert processes == [
        (
            {"gpu": "0", "uuid": "GPU-00000000-0000-0000-0000-000000000000", "pid": "4100"}
            | {"host": "gpu-node"},
            {
                "memory_used_bytes": 19_000.0 * MIB,
                "sm_utilization_percent": 97.0,
                "memory_utilization_percent": 11.0,
            },
        ),
        (
            {"gpu": "1", "uuid": "MIG-11111111-1111-1111-1111-111111111111", "mig": "1/0"}
            | {"pid": "4242", "host": "gpu-node"},
            {"memory_used_bytes": 29000.0 * MIB},
        ),
    ]
    [agent] = [p["fields"] for p in points if p["measurement"] == "agent"]
    # The agent's own measurement says how the GPUs went (sampled after the gpu sampler).
    assert (agent["gpus_hung"], agent["gpus_failing"], agent["gpus_lost"]) == (0.0, 0.0, 0.0)
    assert agent["gpu_reading_age_seconds"] == max(p["fields"]["reading_age_seconds"] for p in gpus)


def gpu_labels(text: str) -> list[str]:
    families = {f.name: f for f in text_string_to_metric_families(text)}
    family = families.get("epochscope_gpu_power_watts")
    return sorted(s.labels["gpu"] for s in family.samples) if family else []


def agent_value(text: str, name: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"epochscope_agent_{name}":
                return sample.value
    return None


@pytest.mark.slow
def test_run_with_eight_slow_gpus_and_one_hanging(tmp_path, repo_env):
    """Eight GPUs whose PCIe calls take 0.1 s each (no field values: two throughput calls
    per GPU, 1.6 s per round if read in the tick at a 0.5 s interval); GPU 3 then hangs in
    an NVML call for a while. /metrics and the push keep every other GPU, say GPU 3 is
    hung (one log line), and GPU 3 comes back when its call answers."""
    hang = tmp_path / "hang"
    gpus = [{**H100_LOAD, "uuid": f"GPU-{index}", "pcie_delay": 0.1} for index in range(8)]
    gpus[3]["hang_while"] = str(hang)
    env = fake_nvml_env(tmp_path, gpus, repo_env)
    endpoint = Endpoint()
    port = free_port()
    config = tmp_path / "agent.toml"
    config.write_text(
        f"""
host = "gpu-node"
interval_seconds = 0.5
samplers = ["gpu", "agent"]
gpu_call_timeout_seconds = 1

[push]
url = "{endpoint.url}"
token = "gpu-test-token-7"
spool_dir = "{tmp_path / "spool"}"
batch_seconds = 0

[metrics]
listen = "127.0.0.1:{port}"
"""
    )
    config.chmod(0o600)
    log_path = tmp_path / "agent.log"
    with log_path.open("ab") as log:
        agent = subprocess.Popen(
            [*AGENT, "run", "--config", str(config)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    eight = [str(index) for index in range(8)]
    try:
        assert wait_until(lambda: gpu_labels(scrape(port) or "") == eight, 60), log_path.read_text()
        text = scrape(port) or ""
        assert agent_value(text, "gpus_hung") == 0.0
        # The tick took the threads' readings: far less than the 1.6 s a sequential read takes.
        assert agent_value(text, "sample_duration_seconds") < 0.5
        assert agent_value(text, "gpu_reading_age_seconds") is not None

        hang.touch()
        hung_page = wait_until(lambda: agent_value(scrape(port) or "", "gpus_hung") == 1.0, 60)
        assert hung_page, log_path.read_text()
        seven = [g for g in eight if g != "3"]
        seen: set[str] = set()
        for _ in range(4):  # the seven others go on, tick after tick; GPU 3 never
            labels = gpu_labels(scrape(port) or "")
            assert set(labels) <= set(seven)
            seen.update(labels)
            wait_until(lambda: False, 0.5)
        assert sorted(seen) == seven
        assert any(
            line.startswith("agent,host=gpu-node ") and "gpus_hung=1" in line
            for line in endpoint.lines()
        )

        hang.unlink()
        assert wait_until(
            lambda: (
                agent_value(scrape(port) or "", "gpus_hung") == 0.0
                and gpu_labels(scrape(port) or "") == eight
            ),
            60,
        ), log_path.read_text()
    finally:
        agent.send_signal(signal.SIGTERM)
        exit_code = agent.wait(30)
    endpoint.stop()
    log = log_path.read_text()
    assert exit_code == 0, log
    hung_lines = [line for line in log.splitlines() if "gpu 3 (GPU-3) hung" in line]
    assert len(hung_lines) == 1, log
    assert "not reported until it answers" in hung_lines[0]
    assert len([line for line in log.splitlines() if "gpu 3 (GPU-3) answers again" in line]) == 1
    assert Path(tmp_path / "spool").exists()
