"""The ``epoch_restart`` rule on runs stored through the write path: an epoch's first timed
step against the median of its others, from the stored step events (a PyTorch loop whose
DataLoader workers start again at every epoch), beside its near misses."""

from __future__ import annotations

import pytest

from collector.findings.engine import Finding, run_findings
from contract.schema import Workload
from tests.support.run_builder import RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

STEPS = 40


def findings_of(store, run_id: str) -> list[Finding]:
    return [f for f in run_findings(store, run_id) if f.rule == "epoch_restart"]


def restart_run(
    run_id: str,
    first_step: float,
    framework: str = "pytorch",
    steps: int = STEPS,
    later_epochs: bool = True,
    end_fields: dict[str, object] | None = None,
    **settings,
) -> RunBuilder:
    """Three epochs of ``steps`` 0.1 s steps whose first takes ``first_step`` s (in epoch 1
    always, in the later epochs when ``later_epochs``)."""
    run = RunBuilder(run_id, framework=framework, steps_per_epoch=steps, warmup_steps=2, **settings)
    for epoch in range(3):
        first = first_step if epoch == 0 or later_epochs else 0.1
        pattern = (first / 0.1,) + (1.0,) * (steps - 1)
        run.epoch(first + 0.1 * (steps - 1), 64 * steps, step_pattern=pattern,
                  end_fields=end_fields)  # fmt: skip
    return run


def test_pytorch_workers_starting_at_every_epoch(make_store):
    # 1.5 s first steps against 0.1 s: 1.4 s extra of a 5.4 s epoch, on each of 4 ranks
    store = make_store(restart_run("torch", 1.5, hosts=("n1", "n2"), ranks_per_host=2).points())
    (finding,) = findings_of(store, "torch")
    evidence = finding.evidence
    assert [e["epoch"] for e in evidence["epochs"]] == [2, 3]  # never epoch 1: start-up
    assert evidence["epochs_checked"] == 2
    hit = evidence["epochs"][0]
    assert hit["first_step_seconds"] == pytest.approx(1.5)
    assert hit["other_steps_median_seconds"] == pytest.approx(0.1)
    assert hit["extra_seconds"] == pytest.approx(1.4)
    assert hit["epoch_seconds"] == pytest.approx(5.4)
    assert hit["extra_share"] == pytest.approx(round(1.4 / 5.4, 4))
    assert evidence["framework"] == "pytorch"
    assert (
        finding.title
        == "An epoch's first step took up to 15.0x its others: DataLoader worker start-up"
    )
    assert "persistent_workers=True" in finding.explanation
    assert "In 2 of 2 epochs after the first" in finding.explanation
    assert finding.severity == "warning"  # 26% of every epoch
    assert finding.chart == "images_per_second"


@pytest.mark.parametrize(
    ("framework", "named"),
    [("tensorflow", "tf.data iterator"), ("mxnet", "data loader"), ("custom", "input pipeline")],
)
def test_worded_for_the_runs_framework(make_store, framework, named):
    store = make_store(restart_run("fw", 1.5, framework=framework).points())
    (finding,) = findings_of(store, "fw")
    assert named in finding.explanation
    if framework == "tensorflow":
        assert "persistent_workers" not in finding.explanation


@pytest.mark.parametrize(
    ("first_step", "steps", "later_epochs", "why"),
    [
        (0.1, STEPS, True, "steady steps"),
        (0.25, STEPS, True, "first step 2.5x the others: below 3x"),
        (0.4, 200, True, "4x, but 0.3 s extra is 1.5% of a 20.3 s epoch: below 5%"),
        (1.5, STEPS, False, "only epoch 1 is slow: the run's start-up, not a restart"),
    ],
)
def test_silent_when_no_epoch_restarts(make_store, first_step, steps, later_epochs, why):
    store = make_store(
        restart_run("calm", first_step, steps=steps, later_epochs=later_epochs).points()
    )
    assert findings_of(store, "calm") == [], why


def test_a_loader_that_keeps_its_workers_is_not_told_to_keep_them(make_store):
    """persistent_workers=True with workers: the stated cause (workers starting again) is
    ruled out by the run's own loader, so the finding says what was seen, at info, and
    never advises the setting the run already has (the matrix's healthy PyTorch script:
    0.06 s first steps against 0.019 s, 11% of a 0.37 s epoch, as a warning before)."""
    kept = {Workload.LOADER_WORKERS: 2, Workload.PERSISTENT_WORKERS: 1}  # as ranks send it
    store = make_store(restart_run("kept", 1.5, run_start_fields=kept).points())
    (finding,) = findings_of(store, "kept")
    assert finding.severity == "info"
    assert finding.title.endswith(": the first batch is loaded again")
    assert "its workers were not started again" in finding.explanation
    assert "not known from what the run sent" in finding.explanation
    assert "Create the DataLoader with persistent_workers=True" not in finding.explanation
    assert finding.evidence["persistent_workers"] is True
    # the same steps without persistent workers: the restart, a warning, with the advice
    restarted = {Workload.LOADER_WORKERS: 2, Workload.PERSISTENT_WORKERS: 0}
    store = make_store(restart_run("restarted", 1.5, run_start_fields=restarted).points())
    (finding,) = findings_of(store, "restarted")
    assert finding.severity == "warning"
    assert "Create the DataLoader with persistent_workers=True" in finding.explanation


def test_measured_worker_starts_decide_whether_the_workers_were_kept(make_store):
    """A profiled PyTorch rank sends the workers its training loader started at each epoch's
    start (workloads/autoprofile/torch_hooks.py ``workers_starting``). None started: the
    workers were kept, the longer first step is the new pass's empty prefetch queue, not
    reported (the matrix's healthy script with persistent workers, 1 of 3 runs before).
    Workers started although the run says it keeps them: a DataLoader made anew each epoch."""
    kept = {Workload.LOADER_WORKERS: 2, Workload.PERSISTENT_WORKERS: 1}
    none_started = {Workload.LOADER_WORKERS_STARTED: 0}
    store = make_store(
        restart_run("kept", 1.5, run_start_fields=kept, end_fields=none_started).points()
    )
    assert findings_of(store, "kept") == []
    anew = {Workload.LOADER_WORKERS_STARTED: 2}
    store = make_store(restart_run("anew", 1.5, run_start_fields=kept, end_fields=anew).points())
    (finding,) = findings_of(store, "anew")
    assert finding.severity == "warning"
    assert finding.evidence["loader_workers_started"] == 4  # 2 at each of epochs 2 and 3
    assert finding.title.endswith(": DataLoader worker start-up")
    assert (
        "4 loader worker processes started at those epochs' starts (seen at each DataLoader"
        " pass), although persistent_workers=True: the DataLoader is made anew each epoch"
    ) in finding.explanation
