"""The sampling loop: wall-clock ticks, skipped ticks, failing samplers, host tags."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest

from agent.config import AgentConfig
from agent.daemon import Daemon, SampleRound, build_samplers, next_tick_ns
from agent.samplers import Roots
from agent.samplers.agent import AgentStats
from contract.point import Point

SECOND = 10**9


class FakeClock:
    """Wall clock in ns that only moves when the loop waits or a sampler works."""

    def __init__(self, start_ns: int) -> None:
        self.now = start_ns

    def __call__(self) -> int:
        return self.now


@dataclass
class TinySampler:
    """A sampler defined here so the loop is tested apart from the real ones."""

    name: str
    clock: FakeClock | None = None
    cost_ns: dict[int, int] = field(default_factory=dict)  # call number -> time it takes
    fail_calls: set[int] = field(default_factory=set)
    calls: list[int] = field(default_factory=list)

    def available(self) -> bool:
        return True

    def sample(self, now_ns: int) -> list[Point]:
        call = len(self.calls)
        self.calls.append(now_ns)
        if self.clock is not None:
            self.clock.now += self.cost_ns.get(call, 0)
        if call in self.fail_calls:
            raise OSError(f"{self.name} device went away")
        return [Point(self.name, {"device": "d0"}, {"calls": call}, now_ns)]


class Recorder:
    def __init__(self) -> None:
        self.samples: list[list[Point]] = []

    def publish(self, points) -> None:
        self.samples.append(list(points))

    submit = publish


def stop_after(clock: FakeClock, ticks: int, daemon_ref: list):
    """A ``wait`` that moves the fake clock and stops once ``ticks`` samples were taken."""

    def wait(seconds: float) -> bool:
        if daemon_ref[0].ticks >= ticks:
            return True
        clock.now += round(seconds * SECOND)
        return False

    return wait


def test_next_tick_is_the_next_multiple_of_the_interval():
    # 1_700_000_000.3 s with a 1 s interval: the next whole second.
    assert next_tick_ns(1_700_000_000_300_000_000, SECOND) == 1_700_000_001_000_000_000
    # Exactly on a tick: the one after, never the same tick twice.
    assert next_tick_ns(1_700_000_001_000_000_000, SECOND) == 1_700_000_002_000_000_000
    # 0.25 s interval at 10.6 s: 10.75 s.
    assert next_tick_ns(10_600_000_000, SECOND // 4) == 10_750_000_000


def test_ticks_align_to_the_wall_clock_and_a_slow_sample_skips_ticks():
    clock = FakeClock(1000 * SECOND + 300_000_000)  # starts at 1000.3 s
    # The third sample (call 2) takes 2.5 s: it starts at 1003 s and ends at 1005.5 s.
    sampler = TinySampler("slow", clock, cost_ns={2: 2_500_000_000})
    recorder = Recorder()
    ref: list = [None]
    daemon = Daemon(
        AgentConfig(host="n1", interval_seconds=1),
        [sampler],
        AgentStats(),
        [recorder],
        [recorder],
        clock_ns=clock,
        monotonic_ns=clock,  # no step: both clocks move together
    )
    ref[0] = daemon
    daemon.run(stop_after(clock, 5, ref))
    # 1001, 1002, 1003 on time; 1004 and 1005 are skipped; then 1006, 1007.
    assert [t / SECOND for t in sampler.calls] == [1001, 1002, 1003, 1006, 1007]
    assert daemon.skipped_ticks == 2
    # Each tick was published and submitted once (2 recorders' worth: same object twice).
    assert len(recorder.samples) == 10


def test_fractional_interval_and_a_clock_stepped_back_holds_samples_in_order(caplog):
    clock = FakeClock(10_050 * SECOND + 10_000_000)  # 10050.01 s
    monotonic = FakeClock(0)
    sampler = TinySampler("s", clock)
    daemon = Daemon(
        AgentConfig(interval_seconds=0.25),
        [sampler],
        AgentStats(),
        clock_ns=clock,
        monotonic_ns=monotonic,
    )
    steps = iter([0, 0, -2 * SECOND])  # the third wait ends with the clock 2 s back

    def wait(seconds: float) -> bool:
        if daemon.ticks >= 4:
            return True
        clock.now += round(seconds * SECOND) + next(steps, 0)
        monotonic.now += round(seconds * SECOND)
        return False

    with caplog.at_level("INFO", "agent.daemon"):
        daemon.run(wait)
    quarter = SECOND // 4
    # 10050.25 and 10050.5 on time. The third wait ends at 10050.75 - 2 = 10048.75 s,
    # before the last sample: no sample until the clock passes it again (a sample at
    # 10048.75 would go before the ones taken), then 10050.75, 10051.0.
    assert sampler.calls == [
        10_050 * SECOND + quarter,
        10_050 * SECOND + 2 * quarter,
        10_050 * SECOND + 3 * quarter,
        10_051 * SECOND,
    ]
    messages = [r.getMessage() for r in caplog.records]
    assert sum("stepped back by 1.8 s" in m for m in messages) == 1, messages
    assert sum("sampling resumes" in m for m in messages) == 1
    assert daemon.clock_steps == 1 and daemon.skipped_ticks == 0


def test_a_clock_stepped_forward_is_reported_not_counted_as_skipped_ticks(caplog):
    clock = FakeClock(100 * SECOND)
    monotonic = FakeClock(0)
    sampler = TinySampler("s", clock)
    daemon = Daemon(
        AgentConfig(interval_seconds=1),
        [sampler],
        AgentStats(),
        clock_ns=clock,
        monotonic_ns=monotonic,
    )
    steps = iter([0, 3600 * SECOND])

    def wait(seconds: float) -> bool:
        if daemon.ticks >= 3:
            return True
        clock.now += round(seconds * SECOND) + next(steps, 0)
        monotonic.now += round(seconds * SECOND)
        return False

    with caplog.at_level("INFO", "agent.daemon"):
        daemon.run(wait)
    assert sampler.calls == [101 * SECOND, 3702 * SECOND, 3703 * SECOND]
    assert daemon.skipped_ticks == 0 and daemon.clock_steps == 1
    assert any("stepped forward by 3600.0 s" in r.getMessage() for r in caplog.records)


def test_a_failing_sampler_is_logged_once_retried_and_never_stops_the_loop(caplog):
    clock = FakeClock(0)
    flaky = TinySampler("flaky", fail_calls={1, 2, 3})
    steady = TinySampler("steady")
    recorder = Recorder()
    ref: list = [None]
    daemon = Daemon(
        AgentConfig(host="n1"), [flaky, steady], AgentStats(), [recorder], clock_ns=clock
    )
    ref[0] = daemon
    with caplog.at_level(logging.INFO):
        daemon.run(stop_after(clock, 6, ref))
    assert len(flaky.calls) == 6  # tried every tick
    assert [len(sample) for sample in recorder.samples] == [2, 1, 1, 1, 2, 2]
    failures = [r for r in caplog.records if "sampler flaky failed" in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info is not None
    assert "device went away" in caplog.text
    assert [r.getMessage() for r in caplog.records if "works again" in r.getMessage()] == [
        "sampler flaky works again"
    ]


def test_host_tag_is_added_and_stats_are_kept():
    stats = AgentStats()
    clock = FakeClock(0)
    daemon = Daemon(
        AgentConfig(host="gpu-07"), [TinySampler("a"), TinySampler("b")], stats, clock_ns=clock
    )
    points = daemon.tick()
    assert [(p.measurement, p.tags) for p in points] == [
        ("a", {"device": "d0", "host": "gpu-07"}),
        ("b", {"device": "d0", "host": "gpu-07"}),
    ]
    assert 0 < stats.sample_duration_seconds < 5


def test_sample_round_overrides_a_host_tag_a_sampler_set():
    class Rogue(TinySampler):
        def sample(self, now_ns):
            return [Point("x", {"host": "wrong"}, {"v": 1}, now_ns)]

    points = SampleRound([Rogue("x")], "right")(5)
    assert points[0].tags == {"host": "right"}


def test_a_submitter_that_raises_does_not_stop_publishing(caplog):
    class Broken:
        def submit(self, points):
            raise RuntimeError("disk on fire")

    recorder = Recorder()
    daemon = Daemon(AgentConfig(host="n"), [TinySampler("a")], AgentStats(), [recorder], [Broken()])
    with caplog.at_level(logging.ERROR):
        daemon.tick()
        daemon.tick()
    assert len(recorder.samples) == 2
    assert "disk on fire" in caplog.text


def test_build_samplers_leaves_out_unknown_modules_and_unavailable_ones(caplog, monkeypatch):
    import agent.daemon as daemon_module

    class Absent(TinySampler):
        def available(self) -> bool:
            return False

    class Selfish(TinySampler):
        stats = None

    made = {"cpu": Selfish("cpu"), "nfs": Absent("nfs")}

    def fake_make(name, roots):
        if name in made:
            return made[name]
        raise ModuleNotFoundError(f"No module named 'agent.samplers.{name}'")

    monkeypatch.setattr(daemon_module, "make_sampler", fake_make)
    stats = AgentStats()
    with caplog.at_level(logging.DEBUG):
        samplers = build_samplers(Roots(), ["cpu", "nfs", "gpu"], stats)
    assert samplers == [made["cpu"]]
    assert made["cpu"].stats is stats  # the self sampler reports this agent's numbers
    messages = [r.getMessage() for r in caplog.records]
    assert "sampler nfs is off: its data is not on this host" in messages
    assert any(m.startswith("sampler gpu is off: cannot load it") for m in messages)
    assert len(messages) == 2  # one line per sampler left out


def test_the_self_sampler_reports_this_daemons_stats(tmp_path):
    from agent.shipper import Shipper

    stats = AgentStats()
    samplers = build_samplers(Roots(), ["agent"], stats)
    down = Shipper("http://127.0.0.1:9", None, "o", "b", tmp_path / "spool", stats=stats)
    daemon = Daemon(AgentConfig(host="n1"), samplers, stats, submitters=[down])
    daemon.tick()  # spools the first sample: 2 points (not started: nothing is sent)
    point, timing = daemon.tick()
    assert point.measurement == "agent" and point.tags == {"host": "n1"}
    assert timing.measurement == "agent_sampler"
    assert timing.tags == {"sampler": "agent", "host": "n1"}
    # The second sample reports the spool as the first tick left it: two lines.
    (segment,) = tmp_path.joinpath("spool").glob("*.lp")
    assert point.fields["spool_points"] == 2.0
    first_lines = segment.read_bytes().split(b"\n")[:4]  # two points, each after its checksum
    assert point.fields["spool_bytes"] == float(sum(len(line) + 1 for line in first_lines))
    assert point.fields["points_dropped"] == 0
    assert 0 < point.fields["sample_duration_seconds"] < 5
    down.queue.close()


def test_an_edge_sample_while_the_clock_is_behind_the_last_sample_is_refused():
    """The rank then interpolates that edge (``EdgeBusy``: 503 on /edge) rather than get a
    sample stamped before the ones already taken."""
    from agent.daemon import EdgeBusy

    clock = FakeClock(50 * SECOND)
    daemon = Daemon(AgentConfig(host="n"), [TinySampler("a")], AgentStats(), clock_ns=clock)
    daemon.tick()
    clock.now -= 2 * SECOND
    with pytest.raises(EdgeBusy, match="stepped back"):
        daemon.edge_sample()
    clock.now += 3 * SECOND
    assert daemon.edge_sample() == 51 * SECOND
