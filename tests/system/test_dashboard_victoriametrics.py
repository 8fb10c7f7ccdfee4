"""The dashboard over the VictoriaMetrics backend (``dashboard serve --backend KIND=URL``).

Debian's real ``victoria-metrics`` on loopback, fed by a real ``collector serve --backend
victoriametrics=URL`` (which keeps the workload events in its SQLite file); the paper run of
tests/unit/test_dashboard_runs.py goes in as line protocol over HTTP. The pages' numbers must be
the ones worked out there, as over SQLite.
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contract.point import encode_lines
from dashboard.source import DataSource

VICTORIA_METRICS = shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics"
pytestmark = pytest.mark.skipif(
    not Path(VICTORIA_METRICS).exists(), reason="Debian package victoria-metrics not installed"
)
pytest.importorskip(
    "collector.store.victoriametrics", reason="no VictoriaMetrics backend in this tree"
)

from collector.store.victoriametrics import VictoriaMetricsStore  # noqa: E402
from tests.support.loopback import free_port  # noqa: E402
from tests.unit.test_dashboard_runs import PAPER_RUN, paper_run  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]


def request(port: int, method: str, path: str, body: bytes | None = None) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=body)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def start(command: list[str], port: int, ready_path: str, log: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{command[0]} exited: {log.read_text()[-2000:]}")
        try:
            if request(port, "GET", ready_path) < 500:
                return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    pytest.fail(f"nothing answered on {port}{ready_path}")


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    """(VictoriaMetrics port, the collector's events file) with the paper run written."""
    workdir = tmp_path_factory.mktemp("vm")
    vm_port, collector_port = free_port(), free_port()
    victoria = start(
        [
            VICTORIA_METRICS,
            f"-storageDataPath={workdir / 'data'}",
            f"-httpListenAddr=127.0.0.1:{vm_port}",
            "-search.latencyOffset=0",  # writes queryable at once
            "-retentionPeriod=100y",  # the fixture run is from 2023
            "-loggerLevel=ERROR",
        ],
        vm_port,
        "/health",
        workdir / "vm.log",
    )
    events = workdir / "events.sqlite"
    collector = start(
        [
            sys.executable,
            "-m",
            "collector",
            "serve",
            "--db",
            str(events),
            "--listen",
            f"127.0.0.1:{collector_port}",
            "--backend",
            f"victoriametrics=http://127.0.0.1:{vm_port}",
        ],
        collector_port,
        "/ping",
        workdir / "collector.log",
    )
    try:
        body = encode_lines(paper_run().points()).encode()
        path = "/api/v2/write?bucket=epochscope&precision=ns"
        assert request(collector_port, "POST", path, body) == 204
        assert request(vm_port, "GET", "/internal/force_flush") == 200
        yield vm_port, events
    finally:
        stop(collector)
        stop(victoria)


def test_run_page_numbers_over_victoriametrics(backend):
    vm_port, events = backend
    source = DataSource(VictoriaMetricsStore(f"http://127.0.0.1:{vm_port}", events=events))
    with source.request():
        assert [run["run_id"] for run in source.runs()] == [PAPER_RUN]
        rows = {(r["host"], r["epoch"]): r for r in source.epochs(PAPER_RUN)}
        ts = source.timeseries(PAPER_RUN, live=False)
    first, later = rows[("node1", 1)], rows[("node2", 2)]
    assert first["nfs_server_read_mbps"] == pytest.approx(300.0)  # epoch 1 reads the data set
    assert later["nfs_server_read_mbps"] == pytest.approx(0.0)  # then the page cache serves it
    assert first["rx_minus_tx_mbps"] == pytest.approx(300.0)  # 400 in - 100 out
    assert ts.bucket_ns == 1_000_000_000  # 280 s in 500 points: one-second buckets
    node1 = ts.hosts["node1"]["series"]
    assert node1["ib_rcv_mbps"][10] == pytest.approx(400.0)
    assert node1["ib_rcv_mbps"][150] == pytest.approx(100.0)


def test_serve_with_backend_url(backend, repo_env):
    vm_port, events = backend
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "dashboard",
        "serve",
        "--backend",
        f"victoriametrics=http://127.0.0.1:{vm_port}",
        "--db",
        str(events),
        "--port",
        str(port),
    ]
    process = subprocess.Popen(
        command, env=repo_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        status = None
        while time.monotonic() < deadline and status is None:
            try:
                status = request(port, "GET", "/")
            except OSError:
                assert process.poll() is None, "dashboard serve exited"
                time.sleep(0.2)
        assert status == 200
    finally:
        stop(process)
