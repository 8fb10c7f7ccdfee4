"""GPU readings from the real agent through the real collector into the per-epoch report.

This machine has no GPU, so NVML is mocked (tests/support/fake_nvml.py; the agent process imports
the fake ``pynvml``): two GPUs whose energy and PCIe byte counters grow at set rates with
the wall clock, one of them in MIG mode with a MIG device. Everything else is real: ``agent
run`` pushing to ``collector serve`` (SQLite), a run's events written to the collector's
write API, and ``collector report --format json``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest

from collector.store import SqliteStore
from contract.point import encode_lines
from tests.integration.test_agent_shipper import wait_until
from tests.integration.test_collector_ingest_server import start_server
from tests.support.fake_nvml import A100_MIG, H100_LOAD, MIB, fake_nvml_env
from tests.support.run_builder import RunBuilder

COLLECTOR = [sys.executable, "-m", "collector"]
EPOCH_SECONDS = 4.0
# Made-up rates: no capture holds counters that grow.
H100 = {
    **H100_LOAD,
    "uuid": "GPU-h100",
    "energy_rate_mw": 300_000,  # 300 W
    "pcie_bytes_per_second": (2_000_000_000, 1_000_000_000),
}
A100 = {
    **A100_MIG,
    "uuid": "GPU-a100",
    "energy_rate_mw": 100_000,  # 100 W
    "pcie_bytes_per_second": (500_000_000, 250_000_000),
    "migs": [
        {
            "uuid": "MIG-1",
            "name": "NVIDIA A100-SXM4-80GB MIG 7g.80gb",
            "gi": 0,
            "ci": 0,
            "memory": (81920 * MIB, 1000 * MIB),
        }
    ],
}


def stored_energy(db, run: RunBuilder) -> str:
    """The stored energy samples around the epoch (seconds from its start), to tell why."""
    with SqliteStore(db) as store:
        series = store.list_series("gpu", "energy_joules")
        data = store.read_series(series, run.t0_ns - 3 * 10**9, run.end_true_ns() + 3 * 10**9)
    return "\n".join(
        f"{info.tags}: "
        + " ".join(
            f"{(t - run.t0_ns) / 1e9:.2f}:{v:.1f}"
            for t, v in zip(d.times_ns, d.values, strict=True)
        )
        for info, d in zip(series, data, strict=True)
    )


@pytest.mark.slow
def test_gpu_columns_from_agent_to_report(tmp_path, repo_env):
    collector = start_server(tmp_path, repo_env)
    env = fake_nvml_env(tmp_path, [H100, A100], repo_env)
    config = tmp_path / "agent.toml"
    config.write_text(
        f"""
host = "gpu-node"
interval_seconds = 0.5
samplers = ["gpu"]

[push]
url = "{collector.url}"
spool_dir = "{tmp_path / "spool"}"
batch_seconds = 0

[metrics]
listen = ""
"""
    )
    log_path = tmp_path / "agent.log"
    with log_path.open("ab") as log:
        agent = subprocess.Popen(
            [sys.executable, "-m", "agent", "run", "--config", str(config)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        # The epoch starts once the agent ticks steadily: its start-up (imports, the first
        # readings, learning the interval) takes seconds on a loaded machine.
        assert wait_until(lambda: "agent started" in log_path.read_text(), 60)
        time.sleep(2.0)
        run = RunBuilder(
            "r-gpu",
            hosts=("gpu-node",),
            ranks_per_host=1,
            gpus=False,
            write_samples=False,
            t0_ns=time.time_ns(),
        )
        run.epoch(EPOCH_SECONDS, 64)
        body = encode_lines(run.points()).encode()
        request = urllib.request.Request(
            f"{collector.url}/api/v2/write?bucket=epochscope&org=epochscope&precision=ns",
            data=body,
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 204
        assert wait_until(lambda: time.time_ns() > run.end_true_ns() + 2 * 10**9, 30)
    finally:
        agent.terminate()  # SIGTERM: flushes what it has not pushed yet
        exit_code = agent.wait(30)
        collector.stop()
    assert exit_code == 0, log_path.read_text()

    result = subprocess.run(
        [*COLLECTOR, "report", "r-gpu", "--db", str(collector.db), "--format", "json"],
        env=repo_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["rows"]
    [row] = [r for r in rows if r["host"] == "gpu-node" and r["epoch"] == 1]
    seconds = row["seconds"]
    assert seconds == pytest.approx(EPOCH_SECONDS, abs=0.01)
    # The A100 is in MIG mode (no utilisation), its MIG device is no GPU of its own: the
    # H100's 100% is the mean.
    assert row["gpu_util_percent"] == pytest.approx(100.0)
    # Counters grow linearly, so the edges' interpolation is exact up to rounding.
    assert row["gpu_energy_joules"] == pytest.approx(400.0 * seconds, rel=0.01), stored_energy(
        collector.db, run
    )
    assert row["gpu_pcie_rx_bytes"] == pytest.approx(2.5e9 * seconds, rel=0.01)
    assert row["gpu_pcie_tx_bytes"] == pytest.approx(1.25e9 * seconds, rel=0.01)
