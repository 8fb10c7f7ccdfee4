"""A run's learning curve: per epoch, its ranks' mean training loss and validation top-1,
from their ``epoch_end`` events (``collector.analysis.run.RankEpochRecord``), and what a
model that learned nothing scores (chance).

Chance is what a model that learned nothing scores: top-1 ``1/classes`` and, for the
cross-entropy loss every bundled trainer uses, ``ln(classes)`` (the loss of a uniform
guess). The number of classes is the ``num_classes`` of the run's ``run_start``; a run that
does not send it has no chance level, and the rules that need one say nothing.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from collector.analysis.run import RankEpochRecord, RunModel
from contract.schema import Workload


@dataclass(frozen=True)
class EpochLearning:
    """One ended epoch of a run, over the ranks that ended it."""

    epoch: int
    loss: float | None  # mean over ranks of their mean training loss (finite ones only)
    loss_not_finite: bool  # a rank's mean loss was NaN or Inf
    top1: float | None  # validation top-1, mean over ranks (all-reduced: the same on each)

    @property
    def has_loss(self) -> bool:
        return self.loss is not None or self.loss_not_finite


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def learning_curve(model: RunModel) -> list[EpochLearning]:
    """The run's ended epochs in order, each with its loss and top-1 (None: not sent)."""
    by_epoch: dict[int, list[RankEpochRecord]] = defaultdict(list)
    for record in model.records:
        if record.ended:
            by_epoch[record.epoch].append(record)
    curve = []
    for epoch in sorted(by_epoch):
        records = by_epoch[epoch]
        curve.append(
            EpochLearning(
                epoch=epoch,
                loss=_mean([r.loss for r in records if r.loss is not None]),
                loss_not_finite=any(r.loss_not_finite for r in records),
                top1=_mean([r.top1 for r in records if r.top1 is not None]),
            )
        )
    return curve


def classes_of(config: dict[str, Any]) -> int | None:
    """The run's number of classes (``num_classes`` of its ``run_start``), if at least 2."""
    value = config.get(Workload.NUM_CLASSES)
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 2:
        return int(value)
    return None


def chance_top1(classes: int) -> float:
    """Top-1 of a model that learned nothing: one class in ``classes``."""
    return 1.0 / classes


def uniform_guess_loss(classes: int) -> float:
    """Cross-entropy of a uniform guess over ``classes``: ``ln(classes)`` (1.386 for 4)."""
    return math.log(classes)
