"""What ``--profile`` runs beside the training, kept small: the ranks' events go to the
collector at most once a second, the embedded collector starts no parse workers, and the
project's threads carry kernel names (so ``top -H`` and bench/workload_throughput/side_cpu.py
tell them from the training's). Real loopback servers, real threads."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agent.shipper import SHIPPER_THREAD, Shipper
from contract.point import Point
from tests.integration.test_agent_shipper import Endpoint, wait_until
from tests.support.loopback import free_port
from workloads.launch.local_stack import child_env, start_collector, stop, wait_for_port
from workloads.record.events import (
    EVENT_BATCH_SECONDS,
    EVENTS_THREAD,
    BackgroundSink,
    MemorySink,
    ShipperSink,
)


def kernel_thread_names() -> set[str]:
    names = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            names.add((task / "comm").read_text().strip())
        except OSError:
            continue
    return names


def step_event(step: int) -> Point:
    return Point(
        "workload",
        {"host": "n1", "run_id": "r", "rank": "0"},
        {"event": "step", "step": step},
        time.time_ns(),
    )


def test_events_sent_at_most_once_a_second_all_of_them_arrive(tmp_path):
    endpoint = Endpoint()
    try:
        sink = BackgroundSink(ShipperSink(endpoint.url, None, tmp_path / "spool"))
        began = time.monotonic()
        for step in range(12):  # a step event every 0.1 s: 1.2 s of them
            sink.submit([step_event(step)])
            time.sleep(0.1)
        elapsed = time.monotonic() - began
        assert sink.close(timeout=10.0)
    finally:
        endpoint.stop()
    lines = endpoint.lines()
    assert [line.split("step=")[1].split("i")[0] for line in lines] == [
        str(step) for step in range(12)
    ]
    # the first at once, then one request per EVENT_BATCH_SECONDS, and the close's flush
    assert 2 <= len(endpoint.requests) <= elapsed / EVENT_BATCH_SECONDS + 2
    assert len(endpoint.requests) < 12


def test_event_threads_carry_kernel_names(tmp_path):
    before = kernel_thread_names()
    assert EVENTS_THREAD not in before and SHIPPER_THREAD not in before
    sink = BackgroundSink(MemorySink())
    shipper = Shipper("http://127.0.0.1:9", None, "o", "b", tmp_path / "spool")
    shipper.start()
    try:
        assert wait_until(lambda: {EVENTS_THREAD, SHIPPER_THREAD} <= kernel_thread_names())
        assert len(EVENTS_THREAD) <= 15 and len(SHIPPER_THREAD) <= 15  # the kernel keeps 15
        main_thread = Path(f"/proc/self/task/{threading.get_native_id()}/comm")
        assert not main_thread.read_text().startswith("es-")  # only the threads named
    finally:
        sink.close(timeout=1.0)
        shipper.close(timeout=1.0)


def child_processes(pid: int) -> list[int]:
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(c) for c in (task / "children").read_text().split()]
    return children


def test_the_embedded_collector_starts_no_parse_workers(tmp_path):
    """``collector serve`` alone starts a pool of parse processes (one per CPU) for large
    bodies; the one ``--profile`` starts for a run parses its small bodies itself."""
    process, _ = start_collector(tmp_path / "run.sqlite", tmp_path / "collector.log")
    try:
        time.sleep(1.0)  # a pool is started right after the port opens
        assert child_processes(process.pid) == []
    finally:
        stop(process)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one CPU: no parse pool either way")
def test_a_cluster_collector_still_starts_its_parse_workers(tmp_path):
    port = free_port()
    log = tmp_path / "collector.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "collector", "serve", "--db", str(tmp_path / "c.sqlite"),
         "--listen", f"127.0.0.1:{port}"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, env=child_env(),
    )  # fmt: skip
    try:
        wait_for_port(port, process, "collector", log)
        assert wait_until(lambda: len(child_processes(process.pid)) >= 1, timeout=60.0)
    finally:
        stop(process)
