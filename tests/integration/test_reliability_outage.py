"""The outage experiment, short: 2 real agents, the real collector down for 15 s.

The full run (8 agents, 10 minutes, SIGTERM) is ``bench/reliability/outage.py``; this is
the same code with smaller numbers, and harsher: the collector is killed with SIGKILL while
the agents push every second, so a request is often cut mid-way (its points are then sent
again: stored once all the same). Every point the agents sampled is stored exactly once,
with the values they sampled; see the bench's docstring for how sent, stored and lost are
counted.
"""

from __future__ import annotations

import pytest

from bench.reliability import outage

# points a tick of the harness agent on its fixture tree: 61 sampled, and each sampler's
# duration and success (agent_sampler, one point for each of the 7 samplers that ran: the
# ceilings sampler runs with no ceilings measured, and says so by its point)
TICK_POINTS = 61 + 7


@pytest.mark.slow
def test_every_point_sampled_during_an_outage_is_stored_exactly_once(tmp_path):
    results = outage.run(
        agents=2,
        outage_seconds=15,
        warmup_seconds=3,
        after_seconds=2,
        batch_seconds=1,
        workdir=tmp_path,
        show_progress=False,
        catch_up_timeout=90,
        kill=True,
    )
    summary = outage.summary(results)
    assert results["outage_points"] >= 2 * 15 * TICK_POINTS, summary  # >= 15 ticks
    assert results["outage_points_missing"] == 0, summary
    assert results["outage_points_with_other_values"] == 0, summary
    assert results["sent"] > results["outage_points"], summary
    assert results["lost"] == 0, summary
    assert results["stored"] == results["sent"], summary
    assert results["exactly_once"], summary
    assert results["catch_up_seconds"] is not None, summary
    assert results["collector_starts"] == 2
    for host in results["per_host"].values():
        assert host["agent_exit_code"] == 0
        assert host["tick_sizes_seen"] == {TICK_POINTS: host["outage_ticks"]}
