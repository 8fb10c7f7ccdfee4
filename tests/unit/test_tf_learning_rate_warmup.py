"""The TensorFlow trainer's linear learning-rate warm-up (issue 42, item 1), checked without
TensorFlow: the rate each step gets. tests/system/test_frameworks_learn.py checks that the
Keras schedule the trainer hands its optimizer gives the same rates."""

from __future__ import annotations

import pytest

from workloads.train.tf_train import learning_rate_warmup_steps, warmup_learning_rate


def test_the_rate_ramps_up_linearly_over_the_first_epoch_then_holds():
    # the demo: 256 pictures, batch 32 on 2 ranks: 4 steps an epoch, the peak 2 x 0.0125
    warmup = learning_rate_warmup_steps(4)
    rates = [warmup_learning_rate(step, 0.025, warmup) for step in range(8)]
    assert warmup == 4
    assert rates == pytest.approx([0.00625, 0.0125, 0.01875, 0.025, 0.025, 0.025, 0.025, 0.025])


def test_a_one_step_epoch_trains_at_the_peak_from_its_first_step():
    assert learning_rate_warmup_steps(0) == 1
    assert warmup_learning_rate(0, 0.1, learning_rate_warmup_steps(1)) == 0.1
