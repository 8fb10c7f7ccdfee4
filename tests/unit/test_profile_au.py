"""A profiled rank's AU terms: each epoch's first step left out (MLPerf Storage's rule, as
DLIO applies it), and the accelerator's idle time: the input wait of a real step, all but
the emulated compute of an emulated one (DLIO's sleep). A real ``Session`` on a clock the
test moves, its events kept in memory (no collector URL); tests/system/test_dlio_crosscheck.py
checks the same against DLIO on a real run."""

from __future__ import annotations

import pytest

from contract.schema import Event, Workload
from workloads.autoprofile.config import ProfileConfig
from workloads.autoprofile.session import Session
from workloads.record.anatomy import StepMarks

# (start, input arrived, compute done, end) of each step, seconds
STEPS = [(0.0, 0.8, 0.9, 1.0), (1.0, 1.1, 1.45, 1.5), (1.5, 1.7, 1.95, 2.0)]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def seconds(self) -> float:
        return self.now

    def ns(self) -> int:
        return 1_000_000_000_000 + int(self.now * 1e9)


def epoch_end(tmp_path, accelerator_busy: float | None) -> dict:
    clock = Clock()
    session = Session(ProfileConfig("au", "", str(tmp_path)), clock.ns, clock.seconds)
    session.start("pytorch", "Net", 8)
    session.epoch_start()
    for start, ready, done, end in STEPS:
        clock.now = end
        marks = StepMarks(input_requested=start, input_ready=ready, compute_done=done)
        session.step(8, marks=marks, accelerator_busy=accelerator_busy)
    session.epoch_end()
    points = session.writer.sink.points
    (end,) = [p for p in points if p.fields.get(Workload.EVENT) == Event.EPOCH_END]
    session.finish()
    return end.fields


def test_au_leaves_the_epochs_first_step_out_and_idles_while_waiting_for_input(tmp_path):
    fields = epoch_end(tmp_path, None)
    assert fields[Workload.TIMED_SECONDS] == pytest.approx(2.0)
    assert fields[Workload.TIMED_INPUT_WAIT_SECONDS] == pytest.approx(0.8 + 0.1 + 0.2)
    assert fields[Workload.AU_STEP_SECONDS] == pytest.approx(1.0)  # steps 2 and 3
    assert fields[Workload.AU_IDLE_SECONDS] == pytest.approx(0.1 + 0.2)


def test_an_emulated_accelerator_is_busy_for_its_configured_time_only(tmp_path):
    fields = epoch_end(tmp_path, accelerator_busy=0.2)  # DLIO's sleep, overshooting
    assert fields[Workload.AU_STEP_SECONDS] == pytest.approx(1.0)
    assert fields[Workload.AU_IDLE_SECONDS] == pytest.approx((0.5 - 0.2) * 2)
    assert fields[Workload.INPUT_WAIT_SECONDS] == pytest.approx(1.1)  # the anatomy unchanged


def test_each_epochs_first_step_is_sent_beside_every_kth(tmp_path):
    """With ``step_every`` 10, steps 1, 10 and 20 of each 25-step epoch: the first is what
    the epoch_restart finding compares (on a real H200 a user's loader restarting its
    workers every epoch waited 24% of the step time in it, and no step event showed it)."""
    clock = Clock()
    session = Session(
        ProfileConfig("every", "", str(tmp_path), step_every=10), clock.ns, clock.seconds
    )
    session.start("pytorch", "Net", 8)
    sent_before = []
    for _ in range(2):
        session.epoch_start()
        for _ in range(25):
            sent_before.append(session.step_is_sent())
            clock.now += 0.1
            session.step(8)
        session.epoch_end()
    steps = [
        p.fields for p in session.writer.sink.points if p.fields.get(Workload.EVENT) == Event.STEP
    ]
    session.finish()
    assert [s[Workload.STEP] for s in steps] == [1, 10, 20, 26, 35, 45]  # the run's global step
    assert [i % 25 + 1 for i, sent in enumerate(sent_before) if sent] == [1, 10, 20, 1, 10, 20]
