"""The dashboard's per-bucket images/s line from sampled step events (issue 42, item 7).

Ranks send one step event every ``--step-every`` steps (``workloads run``: every K-th timed
step; ``workloads profile``: also each epoch's first), each with that one step's images.
Before, the line spread only the sent step's images, so it read K times low (about 10x
at K = 10). Each event now stands for the steps since its rank's previous one
(``contract.throughput.sampled_step_spans``), and the line agrees with the run's
throughput."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from collector.queries import query
from collector.queries.timeseries import rank_step_spans
from contract.schema import Event, Workload
from contract.throughput import SampledStep, sampled_step_spans
from tests.support.run_builder import NS, RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

STEPS_PER_EPOCH, EVERY = 100, 10


def sampled_run(profiler_style: bool) -> list:
    """2 ranks, 3 epochs of 100 steps of 32 images (100 s each), no warm-up; only every
    10th step's event kept, and with ``profiler_style`` each epoch's first too."""
    run = RunBuilder("sampled", ranks_per_host=2, steps_per_epoch=STEPS_PER_EPOCH,
                     write_samples=False)  # fmt: skip
    for _ in range(3):
        run.epoch(100, 32 * STEPS_PER_EPOCH)

    def kept(point) -> bool:
        if point.fields.get(Workload.EVENT) != Event.STEP:
            return True
        in_epoch = (int(point.fields[Workload.STEP]) - 1) % STEPS_PER_EPOCH + 1
        return in_epoch % EVERY == 0 or (profiler_style and in_epoch == 1)

    return [point for point in run.points() if kept(point)]


@pytest.mark.parametrize("profiler_style", [False, True], ids=["workloads-run", "profile"])
def test_the_bucket_line_agrees_with_the_run_throughput(make_store, profiler_style):
    points = sampled_run(profiler_style)
    sent = sum(p.fields.get(Workload.EVENT) == Event.STEP for p in points)
    assert sent == 2 * 3 * (STEPS_PER_EPOCH // EVERY + profiler_style)
    store = make_store(points)
    (summary,) = query.runs_summary(store)
    assert summary.images_per_second == pytest.approx(2 * 32, rel=1e-6)  # 64 img/s

    series = query.host_timeseries(store, "sampled", "node1", bucket_ns=10 * NS)
    line = [v for v in series.series["images_per_second"] if v is not None]
    # the 300 s of training in 10-s buckets: each reads the run's 64 img/s within 3 %
    # (before: 6.4, a tenth; the profiler's first steps made it 7.0)
    assert len(line) >= 30
    inside = line[1:-1]
    assert all(v == pytest.approx(summary.images_per_second, rel=0.03) for v in inside), line
    assert math.fsum(v * 10 for v in line) == pytest.approx(3 * 2 * 3200, rel=0.03)


def test_each_event_stands_for_the_steps_since_the_previous_one():
    # one rank: steps 10 and 20 of epoch 1 (1 s each), then step 101, epoch 2's first
    steps = [
        SampledStep(10 * NS, 32, 1.0, 1, 10),
        SampledStep(20 * NS, 32, 1.0, 1, 20),
        SampledStep(130 * NS, 32, 1.0, 2, 101),
    ]
    spans = sampled_step_spans(steps)
    # the first stands for the usual 10 steps at its own pace; the second for the 10
    # between the two; the third for 10 at most (81 since the previous), its own pace
    assert spans == [(0.0, 10 * NS, 320), (10 * NS, 20 * NS, 320), (120 * NS, 130 * NS, 320)]
    # without step numbers (older events): each event is its own step
    plain = [SampledStep(5 * NS, 32, 2.0, 1, math.nan)]
    assert sampled_step_spans(plain) == [(3 * NS, 5 * NS, 32)]


def _rank_events(seed: int, count: int) -> list[SampledStep]:
    """One rank's step events in time order, with what real ones hold and what they may
    lack: epochs changing, steps sent every few steps or repeated, NaN step numbers (older
    events), zero, negative and NaN seconds, NaN images."""
    rng = random.Random(seed)
    events, time_ns, step, epoch = [], 0, 0.0, 1.0
    for _ in range(count):
        time_ns += rng.choice([0, 1, rng.randrange(1, 30 * NS)])
        if rng.random() < 0.1:
            epoch += 1
        step += rng.choice([0, 1, 5, 10, 10, 10, -3])
        events.append(
            SampledStep(
                time_ns,
                rng.choice([32.0, 32.0, 64.0, math.nan]),
                rng.choice([0.5, 1.25, 0.0, -1.0, math.nan]),
                epoch,
                step if rng.random() > 0.1 else math.nan,
            )
        )
    return events


@pytest.mark.parametrize("seed", range(40))
def test_the_run_pages_array_twin_gives_the_rules_floats(seed):
    # collector.queries.timeseries.rank_step_spans computes the rule over numpy arrays for
    # the run page: every float must be the rule's own, not merely close
    events = _rank_events(seed, count=[0, 1, 2, 3, 50, 400][seed % 6])
    expected = sampled_step_spans(events)
    columns = [
        np.array([getattr(e, name) for e in events], dtype=np.float64)
        for name in ("time_ns", "images", "seconds", "epoch", "step")
    ]
    begin, end, images = rank_step_spans(*columns)
    got = list(zip(begin.tolist(), end.tolist(), images.tolist(), strict=True))
    assert got == [tuple(float(v) for v in span) for span in expected]
