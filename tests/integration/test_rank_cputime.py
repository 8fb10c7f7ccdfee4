"""Each rank's own CPU seconds per epoch (``workloads.record.cputime``): the rank and its
data loaders, read from the live /proc with real child processes that spin."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from contract import procfs
from contract.schema import Event, Workload
from workloads.record.cputime import ProcessTreeCpu
from workloads.record.events import EventWriter, MemorySink
from workloads.record.timing import Recorder

SPIN_FOR = "import time\nend = time.process_time() + float(__import__('sys').argv[1])\n" + (
    "while time.process_time() < end: pass\n"
)


def test_parse_stat_ticks_adds_own_and_reaped_children_time():
    line = "42 (a (b) c) S 7 42 42 0 -1 4194560 100 0 0 0 300 40 25 5 20 0 1 0 99 1 1\n"
    stat = procfs.parse_stat(line)
    assert stat.ticks + stat.children_ticks == 300 + 40 + 25 + 5


def test_the_tree_counts_live_children_and_reaped_ones():
    tree = ProcessTreeCpu()
    before = tree()
    assert before is not None
    child = subprocess.Popen([sys.executable, "-c", SPIN_FOR, "1.2"])
    time.sleep(0.8)  # a loaded machine may give it little of that; it started python at least
    while_alive = tree()  # the child is counted while it runs
    assert child.poll() is None
    child.wait()  # reaped: its time moves into our cstime
    after = tree()
    assert while_alive is not None and after is not None
    assert while_alive - before > 0.05
    assert 1.2 <= after - before < 4.0  # its 1.2 s plus our own reading and waiting
    assert after >= while_alive


def test_epoch_end_carries_the_ranks_cpu_seconds_and_run_start_its_pid():
    sink = MemorySink()
    writer = EventWriter(sink, "r", 0, "pytorch", host="h", clock_ns=lambda: 0)
    recorder = Recorder(writer, batch_size=4, warmup_steps=0, read_io=lambda: None)
    recorder.run_start({})
    recorder.epoch_start(1)
    subprocess.run([sys.executable, "-c", SPIN_FOR, "0.4"], check=True)  # a loader's work
    recorder.step_done(1.0)
    recorder.epoch_end()
    start, *_, end = [point.fields for point in sink.points]
    assert start[Workload.EVENT] == Event.RUN_START
    assert start[Workload.PID] == os.getpid()
    assert end[Workload.EVENT] == Event.EPOCH_END
    assert 0.4 <= end[Workload.CPU_SECONDS] < 3.0
