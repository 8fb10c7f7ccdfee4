"""The ``divergence`` and ``not_learning`` rules on runs stored through the write path: each
rank's ``epoch_end`` carries its mean training loss (or ``loss_not_finite`` when that was
NaN or Inf, which line protocol cannot carry) and validation top-1; ``run_start`` the
number of classes (chance). Beside each, its near misses."""

from __future__ import annotations

import math

import pytest

from collector.analysis.learning import learning_curve
from collector.analysis.run import read_run
from collector.findings.engine import Finding, run_findings
from tests.support.run_builder import RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

LEARNING_RULES = ("divergence", "not_learning")


def learning_run(
    run_id: str,
    losses: list[float | None],
    top1: list[float | None] | None = None,
    classes: int | None = 4,
    **settings,
) -> RunBuilder:
    run = RunBuilder(run_id, framework="pytorch", num_classes=classes, **settings)
    for index, loss in enumerate(losses):
        run.epoch(10.0, 256, loss=loss, top1=top1[index] if top1 else None)
    return run


def findings_of(store, run_id: str) -> list[Finding]:
    return [f for f in run_findings(store, run_id) if f.rule in LEARNING_RULES]


def test_the_curve_is_read_from_every_ranks_epoch_end(make_store):
    run = learning_run("curve", [1.5, math.nan, 0.4], [0.25, 0.3, 0.9], ranks_per_host=2)
    store = make_store(run.points())
    curve = learning_curve(read_run(store, "curve"))
    assert [(e.epoch, e.loss, e.loss_not_finite, e.top1) for e in curve] == [
        (1, 1.5, False, 0.25),
        (2, None, True, 0.3),  # NaN did not travel: the flag did
        (3, 0.4, False, 0.9),
    ]


def test_a_loss_that_turns_nan_is_divergence(make_store):
    store = make_store(learning_run("nan", [2.1, math.inf, math.nan], [0.25] * 3).points())
    (finding,) = findings_of(store, "nan")  # not also not_learning: divergence is the cause
    assert finding.rule == "divergence"
    assert finding.severity == "critical"
    assert finding.title == "The training diverged: epoch 2's loss was NaN or Inf"
    assert finding.evidence["epoch"] == 2
    assert finding.evidence["kind"] == "not_finite"
    assert finding.evidence["losses"] == [2.1, None, None]
    assert "Loss per epoch: 2.100, NaN/Inf, NaN/Inf" in finding.explanation
    # the run sent no learning rate and trains in FP32: no cause is named from a list
    assert finding.evidence["cause"] == "not_known"
    assert "The cause is not known from what the run sent" in finding.explanation
    assert "learning rate too high" not in finding.explanation


def test_a_real_divergence_fires(make_store):
    # a learning rate far too high: the loss climbs, then turns NaN
    store = make_store(learning_run("real", [1.5, 4.0, 9.0, math.nan], classes=10).points())
    (finding,) = findings_of(store, "real")
    assert (finding.evidence["kind"], finding.evidence["epoch"]) == ("not_finite", 4)


def test_a_loss_staying_several_fold_above_the_best_for_two_epochs_is_divergence(make_store):
    store = make_store(learning_run("grew", [2.0, 2.1, 8.0, 9.5], classes=10).points())
    (finding,) = findings_of(store, "grew")
    evidence = finding.evidence
    assert (evidence["kind"], evidence["first_epoch"], evidence["epoch"]) == ("grew", 3, 4)
    assert (evidence["lowest_loss_before"], evidence["lowest_loss_epoch"]) == (2.0, 1)
    assert finding.title == "The training diverged: the loss grew 4.8x by epoch 4"
    assert "Over epochs 3..4 its mean training loss stayed at least 3x the run's best" in (
        finding.explanation
    )


def test_the_demos_one_epoch_transient_is_no_divergence(make_store):
    # make demo's false CRITICAL (issue 42 item 1): epoch 2's 11.62 is 5.05x ln 10, one
    # epoch of a freshly initialised network
    store = make_store(learning_run("demo", [7.83, 11.62, 6.59], classes=10).points())
    assert [f for f in findings_of(store, "demo") if f.rule == "divergence"] == []


def test_fp16_is_named_only_when_the_run_trains_in_fp16(make_store):
    run = learning_run("fp16", [2.0, math.nan], classes=10, precision="fp16")
    (finding,) = findings_of(make_store(run.points()), "fp16")
    assert finding.evidence["cause"] == "fp16"
    assert "The run trains in FP16" in finding.explanation


def test_a_loss_far_above_a_uniform_guess_in_two_epochs_is_divergence(make_store):
    # the bundled MXNet trainer before its fix: losses of 10-24 for 4 classes (ln 4 = 1.39)
    store = make_store(learning_run("mx", [12.0, 24.0, 10.0], [0.25] * 3).points())
    (finding,) = findings_of(store, "mx")
    assert finding.rule == "divergence"
    assert finding.evidence["kind"] == "above_uniform"
    assert (finding.evidence["first_epoch"], finding.evidence["epoch"]) == (1, 2)
    assert finding.evidence["uniform_guess_loss"] == pytest.approx(round(math.log(4), 4))
    assert finding.title == "The training is unstable: epoch 2's loss is 17.3x a uniform guess's"


def test_a_flat_loss_at_chance_does_not_learn(make_store):
    # learning rate 0: the loss stays where it started, top-1 at 1/4
    store = make_store(learning_run("flat", [1.45, 1.43, 1.44], [0.25, 0.28, 0.23]).points())
    (finding,) = findings_of(store, "flat")
    assert finding.rule == "not_learning"
    assert finding.severity == "warning"
    assert finding.title == "The training does not learn: top-1 at chance and the loss not falling"
    evidence = finding.evidence
    assert evidence["judged_by"] == "top1"
    assert evidence["chance_top1_fraction"] == 0.25
    assert evidence["best_top1_fraction"] == 0.28
    assert evidence["loss_falls"] is False
    assert evidence["classes"] == 4
    assert "chance is 1/4 = 0.250" in finding.explanation


def test_a_falling_loss_with_top1_at_chance_names_validation(make_store):
    # the bundled MXNet trainer before its fix, on a quiet run: the loss fell, top-1 did not
    store = make_store(learning_run("val", [3.32, 1.63, 0.29], [0.25, 0.25, 0.25]).points())
    (finding,) = findings_of(store, "val")
    assert finding.title == "The training loss falls but validation top-1 stays at chance"
    assert finding.evidence["loss_falls"] is True
    assert "batch-norm" in finding.explanation


def test_without_validation_the_loss_is_judged_against_a_uniform_guess(make_store):
    run = learning_run("noval", [1.39, 1.40], steps_per_epoch=60)
    for spec in run.epochs:
        spec.shares = (0.0, 0.9, 0.0)
    store = make_store(run.points())
    (finding,) = findings_of(store, "noval")
    assert finding.evidence["judged_by"] == "loss"
    assert finding.title == "The training does not learn: the loss stays at a uniform guess's"


def test_without_validation_a_few_steps_are_too_few_to_judge(make_store):
    # make demo: 3 epochs of 4 steps, loss 6.3, 8.8, 7.0 against ln 10 = 2.3: a freshly
    # initialised network's first steps, not a training that cannot learn
    run = learning_run("demo", [6.303, 8.792, 7.009], classes=10, steps_per_epoch=4)
    for spec in run.epochs:  # the ranks' epoch_end carry their step count (with the anatomy)
        spec.shares = (0.0, 0.9, 0.0)
    assert findings_of(make_store(run.points()), "demo") == []


def test_huge_losses_are_written_short(make_store):
    # a learning rate of 1000 in one epoch of 4 steps: overflowed weights count at once
    store = make_store(learning_run("huge", [3.35e14]).points())
    (finding,) = findings_of(store, "huge")
    assert finding.title == "The training is unstable: epoch 1's loss is 2.4e+14x a uniform guess's"
    assert "its mean training loss, 3.35e+14, was 2.4e+14x the loss" in finding.explanation


@pytest.mark.parametrize(
    ("losses", "top1", "classes", "why"),
    [
        ([1.2, 0.5, 0.1], [0.4, 0.8, 1.0], 4, "it learns"),
        ([1.4, 1.3], [0.25, 0.38], 4, "top-1 0.38 > 1.5 x chance"),
        ([1.2, 0.6], [0.25, None], 4, "top-1 in one epoch only, loss well under ln 4"),
        ([1.4], [0.25], 4, "one epoch is too few to judge"),
        ([1.4, 1.4, 1.4], [0.25] * 3, None, "no number of classes: no chance level"),
        ([1.2, 0.9], None, 4, "no validation, loss well under ln 4"),
        ([3.0, 1.3], None, 4, "no validation, loss above ln 4 but falling"),
        ([0.002, 0.001, 0.004], [1.0] * 3, 4, "4x near zero is no divergence"),
        ([6.0, 5.0], [0.6, 0.7], 1000, "6.0 is under 5 x ln 1000"),
        ([1.3, 0.9, 3.0], [0.3, 0.5, 0.4], 4, "3.3x its best in one epoch only"),
        ([2.0, 2.1, 8.0, 3.0], [0.3] * 4, 10, "one epoch at 4x its best, then back"),
        ([12.0, 1.3, 1.2], [0.3, 0.6, 0.8], 4, "far above a uniform guess in one epoch only"),
    ],
)
def test_near_misses(make_store, losses, top1, classes, why):
    store = make_store(learning_run("near", losses, top1, classes).points())
    assert findings_of(store, "near") == [], why
