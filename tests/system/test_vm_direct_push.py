"""Past one collector: agents push their samples straight to VictoriaMetrics' InfluxDB
endpoint while the collector keeps the runs' events (docs/scale-out.md).

A real ``agent run`` with ``push.url`` naming a real ``victoria-metrics`` on loopback (its
``/api/v2/write``, the same request the agent sends the collector) reads a copy of the
captured ``procfs-mlx-hfi`` tree, changed once in the middle of an epoch (sda reads 2048
more sectors, ``Cached`` grows 1024 kB). The run's workload events go to a real
``collector serve --backend victoriametrics=URL``. Checked: VictoriaMetrics holds the
agent's series under the names the backend's reader expects (``measurement_field``, the
agent's tags as labels, no ``db`` label from the agent's bucket), the collector's file
holds the events and none of the agent's samples, and ``collector report --backend``, the
read API behind ``collector report --collector URL`` and the dashboard's store all give the
epoch's 1 MiB read and 1 MiB of page cache. About 20 s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest

from collector.store import SqliteStore
from contract import schema
from contract.point import encode_lines
from tests.conftest import fixture_root
from tests.support.loopback import free_port, http_get, http_post
from tests.support.run_builder import RunBuilder
from tests.support.services import start, stop, wait_until

VICTORIA_METRICS = Path(shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not VICTORIA_METRICS.exists(), reason="Debian package victoria-metrics not installed"
    ),
]

S = 1_000_000_000
MIB = 1024 * 1024
HOST = "directhost"
RUN_ID = "directrun"
EPOCH_SECONDS = 4.0


def exported(vm_port: int, selector: str) -> list[dict]:
    http_get(vm_port, "/internal/force_flush")
    status, body = http_get(vm_port, "/api/v1/export?" + urlencode({"match[]": selector}))
    assert status == 200, body
    return [json.loads(line) for line in body.decode().splitlines() if line.strip()]


def bump_proc_files(proc: Path) -> None:
    """sda reads 2048 more sectors (1 MiB); meminfo's Cached grows by 1024 kB (1 MiB),
    each file replaced whole so that the agent never reads half of one."""
    diskstats = (proc / "diskstats").read_text().splitlines()
    for index, line in enumerate(diskstats):
        fields = line.split()
        if len(fields) > 5 and fields[2] == "sda":
            fields[5] = str(int(fields[5]) + 2048)
            diskstats[index] = " ".join(fields)
    meminfo = [
        f"Cached:         {int(line.split()[1]) + 1024} kB" if line.startswith("Cached:") else line
        for line in (proc / "meminfo").read_text().splitlines()
    ]
    for name, lines in (("diskstats", diskstats), ("meminfo", meminfo)):
        temporary = proc / f".{name}.new"
        temporary.write_text("\n".join(lines) + "\n")
        os.replace(temporary, proc / name)


@pytest.fixture(scope="module")
def direct(tmp_path_factory):
    env = dict(os.environ)
    repo = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), env.get("PYTHONPATH")]))
    work = tmp_path_factory.mktemp("vmdirect")
    source = fixture_root("procfs-mlx-hfi")
    proc = work / "proc"
    proc.mkdir()
    for name in ("stat", "meminfo", "diskstats"):
        shutil.copyfile(source / "proc" / name, proc / name)
    vm_port, collector_port = free_port(), free_port()
    vm_url = f"http://127.0.0.1:{vm_port}"
    config = work / "agent.toml"
    config.write_text(
        f'host = "{HOST}"\ninterval_seconds = 0.5\n'
        f'samplers = ["cpu", "memory", "disk", "infiniband"]\n'
        f'proc_root = "{proc}"\nsys_root = "{source / "sys"}"\n'
        f'[push]\nurl = "{vm_url}"\nspool_dir = "{work / "spool"}"\nbatch_seconds = 0.5\n'
        '[metrics]\nlisten = ""\n'
    )
    events = work / "events.sqlite"
    processes = []
    try:
        vm = start(
            [
                str(VICTORIA_METRICS),
                f"-storageDataPath={work / 'vm-data'}",
                f"-httpListenAddr=127.0.0.1:{vm_port}",
                "-search.latencyOffset=0",
                "-dedup.minScrapeInterval=1ms",
                "-loggerLevel=ERROR",
            ],
            work / "vm.log",
        )
        processes.append(vm)
        wait_until(lambda: http_get(vm_port, "/health")[0] == 200, "vm", vm, work / "vm.log")
        collector = start(
            [
                *(sys.executable, "-m", "collector", "serve", "--db", str(events)),
                *("--listen", f"127.0.0.1:{collector_port}"),
                *("--backend", f"victoriametrics={vm_url}"),
            ],
            work / "collector.log",
            env,
        )
        processes.append(collector)
        agent = start(
            [sys.executable, "-m", "agent", "run", "--config", str(config)], work / "agent.log", env
        )
        processes.append(agent)
        wait_until(
            lambda: http_get(collector_port, "/ping")[0] == 204,
            "collector",
            collector,
            work / "collector.log",
        )
        cached = f'memory_cached_bytes{{host="{HOST}"}}'
        wait_until(
            lambda: sum(len(s["values"]) for s in exported(vm_port, cached)) >= 2,
            "two of the agent's ticks in victoria-metrics",
            agent,
            work / "agent.log",
        )
        epoch_start = time.time_ns()
        time.sleep(EPOCH_SECONDS / 2)
        bump_proc_files(proc)
        time.sleep(EPOCH_SECONDS / 2)
        epoch_end = epoch_start + int(EPOCH_SECONDS * S)

        def pushed_after_end() -> bool:
            (series,) = exported(vm_port, cached)
            return max(series["timestamps"]) * 1_000_000 > epoch_end + S // 2

        wait_until(pushed_after_end, "a tick after the epoch", agent, work / "agent.log")
        run = RunBuilder(RUN_ID, hosts=(HOST,), t0_ns=epoch_start, write_samples=False)
        run.epoch(EPOCH_SECONDS, 600)
        status, reply = http_post(
            collector_port,
            "/api/v2/write?bucket=b&precision=ns",
            encode_lines(run.event_points()).encode(),
        )
        assert status == 204, reply
        yield {
            "vm_port": vm_port,
            "vm_url": vm_url,
            "collector_port": collector_port,
            "events": events,
            "env": env,
            "agent_log": work / "agent.log",
        }
    finally:
        for process in reversed(processes):
            stop(process)


def collector_cli(direct: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "collector", *args],
        env=direct["env"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def known_field(metric_name: str) -> bool:
    """Whether ``measurement_field`` names a field of the schema (either split)."""
    parts = metric_name.split("_")
    return any(
        schema.field_spec("_".join(parts[:k]), "_".join(parts[k:])) is not None
        for k in range(1, len(parts))
    )


def test_victoria_metrics_holds_the_agents_series_under_the_readers_names(direct):
    series = exported(direct["vm_port"], f'{{host="{HOST}"}}')
    names = {s["metric"]["__name__"] for s in series}
    assert {"memory_cached_bytes", "disk_read_bytes", "cpu_user_seconds"} <= names
    unknown = sorted(name for name in names if not known_field(name))
    assert unknown == [], unknown
    (sda,) = [
        s["metric"]
        for s in series
        if s["metric"]["__name__"] == "disk_read_bytes" and s["metric"].get("device") == "sda"
    ]
    assert sda["host"] == HOST and "db" not in sda  # the agent's bucket adds no label


def test_collector_keeps_the_events_and_none_of_the_agents_samples(direct):
    with SqliteStore(direct["events"]) as local:
        assert [run.run_id for run in local.runs()] == [RUN_ID]
        assert local.list_series("memory", "cached_bytes", HOST) == []


def check_row(row: dict) -> None:
    assert row["seconds"] == EPOCH_SECONDS and row["images"] == 600
    assert row["disk_read_bytes"] == MIB  # sda: 2048 sectors x 512 B inside the epoch
    assert row["page_cache_delta_bytes"] == MIB  # Cached +1024 kB
    assert row["ib_rcv_bytes"] == 0 and row["ib_xmit_bytes"] == 0  # constant counters


def test_collector_report_reads_both(direct):
    result = collector_cli(
        direct,
        "report",
        RUN_ID,
        "--format",
        "json",
        "--backend",
        f"victoriametrics={direct['vm_url']}",
        "--db",
        str(direct["events"]),
    )
    assert result.returncode == 0, result.stderr
    rows = {(row["host"], row["epoch"]): row for row in json.loads(result.stdout)["rows"]}
    check_row(rows[(HOST, 1)])


def test_read_api_reads_both(direct):
    """What ``collector report --collector URL`` and ``dashboard serve --collector URL``
    read: the collector answers from VictoriaMetrics though it never saw the samples."""
    status, reply = http_get(
        direct["collector_port"], f"/api/v1/report?run_id={RUN_ID}&format=json"
    )
    assert status == 200, reply
    rows = {(row["host"], row["epoch"]): row for row in json.loads(reply)["rows"]}
    check_row(rows[(HOST, 1)])


def test_dashboard_reads_both(direct):
    from collector.queries.query import epoch_table
    from collector.store.victoriametrics import VictoriaMetricsStore
    from dashboard.cli import build_parser, open_store

    args = build_parser().parse_args(
        [
            *("serve", "--backend", f"victoriametrics={direct['vm_url']}"),
            *("--db", str(direct["events"])),
        ]
    )
    store = open_store(args)
    assert isinstance(store, VictoriaMetricsStore)
    rows = epoch_table(store, RUN_ID)
    (row,) = [r for r in rows if r["host"] == HOST]
    assert row["disk_read_bytes"] == MIB and row["page_cache_delta_bytes"] == MIB
