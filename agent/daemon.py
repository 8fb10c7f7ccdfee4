"""The sampling loop: every tick, sample every sampler, publish and ship.

Ticks sit on multiples of the interval on the wall clock (1 s: every whole second), so
the points of every node line up. The next tick is always the next multiple after now:
a slow sample skips ticks rather than queueing them.

The wall clock stepped (``date -s``, an NTP step; found by comparing it with the monotonic
clock between ticks, 1 s of difference or more): samples stay in time order, so that no
point already stored is overwritten and no counter goes backwards within a series.
Stepped back by X s: no tick (and no edge sample: that edge is interpolated) until the
wall clock passes the last sample's time again, a gap of about X s, with a warning when
it starts and a line when sampling resumes. Stepped forward by X s: sampling goes on at
the new time, a gap of X s in the series (a counter's rate across it is averaged over X s
that did not pass), with a warning; the ticks it jumped over are not counted as skipped.

Each tick: every sampler's ``sample(now_ns)`` (a sampler that raises is logged once and
tried again next tick), the ``host`` tag added, the points published to /metrics and
submitted to the shipper; ``AgentStats.sample_duration_seconds`` is the wall time of the
sampling, read by the ``agent`` self sampler at the next tick. Where the ``agent`` sampler
runs, each tick also carries one ``agent_sampler`` point per sampler (tag ``sampler``):
the wall time of its ``sample()`` that tick and whether it returned (1) or raised (0), as
node_exporter's ``node_scrape_collector_duration_seconds`` and ``_success``.

Edge samples: ``edge_sample()`` (``POST /edge`` on loopback) samples now, outside the tick
grid, so that a run or epoch edge has a real reading at its own instant instead of one
interpolated between two ticks (a rank asks at each run/epoch event and uses the returned
timestamp as the event's). The points are shipped like a tick's, handed to the shipper
with the next tick's (``ship_edge_samples``: the reply does not wait for the spool's
write), and not published to
/metrics (scrapes keep their regular grid); slow samplers (GPU: NVML) are left out. One
lock serialises ticks and edge samples: samplers keep /proc files open and are not
thread-safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agent.config import AgentConfig
from agent.samplers import SAMPLER_NAMES, Roots, Sampler, make_sampler
from agent.samplers.agent import AgentStats
from contract.point import Point
from contract.schema import AgentSelf, SamplerSelf, Tag

log = logging.getLogger(__name__)

CLOCK_STEP_NS = 1_000_000_000  # wall and monotonic clocks apart by this much: a step


class Publisher(Protocol):
    def publish(self, points: Sequence[Point]) -> None: ...


class Submitter(Protocol):
    def submit(self, points: list[Point]) -> None: ...


def next_tick_ns(now_ns: int, interval_ns: int) -> int:
    """The first multiple of ``interval_ns`` strictly after ``now_ns``."""
    return (now_ns // interval_ns + 1) * interval_ns


def build_samplers(
    roots: Roots, wanted: Sequence[str] | None, stats: AgentStats | None = None
) -> list[Sampler]:
    """The samplers to run: ``wanted`` (default: all) that find their data on this host.

    One that cannot run is left out with one log line saying why. The self sampler is
    given ``stats`` so that it reports this agent's spool and timings.
    """
    samplers: list[Sampler] = []
    for name in wanted if wanted is not None else SAMPLER_NAMES:
        try:
            sampler = make_sampler(name, roots)
            available = sampler.available()
        except ImportError as error:
            log.warning("sampler %s is off: cannot load it (%s)", name, error)
            continue
        except Exception as error:
            log.warning("sampler %s is off: %s: %s", name, type(error).__name__, error)
            continue
        if not available:
            # The sampler itself logs the one line saying what it did not find.
            log.debug("sampler %s is off: its data is not on this host", name)
            continue
        if stats is not None and hasattr(sampler, "stats"):
            sampler.stats = stats  # type: ignore[attr-defined]
        samplers.append(sampler)
    return samplers


@dataclass(frozen=True)
class SamplerOutcome:
    """How one sampler's ``sample()`` went in the last round."""

    name: str
    duration_seconds: float
    success: bool


@dataclass
class SampleRound:
    """Runs every sampler once, timing each, and tags the points with the host."""

    samplers: Sequence[Sampler]
    host: str
    _failing: set[str] = field(default_factory=set)
    outcomes: list[SamplerOutcome] = field(default_factory=list)  # of the last round

    def __call__(self, now_ns: int, skip: frozenset[str] = frozenset()) -> list[Point]:
        points: list[Point] = []
        self.outcomes = []
        for sampler in self.samplers:
            if sampler.name in skip:
                continue
            started = time.perf_counter()
            sampled = self._sample(sampler, now_ns)
            self.outcomes.append(
                SamplerOutcome(sampler.name, time.perf_counter() - started, sampled is not None)
            )
            if sampled is None:
                continue
            for point in sampled:
                point.tags[Tag.HOST] = self.host
            points.extend(sampled)
        return points

    def _sample(self, sampler: Sampler, now_ns: int) -> list[Point] | None:
        """The sampler's points, or None when it raised (logged once until it works)."""
        try:
            sampled = sampler.sample(now_ns)
        except Exception:
            if sampler.name not in self._failing:
                self._failing.add(sampler.name)
                log.exception(
                    "sampler %s failed; retrying every tick, logged once until it works",
                    sampler.name,
                )
            return None
        if sampler.name in self._failing:
            self._failing.discard(sampler.name)
            log.info("sampler %s works again", sampler.name)
        return sampled

    @property
    def reports_samplers(self) -> bool:
        """Whether ``agent_sampler`` points are wanted: the agent's own metrics are on."""
        return any(sampler.name == AgentSelf.NAME for sampler in self.samplers)

    def sampler_points(self, now_ns: int) -> list[Point]:
        """One ``agent_sampler`` point per sampler of the last round."""
        return [
            Point(
                SamplerSelf.NAME,
                {Tag.SAMPLER: outcome.name, Tag.HOST: self.host},
                {
                    SamplerSelf.DURATION_SECONDS: outcome.duration_seconds,
                    SamplerSelf.SUCCESS: float(outcome.success),
                },
                now_ns,
            )
            for outcome in self.outcomes
        ]


# Left out of edge samples: too slow to sample while a rank waits (NVML takes tens of ms),
# and GPU counters are not summed per epoch from edges.
EDGE_SKIPPED_SAMPLERS = frozenset({"gpu"})
EDGE_LOCK_WAIT_SECONDS = 0.5  # well under the rank's 1 s timeout (AgentEdges)


# Edge samples a node takes at most: a burst for every rank of a node at one epoch edge,
# then a steady rate no training reaches (an epoch edge every 0.1 s) and a flood does.
EDGE_BURST = 64
EDGE_RATE_PER_SECOND = 10.0


class EdgeBusy(RuntimeError):
    """No edge sample: a tick held the samplers longer than ``EDGE_LOCK_WAIT_SECONDS``, or
    the node's edge samples are over their budget (``EdgeBudget``)."""


class EdgeBudget:
    """A token bucket of edge samples: ``EDGE_BURST`` at once, ``EDGE_RATE_PER_SECOND``
    after that. A local process asking for edges in a loop gets 503s (its edges are
    interpolated) instead of filling the store with samples of one series."""

    def __init__(
        self,
        burst: int = EDGE_BURST,
        rate: float = EDGE_RATE_PER_SECOND,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst = burst
        self.rate = rate
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def take(self) -> bool:
        """One edge sample's token; False when none is left (the caller holds the lock)."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


class Daemon:
    def __init__(
        self,
        config: AgentConfig,
        samplers: Sequence[Sampler],
        stats: AgentStats,
        publishers: Sequence[Publisher] = (),
        submitters: Sequence[Submitter] = (),
        clock_ns: Callable[[], int] = time.time_ns,
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.interval_ns = round(config.interval_seconds * 1e9)
        self.monotonic_ns = monotonic_ns
        self._last_sample_ns = 0  # the newest sample's time: samples never go before it
        self._holding_since: int | None = None  # last sample's time, while stepped back
        self.clock_steps = 0
        self.sample_round = SampleRound(samplers, config.host)
        self._report_samplers = self.sample_round.reports_samplers
        self.stats = stats
        self.publishers = publishers
        self.submitters = submitters
        self.clock_ns = clock_ns
        self.ticks = 0
        self.skipped_ticks = 0
        self.edge_samples = 0
        self._sampling = threading.Lock()
        self._edge_points: list[Point] = []  # sampled at edges, not yet shipped (lock held)
        self.edge_budget = EdgeBudget()
        self.edges_coalesced = 0
        self.edges_over_budget = 0
        self._last_edge_ns: int | None = None
        self._last_edge_done = float("-inf")  # time.monotonic() when it was taken

    def tick(self) -> list[Point]:
        with self._sampling:
            started = time.perf_counter()
            now_ns = self.clock_ns()
            self._last_sample_ns = max(self._last_sample_ns, now_ns)
            points = self.sample_round(now_ns)
            self.stats.sample_duration_seconds = time.perf_counter() - started
            if self._report_samplers:
                points.extend(self.sample_round.sampler_points(now_ns))
            edge_points, self._edge_points = self._edge_points, []
        for publisher in self.publishers:
            publisher.publish(points)
        self._submit(edge_points + points)  # one spool write for both
        self.ticks += 1
        return points

    def edge_sample(self) -> int:
        """Sample now (every sampler but the slow ones); the sample's time. Its points
        are shipped with the next tick's (``ship_edge_samples``), not while a rank waits.

        Waits for a tick in progress at most ``EDGE_LOCK_WAIT_SECONDS`` (a tick that
        samples NVML can take longer), then raises ``EdgeBusy``: a rank is never held up
        by a slow sampler, and that one edge is interpolated."""
        arrived = time.monotonic()
        if not self._sampling.acquire(timeout=EDGE_LOCK_WAIT_SECONDS):
            raise EdgeBusy("a tick is sampling")
        try:
            if self._last_edge_ns is not None and self._last_edge_done >= arrived:
                # an edge sample was taken while this request waited for it: one sample
                # answers every rank that asked at once
                self.edges_coalesced += 1
                return self._last_edge_ns
            now_ns = self.clock_ns()
            if now_ns < self._last_sample_ns:
                raise EdgeBusy("the wall clock was stepped back: samples wait until it catches up")
            if not self.edge_budget.take():
                self.edges_over_budget += 1
                raise EdgeBusy(
                    f"over the node's edge-sample budget ({self.edge_budget.burst} at once, "
                    f"{self.edge_budget.rate:g} a second)"
                )
            self.edge_samples += 1
            self._last_sample_ns = now_ns
            self.stats.edge_samples = self.edge_samples  # the sample's own agent point counts it
            self._edge_points.extend(self.sample_round(now_ns, skip=EDGE_SKIPPED_SAMPLERS))
            self._last_edge_ns = now_ns
            self._last_edge_done = time.monotonic()
        finally:
            self._sampling.release()
        return now_ns

    def ship_edge_samples(self) -> None:
        """Hand the edge samples taken since the last tick to the shipper now (each tick
        does; the loop does when it stops)."""
        with self._sampling:
            edge_points, self._edge_points = self._edge_points, []
        if edge_points:
            self._submit(edge_points)

    def _submit(self, points: list[Point]) -> None:
        for submitter in self.submitters:
            try:
                submitter.submit(points)
            except Exception:
                log.exception("handing a sample to %r failed", submitter)

    def run(self, wait: Callable[[float], bool]) -> None:
        """Tick until ``wait(seconds)`` returns True (a stop was asked for)."""
        next_ns = next_tick_ns(self.clock_ns(), self.interval_ns)
        last_wall, last_mono = self.clock_ns(), self.monotonic_ns()
        while True:
            now_ns = self.clock_ns()
            if next_ns - now_ns > self.interval_ns:  # the clock was stepped back
                next_ns = next_tick_ns(max(now_ns, self._last_sample_ns), self.interval_ns)
                self._hold(now_ns)
            # Never wait longer than an interval at once: a step while waiting is seen.
            if wait(min(max(0, next_ns - now_ns), self.interval_ns) / 1e9):
                self.ship_edge_samples()
                return
            if self.clock_ns() < next_ns:
                continue  # woken early: wait for the rest
            wall, mono = self.clock_ns(), self.monotonic_ns()
            stepped_forward = (wall - last_wall) - (mono - last_mono) >= CLOCK_STEP_NS
            if stepped_forward:
                self._report_forward_step((wall - last_wall) - (mono - last_mono))
            self._resume()
            self.tick()
            last_wall, last_mono = self.clock_ns(), self.monotonic_ns()
            after = next_tick_ns(last_wall, self.interval_ns)
            missed = (after - next_ns) // self.interval_ns - 1
            if missed > 0 and not stepped_forward:
                self.skipped_ticks += missed
                log.debug("sampling took longer than the interval: skipped %d ticks", missed)
            next_ns = after

    def _hold(self, now_ns: int) -> None:
        """The wall clock is behind the last sample: say so once per step."""
        if self._holding_since is not None or now_ns >= self._last_sample_ns:
            return
        self._holding_since = self._last_sample_ns
        self.clock_steps += 1
        log.warning(
            "the wall clock was stepped back by %.1f s: no samples until it passes the last "
            "sample's time again (samples stay in time order; a gap of that length)",
            (self._last_sample_ns - now_ns) / 1e9,
        )

    def _resume(self) -> None:
        if self._holding_since is not None:
            self._holding_since = None
            log.info("the wall clock passed the last sample's time: sampling resumes")

    def _report_forward_step(self, step_ns: int) -> None:
        self.clock_steps += 1
        log.warning(
            "the wall clock was stepped forward by %.1f s: a gap in the samples (a rate "
            "across it is averaged over time that did not pass)",
            step_ns / 1e9,
        )
