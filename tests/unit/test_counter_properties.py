"""Property tests of the per-epoch counter arithmetic (``collector.analysis.counters``).

Hypothesis builds a true counter ``C(t)``: piecewise linear, rates 0..1 GB/s per segment,
starting at a random large offset. It is sampled about once an interval with jittered
sample times; some samples are NaN (a saturated InfiniBand counter reads as a gap), some
are missing (an agent outage), and the counter is reset to zero at a few moments (a reboot,
a driver reload, an agent restart for the agent's own ``cpu_seconds``). Epoch windows are
drawn at random, some reaching past the sampled span. ``counter_increases`` must then give
the true increase ``C(end) - C(start)`` within a bound worked out from the data:

* Interpolation. Between two consecutive valid samples ``a < b`` the function draws the
  chord. For a nondecreasing counter whose rate on ``[a, b]`` stays within
  ``[r_min, r_max]``, the chord and the truth differ at ``t = a + u = b - v`` by at most
  ``(r_max - r_min) * u * v / (u + v)``: writing ``X = C(t) - C(a)`` in ``[r_min u,
  r_max u]`` and ``Y = C(b) - C(t)`` in ``[r_min v, r_max v]``, the difference is
  ``(v X - u Y) / (u + v)``, largest at ``X = r_max u``, ``Y = r_min v``. It is zero at a
  sample and when the rate is constant over the interval, whatever the jitter or the gap.
* Resets. A reset at ``tau`` between valid samples ``a`` and ``b`` is seen as a drop; the
  new value counts as growth from zero, so the growth between ``a`` and ``tau`` is lost
  (nobody sampled it): ``C(tau) - C(a)``. A window whose end passes ``b`` misses exactly
  that; a boundary inside ``(a, b)`` is off by at most the interval's true growth.
  Resets are only injected where the drop is visible (the value after it is below the
  value before): an invisible reset cannot be told from growth by anyone (Prometheus'
  ``increase()`` has the same limit).

So ``|estimate - truth| <= E(start) + E(end) + sum of lost growth of resets seen inside
the window``, plus float rounding (1e-12 of the counter's magnitude). Windows are clipped to
the valid samples' span (what has been observed); a window outside it is NaN, never 0.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.analysis.counters import counter_increases

S = 1_000_000_000
T0 = 1_700_000_000 * S  # realistic epoch nanoseconds: beyond float64's exact integers
RATE_MAX = 1e9  # bytes/s: a saturated 8 Gbit/s link


@dataclass
class Scenario:
    breaks_ns: np.ndarray  # segment boundaries, offset from T0
    cumulative: np.ndarray  # true C at each boundary
    rates: np.ndarray  # per segment, per ns
    sample_ns: np.ndarray  # valid sample times (offsets), ascending
    observed: np.ndarray  # what the agent read (NaN: a saturated read)
    resets: list[tuple[int, int, int]]  # (tau, a, b): reset time and its valid neighbours
    windows: list[tuple[int, int]]
    all_times: np.ndarray  # every sample time written, NaN reads included

    def true_counter(self, t_ns: np.ndarray | int) -> np.ndarray:
        return np.interp(np.asarray(t_ns, dtype=np.float64), self.breaks_ns, self.cumulative)

    def rate_range(self, a: int, b: int) -> tuple[float, float]:
        """Lowest and highest rate (per ns) of the true counter over [a, b]."""
        first = max(0, int(np.searchsorted(self.breaks_ns, a, "right")) - 1)
        last = max(0, int(np.searchsorted(self.breaks_ns, b, "left")) - 1)
        chunk = self.rates[first : last + 1]
        return float(chunk.min()), float(chunk.max())


@st.composite
def scenarios(draw) -> Scenario:
    segments = draw(st.integers(1, 8))
    durations = [draw(st.integers(S // 10, 120 * S)) for _ in range(segments)]
    # bytes/s per segment; idle segments (rate 0) are common in real counters
    rates = (
        np.array(
            [draw(st.one_of(st.just(0), st.integers(1, int(RATE_MAX)))) for _ in durations],
            dtype=np.float64,
        )
        / S
    )  # per ns
    breaks = np.concatenate(([0], np.cumsum(durations))).astype(np.float64)
    offset = float(draw(st.integers(0, 2**40)))
    cumulative = offset + np.concatenate(([0.0], np.cumsum(rates * np.diff(breaks))))
    span = int(breaks[-1])

    interval = draw(st.sampled_from([S // 2, S, 5 * S, 10 * S]))
    jitter = draw(st.floats(0, 0.45))
    jitters = draw(
        st.lists(st.floats(-1, 1), min_size=span // interval + 1, max_size=span // interval + 1)
    )
    times = np.array(
        [k * interval + round(j * jitter * interval) for k, j in enumerate(jitters)],
        dtype=np.int64,
    )
    times = times[(times >= 0) & (times <= span)]

    # Missing samples (an outage) and NaN samples (saturated reads): index ranges.
    keep = np.ones(times.size, dtype=bool)
    saturated = np.zeros(times.size, dtype=bool)
    for _ in range(draw(st.integers(0, 3))):
        start = draw(st.integers(0, max(0, times.size - 1)))
        length = draw(st.integers(1, 20))
        if draw(st.booleans()):
            keep[start : start + length] = False
        else:
            saturated[start : start + length] = True
    times, saturated = times[keep], saturated[keep]

    scenario = Scenario(breaks, cumulative, rates, times, np.empty(0), [], [], times)
    truth = scenario.true_counter(times)
    valid = np.flatnonzero(~saturated)
    # Resets: the counter restarts from zero at tau. Only visible ones are kept.
    observed = truth.copy()
    resets: list[tuple[int, int, int]] = []
    positions = (
        sorted(set(draw(st.lists(st.integers(1, valid.size - 1), max_size=3))))
        if valid.size >= 2
        else []
    )
    for position in positions:  # in time order: each reset rewrites what follows it
        a, b = int(times[valid[position - 1]]), int(times[valid[position]])
        if b - a < 2 or any(a <= tau < b for tau, _, _ in resets):
            continue
        tau = draw(st.integers(a + 1, b - 1))
        after = times > tau
        new_observed = observed.copy()
        new_observed[after] = truth[after] - float(scenario.true_counter(tau))
        if not new_observed[valid[position]] < new_observed[valid[position - 1]]:
            continue  # a reset nobody could see
        observed = new_observed
        resets.append((tau, a, b))
    observed[saturated] = np.nan

    windows = [(-S, span + S)] if draw(st.booleans()) else []  # the whole run
    for _ in range(draw(st.integers(1, 6))):
        start = draw(st.integers(-20 * S, span + 20 * S))
        end = draw(st.integers(start, start + draw(st.integers(0, span + 40 * S))))
        windows.append((start, end))
    scenario.sample_ns = times[~saturated]
    scenario.observed = observed
    scenario.resets = resets
    scenario.windows = windows
    return scenario


def boundary_error(scenario: Scenario, t: int) -> float:
    """E(t): how far the interpolated counter can be from the truth at t."""
    samples = scenario.sample_ns
    index = int(np.searchsorted(samples, t, "left"))
    if index < samples.size and samples[index] == t:
        return 0.0
    a, b = int(samples[index - 1]), int(samples[index])
    if any(ra == a and rb == b for _, ra, rb in scenario.resets):
        growth = scenario.true_counter(np.array([a, b]))
        return float(growth[1] - growth[0])
    r_min, r_max = scenario.rate_range(a, b)
    u, v = t - a, b - t
    return (r_max - r_min) * u * v / (u + v)


def lost_to_resets(scenario: Scenario, start: int, end: int) -> float:
    lost = 0.0
    for tau, a, b in scenario.resets:
        if start < b and a < end:  # the reset's interval overlaps the window
            at = scenario.true_counter(np.array([a, tau]))
            lost += float(at[1] - at[0])
    return lost


def estimates(scenario: Scenario, windows: list[tuple[int, int]]) -> np.ndarray:
    starts = [T0 + start for start, _ in windows]
    ends = [T0 + end for _, end in windows]
    return counter_increases(
        T0 + scenario.all_times, scenario.observed, np.array(starts), np.array(ends)
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_per_epoch_increase_is_the_true_increase_within_the_stated_bound(scenario):
    samples = scenario.sample_ns
    got = estimates(scenario, scenario.windows)
    for (start, end), estimate in zip(scenario.windows, got, strict=True):
        if samples.size < 2 or end < samples[0] or start > samples[-1]:
            assert math.isnan(estimate), (start, end, estimate)
            continue
        lo, hi = max(start, int(samples[0])), min(end, int(samples[-1]))
        truth = float(scenario.true_counter(hi) - scenario.true_counter(lo))
        bound = (
            boundary_error(scenario, lo)
            + boundary_error(scenario, hi)
            + lost_to_resets(scenario, lo, hi)
        )
        rounding = 1e-12 * abs(float(scenario.cumulative[-1])) + 1e-6
        assert abs(estimate - truth) <= bound + rounding, (
            f"window [{lo}, {hi}] ns: estimate {estimate}, truth {truth}, bound {bound},"
            f" resets {scenario.resets}"
        )
        assert estimate >= -rounding  # a counter never shrinks, resets or not


@settings(max_examples=100, deadline=None)
@given(scenarios(), st.lists(st.floats(0, 1), min_size=1, max_size=10))
def test_epochs_that_tile_the_run_add_up_to_the_run(scenario, cuts):
    """Consecutive epochs (shared boundaries) sum to the increase over their union, and
    with boundaries on samples and no reset that is exactly the true increase."""
    samples = scenario.sample_ns
    if samples.size < 2:
        return
    first, last = int(samples[0]), int(samples[-1])
    inner = sorted({first + round(c * (last - first)) for c in cuts})
    bounds = [first, *inner, last]
    epochs = list(itertools.pairwise(bounds))
    per_epoch = estimates(scenario, epochs)
    (whole,) = estimates(scenario, [(first, last)])
    rounding = 1e-12 * abs(float(scenario.cumulative[-1])) + 1e-6
    assert abs(float(np.sum(per_epoch)) - whole) <= rounding * len(epochs)
    truth = float(scenario.true_counter(last) - scenario.true_counter(first))
    lost = lost_to_resets(scenario, first, last)
    # Whole span: both ends are samples, so only the resets' unseen growth is missing.
    assert truth - lost - rounding <= whole <= truth + rounding


def test_the_bound_is_tight_for_a_rate_change_between_samples():
    """The worst case of the interpolation bound, by hand: samples at 0 s and 10 s, the
    counter idle for 5 s then 100 B/s for 5 s (C: 0, 0, 500). At t = 5 s the chord says
    250, the truth 0: (r_max - r_min) u v / (u + v) = 100 x 5 x 5 / 10 = 250."""
    times = np.array([T0, T0 + 10 * S], dtype=np.int64)
    values = np.array([0.0, 500.0])
    got = counter_increases(times, values, [T0], [T0 + 5 * S])
    assert got[0] == 250.0
