"""Crashes and a full spool, with the real processes.

- ``kill -9`` of the collector while four writers stream into it: after a restart every
  point that got a 204 is there with its value, and every batch is all or nothing (a
  write is one transaction).
- ``kill -9`` of an agent while the collector is down: the next agent replays the spool;
  of the ticks the killed agent sampled, at most the one in flight is lost.
- A full spool: the oldest points are dropped, counted in the agent's self metrics (the
  ``agent`` measurement and ``epochscope_agent_points_dropped_total`` on /metrics), the
  warning is logged once, and the agent keeps running.

The agents sample the captured ``procfs-mlx-hfi`` tree (every tick the same points).
"""

from __future__ import annotations

import gzip
import http.client
import itertools
import os
import re
import signal
import threading
import time
from collections import Counter

import pytest

from bench.reliability import harness
from contract.schema import AgentSelf

S = 1_000_000_000
WRITERS = 4
BATCH = 40


def _collector(tmp_path, token_file=None, **extra) -> harness.Collector:
    return harness.Collector(
        db=tmp_path / "collector.sqlite",
        token_file=token_file,
        log=tmp_path / "collector.log",
        port=harness.free_port(),
        **extra,
    )


@pytest.mark.slow
def test_kill_9_under_continuous_writes_keeps_every_acknowledged_point(tmp_path):
    collector = _collector(tmp_path)
    collector.start()
    acknowledged: dict[int, list[int]] = {w: [] for w in range(WRITERS)}
    attempted: dict[int, list[int]] = {w: [] for w in range(WRITERS)}
    stop = threading.Event()

    def value(writer: int, batch: int, i: int) -> float:
        return writer * 1e9 + batch * BATCH + i + 0.25  # exact in float64

    def writer_loop(writer: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", collector.port, timeout=30)
        batch = 0
        while not stop.is_set():
            lines = "\n".join(
                f"disk,host=k9w{writer},device=sda read_bytes={value(writer, batch, i)!r},"
                f"reads={batch * BATCH + i}i {(batch * BATCH + i) * S}"
                for i in range(BATCH)
            ).encode()
            headers = {}
            if writer % 2:  # half the writers send gzip bodies
                lines = gzip.compress(lines)
                headers["Content-Encoding"] = "gzip"
            attempted[writer].append(batch)
            try:
                conn.request("POST", "/api/v2/write?bucket=b", body=lines, headers=headers)
                response = conn.getresponse()
                response.read()
            except (OSError, http.client.HTTPException):
                return  # the collector is gone: this batch was never acknowledged
            if response.status == 204:
                acknowledged[writer].append(batch)
            batch += 1

    threads = [threading.Thread(target=writer_loop, args=(w,)) for w in range(WRITERS)]
    for thread in threads:
        thread.start()
    try:
        assert harness.wait_until(
            lambda: all(len(batches) >= 20 for batches in acknowledged.values()), 90, 0.005
        )
        collector.kill()  # mid-stream: some batch is always in flight
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    collector.start()
    try:
        for writer in range(WRITERS):
            host = f"k9w{writer}"
            stored = harness.stored_points(collector.db, hosts=[host])
            by_time = {key[3]: values for key, values in stored.items()}
            for batch in attempted[writer]:
                present = [(batch * BATCH + i) * S in by_time for i in range(BATCH)]
                if batch in acknowledged[writer]:
                    assert all(present), f"{host}: acknowledged batch {batch} is not all there"
                else:
                    # the one in flight when the collector died: all or nothing
                    assert all(present) or not any(present), f"{host}: batch {batch} is torn"
                for i in range(BATCH):
                    if present[i]:
                        assert by_time[(batch * BATCH + i) * S] == {
                            "read_bytes": value(writer, batch, i),
                            "reads": float(batch * BATCH + i),
                        }
            attempted_times = {
                (batch * BATCH + i) * S for batch in attempted[writer] for i in range(BATCH)
            }
            assert set(by_time) <= attempted_times  # nothing that was not sent
        # and the restarted collector takes writes again
        conn = http.client.HTTPConnection("127.0.0.1", collector.port, timeout=30)
        conn.request("POST", "/api/v2/write?bucket=b", body=b"disk,host=after reads=1i 1")
        assert conn.getresponse().status == 204
        conn.close()
    finally:
        collector.stop()


def _ticks_of(lines: list[str]) -> list[int]:
    prefix = AgentSelf.NAME + ","
    return sorted(int(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(prefix))


@pytest.mark.slow
def test_kill_9_of_an_agent_during_an_outage_loses_at_most_the_tick_in_flight(tmp_path):
    token, token_file = harness.write_token_file(tmp_path)
    collector = _collector(tmp_path, token_file)  # not started: the outage
    interval = 0.5
    agent = harness.Agent(
        host="k9agent",
        workdir=tmp_path / "agent",
        push_url=collector.url,
        token=token,
        interval_seconds=interval,
        batch_seconds=1,
        log_level="debug",  # the daemon logs skipped ticks at debug level
    )
    agent.start()
    try:
        assert harness.wait_until(lambda: len(list(agent.spool_dir.glob("*.lp"))) >= 8, 60)
        time.sleep(0.37)  # somewhere inside a tick
        before_kill_ns = time.time_ns()
        agent.kill()
        after_kill_ns = time.time_ns()
    finally:
        if agent.process.poll() is None:
            agent.kill()
    first_run_lines = agent.spooled_lines()
    first_run_ticks = _ticks_of(first_run_lines)
    # Every tick the agent finished is in the spool whole (68 lines: 61 sampled and each of
    # the 7 samplers' agent_sampler point, the ceilings sampler's with no ceilings measured
    # on the fixture tree among them); the one being
    # written when it died may be there in part (its complete lines), or not at all.
    per_tick = Counter(line.rsplit(" ", 1)[1] for line in first_run_lines)
    sizes = [per_tick[str(tick)] for tick in first_run_ticks]
    assert set(sizes[:-1]) == {61 + 7}, per_tick
    assert set(per_tick) == {str(tick) for tick in first_run_ticks} or (
        len(set(per_tick) - {str(t) for t in first_run_ticks}) == 1  # torn before its self point
    )
    # Slots of `interval` from the first tick to the kill: each had a tick unless the
    # daemon said it skipped it (a loaded machine); at most the last one is missing. The
    # kill lands between the two clock readings around it.
    interval_ns = int(interval * S)
    first_slot = first_run_ticks[0] // interval_ns
    slots_before = before_kill_ns // interval_ns - first_slot + 1
    slots_after = after_kill_ns // interval_ns - first_slot + 1
    skipped = sum(
        int(n) for n in re.findall(r"skipped (\d+) ticks", agent.log.read_text(errors="replace"))
    )
    assert slots_before - skipped - 1 <= len(first_run_ticks) <= slots_after - skipped, (
        slots_before,
        slots_after,
        skipped,
        len(first_run_ticks),
    )

    collector.start()
    try:
        agent.start()  # the same spool: the next run replays it first
        assert harness.wait_until(
            lambda: set(first_run_ticks) <= set(harness.agent_tick_times(collector.db, agent.host)),
            90,
            0.25,
        ), agent.log.read_text()[-3000:]
        assert agent.stop() == 0
    finally:
        if agent.process.poll() is None:
            agent.kill()
        collector.stop()
    stored = harness.stored_points(collector.db, hosts=[agent.host])
    for line in first_run_lines:
        key, values = harness.point_key(line)
        assert stored.get(key) == values, line
    stored_ticks = sorted({key[3] for key in stored if key[1] == AgentSelf.NAME})
    assert stored_ticks[: len(first_run_ticks)] == first_run_ticks  # replayed, once each
    assert len(stored_ticks) == len(first_run_ticks) + agent.ticks_reported[-1]
    log = agent.log.read_text()
    assert "left by the last run will be sent first" in log
    assert os.listdir(agent.spool_dir) == []


@pytest.mark.slow
def test_a_full_spool_drops_the_oldest_counts_them_and_logs_once(tmp_path):
    token, token_file = harness.write_token_file(tmp_path)
    collector = _collector(tmp_path, token_file)  # down until the spool has overflowed
    samplers = ("cpu", "memory", AgentSelf.NAME)
    per_tick = 2 * len(samplers)  # each sampler's point and its agent_sampler point
    agent = harness.Agent(
        host="fullspool",
        workdir=tmp_path / "agent",
        push_url=collector.url,
        token=token,
        interval_seconds=0.2,
        batch_seconds=0.2,
        spool_max_bytes=3000,  # room for about two ticks
        samplers=samplers,
        log_level="debug",
    )
    agent.start()
    try:
        assert harness.wait_until(
            lambda: agent.scrape().get("epochscope_agent_points_dropped_total", 0) >= 30, 60
        ), agent.log.read_text()[-2000:]
        assert agent.process.poll() is None  # full, dropping, and running
        dropped_while_down = agent.scrape()["epochscope_agent_points_dropped_total"]
        spool_bytes = sum(path.stat().st_size for path in agent.spool_dir.glob("*.lp"))
        assert spool_bytes <= 3000
        collector.start()
        assert harness.wait_until(
            lambda: len(harness.agent_tick_times(collector.db, agent.host)) >= 10, 60
        )
        assert agent.stop() == 0
    finally:
        if agent.process.poll() is None:
            agent.kill()
        collector.stop()
    log = agent.log.read_text()
    assert log.count("is full (spool_max_bytes=3000)") == 1, log[-3000:]
    assert "Traceback" not in log
    ticks = agent.ticks_reported[-1]
    stored = harness.stored_points(collector.db, hosts=[agent.host])
    stored_ticks = sorted({key[3] for key in stored if key[1] == AgentSelf.NAME})
    # The last agent point stored carries the dropped count the agent kept.
    last_self = stored[(agent.host, AgentSelf.NAME, (), stored_ticks[-1])]
    dropped = last_self[AgentSelf.POINTS_DROPPED]
    assert dropped >= dropped_while_down and dropped % per_tick == 0
    dropped_ticks = int(dropped) // per_tick
    # Every tick is either stored or dropped, and the dropped ones are the oldest: the
    # stored ticks are consecutive (no hole) after the dropped prefix.
    interval_ns = int(0.2 * S)
    slots = [t // interval_ns for t in stored_ticks]
    skipped = sum(int(n) for n in re.findall(r"skipped (\d+) ticks", log))
    holes = sum(b - a - 1 for a, b in itertools.pairwise(slots))
    assert holes == skipped, (holes, skipped)
    assert len(stored_ticks) + dropped_ticks == ticks
    for key in stored:
        assert key[3] in set(stored_ticks)  # every stored tick is complete
    assert len(stored) == len(stored_ticks) * per_tick
    # the process was not signalled or restarted: one start, one clean stop
    assert log.count("agent started") == 1
    assert signal.SIGTERM.name + ": flushing and stopping" in log
