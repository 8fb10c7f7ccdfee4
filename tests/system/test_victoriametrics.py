"""The VictoriaMetrics backend against Debian's real /usr/bin/victoria-metrics on loopback:
``collector serve --backend victoriametrics=URL`` forwards writes, ``VictoriaMetricsStore``
reads them back through the Prometheus API, events stay in the local SQLite file."""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from collector.store import SqliteStore
from collector.store.api import ReadStore
from collector.store.backends import BackendSpec, BackendSpecError, parse_backend_spec
from collector.store.victoriametrics import VictoriaMetricsStore, series_id
from tests.support.loopback import free_port
from tests.support.loopback import http_get as get
from tests.support.loopback import http_post as post

VICTORIA_METRICS = shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics"
REPO_ROOT = Path(__file__).resolve().parents[2]
S = 1_000_000_000
T0 = 1_700_000_000  # seconds; inside the 100-year retention the test server runs with

pytestmark = pytest.mark.skipif(
    not Path(VICTORIA_METRICS).exists(), reason="Debian package victoria-metrics not installed"
)


SERVE = [sys.executable, "-m", "collector", "serve"]


def vm_url(port: int) -> str:
    return f"victoriametrics=http://127.0.0.1:{port}"


def wait_for(port: int, path: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"exited early: {log.read_text()[-2000:]}")
        try:
            if get(port, path)[0] < 500:
                return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"nothing answered on {port}{path}")


@pytest.fixture(scope="module")
def victoria(tmp_path_factory):
    """A real victoria-metrics; -search.latencyOffset=0 makes writes queryable at once."""
    workdir = tmp_path_factory.mktemp("vm")
    port = free_port()
    log = workdir / "vm.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                VICTORIA_METRICS,
                f"-storageDataPath={workdir / 'data'}",
                f"-httpListenAddr=127.0.0.1:{port}",
                "-search.latencyOffset=0",
                "-retentionPeriod=100y",
                "-loggerLevel=ERROR",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    wait_for(port, "/health", process, log)
    yield port
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)


@pytest.fixture(scope="module")
def collector(tmp_path_factory, victoria):
    """``collector serve`` forwarding to it."""
    workdir = tmp_path_factory.mktemp("collector")
    db = workdir / "events.sqlite"
    port = free_port()
    log = workdir / "serve.log"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "collector",
                "serve",
                "--db",
                str(db),
                "--listen",
                f"127.0.0.1:{port}",
                "--backend",
                f"victoriametrics=http://127.0.0.1:{victoria}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    wait_for(port, "/ping", process, log)
    yield port, db
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)


def write(collector_port: int, victoria_port: int, body: str, precision: str = "s"):
    status, reply = post(
        collector_port, f"/api/v2/write?bucket=b&precision={precision}", body.encode()
    )
    assert get(victoria_port, "/internal/force_flush")[0] == 200
    return status, reply


def store_for(victoria_port: int, db: Path | None = None) -> VictoriaMetricsStore:
    return VictoriaMetricsStore(f"http://127.0.0.1:{victoria_port}", str(db) if db else None)


def test_implements_read_store_exactly():
    for name in ("list_series", "read_series", "hosts", "runs", "events"):
        expected = inspect.signature(getattr(ReadStore, name))
        actual = inspect.signature(getattr(VictoriaMetricsStore, name))
        assert list(actual.parameters) == list(expected.parameters), name
    assert parse_backend_spec("victoriametrics=http://127.0.0.1:8428/") == BackendSpec(
        "victoriametrics", "http://127.0.0.1:8428"
    )
    with pytest.raises(BackendSpecError, match="victoriametrics=URL or prometheus=URL"):
        parse_backend_spec("influxdb=http://x")
    assert series_id("cpu_user_seconds", {"host": "a"}) == series_id(
        "cpu_user_seconds", {"host": "a"}
    )


def test_forwarded_samples_read_back(collector, victoria):
    port, _ = collector
    lines = [
        f"disk,host=vm1,device=sda,kind=disk reads={100 + t}i,read_bytes={512 * t}i {T0 + t}"
        for t in range(0, 60)
    ] + [f"disk,host=vm2,device=nvme0n1,kind=disk reads={t}i {T0 + t}" for t in range(0, 60, 10)]
    status, _ = write(port, victoria, "\n".join(lines))
    assert status == 204
    store = store_for(victoria)
    infos = store.list_series("disk", "reads")
    assert [(i.host, i.tags) for i in infos] == [
        ("vm1", {"device": "sda", "kind": "disk"}),
        ("vm2", {"device": "nvme0n1", "kind": "disk"}),
    ]
    assert [i.host for i in store.list_series("disk", "reads", "vm2")] == ["vm2"]
    vm1, vm2 = store.read_series(infos, (T0 + 10) * S, (T0 + 20) * S)
    # [10 s, 20 s] plus one sample on each side: 9 .. 21 s
    assert (vm1.times_ns // S).tolist() == list(range(T0 + 9, T0 + 22))
    assert vm1.values.tolist() == [100.0 + t for t in range(9, 22)]
    assert (vm2.times_ns // S).tolist() == [T0, T0 + 10, T0 + 20, T0 + 30]
    assert vm2.times_ns.dtype == np.int64 and vm2.values.dtype == np.float64
    assert {"vm1", "vm2"} <= set(store.hosts())


def test_neighbours_beyond_the_export_margin(collector, victoria):
    port, _ = collector
    # samples an hour apart: the export margin (10 min) does not reach them
    body = "\n".join(f"nfs_rpc,host=far calls={t}i {T0 + t * 3600}" for t in range(5))
    assert write(port, victoria, body)[0] == 204
    store = store_for(victoria)
    (info,) = store.list_series("nfs_rpc", "calls", "far")
    (data,) = store.read_series([info], (T0 + 3600 + 1) * S, (T0 + 7200 - 1) * S)
    assert (data.times_ns // S - T0).tolist() == [3600, 7200]
    assert data.values.tolist() == [1.0, 2.0]
    (data,) = store.read_series([info], (T0 + 3 * 3600) * S, (T0 + 3 * 3600) * S)
    assert (data.times_ns // S - T0).tolist() == [2 * 3600, 3 * 3600, 4 * 3600]


def test_ms_precision_is_what_victoria_metrics_keeps(collector, victoria):
    port, _ = collector
    body = f"gpu,host=ms,gpu=0 power_watts=250.5 {T0 * S + 123_456_789}"
    assert write(port, victoria, body, precision="ns")[0] == 204
    store = store_for(victoria)
    (info,) = store.list_series("gpu", "power_watts", "ms")
    assert info.tags == {"gpu": "0"}
    (data,) = store.read_series([info], T0 * S, (T0 + 1) * S)
    assert data.times_ns.tolist() == [T0 * S + 123_000_000]  # trimmed to ms
    assert data.values.tolist() == [250.5]


def test_partial_write_strings_and_server_time(collector, victoria):
    port, _ = collector
    before = time.time_ns()
    body = "\n".join(
        [
            f'system,host=str uptime=5i,uptime_format="1 day, 2:00" {T0}',
            "system,host=str uptime=oops 1",  # line 2: bad
            "system,host=now uptime=7i",  # no timestamp: server time
        ]
    )
    status, reply = write(port, victoria, body)
    after = time.time_ns()
    assert status == 400
    assert "line 2" in json.loads(reply)["message"]
    store = store_for(victoria)
    (data,) = store.read_series(store.list_series("system", "uptime", "str"), 0, 2**62)
    assert data.values.tolist() == [5.0]
    assert store.list_series("system", "uptime_format") == []  # strings are not series
    (data,) = store.read_series(store.list_series("system", "uptime", "now"), 0, 2**62)
    (stamp,) = data.times_ns.tolist()
    # the collector's server time, truncated to s, as sent: before <= it <= after
    assert before // S * S <= stamp <= after


def test_workload_events_stay_local_and_numbers_go_to_victoria(collector, victoria):
    port, db = collector
    tags = "workload,framework=pytorch,host=w1,rank=0,run_id=vmrun"
    body = "\n".join(
        [
            f'{tags} event="run_start",model="resnet50",world_size=8i {T0}',
            f'{tags} event="epoch_end",epoch=1i,images=1281167i,seconds=300.5 {T0 + 300}',
            f'{tags} event="run_end",state="finished" {T0 + 600}',
        ]
    )
    assert write(port, victoria, body)[0] == 204
    store = store_for(victoria, db)
    run = store.run("vmrun")
    assert run is not None and run in store.runs()
    assert store.run("no-such-run") is None
    assert (run.state, run.model, run.world_size, run.hosts) == ("finished", "resnet50", 8, ("w1",))
    events = store.events("vmrun")
    assert [e.event for e in events] == ["run_start", "epoch_end", "run_end"]
    assert events[1].fields == {"epoch": 1, "images": 1281167, "seconds": 300.5}
    assert [e.event for e in store.events("vmrun", since_ns=(T0 + 300) * S)] == ["run_end"]
    assert [e.event for e in store.events("vmrun", kinds=("epoch_end",))] == ["epoch_end"]
    (images,) = store.list_series("workload", "images", "w1")
    assert images.tags == {"framework": "pytorch", "rank": "0", "run_id": "vmrun"}
    assert store.list_series("workload", "event") == []
    assert "w1" in store.hosts()
    # nothing but events went into SQLite
    with SqliteStore(db) as local:
        assert local.list_series("disk", "reads") == []


def test_same_answers_as_the_sqlite_store(collector, victoria, tmp_path):
    port, _ = collector
    rng = np.random.default_rng(3)
    lines = []
    for t in range(0, 300, 3):
        for gpu in range(2):
            value = round(float(rng.uniform(0, 100)), 3)
            lines.append(f"gpu,host=same,gpu={gpu} utilization_percent={value} {T0 + t}")
    body = "\n".join(lines)
    assert write(port, victoria, body)[0] == 204
    with SqliteStore(tmp_path / "same.sqlite") as local:
        local.write_lines(body, "s")
        expected = local.read_series(
            local.list_series("gpu", "utilization_percent", "same"), (T0 + 50) * S, (T0 + 80) * S
        )
    store = store_for(victoria)
    got = store.read_series(
        store.list_series("gpu", "utilization_percent", "same"), (T0 + 50) * S, (T0 + 80) * S
    )
    assert [d.info.tags for d in got] == [d.info.tags for d in expected]
    for mine, theirs in zip(got, expected, strict=True):
        assert mine.times_ns.tolist() == theirs.times_ns.tolist()
        assert mine.values.tolist() == theirs.values.tolist()


def test_victoria_metrics_down_means_503_and_the_events_kept(tmp_path, repo_env):
    dead = free_port()  # nothing listens there
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "collector",
                "serve",
                "--db",
                str(tmp_path / "e.sqlite"),
                "--listen",
                f"127.0.0.1:{port}",
                "--backend",
                f"victoriametrics=http://127.0.0.1:{dead}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=repo_env,
        )
    try:
        wait_for(port, "/ping", process, log)
        body = (
            'workload,host=h,run_id=down,rank=0 event="run_start" 1\ncpu,host=h user_seconds=1i 1'
        )
        status, reply = post(port, "/api/v2/write?bucket=b", body.encode())
        assert status == 503
        assert json.loads(reply)["code"] == "unavailable"
        with SqliteStore(tmp_path / "e.sqlite") as local:
            # the samples are not kept (the client sends the batch again); the training's
            # event is, whatever VictoriaMetrics does (a re-sent event replaces itself)
            assert [run.run_id for run in local.runs()] == ["down"]
            assert local.list_series("cpu", "user_seconds") == []
        assert re.search(r"listening on .*backend victoriametrics", log.read_text())
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def test_prometheus_store_reads_victoria_metrics_too(victoria):
    """``PrometheusStore`` uses only the standard Prometheus API, which VictoriaMetrics
    answers too: here fed with Prometheus-named samples (as if VictoriaMetrics scraped the
    agents) through its Prometheus import endpoint."""
    from collector.store.prometheus import PrometheusStore

    lines = [
        f'epochscope_memory_cached_bytes{{host="pvm",job="j",instance="i:1"}} {100 + t} '
        f"{(T0 + t) * 1000}"
        for t in range(60)
    ] + [
        f'epochscope_memory_cached_bytes{{host="pvmfar"}} {t} {(T0 + t * 3600) * 1000}'
        for t in range(5)
    ]
    status, reply = post(victoria, "/api/v1/import/prometheus", "\n".join(lines).encode())
    assert status == 204, reply
    assert get(victoria, "/internal/force_flush")[0] == 200
    store = PrometheusStore(f"http://127.0.0.1:{victoria}", events=None)
    near, far = store.list_series("memory", "cached_bytes", "pvm") + store.list_series(
        "memory", "cached_bytes", "pvmfar"
    )
    assert near.tags == {} and far.tags == {}  # job and instance are not identity
    near_data, far_data = store.read_series([near, far], (T0 + 10) * S, (T0 + 20) * S)
    assert (near_data.times_ns // S - T0).tolist() == list(range(9, 22))
    assert near_data.values.tolist() == [100.0 + t for t in range(9, 22)]
    # far: the neighbours an hour away come from the count_over_time probes
    assert (far_data.times_ns // S - T0).tolist() == [0, 3600]
    (far_data,) = store.read_series([far], (T0 + 5400) * S, (T0 + 5800) * S)
    assert (far_data.times_ns // S - T0).tolist() == [3600, 7200]
    assert far_data.values.tolist() == [1.0, 2.0]
