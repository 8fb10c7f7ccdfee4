"""The VictoriaMetrics path as an admin runs it, against Debian's real
/usr/bin/victoria-metrics and a real ``collector serve`` on loopback:

* an epoch's edge samples, stamped in ns and kept by VictoriaMetrics in whole ms, are the
  epoch's edge readings (compared at the backend's precision), not readings up to 1 ms
  inside the epoch with the next tick's burst interpolated after them;
* VictoriaMetrics down: ``/health`` fails, the outage is logged once (and its end once),
  the trainings' events are kept in the collector's SQLite file, readers get one clear
  line and the read API a 503;
* a batch re-sent after its answer was lost is stored once with
  ``-dedup.minScrapeInterval=1ms``, and the collector warns when VictoriaMetrics lacks it;
* credentials come from ``--backend-auth-file`` (VictoriaMetrics' own ``-httpAuth.*``
  basic auth here), a URL with credentials in it is refused, and no password is logged;
* the SQLite file of a VictoriaMetrics-backed collector, read without ``--backend``, says
  where its node columns are.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collector.analysis.epochs import build_report
from collector.store.backends import (
    BackendSpecError,
    authorization_of,
    open_backend_store,
    parse_backend_spec,
)
from contract.point import encode_lines
from tests.support.loopback import free_port, http_get, http_post
from tests.support.run_builder import T0_NS, RunBuilder
from tests.support.services import stop

VICTORIA_METRICS = Path(shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics")
pytestmark = pytest.mark.skipif(
    not VICTORIA_METRICS.exists(), reason="Debian package victoria-metrics not installed"
)

S = 1_000_000_000
GB = 1_000_000_000
PASSWORD = "s3cr3t-Pw0rd"


def start_vm(workdir: Path, port: int, *flags: str) -> subprocess.Popen:
    """A real victoria-metrics on 127.0.0.1:port; -search.latencyOffset=0 makes writes
    queryable at once."""
    log = open(workdir / f"vm-{port}.log", "ab")  # noqa: SIM115 (the process keeps it)
    process = subprocess.Popen(
        [
            str(VICTORIA_METRICS),
            f"-storageDataPath={workdir / 'vm-data'}",
            f"-httpListenAddr=127.0.0.1:{port}",
            "-search.latencyOffset=0",
            "-retentionPeriod=100y",
            "-loggerLevel=ERROR",
            *flags,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    wait_for(lambda: http_get(port, "/-/healthy")[0] < 500, process, "victoria-metrics")
    return process


def start_collector(
    workdir: Path, port: int, backend: str, env: dict[str, str], *extra: str
) -> subprocess.Popen:
    log = open(workdir / "collector.log", "ab")  # noqa: SIM115 (the process keeps it)
    command = [sys.executable, "-m", "collector", "serve", "--db", str(workdir / "c.sqlite")]
    command += ["--listen", f"127.0.0.1:{port}", "--backend", backend, *extra]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    wait_for(lambda: http_get(port, "/ping")[0] == 204, process, "collector")
    return process


def wait_for(condition, process: subprocess.Popen, what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{what} exited early ({process.returncode})")
        try:
            if condition():
                return
        except OSError:
            pass
        time.sleep(0.05)
    pytest.fail(f"{what}: not ready within {seconds} s")


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "collector", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def write(port: int, body: str) -> tuple[int, bytes]:
    return http_post(port, "/api/v2/write?bucket=b&precision=ns", body.encode())


# ------------------------------------------------------------------------------ precision


def edge_run() -> tuple[str, int, int]:
    """One 4 s epoch whose edges fall 0.456789 ms past a whole ms: its events and
    ``memory.cached_bytes`` as the agent writes it: a tick each whole second and an edge
    sample stamped with each edge's event time (ns). The page cache is flat up to the start
    edge and grows 0.5 GB in the tick after it; it is 2 GB at the end edge and grows 1 GB
    in the tick after that: the epoch's true growth is exactly 1 GB. Returns the body and
    the epoch's start and end (ns)."""
    run = RunBuilder("msrun", hosts=("ms1",), t0_ns=T0_NS + 2_300_456_789, write_samples=False)
    run.epoch(4.0, 400)
    events = run.event_points()
    start = next(p.time_ns for p in events if p.fields.get("event") == "epoch_start")
    end = next(p.time_ns for p in events if p.fields.get("event") == "epoch_end")
    assert start % 1_000_000 and end % 1_000_000  # not on a whole ms: VictoriaMetrics floors
    samples = {T0_NS + k * S: 1 * GB for k in range(3)}  # 0, 1, 2 s: before the start
    samples[start] = 1 * GB
    samples |= {T0_NS + 3 * S: 1.5 * GB, T0_NS + 4 * S: 1.8 * GB, T0_NS + 5 * S: 1.9 * GB}
    samples |= {T0_NS + 6 * S: 2 * GB, end: 2 * GB}
    samples |= {T0_NS + k * S: 3 * GB for k in range(7, 10)}
    lines = [f"memory,host=ms1 cached_bytes={int(v)}i {t}" for t, v in sorted(samples.items())]
    return encode_lines(events) + "\n" + "\n".join(lines), start, end


def test_edge_samples_are_compared_at_the_backends_precision(tmp_path, repo_env):
    vm_port, port = free_port(), free_port()
    vm = start_vm(tmp_path, vm_port)
    try:
        collector = start_collector(
            tmp_path, port, f"victoriametrics=http://127.0.0.1:{vm_port}", repo_env
        )
        try:
            body, start, end = edge_run()
            assert write(port, body)[0] == 204
            assert http_get(vm_port, "/internal/force_flush")[0] == 200
            spec = parse_backend_spec(f"victoriametrics=http://127.0.0.1:{vm_port}")
            store = open_backend_store(spec, tmp_path / "c.sqlite")
            (info,) = store.list_series("memory", "cached_bytes", "ms1")
            (data,) = store.read_series([info], start, end)
            # kept in whole ms: the edge samples sit up to 1 ms before their edges
            assert start - 1_000_000 < int(data.times_ns[0]) < start
            (row,) = build_report(store, "msrun").host_rows()
            assert row.page_cache_delta_bytes == 1 * GB  # 2 GB at the end edge - 1 GB
            assert row.interpolated_edges == ""
            # compared in ns, the floored edge samples are readings inside the epoch and
            # the value at each edge is interpolated towards the next tick's burst
            store.time_resolution_ns = 1
            (ns_row,) = build_report(store, "msrun").host_rows()
            error = ns_row.page_cache_delta_bytes - 1 * GB
            # end: + 1 GB x 0.456789 ms / 700 ms; start: + 0.5 GB x the same share
            assert 300_000 < error < 350_000, error
            log = (tmp_path / "collector.log").read_text()
            assert "runs without -dedup.minScrapeInterval" in log  # started without it
        finally:
            stop(collector)
    finally:
        stop(vm)


# ------------------------------------------------------------------------------ outage


@pytest.mark.slow
def test_victoria_metrics_down_then_back(tmp_path, repo_env):
    """Load: two Python processes and VictoriaMetrics; nothing here is timed but the
    waits for readiness and for /health to change (seconds, generous)."""
    vm_port, port = free_port(), free_port()
    backend = f"victoriametrics=http://127.0.0.1:{vm_port}"
    db = str(tmp_path / "c.sqlite")
    vm = start_vm(tmp_path, vm_port, "-dedup.minScrapeInterval=1ms")
    collector = start_collector(tmp_path, port, backend, repo_env)
    try:
        status, reply = http_get(port, "/health")
        assert (status, json.loads(reply)["status"]) == (200, "pass")
        body, _, _ = edge_run()
        assert write(port, body)[0] == 204
        assert http_get(vm_port, "/internal/force_flush")[0] == 200
        assert http_get(port, "/api/v1/report?run_id=msrun&format=json")[0] == 200

        stop(vm)
        # the trainings' events: kept in SQLite and answered 204 without VictoriaMetrics
        events = RunBuilder("downrun", hosts=("d1",), t0_ns=T0_NS + 3600 * S, write_samples=False)
        events.epoch(2.0, 100)
        assert write(port, encode_lines(events.event_points()))[0] == 204
        # samples (with an event beside them) get 503: the agents keep them
        mixed = f'workload,host=d2,run_id=mixed,rank=0 event="run_start" {T0_NS}\n'
        mixed += f"memory,host=d2 cached_bytes=5i {T0_NS}"
        for _ in range(5):
            status, reply = write(port, mixed)
            assert status == 503
            assert json.loads(reply)["code"] == "unavailable"
        status, reply = http_get(port, "/health")
        health = json.loads(reply)
        assert (status, health["status"]) == (503, "fail")
        assert "sample backend" in health["message"] and str(vm_port) in health["message"]

        runs = cli(repo_env, "runs", "--db", db, "--format", "json")
        # (the file alone: says where the node columns are, lists the kept runs)
        assert {r["run_id"] for r in json.loads(runs.stdout)} == {"msrun", "downrun", "mixed"}
        assert f"--backend {backend}" in runs.stderr and "victoriametrics" in runs.stderr
        # a reader over the backend: one line, no traceback
        report = cli(repo_env, "report", "msrun", "--db", db, "--backend", backend)
        assert report.returncode == 1
        assert "Traceback" not in report.stderr
        assert report.stderr.count("\n") == 1 and "unreachable" in report.stderr
        # the read API: 503 with the reason, not 500
        status, reply = http_get(port, "/api/v1/report?run_id=msrun&format=json")
        assert status == 503 and "unreachable" in json.loads(reply)["message"]

        vm = start_vm(tmp_path, vm_port, "-dedup.minScrapeInterval=1ms")
        assert write(port, mixed)[0] == 204
        assert http_get(port, "/health")[0] == 200
        log = (tmp_path / "collector.log").read_text()
        assert log.count("does not take writes") == 1  # six refused writes, one line
        assert log.count("takes writes again") == 1 and "6 writes not forwarded" in log
        assert "runs without -dedup" not in log  # started with it
    finally:
        stop(collector)
        if vm.poll() is None:
            stop(vm)


@pytest.mark.slow
def test_resent_batch_is_stored_once_with_dedup(tmp_path, repo_env):
    """A batch VictoriaMetrics took whose answer was lost (the collector restarted) is
    sent again: the same samples twice. With -dedup.minScrapeInterval=1ms it keeps one."""
    vm_port, port = free_port(), free_port()
    vm = start_vm(tmp_path, vm_port, "-dedup.minScrapeInterval=1ms")
    try:
        collector = start_collector(
            tmp_path, port, f"victoriametrics=http://127.0.0.1:{vm_port}", repo_env
        )
        body = f"memory,host=twice cached_bytes=7i {T0_NS + 123_456_789}"
        assert write(port, body)[0] == 204
        stop(collector)  # the restart: the agent sends its batch again
        collector = start_collector(
            tmp_path, port, f"victoriametrics=http://127.0.0.1:{vm_port}", repo_env
        )
        assert write(port, body)[0] == 204
        stop(collector)
        assert http_get(vm_port, "/internal/force_flush")[0] == 200
        status, reply = http_get(
            vm_port, "/api/v1/export?match[]=memory_cached_bytes&start=1699999999&end=1700000009"
        )
        assert status == 200, reply
        (series,) = [json.loads(line) for line in reply.decode().splitlines()]
        assert series["timestamps"] == [1_700_000_000_123] and series["values"] == [7]
    finally:
        stop(vm)


# ------------------------------------------------------------------------------ credentials


@pytest.mark.slow
def test_credentials_come_from_a_file_never_from_the_url(tmp_path, repo_env):
    vm_port, port = free_port(), free_port()
    url = f"http://127.0.0.1:{vm_port}"
    auth = tmp_path / "vm.auth"
    auth.write_text(f"epochscope:{PASSWORD}\n")
    auth.chmod(0o600)
    db = str(tmp_path / "c.sqlite")

    with pytest.raises(BackendSpecError) as refused:
        parse_backend_spec(f"victoriametrics=http://epochscope:{PASSWORD}@127.0.0.1:{vm_port}")
    assert "--backend-auth-file" in str(refused.value) and PASSWORD not in str(refused.value)
    inline = cli(
        repo_env,
        "serve",
        "--db",
        db,
        "--backend",
        f"victoriametrics=http://epochscope:{PASSWORD}@127.0.0.1:{vm_port}",
    )
    assert inline.returncode == 2 and "--backend-auth-file" in inline.stderr
    assert PASSWORD not in inline.stderr + inline.stdout

    spec = parse_backend_spec(f"victoriametrics={url}", auth_file=auth)
    assert PASSWORD not in repr(spec)
    token = tmp_path / "token"
    token.write_text("abc.def-ghi\n")
    token.chmod(0o600)
    assert authorization_of(token) == "Bearer abc.def-ghi"

    vm = start_vm(
        tmp_path, vm_port, "-httpAuth.username=epochscope", f"-httpAuth.password={PASSWORD}"
    )
    try:
        assert http_get(vm_port, "/api/v1/labels")[0] == 401  # it does want credentials
        collector = start_collector(
            tmp_path, port, f"victoriametrics={url}", repo_env, "--backend-auth-file", str(auth)
        )
        try:
            body, _, _ = edge_run()
            assert write(port, body)[0] == 204
            assert http_get(port, "/health")[0] == 200

            def ms1_row() -> dict:
                status, reply = http_get(port, "/api/v1/report?run_id=msrun&format=json")
                assert status == 200
                (row,) = [r for r in json.loads(reply)["rows"] if r["host"] == "ms1"]
                return row

            # the collector forwards in the background and VictoriaMetrics makes a write
            # searchable within about a second: wait for it rather than race it
            wait_for(lambda: ms1_row()["page_cache_delta_bytes"] is not None, collector,
                     "the forwarded samples in VictoriaMetrics")  # fmt: skip
            assert ms1_row()["page_cache_delta_bytes"] == 1 * GB
        finally:
            stop(collector)
        backend = ["--db", db, "--backend", f"victoriametrics={url}"]
        report = cli(repo_env, "report", "msrun", *backend, "--backend-auth-file", str(auth))
        assert report.returncode == 0, report.stderr
        without = cli(repo_env, "report", "msrun", *backend)
        assert without.returncode == 1 and "Traceback" not in without.stderr
        assert "HTTP 401" in without.stderr and "--backend-auth-file" in without.stderr
        log = (tmp_path / "collector.log").read_text()
        assert PASSWORD not in log and "epochscope:" not in log
    finally:
        stop(vm)


def test_dashboard_logs_a_backend_outage_once(tmp_path, caplog):
    """``dashboard serve --backend`` with nothing listening at the backend's port: its
    background preparation of finished runs says so in one line, not a traceback a round."""
    import logging

    from collector.store import SqliteStore
    from dashboard.source import DataSource

    run = RunBuilder("dashrun", hosts=("q1",), write_samples=False)
    run.epoch(2.0, 100)
    with SqliteStore(tmp_path / "c.sqlite") as local:
        local.write_lines(encode_lines(run.event_points()))
    spec = parse_backend_spec(f"victoriametrics=http://127.0.0.1:{free_port()}")
    source = DataSource(open_backend_store(spec, tmp_path / "c.sqlite"), complete_ahead=False)
    with caplog.at_level(logging.WARNING, logger="dashboard"):
        stop = source.start_preparing(newest=1, every_s=0.05)
        # the first round's warning, however slowly a loaded machine gets to it; then about
        # 20 more rounds, each of which would log again if the outage were said a round
        deadline = time.monotonic() + 30
        while not any(r.name.startswith("dashboard") for r in caplog.records):
            assert time.monotonic() < deadline, "no round said the backend is unreachable"
            time.sleep(0.05)
        time.sleep(1.0)
        stop.set()
    mine = [r for r in caplog.records if r.name.startswith("dashboard")]
    assert len(mine) == 1 and mine[0].levelno == logging.WARNING
    assert "unreachable" in mine[0].getMessage() and mine[0].exc_info is None
