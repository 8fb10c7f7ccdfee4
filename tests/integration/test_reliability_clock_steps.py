"""Wall-clock steps under a live ``agent run`` and ``collector serve``, without touching
the machine's clock: each process runs with ``tests/support/wallclock_offset.c`` preloaded
(built here with gcc), which moves its ``CLOCK_REALTIME`` by the seconds in a file the
test rewrites, so its wall clock steps while its monotonic clock goes on, as under
``date -s`` or an NTP step. (libfaketime does the same, but with the monotonic clock left
alone its ``clock_nanosleep`` fails Python's ``time.sleep`` with EINVAL in Debian 12's
0.9.10.)

- The agent's clock steps back 3 s, then forward 30 s: its samples stay in time order
  (none stored twice, none overwritten), one warning for each step and one line when
  sampling resumes after the step back.
- The collector's clock steps back an hour, then forward an hour: it stores every point
  (agents stamp their own points; the collector's clock only decides compaction and
  retention windows, an hour off either way moves neither past a point).

Skipped where gcc is missing.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from bench.reliability import harness
from contract.schema import AgentSelf

SHIM_SOURCE = Path(__file__).parents[1] / "support" / "wallclock_offset.c"


def _shim(directory: Path) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the wall-clock shim")
    library = directory / "wallclock_offset.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O2", "-o", str(library), str(SHIM_SOURCE), "-ldl"],
        check=True,
    )
    return library


def _stepped(library: Path, offset_file: Path) -> dict[str, str]:
    offset_file.write_text("0\n")
    return {"LD_PRELOAD": str(library), "WALLCLOCK_OFFSET_FILE": str(offset_file)}


@pytest.mark.slow
def test_clock_steps_keep_samples_in_order_and_every_point_stored(tmp_path, monkeypatch):
    library = _shim(tmp_path)
    agent_offset, collector_offset = tmp_path / "agent.offset", tmp_path / "collector.offset"
    token, token_file = harness.write_token_file(tmp_path)
    collector = harness.Collector(
        db=tmp_path / "collector.sqlite",
        token_file=token_file,
        log=tmp_path / "collector.log",
        port=harness.free_port(),
    )
    agent = harness.Agent(
        host="clockstep",
        workdir=tmp_path / "agent",
        push_url=collector.url,
        token=token,
        interval_seconds=0.2,
        batch_seconds=0.2,
        samplers=("cpu", AgentSelf.NAME),
    )
    real_repo_env = harness.repo_env
    for process, offset in ((collector, collector_offset), (agent, agent_offset)):
        monkeypatch.setattr(
            harness,
            "repo_env",
            lambda offset=offset, **extra: real_repo_env(**_stepped(library, offset)),
        )
        process.start()
    monkeypatch.setattr(harness, "repo_env", real_repo_env)

    def stored_ticks() -> list[int]:
        return harness.agent_tick_times(collector.db, agent.host)

    try:
        assert harness.wait_until(lambda: len(stored_ticks()) >= 5, 60)
        agent_offset.write_text("-3\n")
        assert harness.wait_until(lambda: "sampling resumes" in agent.log.read_text(), 30)
        before_forward = len(stored_ticks())
        agent_offset.write_text("+30\n")
        assert harness.wait_until(lambda: len(stored_ticks()) >= before_forward + 5, 30)
        collector_offset.write_text("-3600\n")
        time.sleep(1.5)
        collector_offset.write_text("+3600\n")
        time.sleep(1.5)
        assert agent.stop() == 0
        time.sleep(0.5)
    finally:
        for process in (agent, collector):
            if process.process is not None and process.process.poll() is None:
                process.kill()
    collector.stop()
    log = agent.log.read_text()
    ticks = stored_ticks()
    assert len(ticks) == agent.ticks_reported[-1]  # every sample stored, none overwritten
    assert ticks == sorted(set(ticks))
    gaps = [(b - a) / 1e9 for a, b in itertools.pairwise(ticks)]
    assert max(gaps) >= 30  # the forward step
    assert log.count("the wall clock was stepped back by") == 1, log[-2000:]
    assert log.count("sampling resumes") == 1
    assert log.count("the wall clock was stepped forward by") == 1, log[-2000:]
    assert "Traceback" not in log + collector.log.read_text()
    print(f"{len(ticks)} ticks stored in order; largest gap {max(gaps):.1f} s")
