"""Final means final: ``workloads run --collector`` / ``workloads profile --collector``
print the per-epoch table only once every host's node samples reach its run_end
(``workloads.launch.node_samples``), waiting at most ``--samples-wait`` seconds; a table
printed without them is marked provisional and names the command that prints the final one.

Against a real ``collector serve`` on loopback: a two-host run's events and the samples up
to its run_end arrive first; node2's samples after run_end arrive a few seconds later (the
table waits and is final), or never (the table is provisional, in bounded time).
"""

from __future__ import annotations

import argparse
import io
import json
import threading
import time
from contextlib import redirect_stdout

import pytest

from collector.api.client import fetch_view
from contract.point import encode_lines
from tests.support.loopback import http_post
from tests.support.run_builder import NS, RunBuilder
from workloads.launch.launcher import Plan, print_collector_report
from workloads.launch.local_stack import start_collector, stop
from workloads.launch.node_samples import (
    DEFAULT_SAMPLES_WAIT_SECONDS,
    missing_hosts,
    wait_for_node_samples,
)
from workloads.launch.summary import format_profile_table
from workloads.record.spec import RunSpec

pytestmark = pytest.mark.timeout(120)
LATE_SECONDS = 3.0


def two_host_run(run_id: str) -> RunBuilder:
    builder = RunBuilder(run_id, framework="pytorch", hosts=("node1", "node2"), gpus=False,
                         nfs=False, t0_ns=time.time_ns() - 60 * NS)  # fmt: skip
    builder.epoch(10.0, 640, disk_read=50e6, cpu_busy=0.8)
    builder.epoch(10.0, 640, disk_read=20e6, cpu_busy=0.9)
    return builder


@pytest.fixture
def collector(tmp_path):
    process, port = start_collector(tmp_path / "c.sqlite", tmp_path / "collector.log")
    yield port
    stop(process)


def post(port: int, points) -> None:
    status, body = http_post(port, "/api/v2/write?bucket=b&precision=ns",
                             encode_lines(points).encode())  # fmt: skip
    assert status == 204, body


def send_all_but_node2s_last_samples(port: int, builder: RunBuilder) -> list:
    """Everything, except node2's samples at or after its run_end: returned, unsent."""
    end = builder.end_true_ns()
    held = [p for p in builder.points() if p.tags.get("host") == "node2"
            and p.measurement != "workload" and p.time_ns >= end]  # fmt: skip
    post(port, [p for p in builder.points() if p not in held])
    return held


def printed(port: int, run_id: str, wait: float) -> tuple[str, float]:
    url = f"http://127.0.0.1:{port}"
    args = argparse.Namespace(collector=url, token_file=None, samples_wait=wait)
    out = io.StringIO()
    started = time.monotonic()
    with redirect_stdout(out):
        print_collector_report(Plan(RunSpec(run_id, "pytorch"), [], 0, None, None), args)
    return out.getvalue(), time.monotonic() - started


def final_table(port: int, run_id: str) -> str:
    query = {"run_id": run_id, "format": "json", "findings": "true"}
    report = json.loads(fetch_view(f"http://127.0.0.1:{port}", "report", query, None))
    return format_profile_table(report["rows"])


def test_the_default_wait_is_three_agent_pushes():
    assert DEFAULT_SAMPLES_WAIT_SECONDS == 15.0


def test_late_samples_are_waited_for_and_the_table_is_final(collector):
    builder = two_host_run("late")
    held = send_all_but_node2s_last_samples(collector, builder)
    answer = json.loads(fetch_view(f"http://127.0.0.1:{collector}", "dashboard/node_samples",
                                   {"run_id": "late"}, None))  # fmt: skip
    assert set(answer) == {"node1", "node2"} and set(missing_hosts(answer)) == {"node2"}
    early = final_table(collector, "late")  # what printing at once would have shown
    timer = threading.Timer(LATE_SECONDS, post, (collector, held))
    timer.start()
    try:
        text, seconds = printed(collector, "late", wait=30.0)
    finally:
        timer.join()
    assert LATE_SECONDS <= seconds < LATE_SECONDS + 10
    assert "provisional" not in text
    final = final_table(collector, "late")
    assert final != early  # the samples after run_end changed the last epoch's columns
    assert final in text


def test_samples_that_never_come_leave_a_provisional_table_in_bounded_time(collector):
    builder = two_host_run("never")
    send_all_but_node2s_last_samples(collector, builder)
    text, seconds = printed(collector, "never", wait=2.0)
    assert 2.0 <= seconds < 2.0 + 8
    first = text.splitlines()[0]
    assert first.startswith("provisional: node samples from node2 (latest ")
    assert "node1" not in first
    url = f"http://127.0.0.1:{collector}"
    assert first.endswith(f"not yet in; the final table: collector report never --collector {url}")
    assert final_table(collector, "never") in text


def test_the_wait_asks_until_every_host_is_in_and_no_longer(collector):
    builder = two_host_run("now")
    post(collector, builder.points())
    url = f"http://127.0.0.1:{collector}"
    assert wait_for_node_samples(url, "now", None, 5.0) == {}
    text, seconds = printed(collector, "now", wait=30.0)
    # no longer than it took to ask: well under the 30 s it could wait (a loaded machine's
    # few seconds for the requests, not the wait)
    assert seconds < 15 and "provisional" not in text, seconds
    # a collector that cannot say (no such question, or unreachable): the table as it comes
    assert wait_for_node_samples("http://127.0.0.1:9", "now", None, 0.0) is None
