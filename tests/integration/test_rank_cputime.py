"""Each rank's own CPU seconds per epoch (``workloads.record.cputime``): the rank and its
data loaders, read from the live /proc with real child processes that spin."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from contract import procfs
from contract.schema import Event, Workload
from tests.support import real_runs
from workloads.record.cputime import ProcessTreeCpu, TreeThrottling, throttling_fields
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


# a loader that moves itself into the quota group given, then spins for the seconds given
SPIN_IN_GROUP = (
    "import pathlib, sys, time\n"
    "(pathlib.Path(sys.argv[1]) / 'tasks').write_text(str(__import__('os').getpid()))\n"
    "end = time.monotonic() + float(sys.argv[2])\n"
    "while time.monotonic() < end: pass\n"
)


def test_a_loader_held_to_its_quota_is_seen_throttled_over_the_epoch():
    """A real cgroup v1 CPU group of 0.25 CPUs holding one spinning child (a loader pool put
    in a group of its own, as the findings bench's decode-quota case does): the epoch's
    fields name that group's quota and a throttled share near every period; the rank's own
    group (no quota here) is not read."""
    if not os.access(real_runs.CGROUP_CPU, os.W_OK):
        pytest.skip(f"{real_runs.CGROUP_CPU} is not writable here")
    with real_runs.cpu_quota_group(0.25) as group:
        child = subprocess.Popen([sys.executable, "-c", SPIN_IN_GROUP, str(group), "4"])
        try:
            tree = TreeThrottling()
            deadline = time.monotonic() + 10
            while not tree() and time.monotonic() < deadline:  # until it has moved in
                time.sleep(0.05)
            start = tree()
            time.sleep(1.5)
            fields = throttling_fields(start, tree())
        finally:
            child.kill()
            child.wait()
    assert set(start) == {group}
    assert fields[Workload.THROTTLED_QUOTA_CPUS] == 0.25
    assert fields[Workload.THROTTLED_GROUP_HOLDS] == "loaders"
    # a process spinning under 0.25 CPUs runs out of quota in every 100 ms period it runs
    assert fields[Workload.CPU_THROTTLED_SHARE] >= 0.8
