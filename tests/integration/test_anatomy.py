"""The step anatomy: four parts that add up to the step, overlap counted once, and the
rank's own reads from the real /proc."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contract import procfs
from contract.schema import Workload
from workloads.record.anatomy import (
    ProcessIo,
    ProcessTreeIo,
    StepMarks,
    covered,
    descendants,
    split_step,
)
from workloads.record.events import EventWriter, MemorySink
from workloads.record.timing import Recorder

PARTS = (
    Workload.INPUT_WAIT_SECONDS,
    Workload.COMPUTE_SECONDS,
    Workload.COMMUNICATION_SECONDS,
    Workload.OTHER_STEP_SECONDS,
)


def test_a_step_splits_at_its_marks():
    marks = StepMarks(input_ready=10.5, compute_done=12.0, communication_done=12.75)
    marks.communication = [(11.0, 11.5), (11.25, 12.5)]  # 11.0..12.0 inside compute
    parts = split_step(10.0, 13.0, marks)
    assert parts is not None
    assert (parts.input_wait, parts.compute, parts.communication, parts.other) == (
        0.5,
        1.5,
        0.75,
        0.25,
    )
    assert parts.overlap == 1.0
    assert parts.total == 3.0


def test_one_process_has_no_communication_and_no_marks_no_anatomy():
    parts = split_step(0.0, 2.0, StepMarks(input_ready=0.5, compute_done=1.5))
    assert parts is not None
    assert (parts.input_wait, parts.compute, parts.communication, parts.other) == (
        0.5,
        1.0,
        0.0,
        0.5,
    )
    assert split_step(0.0, 2.0, StepMarks()) is None
    # only the all-reduce end: compute runs up to it
    only_end = split_step(0.0, 2.0, StepMarks(input_ready=0.5, communication_done=1.5))
    assert only_end is not None and (only_end.compute, only_end.communication) == (1.0, 0.0)


def test_time_before_the_batch_is_asked_for_is_not_input_wait():
    # TensorFlow's first step: tracing until 1.0, then the compiled step asks for its batch
    marks = StepMarks(input_requested=1.0, input_ready=1.5, compute_done=3.0)
    parts = split_step(0.0, 4.0, marks)
    assert parts is not None
    assert (parts.input_wait, parts.compute, parts.communication, parts.other) == (
        0.5,
        1.5,
        0.0,
        2.0,
    )
    assert parts.overlap is None  # no all-reduce timed one by one: not measured, not 0


def test_marks_out_of_order_are_clamped_never_negative():
    marks = StepMarks(input_ready=-1.0, compute_done=5.0, communication_done=4.0)
    parts = split_step(0.0, 3.0, marks)
    assert parts is not None
    assert (parts.input_wait, parts.compute, parts.communication, parts.other) == (
        0.0,
        3.0,
        0.0,
        0.0,
    )


def test_covered_is_the_union_inside_the_window():
    assert covered([(0, 2), (1, 3), (5, 6)], 1, 5.5) == 2.5
    assert covered([], 0, 1) == 0.0
    assert covered([(2, 3)], 0, 1) == 0.0


times = st.floats(min_value=0.0, max_value=1e5, allow_nan=False)


@given(
    start=times,
    length=st.floats(min_value=0.0, max_value=100.0),
    requested=st.none() | times,
    ready=st.none() | times,
    computed=st.none() | times,
    communicated=st.none() | times,
)
def test_the_four_parts_always_add_up_to_the_step(
    start, length, requested, ready, computed, communicated
):
    end = start + length
    marks = StepMarks(ready, requested, computed, communicated)
    parts = split_step(start, end, marks)
    if ready is None:
        assert parts is None
        return
    assert parts is not None
    for value in (parts.input_wait, parts.compute, parts.communication, parts.other):
        assert value >= 0.0
    assert math.isclose(parts.total, end - start, rel_tol=1e-9, abs_tol=1e-6)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_recorder_writes_each_steps_parts_and_the_epochs_sums():
    sink = MemorySink()
    writer = EventWriter(sink, "r", 0, "pytorch", host="h", clock_ns=lambda: 0)
    clock = Clock()
    reads = iter([ProcessIo(rchar=1000, read_bytes=100), ProcessIo(rchar=6000, read_bytes=2100)])
    recorder = Recorder(
        writer, batch_size=4, warmup_steps=1, step_every=1, clock=clock, read_io=lambda: next(reads)
    )
    recorder.epoch_start(1)
    for step in range(3):
        base = clock.now
        recorder.input_ready(base + 0.25 * (step + 1))  # input wait 0.25, 0.5, 0.75
        recorder.compute_done(base + 1.0)
        recorder.add_communication(base + 0.9, base + 1.2)
        recorder.communication_done(base + 1.2)
        clock.now = base + 1.5
        recorder.step_done(1.0)
    recorder.epoch_end(loss=1.0)
    events = [p.fields for p in sink.points]
    steps = [e for e in events if e["event"] == "step"]
    assert [s[Workload.INPUT_WAIT_SECONDS] for s in steps] == [0.5, 0.75]  # warm-up step 1
    for fields in steps:
        assert math.isclose(sum(fields[p] for p in PARTS), fields[Workload.SECONDS])
        assert math.isclose(fields[Workload.OVERLAP_SECONDS], 0.1)
    end = events[-1]
    assert end["event"] == "epoch_end"
    # sums over all three steps, warm-up included, like ``seconds``
    assert math.isclose(end[Workload.INPUT_WAIT_SECONDS], 1.5)
    assert math.isclose(end[Workload.COMPUTE_SECONDS], 3.0 - 1.5)
    assert math.isclose(end[Workload.COMMUNICATION_SECONDS], 0.6)
    assert math.isclose(end[Workload.OTHER_STEP_SECONDS], 0.9)
    assert math.isclose(sum(end[p] for p in PARTS), end[Workload.SECONDS])
    # AU's input wait: the timed steps' only (2 and 3, after the one warm-up step)
    assert math.isclose(end[Workload.TIMED_INPUT_WAIT_SECONDS], 0.5 + 0.75)
    assert math.isclose(end[Workload.TIMED_SECONDS], 3.0)
    assert (end[Workload.PROCESS_READ_BYTES], end[Workload.PROCESS_RCHAR_BYTES]) == (2000, 5000)
    assert isinstance(end[Workload.PROCESS_READ_BYTES], int)


def test_a_loop_that_marks_nothing_writes_no_anatomy():
    sink = MemorySink()
    writer = EventWriter(sink, "r", 0, "pytorch", host="h", clock_ns=lambda: 0)
    recorder = Recorder(writer, batch_size=4, warmup_steps=0, step_every=1, read_io=lambda: None)
    recorder.epoch_start(1)
    recorder.step_done(1.0)
    recorder.epoch_end()
    for point in sink.points:
        assert Workload.INPUT_WAIT_SECONDS not in point.fields
        assert Workload.PROCESS_READ_BYTES not in point.fields


def test_parse_proc_io_and_stat():
    text = (
        "rchar: 4096\nwchar: 10\nsyscr: 3\nsyscw: 1\nread_bytes: 512\n"
        "write_bytes: 0\ncancelled_write_bytes: 0\n"
    )
    io = procfs.parse_io(text)
    assert ProcessIo(io.rchar, io.read_bytes) == ProcessIo(rchar=4096, read_bytes=512)
    line = "42 (a (weird) name) S 7 42 42 0 -1 4194560 1 0 0 0 3 1 0 0 20 0 1 0 9876 0 0"
    assert procfs.parse_stat(line).ppid == 7


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux /proc/<pid>/io")
def test_the_tree_counts_a_child_process_reads(tmp_path):
    data = tmp_path / "blob"
    data.write_bytes(os.urandom(3_000_000))
    process_tree_io = ProcessTreeIo()
    before = process_tree_io()
    assert before is not None
    # a child that reads the file and stays alive until told: its own /proc/<pid>/io counts
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; open(sys.argv[1], 'rb').read(); print('read', flush=True); "
            "sys.stdin.readline()",
            str(data),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "read"
        assert child.pid in descendants(os.getpid())
        during = process_tree_io()
        assert during is not None
        assert (during - before).rchar >= 3_000_000
    finally:
        child.stdin.write("\n")
        child.stdin.flush()
        child.wait(timeout=60)
    # reaped: the kernel has moved its counts into ours, nothing is lost
    deadline = time.monotonic() + 5
    after = process_tree_io()
    while after is not None and (after - before).rchar < 3_000_000 and time.monotonic() < deadline:
        time.sleep(0.05)
        after = process_tree_io()
    assert after is not None and (after - before).rchar >= 3_000_000


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux /proc/<pid>/io")
def test_the_readers_own_proc_scans_are_not_counted():
    reader = ProcessTreeIo()
    first = reader()
    for _ in range(5):
        reader()
    last = reader()
    assert first is not None and last is not None
    assert last.rchar - first.rchar < 5_000  # a scan of /proc would be ~100 kB each


def test_step_shares_pool_a_hosts_ranks_per_step_number():
    from collector.analysis.anatomy import step_shares
    from collector.store.api import StepTable

    nan = math.nan
    table = StepTable.from_columns(
        ["a", "a", "a", "b", "a"],
        [0, 1, 0, 2, 1],
        [10, 12, 20, 11, 30],
        images=[8] * 5,
        seconds=[1.0, 3.0, 2.0, 2.0, 0.0],
        epoch=[1, 1, 1, 1, 1],
        step=[5, 5, nan, 5, 6],  # no number: a point of its own; no seconds: left out
        input_wait=[0.5, 0.5, 0.2, 1.0, 0.0],
        compute=[0.5, 1.5, 1.8, 1.0, 0.0],
        communication=[0.0, 1.0, nan, 0.0, 0.0],
    )
    shares = step_shares(table)
    first, alone = shares["a"]
    # step 5 on a: (0.5 + 0.5) / (1 + 3) input wait, (0.5 + 1.5) / 4 compute
    assert (first["step"], first["time_ns"], first["steps"]) == (5, 12, 1)
    assert (first["input_wait_percent"], first["compute_percent"]) == (25.0, 50.0)
    assert first["communication_percent"] == 25.0
    assert [r["rank"] for r in first["ranks"]] == [0, 1]
    assert first["ranks"][0]["input_wait_percent"] == 50.0
    assert alone["step"] is None and alone["input_wait_percent"] == 10.0
    assert alone["communication_percent"] is None  # not measured: no number, never 0
    assert shares["b"][0]["input_wait_percent"] == 50.0
