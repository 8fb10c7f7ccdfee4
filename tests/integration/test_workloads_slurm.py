"""A rank inside a Slurm job names its job and step in ``run_start``.

The real thing, a rank started by ``srun`` inside a batch job of a real Slurm, is in
``tests/system/test_slurm_real.py``; here the environment is given to the writer.
"""

from __future__ import annotations

import os
import subprocess
import sys

from contract.schema import Event, Workload
from workloads.record.events import EventWriter, MemorySink, read_events_file, slurm_fields


def writer(environ: dict[str, str]) -> tuple[EventWriter, MemorySink]:
    sink = MemorySink()
    return EventWriter(sink, "run-1", 0, "pytorch", host="n01", environ=environ), sink


def test_run_start_carries_the_slurm_job_and_step():
    events, sink = writer({"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "HOME": "/x"})
    events.emit(Event.RUN_START, {Workload.MODEL: "resnet50"})
    events.emit(Event.EPOCH_START, {Workload.EPOCH: 1})
    start, epoch = sink.points
    assert start.fields == {
        "event": "run_start",
        "model": "resnet50",
        "slurm_job_id": "4242",
        "slurm_step_id": "0",
        "pid": os.getpid(),  # the rank's, to tell its processes from others on the host
    }
    assert "slurm_job_id" not in epoch.fields  # once per run, not on every event
    assert start.tags == {"host": "n01", "run_id": "run-1", "rank": "0", "framework": "pytorch"}


def test_outside_slurm_no_field_and_a_batch_script_has_no_step():
    assert slurm_fields({}) == {}
    assert slurm_fields({"SLURM_JOB_ID": "77"}) == {"slurm_job_id": "77"}
    assert slurm_fields({"SLURM_JOB_ID": " ", "SLURM_STEP_ID": ""}) == {}
    events, sink = writer({})
    events.emit(Event.RUN_START, {})
    assert sink.points[0].fields == {"event": "run_start", "pid": os.getpid()}


def test_a_field_the_caller_gives_wins():
    events, sink = writer({"SLURM_JOB_ID": "1"})
    events.emit(Event.RUN_START, {Workload.SLURM_JOB_ID: "2"})
    assert sink.points[0].fields["slurm_job_id"] == "2"


def test_a_rank_process_reads_its_own_environment(tmp_path, repo_env):
    """A separate process with SLURM_* in its real environment (as srun sets it)."""
    path = tmp_path / "events.jsonl"
    code = (
        "import sys; from pathlib import Path\n"
        "from contract.schema import Event\n"
        "from workloads.record.events import EventWriter, FileSink\n"
        "w = EventWriter(FileSink(Path(sys.argv[1])), 'r', 3, 'tensorflow')\n"
        "w.emit(Event.RUN_START, {}); w.close()\n"
    )
    env = {**repo_env, "SLURM_JOB_ID": "918273", "SLURM_STEP_ID": "2"}
    env.pop("EPOCHSCOPE_AGENT_PORT", None)
    subprocess.run([sys.executable, "-c", code, str(path)], env=env, check=True, timeout=60)
    (point,) = read_events_file(path)
    assert point.fields["slurm_job_id"] == "918273" and point.fields["slurm_step_id"] == "2"
    assert os.environ.get("SLURM_JOB_ID") != "918273"  # the test's own is untouched
