"""input_wait and storage_bound on runs stored through the write path, built from the facts
of the findings matrix's real runs (issue 42): a cold run on throttled storage waits only in
epoch 1, which the settled epochs leave out; a cold control over a fast disk reads its data
set in epoch 1 but waits no longer for input then than with the set cached."""

from __future__ import annotations

import pytest

from collector.findings.engine import Finding, run_findings
from tests.support.run_builder import RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

MB = 1e6


def findings_of(store, run_id: str, rule: str) -> list[Finding]:
    return [f for f in run_findings(store, run_id) if f.rule == rule]


def cold_run(run_id: str, first_wait: float, settled_wait: float, first_reads: float) -> RunBuilder:
    """Three epochs of one rank: epoch 1 reads ``first_reads`` bytes from storage (of 50 MB
    read) and waits ``first_wait`` of its steps for input; epochs 2 and 3 read the set from
    the page cache and wait ``settled_wait``."""
    run = RunBuilder(run_id, steps_per_epoch=5)
    run.epoch(300, 6400, shares=(first_wait, 0.9 - first_wait, 0.0),
              reads=(int(first_reads), int(50 * MB)))  # fmt: skip
    for _ in range(2):
        run.epoch(
            100, 6400, shares=(settled_wait, 0.9 - settled_wait, 0.0), reads=(0, int(50 * MB))
        )
    return run


def test_a_cold_run_that_waited_on_storage_in_epoch_1_only_is_input_wait_on_storage(make_store):
    """eval-3's cold-throttled-root: epoch 1 waited 84-89% of its steps while the ranks read
    the whole data set from the throttled disk (2.5 MB per image of 2.5 MB), epoch 2 1-8%
    from the page cache."""
    store = make_store(cold_run("cold", 0.88, 0.01, 40 * MB).points())
    (finding,) = findings_of(store, "cold", "input_wait")
    assert finding.evidence["epochs"] == [1]
    assert finding.evidence["cause"] == "storage"
    assert finding.evidence["cold_first_epoch"] is True
    assert finding.severity == "warning"
    assert "Only the first epoch waited: the data set was read from storage" in (
        finding.explanation
    )
    # epoch 1's start-up is still explained as the first reads
    (startup,) = findings_of(store, "cold", "startup")
    assert startup.evidence["cause"] == "reads"


def test_epoch_1_that_waited_as_long_as_the_cached_epochs_is_not_put_on_storage(make_store):
    """eval-3's control-lightning and control-script: epoch 1 read the (cold) data set and
    waited 21-22%, the cached epochs 20-27%: the reads added no wait."""
    store = make_store(cold_run("ctl", 0.22, 0.25, 40 * MB).points())
    (finding,) = findings_of(store, "ctl", "input_wait")
    assert finding.evidence["epochs"] == [2, 3]  # the settled epochs' own finding only
    assert finding.evidence["cause"] != "storage"


def test_graph_building_in_epoch_1_stays_startup(make_store):
    """Epoch 1 slow with no reads and no wait on the loader: start-up, not input wait."""
    run = RunBuilder("build", steps_per_epoch=5, framework="tensorflow")
    run.epoch(300, 6400, shares=(0.02, 0.3, 0.0), reads=(0, int(1 * MB)))
    for _ in range(2):
        run.epoch(100, 6400, shares=(0.02, 0.9, 0.0), reads=(0, int(1 * MB)))
    store = make_store(run.points())
    assert findings_of(store, "build", "input_wait") == []
    (startup,) = findings_of(store, "build", "startup")
    assert startup.evidence["cause"] == "build"


def control_run(run_id: str, first_wait: float) -> RunBuilder:
    """eval-2's control-torchrun r1 (2 ranks on one host, data cold on the root disk): epoch
    1 read the data set at about 54 MB/s with 8% iowait, its steps unsteady (images/s
    coefficient of variation 0.33), input wait ``first_wait`` (18.8% there); epoch 2 read
    nothing from storage, its steps unsteady too (0.21), input wait 24.5%."""
    run = RunBuilder(run_id, ranks_per_host=2, steps_per_epoch=6)
    run.epoch(100, 6_000, step_pattern=(1, 2), shares=(first_wait, 0.7, 0.0),
              cpu_busy=0.9, cpu_iowait=0.08, reads=(int(2_700 * MB), int(2_700 * MB)))  # fmt: skip
    run.epoch(50, 6_000, step_pattern=(1, 1.5), shares=(0.245, 0.7, 0.0), cpu_busy=0.9,
              reads=(0, int(2_700 * MB)))  # fmt: skip
    return run


def test_storage_bound_not_where_the_ranks_waited_as_long_with_the_data_cached(make_store):
    store = make_store(control_run("ctl", 0.188).points())
    assert findings_of(store, "ctl", "storage_bound") == []


def test_storage_bound_where_the_reading_epoch_waited_longer(make_store):
    store = make_store(control_run("slow", 0.6).points())
    (finding,) = findings_of(store, "slow", "storage_bound")
    assert finding.evidence["epochs"] == [1]
    assert finding.evidence["host_epochs"][0]["input_wait_percent"] == pytest.approx(60.0)
