"""``agent run`` with ``[otlp]``: a real agent process over the captured ``procfs-mlx-hfi``
tree sends OTLP/HTTP JSON to a loopback receiver; the receiver decodes it with the OTLP
JSON mapping and the values are the tree's known ones. The exporter's outage behaviour
(kept while down, the oldest dropped and counted past the cap) in process."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from agent.otlp import OtlpExporter
from agent.samplers.agent import AgentSampler, AgentStats
from contract.point import Point
from contract.schema import AgentSelf
from tests.conftest import fixture_root
from tests.integration.test_agent_run import MLX4_RCV_BYTES, MLX4_XMIT_BYTES
from tests.integration.test_agent_shipper import wait_until
from tests.support.otlp_receiver import OtlpReceiver, attributes, metrics_by_name

SECRET = "otlp-secret-value-77"


def test_agent_run_exports_real_samples_as_otlp_metrics(tmp_path: Path, repo_env) -> None:
    root = fixture_root("procfs-mlx-hfi")
    headers = tmp_path / "otlp-headers"
    headers.write_text(f"# the site's collector wants this\nAuthorization: Bearer {SECRET}\n")
    headers.chmod(0o600)
    with OtlpReceiver() as receiver:
        config = tmp_path / "agent.toml"
        config.write_text(
            f"""
host = "testhost"
interval_seconds = 0.5
samplers = ["infiniband"]
proc_root = "{root / "proc"}"
sys_root = "{root / "sys"}"

[metrics]
listen = ""

[otlp]
endpoint = "{receiver.url("/v1/metrics")}"
headers_file = "{headers}"
batch_seconds = 0.5
"""
        )
        log_path = tmp_path / "agent.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "agent", "run", "--config", str(config)],
                env=repo_env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            assert wait_until(lambda: len(receiver.requests) >= 2, timeout=30), log_path.read_text()
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=20) == 0
    path, request_headers, body = receiver.requests[0]
    assert path == "/v1/metrics"
    assert request_headers["Authorization"] == f"Bearer {SECRET}"
    metrics = metrics_by_name(body)
    resource, rcv = metrics["epochscope_infiniband_rcv_bytes"]
    assert resource["host.name"] == "testhost"
    assert rcv["sum"]["isMonotonic"] is True and rcv["sum"]["aggregationTemporality"] == 2
    by_port = {
        (attrs["device"], attrs["port"]): int(point["asInt"])
        for point in rcv["sum"]["dataPoints"]
        for attrs in [attributes(point["attributes"])]
    }
    assert by_port[("mlx4_0", "1")] == MLX4_RCV_BYTES
    (xmit,) = [
        int(point["asInt"])
        for point in metrics["epochscope_infiniband_xmit_bytes"][1]["sum"]["dataPoints"]
        if attributes(point["attributes"]) == {"device": "mlx4_0", "port": "1"}
    ][:1]
    assert xmit == MLX4_XMIT_BYTES
    log_text = log_path.read_text()
    assert "otlp=" + receiver.url("/v1/metrics") in log_text
    assert SECRET not in log_text


def _points(count: int, time_ns: int) -> list[Point]:
    return [
        Point("disk", {"host": "n", "device": f"d{i}", "kind": "disk"}, {"read_bytes": i}, time_ns)
        for i in range(count)
    ]


def test_points_wait_while_the_endpoint_is_down_and_the_oldest_past_the_cap_are_counted() -> None:
    with OtlpReceiver(status=503) as receiver:
        stats = AgentStats()
        exporter = OtlpExporter(
            receiver.url("/v1/metrics"), batch_seconds=0.05, max_queued_points=10, stats=stats
        )
        for tick in range(4):  # 4 ticks of 4 points: the first two go past the cap of 10
            exporter.submit(_points(4, tick))
        exporter.start()
        assert wait_until(lambda: len(receiver.requests) >= 1)
        assert not exporter.flush(0.3)  # the endpoint still refuses: nothing delivered
        receiver.status = 200
        assert exporter.flush(10)
        exporter.close(1)
    assert exporter.points_dropped == 8
    assert stats.otlp_points_dropped == 8  # what the agent sampler reports
    (agent_point,) = AgentSampler(None, stats).sample(5)  # type: ignore[arg-type]
    assert agent_point.fields[AgentSelf.OTLP_POINTS_DROPPED] == 8
    assert exporter.points_sent == 8
    delivered = metrics_by_name(receiver.requests[-1][2])["epochscope_disk_read_bytes"][1]
    assert sorted({int(p["timeUnixNano"]) for p in delivered["sum"]["dataPoints"]}) == [2, 3]


def test_a_refused_batch_is_dropped_and_counted() -> None:
    with OtlpReceiver(status=400) as receiver:
        exporter = OtlpExporter(receiver.url("/v1/metrics"), batch_seconds=0)
        exporter.start()
        exporter.submit(_points(3, 1))
        assert exporter.flush(10)
        exporter.close(1)
    assert (exporter.points_dropped, exporter.points_sent) == (3, 0)
