"""``--backend prometheus=URL`` against Debian's real /usr/bin/prometheus on loopback.

Prometheus scrapes a real ``agent run`` (no push) every second; the agent reads a copy of
the captured ``procfs-mlx-hfi`` tree, which the test changes once in the middle of an epoch
(1 MiB more read from sda, 1 MiB more page cache), so every number is known. The run's
workload events go through a real ``collector serve --backend prometheus=URL`` into its
SQLite file. ``PrometheusStore`` reads it all back through the Prometheus HTTP API, and
``collector report --backend prometheus=URL`` cuts the epoch.

Older, hand-written samples (2023, hour-long gaps, two scrape jobs) are backfilled into
the same Prometheus with ``promtool tsdb create-blocks-from openmetrics`` before it starts,
for the cases a live scrape cannot make: neighbours beyond the margin, chunked reads,
identities split over ``job``/``instance``, and equality with the SQLite store.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

import numpy as np
import pytest

from collector.store import SqliteStore
from collector.store.api import ReadStore
from collector.store.backends import BackendSpec, parse_backend_spec
from collector.store.prometheus import PrometheusStore
from contract.point import encode_lines
from tests.conftest import fixture_root
from tests.support.loopback import free_port, http_get, http_post
from tests.support.run_builder import RunBuilder
from tests.support.services import start, stop, wait_until

PROMETHEUS = Path(shutil.which("prometheus") or "/usr/bin/prometheus")
PROMTOOL = Path(shutil.which("promtool") or "/usr/bin/promtool")
if not PROMETHEUS.exists():
    print(f"test_prometheus_backend: skipped, {PROMETHEUS} is missing (Debian package prometheus)")
pytestmark = pytest.mark.skipif(
    not PROMETHEUS.exists(), reason=f"{PROMETHEUS} missing: install Debian package prometheus"
)

S = 1_000_000_000
MS = 1_000_000
T0 = 1_700_000_000  # seconds: 2023-11-14, for the backfilled samples
HOST = "promhost"
RUN_ID = "promrun"
EPOCH_SECONDS = 8.0
EPOCH_IMAGES = 1200
MIB = 1024 * 1024

# procfs-mlx-hfi/proc/meminfo: "Cached: 12007640 kB" -> 12007640 x 1024 bytes
CACHED_BYTES = 12_007_640 * 1024  # 12_295_823_360
# procfs-mlx-hfi/proc/diskstats, sda: 1003346126 sectors read x 512 bytes
SDA_READ_BYTES = 1_003_346_126 * 512  # 513_713_216_512
# mlx4_0 port 1 counters/port_rcv_data: 2221223609 four-byte words
MLX4_RCV_BYTES = 2_221_223_609 * 4  # 8_884_894_436


def query(port: int, promql: str) -> list:
    status, body = http_get(port, "/api/v1/query?" + urlencode({"query": promql}))
    assert status == 200, body
    return json.loads(body)["data"]["result"]


# ------------------------------------------------------------------------------ backfill


def openmetrics_backfill() -> str:
    """Samples the live scrape cannot make (all at 2023 times, hosts unlike the agent's)."""
    lines = ["# TYPE epochscope_memory_cached_bytes gauge"]
    # "far": one sample an hour, 5 hours; the 10-minute margin reaches none of the others
    lines += [f'epochscope_memory_cached_bytes{{host="far"}} {t} {T0 + t * 3600}' for t in range(5)]
    # "dense": one sample a second for 10 minutes, value 1000 + t
    lines += [
        f'epochscope_memory_cached_bytes{{host="dense",job="epochscope",instance="n1:9711"}} '
        f"{1000 + t} {T0 + t}"
        for t in range(600)
    ]
    # "twojobs": the same point scraped by two jobs, at even and at odd seconds
    for job, parity in (("a", 0), ("b", 1)):
        lines += [
            f'epochscope_memory_cached_bytes{{host="twojobs",job="{job}",instance="{job}:1"}} '
            f"{t} {T0 + t}"
            for t in range(parity, 20, 2)
        ]
    lines.append("# TYPE epochscope_gpu_utilization_percent gauge")
    rng = np.random.default_rng(3)
    for gpu in range(2):
        for t in range(0, 300, 3):
            value = round(float(rng.uniform(0, 100)), 3)
            lines.append(
                f'epochscope_gpu_utilization_percent{{gpu="{gpu}",host="same"}} {value} {T0 + t}'
            )
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def same_as_line_protocol(openmetrics: str) -> str:
    """The "same" host's GPU samples as line protocol, for the SQLite store."""
    out = []
    for line in openmetrics.splitlines():
        if line.startswith("epochscope_gpu_utilization_percent{"):
            labels, value, stamp = line.split(" ")
            gpu = labels.split('gpu="')[1].split('"')[0]
            out.append(f"gpu,host=same,gpu={gpu} utilization_percent={value} {stamp}")
    return "\n".join(out)


# ------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """An agent serving /metrics from a copied fixture tree, a Prometheus scraping it
    (with the backfilled blocks), and the epoch: returns a dict of what the tests need."""
    env = dict(os.environ)
    repo = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), env.get("PYTHONPATH")]))
    work = tmp_path_factory.mktemp("prom")
    source = fixture_root("procfs-mlx-hfi")
    proc = work / "proc"
    proc.mkdir()
    for name in ("stat", "meminfo", "diskstats"):
        shutil.copyfile(source / "proc" / name, proc / name)

    agent_port, prom_port, collector_port = free_port(), free_port(), free_port()
    config = work / "agent.toml"
    config.write_text(
        f'host = "{HOST}"\ninterval_seconds = 0.5\n'
        f'samplers = ["cpu", "memory", "disk", "infiniband"]\n'
        f'proc_root = "{proc}"\nsys_root = "{source / "sys"}"\n'
        f'[metrics]\nlisten = "127.0.0.1:{agent_port}"\n'
    )
    tsdb = work / "tsdb"
    openmetrics = openmetrics_backfill()
    if PROMTOOL.exists():
        (work / "backfill.om").write_text(openmetrics)
        subprocess.run(
            [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", work / "backfill.om", tsdb],
            check=True,
            capture_output=True,
            timeout=60,
        )
    (work / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: epochscope\n    static_configs:\n"
        f'      - targets: ["127.0.0.1:{agent_port}"]\n'
    )
    events = work / "events.sqlite"
    url = f"http://127.0.0.1:{prom_port}"
    processes = []
    try:
        agent = start(
            [sys.executable, "-m", "agent", "run", "--config", str(config)], work / "agent.log", env
        )
        processes.append(agent)
        prometheus = start(
            [
                str(PROMETHEUS),
                f"--config.file={work / 'prometheus.yml'}",
                f"--storage.tsdb.path={tsdb}",
                "--storage.tsdb.retention.time=100y",  # the backfill is from 2023
                f"--web.listen-address=127.0.0.1:{prom_port}",
                "--log.level=warn",
            ],
            work / "prometheus.log",
        )
        processes.append(prometheus)
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
                f"prometheus={url}",
            ],
            work / "collector.log",
            env,
        )
        processes.append(collector)
        wait_until(
            lambda: http_get(prom_port, "/-/ready")[0] == 200,
            "prometheus ready",
            prometheus,
            work / "prometheus.log",
        )
        wait_until(
            lambda: http_get(collector_port, "/ping")[0] == 204,
            "collector ready",
            collector,
            work / "collector.log",
        )
        selector = f'epochscope_memory_cached_bytes{{host="{HOST}"}}'

        def scraped_after(stamp_ns: int) -> bool:
            found = query(prom_port, f"timestamp({selector})")
            return bool(found) and float(found[0]["value"][1]) * S > stamp_ns

        def scrapes() -> int:
            found = query(prom_port, f"count_over_time({selector}[1m])")
            return int(found[0]["value"][1]) if found else 0

        wait_until(
            lambda: scrapes() >= 2,  # two scrapes before the epoch starts
            "two scrapes",
            prometheus,
            work / "prometheus.log",
        )
        epoch_start = time.time_ns()
        time.sleep(EPOCH_SECONDS / 2)
        bump_proc_files(proc)  # mid-epoch: +1 MiB read from sda, +1 MiB page cache
        time.sleep(EPOCH_SECONDS / 2)
        epoch_end = epoch_start + int(EPOCH_SECONDS * S)
        wait_until(
            lambda: scraped_after(epoch_end + S // 2),
            "a scrape after the epoch",
            prometheus,
            work / "prometheus.log",
        )

        run = RunBuilder(RUN_ID, hosts=(HOST,), t0_ns=epoch_start, write_samples=False)
        run.epoch(EPOCH_SECONDS, EPOCH_IMAGES)
        body = encode_lines(run.event_points())
        # and one sample pushed to the collector: kept in its SQLite file, not forwarded
        body += f"\ndisk,host=pushed,device=sdz,kind=disk read_bytes=5i {epoch_start}"
        status, reply = http_post(
            collector_port, "/api/v2/write?bucket=b&precision=ns", body.encode()
        )
        assert status == 204, reply
        exposed = http_get(agent_port, "/metrics")[1].decode()
        yield {
            "url": url,
            "port": prom_port,
            "events": events,
            "epoch": (epoch_start, epoch_end),
            "exposed": exposed,
            "collector_log": work / "collector.log",
            "collector_port": collector_port,
            "backfilled": PROMTOOL.exists(),
            "openmetrics": openmetrics,
            "env": env,
        }
    finally:
        for process in reversed(processes):
            stop(process)


def bump_proc_files(proc: Path) -> None:
    """sda reads 2048 more sectors (1 MiB); meminfo's Cached grows by 1024 kB (1 MiB).
    Each file is replaced whole, so the agent never reads half a file."""
    diskstats = (proc / "diskstats").read_text().splitlines()
    for index, line in enumerate(diskstats):
        fields = line.split()
        if len(fields) > 5 and fields[2] == "sda":
            fields[5] = str(int(fields[5]) + 2048)
            diskstats[index] = " ".join(fields)
    meminfo = (proc / "meminfo").read_text().splitlines()
    for index, line in enumerate(meminfo):
        if line.startswith("Cached:"):
            meminfo[index] = f"Cached:         {12_007_640 + 1024} kB"
    for name, lines in (("diskstats", diskstats), ("meminfo", meminfo)):
        temporary = proc / f".{name}.new"
        temporary.write_text("\n".join(lines) + "\n")
        os.replace(temporary, proc / name)


def store_for(live, **attributes) -> PrometheusStore:
    store = PrometheusStore(live["url"], events=live["events"])
    for name, value in attributes.items():
        setattr(store, name, value)
    return store


def needs_backfill(live) -> None:
    if not live["backfilled"]:
        pytest.skip(f"{PROMTOOL} missing: cannot backfill the hand-written samples")


# ------------------------------------------------------------------------------ tests


def collector_cli(live: dict, *args: str) -> subprocess.CompletedProcess:
    """``collector ARGS --backend prometheus=URL --db EVENTS`` against the live Prometheus."""
    command = [sys.executable, "-m", "collector", *args]
    command += ["--backend", f"prometheus={live['url']}", "--db", str(live["events"])]
    return subprocess.run(
        command, env=live["env"], capture_output=True, text=True, timeout=60, check=False
    )


def test_implements_read_store_and_parses_specs():
    for name in ("list_series", "read_series", "hosts", "runs", "events"):
        expected = inspect.signature(getattr(ReadStore, name))
        actual = inspect.signature(getattr(PrometheusStore, name))
        assert list(actual.parameters) == list(expected.parameters), name
    assert parse_backend_spec("prometheus=http://127.0.0.1:9090/") == BackendSpec(
        "prometheus", "http://127.0.0.1:9090"
    )
    assert not parse_backend_spec("prometheus=http://x:9090").forwards_writes
    assert parse_backend_spec("http://x:8428", bare_url_kind="victoriametrics") == BackendSpec(
        "victoriametrics", "http://x:8428"
    )


def test_list_series_finds_the_agents_series_without_scrape_labels(live):
    store = store_for(live)
    (memory,) = store.list_series("memory", "cached_bytes", HOST)
    assert (memory.measurement, memory.field, memory.host, memory.tags) == (
        "memory",
        "cached_bytes",
        HOST,
        {},  # instance and job are not part of the identity
    )
    ports = {
        (i.host, i.tags["device"], i.tags["port"])
        for i in store.list_series("infiniband", "rcv_bytes", HOST)
    }
    assert (HOST, "mlx4_0", "1") in ports and (HOST, "mlx4_0", "2") in ports
    (sda,) = [i for i in store.list_series("disk", "read_bytes", HOST) if i.tags["device"] == "sda"]
    assert sda.tags == {"device": "sda", "kind": "disk"}
    # The CPU modes are one family, epochscope_cpu_seconds_total{mode=...}: each field
    # finds its own mode's series.
    (user,) = store.list_series("cpu", "user_seconds", HOST)
    (idle,) = store.list_series("cpu", "idle_seconds", HOST)
    assert (user.tags, idle.tags) == ({"mode": "user"}, {"mode": "idle"})
    assert store.list_series("memory", "no_such_field") == []  # not in the schema
    assert store.list_series("workload", "event") == []  # text fields are never exposed
    assert HOST in store.hosts()


def test_read_series_returns_the_raw_scraped_samples(live):
    store = store_for(live)
    start, end = live["epoch"]
    (memory,) = store.list_series("memory", "cached_bytes", HOST)
    (sda,) = [i for i in store.list_series("disk", "read_bytes", HOST) if i.tags["device"] == "sda"]
    mlx4 = next(
        i
        for i in store.list_series("infiniband", "rcv_bytes", HOST)
        if (i.tags["device"], i.tags["port"]) == ("mlx4_0", "1")
    )
    (user,) = store.list_series("cpu", "user_seconds", HOST)
    (idle,) = store.list_series("cpu", "idle_seconds", HOST)
    cached, read, rcv, user_data, idle_data = store.read_series(
        [memory, sda, mlx4, user, idle], start, end
    )
    # procfs-mlx-hfi/proc/stat: "cpu  301854 612 111922 8979004 ..." in USER_HZ ticks
    assert set(user_data.values.tolist()) == {301854 / os.sysconf("SC_CLK_TCK")}
    assert set(idle_data.values.tolist()) == {8979004 / os.sysconf("SC_CLK_TCK")}
    for data in (cached, read, rcv, user_data):
        times = data.times_ns
        assert times.dtype == np.int64 and data.values.dtype == np.float64
        assert np.all(np.diff(times) > 0)
        assert np.all(times % MS == 0)  # Prometheus keeps whole ms
        # one sample per scrape (1 s), the epoch's 8 s plus one neighbour on each side
        assert times[0] < start <= times[1] and times[-2] <= end < times[-1]
        assert abs(float(np.median(np.diff(times))) - S) < 0.1 * S
        assert 8 <= times.size <= 12
    # the values the agent exposed: before the change, then 1 MiB more
    assert set(cached.values.tolist()) == {CACHED_BYTES, CACHED_BYTES + MIB}
    assert cached.values[0] == CACHED_BYTES and cached.values[-1] == CACHED_BYTES + MIB
    assert set(read.values.tolist()) == {SDA_READ_BYTES, SDA_READ_BYTES + MIB}
    assert np.all(np.diff(cached.values) >= 0)
    assert rcv.values.tolist() == [MLX4_RCV_BYTES] * rcv.values.size
    assert (
        f'epochscope_infiniband_rcv_bytes_total{{device="mlx4_0",host="{HOST}",port="1"}} '
        in (live["exposed"])
    )


def test_collector_report_over_prometheus(live):
    result = collector_cli(live, "report", RUN_ID, "--format", "json")
    assert result.returncode == 0, result.stderr
    rows = {(row["host"], row["epoch"]): row for row in json.loads(result.stdout)["rows"]}
    assert set(rows) == {(HOST, 1), ("*", 1)}
    row = rows[(HOST, 1)]
    assert row["seconds"] == EPOCH_SECONDS and row["images"] == EPOCH_IMAGES
    assert row["images_per_second"] == EPOCH_IMAGES / EPOCH_SECONDS  # 150
    # sda read 2048 sectors x 512 = 1 MiB inside the epoch; partitions, dm and loop
    # devices are not counted, and nothing else changed
    assert row["disk_read_bytes"] == MIB
    # 1048576 B / 8 s = 0.131072 MB/s, which the report rounds to 3 decimals
    assert row["disk_read_mbps"] == 0.131
    assert row["disk_write_bytes"] == 0
    assert row["page_cache_delta_bytes"] == MIB  # Cached 12007640 -> 12008664 kB
    assert row["ib_rcv_bytes"] == 0 and row["ib_xmit_bytes"] == 0  # constant counters
    assert row["major_faults"] is None  # the tree has no vmstat: unknown, not zero
    assert row["gpu_util_percent"] is None
    assert rows[("*", 1)]["disk_read_bytes"] == MIB

    runs = collector_cli(live, "runs", "--format", "json")
    assert runs.returncode == 0, runs.stderr
    assert [r["run_id"] for r in json.loads(runs.stdout)] == [RUN_ID]


def test_read_api_answers_from_prometheus(live):
    """The table a run prints after it (``collector report --collector URL``) and the read
    API behind it read the samples from Prometheus, not from the collector's SQLite file
    (which holds none of the agent's: Prometheus scrapes them)."""
    port = live["collector_port"]
    status, reply = http_get(port, f"/api/v1/report?run_id={RUN_ID}&format=json")
    assert status == 200, reply
    rows = {(row["host"], row["epoch"]): row for row in json.loads(reply)["rows"]}
    row = rows[(HOST, 1)]
    assert row["disk_read_bytes"] == MIB and row["page_cache_delta_bytes"] == MIB
    # scrapes carry no edge samples: the edges are interpolated (a tick within 1 ms of
    # an edge would count as its reading; both edges so is a chance of about 1e-5)
    assert row["interpolated_edges"] in ("start", "end", "start,end")
    table = subprocess.run(
        [
            sys.executable,
            "-m",
            "collector",
            "report",
            RUN_ID,
            "--collector",
            f"http://127.0.0.1:{port}",
        ],
        env=live["env"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert table.returncode == 0, table.stderr
    (host_line,) = [line for line in table.stdout.splitlines() if line.startswith(HOST)]
    # disk read and cache growth: 1 MiB each (1.0 MB), not "–"
    assert host_line.count("1.0 MB") == 2 and "–" not in host_line, table.stdout
    assert "Interpolated edges" in table.stdout


def test_dashboard_says_prometheus_epochs_are_interpolated(live):
    from collector.queries.query import epoch_table
    from dashboard.pages import absent_note, interpolated_note

    rows = epoch_table(store_for(live), RUN_ID)
    note = interpolated_note(rows)
    assert note.startswith("Interpolated epoch edges in 1 of 1 host epochs")
    assert "Prometheus" in note
    assert note in absent_note(rows, [])


def test_serve_with_prometheus_forwards_nothing_and_keeps_samples(live):
    assert "backend prometheus" in live["collector_log"].read_text()
    with SqliteStore(live["events"]) as local:
        (pushed,) = local.list_series("disk", "read_bytes", "pushed")
        (data,) = local.read_series([pushed], 0, 2**62)
        assert data.values.tolist() == [5.0]
        assert [run.run_id for run in local.runs()] == [RUN_ID]
    assert store_for(live).list_series("disk", "read_bytes", "pushed") == []


def test_dashboard_opens_a_prometheus_store(live):
    from dashboard.cli import build_parser, open_store

    args = build_parser().parse_args(
        ["serve", "--backend", f"prometheus={live['url']}", "--db", str(live["events"])]
    )
    store = open_store(args)
    assert isinstance(store, PrometheusStore)
    assert [run.run_id for run in store.runs()] == [RUN_ID]


# ------------------------------------------------------------------ backfilled samples


def test_neighbours_beyond_the_margin(live):
    needs_backfill(live)
    store = store_for(live)
    (far,) = store.list_series("memory", "cached_bytes", "far")
    # samples at 0, 1, 2, 3, 4 h (values 0..4): an empty range between two of them
    (data,) = store.read_series([far], (T0 + 5400) * S, (T0 + 5800) * S)
    assert (data.times_ns // S - T0).tolist() == [3600, 7200]
    assert data.values.tolist() == [1.0, 2.0]
    (data,) = store.read_series([far], (T0 + 3 * 3600) * S, (T0 + 3 * 3600) * S)
    assert (data.times_ns // S - T0).tolist() == [2 * 3600, 3 * 3600, 4 * 3600]
    (data,) = store.read_series([far], (T0 + 4 * 3600 + 1) * S, (T0 + 5 * 3600) * S)
    assert (data.times_ns // S - T0).tolist() == [4 * 3600]  # nothing after: none invented


def test_chunked_reads_give_the_same_samples(live):
    needs_backfill(live)
    whole = store_for(live)
    chunked = store_for(live, first_chunk_ms=7_000, target_samples=25)
    calls = []
    query_once = chunked.http.query
    chunked.http.query = lambda promql, at_ms: calls.append(promql) or query_once(promql, at_ms)
    (dense,) = whole.list_series("memory", "cached_bytes", "dense")
    assert dense.tags == {}  # job and instance dropped
    (expected,) = whole.read_series([dense], (T0 + 100) * S, (T0 + 400) * S)
    (got,) = chunked.read_series([dense], (T0 + 100) * S, (T0 + 400) * S)
    # [100 s, 400 s] plus the samples at 99 and 401 s; value 1000 + t
    assert (expected.times_ns // S - T0).tolist() == list(range(99, 402))
    assert expected.values.tolist() == [1000.0 + t for t in range(99, 402)]
    assert got.times_ns.tolist() == expected.times_ns.tolist()
    assert got.values.tolist() == expected.values.tolist()
    # 10-minute margins: 0 .. 600 s of samples, in windows of ~25 samples, growing 4x at
    # most from 7 s: many requests, every one a raw range selector
    assert len(calls) > 10
    assert all(call.startswith("{") for call in calls)


def test_two_jobs_scraping_one_point_are_one_series(live):
    needs_backfill(live)
    store = store_for(live)
    (info,) = store.list_series("memory", "cached_bytes", "twojobs")
    (data,) = store.read_series([info], T0 * S, (T0 + 19) * S)
    assert (data.times_ns // S - T0).tolist() == list(range(20))  # even from a, odd from b
    assert data.values.tolist() == [float(t) for t in range(20)]


def test_same_answers_as_the_sqlite_store(live, tmp_path):
    needs_backfill(live)
    with SqliteStore(tmp_path / "same.sqlite") as local:
        local.write_lines(same_as_line_protocol(live["openmetrics"]), "s")
        expected = local.read_series(
            local.list_series("gpu", "utilization_percent", "same"), (T0 + 50) * S, (T0 + 80) * S
        )
    store = store_for(live)
    got = store.read_series(
        store.list_series("gpu", "utilization_percent", "same"), (T0 + 50) * S, (T0 + 80) * S
    )
    assert (
        [d.info.tags for d in got]
        == [d.info.tags for d in expected]
        == [
            {"gpu": "0"},
            {"gpu": "1"},
        ]
    )
    for mine, theirs in zip(got, expected, strict=True):
        assert mine.times_ns.tolist() == theirs.times_ns.tolist()
        assert mine.values.tolist() == theirs.values.tolist()
