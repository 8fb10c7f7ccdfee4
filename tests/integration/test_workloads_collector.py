"""Workload events through the agent's Shipper into a real ``collector serve`` process.

No ML framework here: a Recorder driven step by step stands in for a training loop (the
framework runs are in test_workloads_frameworks.py). What is checked is the contract:
the points the collector stores, the per-epoch report it cuts from them, and that a run
is not lost when the collector is down while it trains.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from collector.store import SqliteStore
from contract.schema import RunState
from contract.units import human_bytes
from workloads.launch.local_stack import start_collector, stop
from workloads.record.events import BackgroundSink, EventWriter, ShipperSink, make_sink
from workloads.record.spec import RunSpec
from workloads.record.timing import Recorder
from workloads.train.placement import Placement
from workloads.train.worker import run_start_fields

pytestmark = pytest.mark.timeout(120)


class StepClock:
    """Each step takes 0.25 s."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fake_training(url: str, spool, run_id: str, host: str, rank: int) -> None:
    """What a trainer does with its recorder: 2 epochs of 4 steps, batch 8, 1 warm-up."""
    spec = RunSpec(run_id=run_id, framework="pytorch", batch_size=8, warmup_steps=1,
                   image_size=32, epochs=2)  # fmt: skip
    sink = make_sink(url, None, spool, None)  # what a rank uses: spooled off its thread
    assert isinstance(sink, BackgroundSink)
    writer = EventWriter(sink, run_id, rank, "pytorch", host=host)
    clock = StepClock()
    recorder = Recorder(writer, batch_size=8, warmup_steps=1, step_every=2, clock=clock)
    recorder.run_start(run_start_fields(spec, Placement(rank, 2, 0, 1)))
    for epoch in (1, 2):
        recorder.epoch_start(epoch)
        for _ in range(4):
            clock.now += 0.25
            recorder.step_done(1.0)
        recorder.epoch_end(loss=1.0 / epoch, top1=0.5 * epoch, top5=1.0)
    recorder.run_end(RunState.FINISHED)
    assert writer.close(30.0)


def test_events_of_two_hosts_make_a_per_epoch_report(tmp_path, repo_env):
    db = tmp_path / "runs.sqlite"
    process, port = start_collector(db, tmp_path / "collector.log")
    try:
        url = f"http://127.0.0.1:{port}"
        fake_training(url, tmp_path / "spool0", "run-a", "node01", 0)
        fake_training(url, tmp_path / "spool1", "run-a", "node02", 1)
    finally:
        stop(process)
    store = SqliteStore(db)
    events = store.events("run-a")
    # per rank: run_start, 2 x (epoch_start, 2 step events [timed steps 2 and 4], epoch_end)
    # (epoch 1 has 3 timed steps: one step event; epoch 2 has 4: two) and run_end
    per_rank = [e.event for e in events if e.rank == 0]
    assert per_rank == ["run_start", "epoch_start", "step", "epoch_end",
                        "epoch_start", "step", "step", "epoch_end", "run_end"]  # fmt: skip
    end1 = next(e for e in events if e.rank == 1 and e.event == "epoch_end")
    # epoch 1: 4 steps x 8 = 32 images in 1.0 s; after 1 warm-up step 24 images in 0.75 s
    assert end1.fields["images"] == 32 and end1.fields["seconds"] == 1.0
    assert end1.fields["timed_images"] == 24 and end1.fields["timed_seconds"] == 0.75
    assert end1.host == "node02" and end1.framework == "pytorch"
    start0 = next(e for e in events if e.rank == 0 and e.event == "run_start")
    assert start0.fields["batch_size"] == 8 and start0.fields["world_size"] == 2
    assert start0.fields["data_format"] == "synthetic" and start0.fields["warmup_steps"] == 1
    (run,) = store.runs()
    assert (run.run_id, run.state, set(run.hosts)) == ("run-a", "finished", {"node01", "node02"})
    store.close()

    report = subprocess.run(
        [sys.executable, "-m", "collector", "report", "run-a", "--db", str(db),
         "--format", "json"],
        capture_output=True, text=True, env=repo_env, timeout=60, check=True,
    )  # fmt: skip
    rows = json.loads(report.stdout)["rows"]
    assert sorted((row["epoch"], row["host"]) for row in rows) == [
        (1, "*"), (1, "node01"), (1, "node02"), (2, "*"), (2, "node01"), (2, "node02"),
    ]  # fmt: skip
    # every epoch: 32 images per host, 64 for both
    assert {(row["host"], row["images"]) for row in rows if row["epoch"] == 2} == {
        ("node01", 32), ("node02", 32), ("*", 64)
    }  # fmt: skip


def test_a_run_survives_a_collector_that_is_down(tmp_path, repo_env):
    db = tmp_path / "late.sqlite"
    # Nothing listens on this port yet: every event waits in the rank's spool.
    process, port = start_collector(tmp_path / "probe.sqlite", tmp_path / "probe.log")
    stop(process)
    url = f"http://127.0.0.1:{port}"
    spool = tmp_path / "spool"
    writer = EventWriter(ShipperSink(url, None, spool), "run-b", 0, "mxnet", host="n1")
    recorder = Recorder(writer, batch_size=4, warmup_steps=0, step_every=1)
    recorder.run_start({})
    recorder.epoch_start(1)
    recorder.step_done(0.5)
    recorder.epoch_end(loss=0.5)
    recorder.run_end()
    assert not writer.close(1.0)  # not delivered: kept on disk
    assert any(spool.rglob("*"))
    # the events' own bytes: each spooled line without the "#<crc32>" line before it
    spooled = sum(
        len(line) + 1
        for path in spool.rglob("*.lp")
        for line in path.read_bytes().splitlines()
        if line and not line.startswith(b"#")
    )

    later = subprocess.Popen(
        [sys.executable, "-m", "collector", "serve", "--db", str(db),
         "--listen", f"127.0.0.1:{port}"],
        env=repo_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        result = subprocess.run(
            [sys.executable, "-m", "workloads", "resend", "--spool", str(spool),
             "--collector", url, "--timeout", "30"],
            capture_output=True, text=True, env=repo_env, timeout=90,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
    finally:
        stop(later)
    # how much, to where, from which spool: the five events, every spooled byte
    assert result.stdout.splitlines() == [
        f"5 events ({human_bytes(spooled)}) delivered to {url} from the spool {spool}"
    ]
    store = SqliteStore(db)
    kinds = [e.event for e in store.events("run-b")]
    store.close()
    assert kinds == ["run_start", "epoch_start", "step", "epoch_end", "run_end"]
