"""Rules on whether a run learns: ``not_learning`` and ``divergence``, over the run's
learning curve (``collector.analysis.learning``: per epoch, the ranks' mean training loss
and validation top-1 from their ``epoch_end`` events).

``divergence``
    An epoch's mean training loss was NaN or Inf on some rank (``loss_not_finite``): at
    once. Otherwise more than one epoch must say so (a freshly initialised network's loss
    swings for an epoch: make demo's 7.83, 11.62, 6.59 with 10 classes is no divergence):
    the loss stayed at least ``DIVERGENCE_RATIO`` times the run's best so far (the lowest
    loss of the epochs before) over ``DIVERGENCE_EPOCHS`` consecutive epochs, each back
    above a uniform guess's (so 0.001 -> 0.004 near convergence is no divergence; without
    the number of classes: above the first epoch's), or it was at least
    ``UNIFORM_LOSS_MULTIPLE`` times the loss of a uniform guess (``ln(classes)``) in
    ``DIVERGENCE_EPOCHS`` epochs (``OVERFLOW_UNIFORM_MULTIPLE`` times in one: overflowed
    weights, like NaN): a model that bad is confidently wrong. The stated cause
    comes from what the run sent: FP16 only where its ``precision`` is fp16; the bundled
    trainers send no learning rate or warm-up, so otherwise the cause is not known.
``not_learning``
    Over at least ``MIN_EPOCHS`` ended epochs the run stayed at chance: validation top-1
    at most ``CHANCE_RATIO`` times ``1/classes`` in every epoch, or (without validation)
    a loss at least ``UNIFORM_LOSS_SHARE`` of a uniform guess's in every epoch and not
    falling. Worded
    two ways: the loss did not fall either (by less than ``LOSS_FALL_MIN`` from the first
    epoch to the last: nothing is learned), or it fell while top-1 stayed at chance (what
    is learned does not carry to validation: the batch-norm moving statistics, a label
    or preprocessing mismatch between the splits). Not judged when the run diverged: the
    divergence is the cause.

Neither rule sees a loss that is not cross-entropy over the classes (the uniform-guess
level then means nothing), nor a run that learns only after its last epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from collector.analysis.learning import (
    EpochLearning,
    chance_top1,
    classes_of,
    learning_curve,
    uniform_guess_loss,
)
from collector.findings.base import CRITICAL, WARNING, Finding, digits, evidence_json, words
from collector.findings.context import RunContext
from contract.schema import Workload

MIN_EPOCHS = 2


CHANCE_RATIO = 1.5  # 0.375 for 4 classes: 2.3 standard deviations above chance on 64 pictures


UNIFORM_LOSS_SHARE = 0.9  # without validation: a loss >= 90 % of ln(classes) is at chance


# without validation, the training loss is judged only after this many steps per rank: in
# its first steps a freshly initialised network's loss swings above a uniform guess's
# before it falls (make demo's 12 steps: 6.3, 8.8, 7.0 against ln 10 = 2.3)
MIN_LOSS_STEPS = 100


LOSS_FALL_MIN = 0.10  # the last epoch's loss at least 10 % below the first's: it falls


DIVERGENCE_RATIO = 3.0


UNIFORM_LOSS_MULTIPLE = 5.0  # 6.9 for 4 classes, 34.5 for 1000


DIVERGENCE_EPOCHS = 2  # epochs that must show growth or a loss far above a uniform guess's


# a loss this many times a uniform guess's counts at once, like NaN: the weights overflowed
# (a learning rate of 1000 ends its one epoch at 3.35e14 for 4 classes), far beyond the
# swings of a freshly initialised network (make demo's worst epoch: 5.05x)
OVERFLOW_UNIFORM_MULTIPLE = 1000.0


class DivergenceKind:
    NOT_FINITE = "not_finite"
    GREW = "grew"
    ABOVE_UNIFORM = "above_uniform"


class DivergenceCause:
    FP16 = "fp16"  # the run's precision is fp16: gradients can overflow without loss scaling
    NOT_KNOWN = "not_known"  # nothing the run sent points at one


@dataclass(frozen=True)
class Divergence:
    """The first epoch whose loss says the training diverged, and how."""

    epoch: int  # the epoch that completed the evidence
    kind: str  # DivergenceKind
    loss: float | None = field(metadata=digits(4))  # None: NaN or Inf
    first_epoch: int | None = None  # the first epoch of the growth or of the losses above
    lowest_loss_before: float | None = field(default=None, metadata=digits(4))
    lowest_loss_epoch: int | None = None
    uniform_guess_loss: float | None = field(default=None, metadata=digits(4))
    losses: list[float | None] = field(default_factory=list)  # per epoch, None: NaN/Inf
    precision: str | None = None  # the run's run_start precision, if sent
    cause: str = DivergenceCause.NOT_KNOWN  # DivergenceCause
    threshold_ratio: float = DIVERGENCE_RATIO
    threshold_uniform_multiple: float = UNIFORM_LOSS_MULTIPLE
    threshold_epochs: int = DIVERGENCE_EPOCHS


@dataclass(frozen=True)
class NotLearning:
    """The run stayed at chance over ``epochs`` epochs."""

    epochs: int
    classes: int
    judged_by: str  # "top1" (validation) or "loss" (no validation)
    chance_top1_fraction: float = field(metadata=digits(4))
    best_top1_fraction: float | None = field(metadata=digits(4))
    uniform_guess_loss: float = field(metadata=digits(4))
    first_loss: float | None = field(metadata=digits(4))
    last_loss: float | None = field(metadata=digits(4))
    loss_falls: bool
    top1: list[float | None] = field(default_factory=list)  # per epoch
    losses: list[float | None] = field(default_factory=list)
    threshold_chance_ratio: float = CHANCE_RATIO


def _losses(curve: list[EpochLearning]) -> list[float | None]:
    return [None if e.loss_not_finite else e.loss for e in curve]


def _cause_of(precision: str | None) -> str:
    return DivergenceCause.FP16 if precision == "fp16" else DivergenceCause.NOT_KNOWN


def divergence(
    curve: list[EpochLearning], classes: int | None, precision: str | None = None
) -> Divergence | None:
    """The epoch by which the training had diverged (see the module's note), or None;
    ``precision``: the run's, the only cause the run's config can show."""
    uniform = uniform_guess_loss(classes) if classes else None
    finite = [e.loss for e in curve if e.loss is not None and not e.loss_not_finite]
    curve_start = finite[0] if finite else 0.0
    found = partial(
        Divergence,
        uniform_guess_loss=uniform,
        losses=_losses(curve),
        precision=precision,
        cause=_cause_of(precision),
    )
    lowest: EpochLearning | None = None  # the run's best so far
    grown: list[EpochLearning] = []  # consecutive epochs >= DIVERGENCE_RATIO x the best
    grown_against: EpochLearning | None = None  # the best they grew against
    far_above: list[EpochLearning] = []  # epochs >= UNIFORM_LOSS_MULTIPLE x a uniform guess's
    for epoch in curve:
        if epoch.loss_not_finite:
            return found(
                epoch=epoch.epoch,
                kind=DivergenceKind.NOT_FINITE,
                loss=None,
                lowest_loss_before=lowest.loss if lowest else None,
                lowest_loss_epoch=lowest.epoch if lowest else None,
            )
        if epoch.loss is None:
            continue
        against = grown_against if grown else lowest
        if (
            against is not None
            and epoch.loss >= DIVERGENCE_RATIO * (against.loss or 0)
            and epoch.loss >= (uniform if uniform is not None else curve_start)
        ):
            grown, grown_against = [*grown, epoch], against
        else:
            grown, grown_against = [], None
        if uniform is not None and epoch.loss >= UNIFORM_LOSS_MULTIPLE * uniform:
            far_above.append(epoch)
        overflowed = uniform is not None and epoch.loss >= OVERFLOW_UNIFORM_MULTIPLE * uniform
        if len(grown) >= DIVERGENCE_EPOCHS and grown_against is not None:
            return found(
                epoch=epoch.epoch,
                kind=DivergenceKind.GREW,
                loss=epoch.loss,
                first_epoch=grown[0].epoch,
                lowest_loss_before=grown_against.loss,
                lowest_loss_epoch=grown_against.epoch,
            )
        if len(far_above) >= DIVERGENCE_EPOCHS or overflowed:
            return found(
                epoch=epoch.epoch,
                kind=DivergenceKind.ABOVE_UNIFORM,
                loss=epoch.loss,
                first_epoch=far_above[0].epoch,
            )
        if lowest is None or (lowest.loss is not None and epoch.loss < lowest.loss):
            lowest = epoch
    return None


def not_learning(
    curve: list[EpochLearning], classes: int | None, steps: int | None = None
) -> NotLearning | None:
    """The run at chance over at least ``MIN_EPOCHS`` epochs (see the module's note);
    ``steps``: its ranks' steps, which must reach ``MIN_LOSS_STEPS`` for the training loss
    alone (no validation) to decide."""
    if classes is None or divergence(curve, classes) is not None:
        return None
    chance, uniform = chance_top1(classes), uniform_guess_loss(classes)
    top1 = [e.top1 for e in curve if e.top1 is not None]
    losses = [e.loss for e in curve if e.loss is not None]
    if len(top1) >= MIN_EPOCHS:
        judged_by, at_chance = "top1", max(top1) <= CHANCE_RATIO * chance
    elif len(losses) >= MIN_EPOCHS and (steps is None or steps >= MIN_LOSS_STEPS):
        judged_by, at_chance = "loss", min(losses) >= UNIFORM_LOSS_SHARE * uniform
    else:
        return None
    if not at_chance:
        return None
    first, last = (losses[0], losses[-1]) if losses else (None, None)
    falls = first is not None and last is not None and last < (1 - LOSS_FALL_MIN) * first
    if falls and judged_by == "loss":  # falling towards a uniform guess's: it learns
        return None
    return NotLearning(
        epochs=len(curve),
        classes=classes,
        judged_by=judged_by,
        chance_top1_fraction=chance,
        best_top1_fraction=max(top1) if top1 else None,
        uniform_guess_loss=uniform,
        first_loss=first,
        last_loss=last,
        loss_falls=falls,
        top1=[e.top1 for e in curve],
        losses=_losses(curve),
    )


def detect_divergence(context: RunContext) -> Divergence | None:
    precision = context.config.get(Workload.PRECISION)
    return divergence(
        learning_curve(context.model),
        classes_of(context.config),
        precision if isinstance(precision, str) else None,
    )


def detect_not_learning(context: RunContext) -> NotLearning | None:
    counted = [r.global_step for r in context.model.records if r.global_step is not None]
    steps = int(max(counted)) if counted else None  # None: its ranks sent no step count
    return not_learning(learning_curve(context.model), classes_of(context.config), steps)


def _loss_text(value: float | None) -> str:
    if value is None:
        return "NaN/Inf"
    return f"{value:.3f}" if abs(value) < 1000 else f"{value:.3g}"  # 3.35e+14


def _times(ratio: float) -> str:
    return f"{ratio:.1f}x" if ratio < 1000 else f"{ratio:.2g}x"


def _series(values: list[float | None]) -> str:
    shown = ", ".join(_loss_text(v) for v in values[:8])
    return shown + (", ..." if len(values) > 8 else "")


def _divergence_cause(found: Divergence) -> str:
    if found.cause == DivergenceCause.FP16:
        return (
            "The run trains in FP16 (its precision): without loss scaling its gradients "
            "overflow, a possible cause; it sent no learning rate or warm-up to judge those by."
        )
    return (
        "The cause is not known from what the run sent (its precision is "
        f"{found.precision or 'not sent'}; it sent no learning rate or warm-up)."
    )


@words.register
def word_divergence(found: Divergence) -> Finding:
    span = f"epochs {found.first_epoch}..{found.epoch}"
    if found.kind == DivergenceKind.NOT_FINITE:
        title = f"The training diverged: epoch {found.epoch}'s loss was NaN or Inf"
        how = (
            f"In epoch {found.epoch} its mean training loss was not a number (NaN) or "
            "infinite on some rank"
        )
    elif found.kind == DivergenceKind.GREW:
        ratio = (found.loss or 0) / max(found.lowest_loss_before or 0, 1e-12)
        title = f"The training diverged: the loss grew {_times(ratio)} by epoch {found.epoch}"
        how = (
            f"Over {span} its mean training loss stayed at least "
            f"{found.threshold_ratio:.0f}x the run's best before them (epoch "
            f"{found.lowest_loss_epoch}'s {_loss_text(found.lowest_loss_before)}), reaching "
            f"{_loss_text(found.loss)} ({_times(ratio)})"
        )
    else:
        multiple = (found.loss or 0) / (found.uniform_guess_loss or 1)
        title = (
            f"The training is unstable: epoch {found.epoch}'s loss is {_times(multiple)} a "
            "uniform guess's"
        )
        if found.first_epoch == found.epoch:
            how = (
                f"In epoch {found.epoch} its mean training loss, {_loss_text(found.loss)}, "
                f"was {_times(multiple)} the loss of a uniform guess over the classes "
                f"({found.uniform_guess_loss:.3f}; {OVERFLOW_UNIFORM_MULTIPLE:.0f}x counts in "
                "one epoch): the weights overflowed"
            )
        else:
            how = (
                f"In {span} its mean training loss was at least "
                f"{found.threshold_uniform_multiple:.0f}x the loss of a uniform guess over "
                f"the classes ({found.uniform_guess_loss:.3f}) in {found.threshold_epochs} "
                f"epochs, epoch {found.epoch}'s {_loss_text(found.loss)} {_times(multiple)}: "
                "the model is confidently wrong"
            )
    return Finding(
        rule="divergence",
        severity=CRITICAL,
        title=title,
        explanation=(
            f"{how}. Loss per epoch: {_series(found.losses)}. {_divergence_cause(found)} "
            "Its throughput is real, but it buys no accuracy."
        ),
        evidence=evidence_json(found),
    )


@words.register
def word_not_learning(found: NotLearning) -> Finding:
    top1 = ", ".join("-" if v is None else f"{v:.3f}" for v in found.top1[:8])
    if found.judged_by == "top1":
        at_chance = (
            f"validation top-1 stayed at chance over {found.epochs} epochs (best "
            f"{found.best_top1_fraction:.3f}; chance is 1/{found.classes} = "
            f"{found.chance_top1_fraction:.3f}; per epoch: {top1})"
        )
    else:
        at_chance = (
            f"without validation, the training loss stayed at a uniform guess's over "
            f"{found.epochs} epochs (ln {found.classes} = {found.uniform_guess_loss:.3f})"
        )
    if found.loss_falls:
        title = "The training loss falls but validation top-1 stays at chance"
        why = (
            f"The training loss fell from {_loss_text(found.first_loss)} to "
            f"{_loss_text(found.last_loss)}, so the model fits its training batches, but "
            "what it learned does not reach validation: in evaluation mode batch-norm uses "
            "its moving statistics (behind weights that grow fast, they no longer describe "
            "the activations), or validation's labels or preprocessing differ from "
            "training's."
        )
    else:
        title = "The training does not learn: top-1 at chance and the loss not falling"
        if found.judged_by == "loss":
            title = "The training does not learn: the loss stays at a uniform guess's"
        why = (
            f"The training loss did not fall either ({_series(found.losses)}): a learning "
            "rate of zero or too small, frozen weights, labels shuffled or not matching the "
            "pictures, or an input pipeline that feeds the same or blank pictures."
        )
    return Finding(
        rule="not_learning",
        severity=WARNING,
        title=title,
        explanation=f"{at_chance[0].upper()}{at_chance[1:]}. {why}",
        evidence=evidence_json(found),
    )
