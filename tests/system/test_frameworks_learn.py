"""Every bundled framework learns: a few epochs on the synthetic data beat chance.

TensorFlow once stayed at exactly chance (top-1 0.125 for 8 classes over 8 epochs) while
PyTorch reached 0.75: Keras' batch-norm momentum (0.99) left the moving statistics that
validation uses near their initial values, so every picture got the same class. Time to
accuracy means nothing unless this holds. Small on purpose: 4 classes, 256 pictures of
32 px, batch 16, one process, no collector (the run's events file); as few epochs as each
framework needs on this data (measured: PyTorch top-1 1.0 after 1 epoch, MXNet 0.25 then
1.0, TensorFlow 0.25, 0.37, 0.5). On a loaded 2-core machine one epoch can take minutes.
MXNet passed here but stayed at chance at its default batch of 32 and on 2 processes until
its residual blocks started as the identity (docs/learning.md has the runs before and
after): test_frameworks_learn_two_processes.py holds the 2-process settings.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from contract.schema import Event, Workload
from workloads.launch.summary import read_events_dir
from workloads.train.datasets import make_dataset

pytestmark = [pytest.mark.slow, pytest.mark.frameworks, pytest.mark.timeout(1800)]

CLASSES, TRAIN, VAL, SIZE, BATCH = 4, 256, 128, 32, 16
# TensorFlow's validation top-1 on this tiny set sits at exactly chance in some epochs and
# leaves it in others (seen in 3 epochs: 0.25 0.672 0.25, 0.25 0.367 0.5, 0.25 0.328 0.25,
# 0.25 0.25 0.539): 5 epochs give it more than one chance to show it learns
EPOCHS = {"pytorch": 1, "mxnet": 2, "tensorflow": 5}
CHANCE = 1 / CLASSES
# 128 validation pictures: chance accuracy has a standard deviation of ~0.04
MARGIN = 0.15
FORMATS = {"tensorflow": "tfrecord", "mxnet": "recordio", "pytorch": "jpeg"}


@pytest.mark.parametrize("framework", sorted(FORMATS))
def test_a_few_epochs_beat_chance(framework, tmp_path, repo_env):
    pytest.importorskip({"tensorflow": "tensorflow", "mxnet": "mxnet", "pytorch": "torch"}[
        framework])  # fmt: skip
    data = tmp_path / FORMATS[framework]
    make_dataset(data, FORMATS[framework], images=TRAIN, classes=CLASSES, image_size=SIZE,
                 val_images=VAL, shards=4, progress=False)  # fmt: skip
    runs = tmp_path / "runs"
    result = subprocess.run(
        ["nice", sys.executable, "-m", "workloads", "run", "--framework", framework,
         "--data-dir", str(data), "--epochs", str(EPOCHS[framework]), "--batch-size", str(BATCH),
         "--loader-workers", "1", "--run-id", "learn", "--runs-dir", str(runs)],
        capture_output=True, text=True, env=repo_env, timeout=1700,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # TensorFlow's C++ start-up lines are not shown (workloads sets TF_CPP_MIN_LOG_LEVEL=2)
    assert "cpu_feature_guard" not in result.stderr and "oneDNN custom" not in result.stderr
    ends = [
        point.fields
        for point in read_events_dir(Path(runs / "learn" / "events"))
        if point.fields.get(Workload.EVENT) == Event.EPOCH_END
    ]
    top1 = [round(fields[Workload.TOP1], 3) for fields in sorted(ends, key=lambda f: f["epoch"])]
    assert len(top1) == EPOCHS[framework]
    print(f"{framework}: validation top-1 per epoch {top1} (chance {CHANCE})")
    # the best epoch: TensorFlow's validation top-1 on this tiny data set is not stable from
    # one epoch to the next (seen: 0.25, 0.672, 0.25; and 0.25, 0.367, 0.5), but it must
    # leave chance, which it never did before
    assert max(top1) >= CHANCE + MARGIN, f"{framework} does not learn: top-1 {top1}"


def test_tensorflows_start_up_lines_are_not_shown(repo_env):
    """What `workloads` does before TensorFlow is imported (quiet_frameworks) hides its C++
    start-up lines (CPU instructions, oneDNN) from every command's output."""
    pytest.importorskip("tensorflow")
    code = ("from workloads.cli import quiet_frameworks; quiet_frameworks(); "
            "import tensorflow as tf; print(int(tf.constant(1) + 1))")  # fmt: skip
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=repo_env, timeout=300)  # fmt: skip
    assert result.stdout.strip() == "2", result.stderr
    assert "cpu_feature_guard" not in result.stderr and "oneDNN" not in result.stderr


def test_mxnet_residual_blocks_start_as_the_identity():
    """Each of ResNet-50's 16 residual blocks starts with its last batch-norm scale at zero
    (the PyTorch trainer's start too): with Gluon's default of one, the first steps blew the
    weights up and validation sat at chance (workloads/train/mx_train.py says how)."""
    mx = pytest.importorskip("mxnet")
    from mxnet import gluon

    from workloads.train.mx_train import zero_init_last_batch_norms

    net = gluon.model_zoo.vision.resnet50_v1(classes=CLASSES)
    assert zero_init_last_batch_norms(net, gluon) == 16
    net.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2))
    net(mx.nd.zeros((1, 3, SIZE, SIZE)))
    gammas = {name: p.data() for name, p in net.collect_params(".*gamma").items()}
    zero = {name for name, data in gammas.items() if float(data.abs().sum().asscalar()) == 0}
    lasts = {block.body[-1].gamma.name for stage in net.features[4:8] for block in stage}
    assert len(lasts) == 16 and zero == lasts  # each block's last batch-norm, no other
    ones = [data for name, data in gammas.items() if name not in zero]
    assert all(float(data.min().asscalar()) == 1.0 for data in ones)


def test_tensorflow_residual_blocks_start_as_the_identity():
    """Keras's ResNet-50 as the TensorFlow trainer builds it: each of the 16 residual blocks'
    last batch-norm (``convN_blockM_3_bn``) starts with gamma at zero, every other batch-norm
    (the shortcuts' ``_0_bn`` included) at one, as the PyTorch and MXNet trainers start."""
    tf = pytest.importorskip("tensorflow")
    import types

    import numpy as np

    from workloads.train.tf_train import build_model

    model = build_model(tf, types.SimpleNamespace(image_size=SIZE, num_classes=CLASSES))
    norms = [
        layer for layer in model.layers if isinstance(layer, tf.keras.layers.BatchNormalization)
    ]
    zero = {layer.name for layer in norms if not np.any(layer.gamma.numpy())}
    assert len(zero) == 16 and all(name.endswith("_3_bn") for name in zero)
    assert all(np.all(layer.gamma.numpy() == 1.0) for layer in norms if layer.name not in zero)


def test_tensorflow_learning_rate_schedule_is_the_linear_warmup():
    """The Keras schedule the TensorFlow trainer gives its optimizer ramps as
    warmup_learning_rate says (a 4-step warm-up to 0.025: 0.00625, 0.0125, 0.01875, then
    0.025 held), and Horovod's DistributedOptimizer, which rebuilds the optimizer from its
    config, keeps it."""
    tf = pytest.importorskip("tensorflow")
    from workloads.train.tf_train import learning_rate_schedule, warmup_learning_rate

    schedule = learning_rate_schedule(tf, 0.025, 4)
    expected = [warmup_learning_rate(step, 0.025, 4) for step in range(7)]
    assert [float(schedule(step)) for step in range(7)] == pytest.approx(expected)
    assert learning_rate_schedule(tf, 0.025, 1) == 0.025
    hvd = pytest.importorskip("horovod.tensorflow.keras")
    hvd.init()
    optimizer = hvd.DistributedOptimizer(
        tf.keras.optimizers.legacy.SGD(learning_rate=schedule, momentum=0.9)
    )
    rebuilt = optimizer.learning_rate
    assert [float(rebuilt(step)) for step in range(7)] == pytest.approx(expected)
