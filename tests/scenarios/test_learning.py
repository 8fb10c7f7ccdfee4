"""Real trainings that diverge, do not learn, or learn: the ``divergence`` and
``not_learning`` findings on real PyTorch runs (``workloads run --profile``, its local
agent and collector), and neither on an ordinary run.

Small on purpose: ResNet-50 at 32 px over the scenarios' 256 pictures of 4 classes (8
steps of 32 per epoch). What each run does is set by its learning rate alone, so the
machine's load changes how long a run takes, never what it learns: the findings here
read the loss and top-1, not the timing.
"""

from __future__ import annotations

import pytest

from tests.scenarios.conftest import run_training

pytestmark = [pytest.mark.slow, pytest.mark.frameworks, pytest.mark.timeout(600)]

LEARNING_RULES = {"divergence", "not_learning"}
SMALL = ("--image-size", "32", "--batch-size", "32", "--loader-workers", "1")


def pytorch_run(tmp_path, scenario_data, repo_env, run_id: str, *args: str):
    pytest.importorskip("torch")
    data = scenario_data("pytorch")
    return run_training(
        tmp_path, run_id, "--framework", "pytorch", "--data-dir", str(data), *SMALL, *args,
        env=repo_env,
    )  # fmt: skip


def test_a_huge_learning_rate_diverges(tmp_path, scenario_data, repo_env):
    # SGD at learning rate 1000: the weights blow up within epoch 1
    # (4 steps, no validation: the loss alone decides)
    run = pytorch_run(tmp_path, scenario_data, repo_env, "diverges", "--epochs", "1",
                      "--steps-per-epoch", "4", "--no-validate",
                      "--learning-rate", "1000")  # fmt: skip
    finding = run.finding("divergence")
    print(finding["title"], finding["evidence"])
    assert finding["severity"] == "critical"
    assert finding["evidence"]["epoch"] == 1
    # within 4 steps the loss overflows: to NaN or Inf, or (seen) a finite 3.4e14, 2.4e14x
    # a uniform guess's, depending on the step it blows up in
    assert finding["evidence"]["kind"] in ("not_finite", "above_uniform")
    assert "not_learning" not in run.rules  # the divergence is the cause


def test_a_learning_rate_of_zero_does_not_learn(tmp_path, scenario_data, repo_env):
    # nothing changes the weights: the loss stays where it started (epoch to epoch it
    # differs only by which pictures and crops each batch got) and top-1 stays at 1/4
    # (4 of the 8 steps per epoch: 128 pictures, enough for a steady mean loss)
    run = pytorch_run(tmp_path, scenario_data, repo_env, "stalls", "--epochs", "2",
                      "--steps-per-epoch", "4", "--learning-rate", "0")  # fmt: skip
    finding = run.finding("not_learning")
    evidence = finding["evidence"]
    print(finding["title"], evidence)
    assert evidence["judged_by"] == "top1"
    assert evidence["chance_top1_fraction"] == 0.25
    assert evidence["best_top1_fraction"] <= 1.5 * 0.25
    assert evidence["loss_falls"] is False
    assert "divergence" not in run.rules


def test_an_ordinary_run_that_learns_gets_neither(tmp_path, scenario_data, repo_env):
    # the default learning rate: PyTorch reaches top-1 1.0 on this set within 2 epochs
    run = pytorch_run(tmp_path, scenario_data, repo_env, "learns", "--epochs", "2")
    print("learns:", run.stdout[-600:])
    assert not run.rules & LEARNING_RULES, run.findings
