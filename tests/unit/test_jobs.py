"""`collector jobs` and `collector job JOBID` over stored synthetic job series
(collector.analysis.jobs, collector.findings.jobs, collector.views.jobs).

Two jobs written by ``RunBuilder.job`` (the jobs sampler's ``job`` and ``slurm_job``
series, a sample every second from the job's start to its end):

- job 101, the run's own (its ``run_start`` names it), on n1 and n2 for 20 s: 8 CPUs per
  node, 2 of them busy; memory peak 2 GB of a 16 GB limit; process reads 1 MB/s; GPUs 0
  and 1 on each node, a process on GPU 0 only; the run's GPUs at 80% busy;
- job 102 on n1 alone, from 5 s to 15 s: 2 CPUs, 1.5 busy; 3 GB of 4 GB; user bob.

Worked out by hand: a node's elapsed is the seen span (20 s) plus one interval (1 s) =
21 s; job 101's CPU efficiency is (2 x 40 CPU s) / (2 nodes x 8 CPUs x 21 s) = 80/336; the
GPUs' mean busy is 78% (80% for 19 s, then falling linearly to 0 over the last second as
the run ends at the job's last sample: (19 x 80 + 40) / 20).
"""

from __future__ import annotations

import csv
import io
import json

import pytest

from collector.analysis.jobs import cpu_efficiency, elapsed_seconds, job_report
from collector.api.client import query_of
from collector.api.server import command_argv
from collector.arguments import build_parser
from collector.findings.jobs import JOB_CPU_EFFICIENCY_FLOOR, JOB_MEMORY_USE_FLOOR
from collector.views.jobs import JOB_KEYS, NODE_KEYS
from collector.views.printers import render
from contract.point import Point
from tests.support.run_builder import NS, RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture


def two_jobs() -> RunBuilder:
    run = RunBuilder("run-a", hosts=("n1", "n2"), ranks_per_host=2)
    run.epoch(10, 640, gpu_util=80.0).epoch(10, 640, gpu_util=80.0)
    run.job("101", seconds=20, cpus=8, cpus_busy=2.0, memory_limit_bytes=16e9,
            memory_peak_bytes=2e9, read_bytes_per_s=1e6, refault_bytes_per_s=0.5e6,
            gpus=("0", "1"), gpu_processes=("0",), of_run=True)  # fmt: skip
    run.job("102", hosts=("n1",), start_s=5, seconds=10, cpus=2, cpus_busy=1.5,
            memory_limit_bytes=4e9, memory_peak_bytes=3e9, user="bob", uid="1001",
            account=None, partition="cpu")  # fmt: skip
    return run


def cli(store, *argv: str) -> str:
    return render(build_parser().parse_args(list(argv)), store)


def test_the_numbers_are_defined_once():
    assert elapsed_seconds(0, 20 * NS, 1.0) == 21.0
    assert elapsed_seconds(0, 0, None) is None  # one sample: no interval
    assert cpu_efficiency(80.0, 336.0) == pytest.approx(0.238095, abs=1e-6)
    assert cpu_efficiency(1.0, 0.0) is None and cpu_efficiency(None, 4.0) is None


def test_jobs_json_has_every_number_exactly(make_store):
    store = make_store(two_jobs().points())
    rows = json.loads(cli(store, "jobs", "--format", "json"))
    assert [r["job_id"] for r in rows] == ["102", "101"]  # newest first
    assert all(list(row) == list(JOB_KEYS) for row in rows)
    new, old = rows
    assert old == {
        "job_id": "101",
        "user": "alice",
        "account": "proj",
        "partition": "gpu",
        "nodes": ["n1", "n2"],
        "start": "2023-11-14T22:13:20.000Z",
        "end": "2023-11-14T22:13:40.000Z",
        "elapsed_seconds": 21.0,
        "cpu_seconds": 80.0,
        "allocated_cpus": 16.0,
        "allocated_cpu_seconds": 336.0,
        "cpu_efficiency": 0.2381,
        "memory_peak_bytes": 2e9,
        "allocated_memory_bytes": 16e9,
        "memory_use_fraction": 0.125,
        "block_read_bytes": None,  # v1 Slurm: no blkio cgroup
        "block_write_bytes": None,
        "process_read_bytes": 40e6,
        "process_write_bytes": 0.0,
        "file_refault_bytes": 20e6,  # 0.5 MB/s for 20 s on each of 2 nodes
        "allocated_gpus": 4.0,
        "gpus": ["0", "1", "0", "1"],
        "gpu_util_percent": 78.0,
        "gpu_memory_peak_bytes": 2e9,  # 1 GB on GPU 0 of each node, the job's own process
        "gpu_process_sm_percent": None,  # no SM share sampled
        "runs": ["run-a"],
    }
    assert new["user"] == "bob" and new["account"] is None and new["nodes"] == ["n1"]
    assert new["start"] == "2023-11-14T22:13:25.000Z"
    assert (new["elapsed_seconds"], new["cpu_seconds"], new["allocated_cpu_seconds"]) == (
        11.0,
        15.0,
        22.0,
    )
    assert new["cpu_efficiency"] == 0.6818 and new["memory_use_fraction"] == 0.75
    assert new["allocated_gpus"] is None and new["gpu_util_percent"] is None
    assert new["runs"] == []


def test_jobs_table_and_csv(make_store):
    store = make_store(two_jobs().points())
    table = cli(store, "jobs")
    line = next(line for line in table.splitlines() if " 101 " in line)
    for cell in ("alice", "n1, n2", "0:00:21", "80.0", "23.8%", "2.0 GB", "16.0 GB", "12.5%",
                 "read 40.0 MB, write 0 B, refaults 20.0 MB", "4 (78.0% busy)",
                 "run-a"):  # fmt: skip
        assert cell in line, (cell, line)
    rows = list(csv.DictReader(io.StringIO(cli(store, "jobs", "--format", "csv"))))
    assert [r["job_id"] for r in rows] == ["102", "101"]
    assert rows[1]["nodes"] == "n1 n2" and rows[1]["block_read_bytes"] == ""


def test_one_job_per_node_with_its_neighbour_findings_and_run(make_store):
    store = make_store(two_jobs().points())
    view = json.loads(cli(store, "job", "101", "--format", "json"))
    assert [n["host"] for n in view["nodes"]] == ["n1", "n2"]
    n1 = view["nodes"][0]
    assert all(list(node) == list(NODE_KEYS) for node in view["nodes"])
    assert (n1["samples"], n1["interval_seconds"], n1["elapsed_seconds"]) == (21, 1.0, 21.0)
    assert (n1["cpu_seconds"], n1["allocated_cpu_seconds"]) == (40.0, 168.0)
    assert n1["gpus_without_process"] == ["1"] and n1["gpu_util_percent"] == 78.0
    assert view["neighbours"] == [
        {
            "job_id": "102",
            "host": "n1",
            "user": "bob",
            "overlap_seconds": 10.0,
            "cpu_seconds": 15.0,
        }
    ]
    findings = {f["rule"]: f for f in view["findings"]}
    assert list(findings) == [
        "job_gpus_idle",
        "job_cpus_unused",
        "job_memory_overrequested",
        "job_shared_node",
    ]
    assert findings["job_gpus_idle"]["evidence"] == {
        "job_id": "101",
        "allocated_gpus": 4,
        "idle_gpus": 2,
        "gpus_by_host": {"n1": ["1"], "n2": ["1"]},
        "gpu_util_percent": 78.0,
    }
    assert findings["job_gpus_idle"]["title"] == "2 of 4 allocated GPUs ran no process"
    cpu = findings["job_cpus_unused"]["evidence"]
    assert cpu["cpu_efficiency_fraction"] == 0.2381
    assert cpu["floor_fraction"] == JOB_CPU_EFFICIENCY_FLOOR
    assert cpu["allocated_cpu_seconds"] == 336.0 and cpu["cpu_seconds"] == 80.0
    memory = findings["job_memory_overrequested"]["evidence"]
    assert memory["memory_use_fraction"] == 0.125
    assert memory["floor_fraction"] == JOB_MEMORY_USE_FLOOR
    shared = findings["job_shared_node"]["evidence"]
    assert shared["other_jobs"] == ["102"] and shared["hosts"] == ["n1"]
    assert shared["cpu_seconds_by_job"] == {"102": 15.0} and shared["other_cpus_mean"] == 1.5
    assert [run["run_id"] for run in view["runs"]] == ["run-a"]
    epochs = [row for row in view["runs"][0]["rows"] if row["host"] == "*"]
    assert [row["epoch"] for row in epochs] == [1, 2]
    assert epochs[0]["images_per_second"] == 256.0  # 4 ranks x 640 images / 10 s

    other = json.loads(cli(store, "job", "102", "--format", "json"))
    assert [f["rule"] for f in other["findings"]] == ["job_shared_node"]  # 68%, 75%: fine
    assert other["neighbours"][0]["cpu_seconds"] == 20.0  # 101 on n1 from 5 s to 15 s
    assert other["runs"] == []


def test_job_table_names_nodes_neighbours_findings_and_the_runs_table(make_store):
    text = cli(make_store(two_jobs().points()), "job", "101")
    assert "job 101 user alice, account proj, partition gpu" in text
    assert "all nodes" in text  # two nodes: their total row
    assert "beside job 102 (bob) on n1 for 10 s: it used 15.0 CPU seconds" in text
    assert "WARNING 2 of 4 allocated GPUs ran no process" in text
    assert "run run-a: per epoch, per host" in text
    nodes = list(csv.DictReader(io.StringIO(cli(make_store(two_jobs().points()), "job",
                                                "101", "--format", "csv"))))  # fmt: skip
    assert [n["host"] for n in nodes] == ["n1", "n2"] and nodes[0]["gpus_without_process"] == "1"


def test_the_summary_is_compact_json_of_the_same_numbers(make_store):
    store = make_store(two_jobs().points())
    text = cli(store, "job", "101", "--summary")
    assert text.endswith("\n") and text.count("\n") == 1 and " " not in text.split('"title"')[0]
    assert len(text.encode()) < 4096
    summary = json.loads(text)
    assert summary["job_id"] == "101" and summary["nodes"] == ["n1", "n2"]
    assert (summary["elapsed_s"], summary["cpus"], summary["cpu_s"]) == (21.0, 16.0, 80.0)
    assert summary["cpu_eff"] == 0.238 and summary["mem_frac"] == 0.125
    assert summary["io"] == {"process_read": 40e6, "process_write": 0.0, "file_refault": 20e6}
    assert summary["runs"] == [{"run_id": "run-a", "images_per_second": 256.0}]
    assert summary["findings"][0]["rule"] == "job_gpus_idle"
    assert "account" not in json.loads(cli(store, "job", "102", "--summary"))


def test_a_summary_of_a_job_on_many_nodes_stays_small(make_store):
    hosts = tuple(f"node{i:04d}" for i in range(200))
    run = RunBuilder("big", hosts=hosts[:1]).epoch(2, 64)
    run.job("9", hosts=hosts, seconds=2)
    summary = cli(make_store(run.job_points()), "job", "9", "--summary")
    assert len(summary.encode()) < 4096
    assert json.loads(summary)["nodes_left_out"] == 200 - 32


def test_a_job_nobody_sampled(make_store):
    store = make_store(two_jobs().points())
    assert job_report(store, "999") is None
    from collector.views.errors import CliError

    with pytest.raises(CliError, match="no job '999'"):
        cli(store, "job", "999")
    assert "no Slurm jobs seen yet" in cli(make_store(RunBuilder("x").epoch(1, 8).points()), "jobs")


def test_job_labels_that_come_later_are_kept(make_store):
    """The sampler leaves out labels it cannot read yet (no job process environment): a job's
    info series then changes its tags; the newest tags are the job's."""
    run = RunBuilder("r").job("7", seconds=4, user="carol", partition="debug")
    points = run.job_points()
    for i, point in enumerate(points[:4]):  # the first two ticks: slurm_job without user
        tags = {k: v for k, v in point.tags.items() if k not in ("user", "partition")}
        points[i] = Point(point.measurement, tags, point.fields, point.time_ns)
    view = json.loads(cli(make_store(points), "job", "7", "--format", "json"))
    assert view["job"]["user"] == "carol" and view["job"]["partition"] == "debug"
    assert view["nodes"][0]["samples"] == 5 and view["job"]["elapsed_seconds"] == 5.0


def test_the_read_api_takes_the_job_view_options():
    args = build_parser().parse_args(["job", "101", "--summary", "--collector", "http://x"])
    query = query_of(args)
    assert query == {"format": "table", "job_id": "101", "summary": "true"}
    argv = command_argv("job", {name: [value] for name, value in query.items()})
    assert argv == ["job", "101", "--format=table", "--summary"]  # values never options
    assert command_argv("jobs", {}) == ["jobs", "--format=json"]
    for bad in ("", "--db=/x", "1;2"):
        with pytest.raises(ValueError, match="job_id"):
            command_argv("job", {"job_id": [bad]})
