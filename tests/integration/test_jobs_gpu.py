"""GPUs per Slurm job: NVML's processes -> pid -> the job's cgroup -> the job's GPU use.

This machine has no GPU, so NVML is mocked (tests/support/fake_nvml.py; the pids, memory and SM
shares NVML answers are made up, as no capture holds processes). The pid -> job join is
real: ``/proc/<pid>/cgroup`` of the captured Slurm node (cgroup v2, job 4:
../shared/fixtures/cgroups/cgroup-exporter-slurm) and of live processes this test puts in
real cgroup v1 job directories (``/sys/fs/cgroup/freezer/slurm_<node>/uid_0/job_<id>/
step_0/task_0``, the layout Slurm's proctrack makes; in the freezer hierarchy so that the
jobs sampler of a real-Slurm test running beside this one does not take them for jobs).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import agent.samplers.gpu as gpu_module
from agent.samplers import make_sampler
from agent.samplers.base import Roots
from agent.samplers.jobs import job_of_cgroup_path, parse_proc_cgroup_job
from collector.analysis.jobs import job_gpu_use, job_report
from collector.store.api import SeriesData, SeriesInfo
from collector.views.jobs import job_row, node_row
from contract.point import Point
from contract.schema import GpuProcess, Tag
from tests.integration.test_sampler_jobs import TREE
from tests.support.fake_nvml import H100_LOAD, MIB, FakeNvml
from tests.support.run_builder import RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

FREEZER = Path("/sys/fs/cgroup/freezer")
H100_B = {**H100_LOAD, "uuid": "GPU-11111111-1111-1111-1111-111111111111"}


@pytest.fixture(autouse=True)
def _close_samplers(monkeypatch):
    made = []
    original = gpu_module.GpuSampler.available

    def tracked(self):
        made.append(self)
        return original(self)

    monkeypatch.setattr(gpu_module.GpuSampler, "available", tracked)
    yield
    for sampler in made:
        sampler.close()


def gpu_sampler(fake: FakeNvml, monkeypatch, proc: Path) -> gpu_module.GpuSampler:
    fake.install(monkeypatch)
    sampler = make_sampler("gpu", Roots(proc=proc))
    assert sampler.available()
    return sampler


def processes(points: list[Point]) -> dict[str, Point]:
    return {p.tags[Tag.PID]: p for p in points if p.measurement == GpuProcess.NAME}


def test_the_job_of_a_cgroup_path():
    assert job_of_cgroup_path("/slurm_node7/uid_1000/job_118/step_0/task_0") == "118"
    assert job_of_cgroup_path("/system.slice/n1_slurmstepd.scope/job_4/step_0/user") == "4"
    assert job_of_cgroup_path("/slurm/uid_5/job_0A1B2C3D4E5F/step_batch") == "0A1B2C3D4E5F"
    assert job_of_cgroup_path("/user.slice/job_7") is None  # not under Slurm's own levels
    assert job_of_cgroup_path("/") is None
    # the captured node's processes (cgroup v2): one in job 4, one in a login session
    assert parse_proc_cgroup_job((TREE / "proc/49276/cgroup").read_text()) == "4"
    assert parse_proc_cgroup_job((TREE / "proc/67998/cgroup").read_text()) is None
    assert parse_proc_cgroup_job((TREE / "proc/43310/cgroup").read_text()) is None


def test_gpu_processes_of_the_captured_node_are_tagged_with_their_job(monkeypatch):
    gpu = {
        **H100_LOAD,
        "processes": [(49276, 8192 * MIB), (67998, 1024 * MIB)],
        # 49276 also holds a graphics context: listed twice by NVML, counted once
        "graphics_processes": [(49276, 8192 * MIB), (43310, 512 * MIB)],
    }
    sampler = gpu_sampler(FakeNvml([gpu]), monkeypatch, TREE / "proc")
    found = processes(sampler.sample(1))
    assert sorted(found) == ["43310", "49276", "67998"]
    assert found["49276"].tags[Tag.JOB_ID] == "4"
    assert found["49276"].fields == {GpuProcess.MEMORY_USED_BYTES: 8192.0 * MIB}
    assert Tag.JOB_ID not in found["67998"].tags and Tag.JOB_ID not in found["43310"].tags
    assert found["43310"].fields == {GpuProcess.MEMORY_USED_BYTES: 512.0 * MIB}


@pytest.fixture
def live_jobs() -> Iterator[dict[str, int]]:
    """Two live processes, each in a real v1 cgroup job directory: job id -> pid."""
    if not os.access(FREEZER, os.W_OK):
        pytest.skip("needs root and the cgroup v1 freezer hierarchy")
    node = FREEZER / f"slurm_esgpu{os.getpid()}"
    made: list[Path] = []
    children: list[subprocess.Popen] = []
    jobs: dict[str, int] = {}
    try:
        for job_id in ("9101", "9102"):
            task = node / "uid_0" / f"job_{job_id}" / "step_0" / "task_0"
            task.mkdir(parents=True)
            made += [task, task.parent, task.parent.parent]
            child = subprocess.Popen(["sleep", "120"])
            children.append(child)
            (task / "cgroup.procs").write_text(f"{child.pid}\n")
            jobs[job_id] = child.pid
        made += [node / "uid_0", node]
        yield jobs
    finally:
        for child in children:
            child.kill()
            child.wait()
        for directory in made:
            if directory.is_dir():
                directory.rmdir()


def test_live_job_processes_on_gpus_give_each_job_its_gpu_use(monkeypatch, live_jobs, make_store):
    """Job 9101 was given GPUs 0 and 1 and runs on GPU 0; job 9102 (given no GPU list)
    runs a process on GPU 1. GPU 1 is therefore idle for 9101: the other job's process
    there is not 9101's."""
    first, second = live_jobs["9101"], live_jobs["9102"]
    gpus = [
        {**H100_LOAD, "processes": [(first, 10_000 * MIB)],
         "process_samples": [(first, 1_000_000, 60, 10)]},
        {**H100_B, "processes": [(second, 2_000 * MIB)],
         "process_samples": [(second, 1_000_000, 30, 5)]},
    ]  # fmt: skip
    sampler = gpu_sampler(FakeNvml(gpus), monkeypatch, Path("/proc"))
    found = processes(sampler.sample(1))
    assert found[str(first)].tags[Tag.JOB_ID] == "9101"
    assert found[str(second)].tags[Tag.JOB_ID] == "9102"
    assert found[str(first)].fields[GpuProcess.SM_UTILIZATION_PERCENT] == 60.0

    # The collector: these readings at every tick of the two jobs' life on node n1.
    run = RunBuilder("run-g", hosts=("n1",), ranks_per_host=1)
    run.epoch(10, 640)
    run.job("9101", seconds=10, gpus=("0", "1"))
    run.job("9102", seconds=10)
    times = run.job_times(run.jobs[0], "n1").tolist()
    gpu_points = [
        Point(p.measurement, {Tag.HOST: "n1", **p.tags}, dict(p.fields), t)
        for t in times
        for p in found.values()
    ]
    store = make_store(run.job_points() + gpu_points)
    report = job_report(store, "9101")
    assert report is not None
    (node,) = report.nodes
    assert node.gpu_memory_peak_bytes == 10_000 * MIB
    assert node.gpu_process_sm_percent == 30.0  # 60% on GPU 0, none on GPU 1
    assert node.gpus_without_process == ("1",)
    row = job_row(report)
    assert row["gpu_memory_peak_bytes"] == 10_000 * MIB
    assert row["gpu_process_sm_percent"] == 30.0
    other = job_report(store, "9102")
    assert other is not None
    assert node_row(other.nodes[0])["gpu_memory_peak_bytes"] == 2_000 * MIB
    assert other.gpu_process_sm_percent == 30.0  # its one GPU, 30%


def test_job_gpu_use_sums_processes_of_one_reading_per_device():
    def series(pid: str, uuid: str, times: list[int], values: list[float]) -> SeriesData:
        info = SeriesInfo(0, GpuProcess.NAME, "n1", GpuProcess.MEMORY_USED_BYTES,
                          {Tag.UUID: uuid, Tag.PID: pid})  # fmt: skip
        return SeriesData(info, np.array(times, dtype=np.int64), np.array(values))

    # two ranks on GPU a (peaks at different readings), one on GPU b
    memory = [
        series("1", "a", [10, 20], [4.0, 6.0]),
        series("2", "a", [10, 20], [5.0, 1.0]),
        series("3", "b", [12, 22], [3.0, float("nan")]),
    ]
    peak, share = job_gpu_use(memory, memory, gpus=4)
    assert peak == 9.0 + 3.0  # GPU a: max(4+5, 6+1); GPU b: 3
    assert share == (8.0 + 3.0) / 4  # means 8 and 3, over the 4 GPUs it was given
    assert job_gpu_use([], [], gpus=2) == (None, None)
