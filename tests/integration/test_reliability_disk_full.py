"""A full spool disk, the collector down and a kill -9: real ``agent run`` and ``collector
serve`` processes, the spool on a real 256 KiB tmpfs filled to its last byte.

What a full disk costs is exactly the points the agent held in memory when it was killed:
the ticks sampled since the disk filled (nothing durable could take them). Everything
spooled before is kept and replayed, the restarted agent samples into memory on the still
full disk with one log line, and the spool takes writes again once space returns.

Needs root for ``mount``; skipped elsewhere.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from bench.reliability import harness
from contract.schema import AgentSelf
from tests.integration.test_agent_spool_faults import fill

SAMPLERS = ("cpu", "memory", AgentSelf.NAME)
PER_TICK = 2 * len(SAMPLERS)  # each sampler's point and its agent_sampler point


def _ticks(lines: list[str]) -> list[int]:
    prefix = AgentSelf.NAME + ","
    return sorted(int(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(prefix))


@pytest.fixture
def agent_on_small_disk(tmp_path):
    token, token_file = harness.write_token_file(tmp_path)
    collector = harness.Collector(
        db=tmp_path / "collector.sqlite",
        token_file=token_file,
        log=tmp_path / "collector.log",
        port=harness.free_port(),
    )
    agent = harness.Agent(
        host="diskfull",
        workdir=tmp_path / "agent",
        push_url=collector.url,
        token=token,
        interval_seconds=0.2,
        batch_seconds=0.2,
        samplers=SAMPLERS,
    )
    agent.spool_dir.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(agent.spool_dir)],
        capture_output=True,
    )
    if os.geteuid() != 0 or mounted.returncode != 0:
        pytest.skip("needs root and tmpfs mounts for a real full disk")
    yield agent, collector
    for process in (agent, collector):
        if process.process is not None and process.process.poll() is None:
            process.kill()
    subprocess.run(["umount", "-l", str(agent.spool_dir)], capture_output=True)


@pytest.mark.slow
def test_full_disk_and_kill_9_lose_only_the_points_held_in_memory(agent_on_small_disk):
    agent, collector = agent_on_small_disk
    agent.start()  # the collector is down from the start
    assert harness.wait_until(lambda: len(agent.spooled_lines()) >= 5 * PER_TICK, 60)
    filler = fill(agent.spool_dir)
    assert harness.wait_until(lambda: agent.scrape().get("epochscope_agent_spool_error") == 1, 30)
    # Still sampling, into memory.
    assert harness.wait_until(
        lambda: agent.scrape().get("epochscope_agent_memory_points", 0) >= 5 * PER_TICK, 30
    )
    held_at_last_look = agent.scrape()["epochscope_agent_memory_points"]
    agent.kill()
    first_run_lines = agent.spooled_lines()
    spooled_ticks = _ticks(first_run_lines)
    assert len(spooled_ticks) >= 5
    first_log_size = agent.log.stat().st_size

    agent.start()  # the disk is still full, the collector still down
    assert harness.wait_until(
        lambda: agent.scrape().get("epochscope_agent_memory_points", 0) >= 3 * PER_TICK, 30
    ), agent.log.read_text()[-2000:]
    assert agent.scrape()["epochscope_agent_spool_error"] == 1
    collector.start()
    assert harness.wait_until(
        lambda: set(spooled_ticks) <= set(harness.agent_tick_times(collector.db, agent.host)),
        60,
        0.25,
    ), agent.log.read_text()[-2000:]
    filler.unlink()  # space returns: the spool takes writes again
    assert harness.wait_until(lambda: agent.scrape().get("epochscope_agent_spool_error") == 0, 30)
    assert harness.wait_until(lambda: agent.scrape().get("epochscope_agent_memory_points") == 0, 30)
    assert agent.stop() == 0
    collector.stop()

    second_log = agent.log.read_bytes()[first_log_size:].decode(errors="replace")
    assert second_log.count("cannot write (No space left on device)") == 1, second_log[-3000:]
    assert second_log.count("write works again") == 1
    assert "Traceback" not in agent.log.read_text()
    stored = harness.stored_points(collector.db, hosts=[agent.host])
    for line in first_run_lines:  # everything spooled before the kill, with its values
        key, values = harness.point_key(line)
        assert stored.get(key) == values, line
    stored_ticks = sorted({key[3] for key in stored if key[1] == AgentSelf.NAME})
    # Stored: every spooled tick of the first run, then every tick of the second (it
    # stopped cleanly). Lost: the first run's ticks after its last spooled one, held in
    # memory at the kill -- at least as many as /metrics showed just before it.
    second_run_ticks = stored_ticks[len(spooled_ticks) :]
    assert stored_ticks[: len(spooled_ticks)] == spooled_ticks
    assert len(second_run_ticks) == agent.ticks_reported[-1]
    lost_ticks = int(held_at_last_look) // PER_TICK
    assert lost_ticks >= 5
    assert second_run_ticks[0] - spooled_ticks[-1] >= (lost_ticks + 1) * 200_000_000
    print(
        f"spooled and kept {len(spooled_ticks)} ticks; lost with memory at the kill "
        f">= {lost_ticks} ticks ({int(held_at_last_look)} points); second run "
        f"{len(second_run_ticks)} ticks all stored"
    )
