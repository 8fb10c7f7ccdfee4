"""Horovod's Keras example (``hvd.DistributedOptimizer``, ``fit`` on a sharded ``tf.data``
pipeline: tests/scripts/keras_horovod_fit.py, unmodified) under ``workloads profile``, on
one process (``python train.py``) and on two (``horovodrun -np 2 --gloo``), read back from
the run's SQLite store.

One process: Horovod's ``_allreduce`` is an identity behind a ``tf.cond``, so the step has
no communication part (a stamp at its entry timed the executor's gap behind the
``tf.cond``: 10% of a step of this small CNN). Two processes: the all-reduce split off by
the stamps in the compiled step, in every epoch of every rank.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest

from contract.schema import Event, Workload
from tests.system.test_workloads_profile import (
    ANATOMY_PARTS,
    SCRIPTS,
    TIMEOUT,
    assert_parts_add_up,
    by_rank,
    check_epochs,
    events,
    profile,
    project_env,
)
from workloads.train.datasets import make_dataset

TRAIN, VAL, CLASSES, BATCH, EPOCHS = 32, 16, 4, 4, 2
NO_ANATOMY = "epochscope: Keras fit: no step anatomy"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.frameworks,
    pytest.mark.timeout(2 * TIMEOUT),
    pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="make frameworks"),
]


@pytest.fixture(scope="module")
def tfrecord(tmp_path_factory):
    out = tmp_path_factory.mktemp("data") / "tfrecord"
    make_dataset(out, "tfrecord", images=TRAIN, classes=CLASSES, image_size=32,
                 val_images=VAL, shards=2, progress=False)  # fmt: skip
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    path = tmp_path_factory.mktemp("work") / "runs"
    path.mkdir()
    return path


def trained(runs, run_id: str, *launcher: str, tfrecord) -> dict[int, list]:
    """Each rank's events of the example run under ``workloads profile``."""
    result = profile(sys.executable, runs, run_id, *launcher, sys.executable,
                     str(SCRIPTS / "keras_horovod_fit.py"), str(tfrecord),
                     "--epochs", str(EPOCHS), "--batch-size", str(BATCH),
                     env=project_env())  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert NO_ANATOMY not in result.stderr, result.stderr[-4000:]
    return by_rank(events(runs, run_id))


@pytest.fixture(scope="module")
def one_process(runs, tfrecord):
    return trained(runs, "hvd1", tfrecord=tfrecord)


@pytest.fixture(scope="module")
def two_processes(runs, tfrecord):
    from workloads.launch import frameworks

    if not frameworks.horovod_supports("tensorflow"):
        pytest.skip("horovod with TensorFlow is not installed: `make frameworks` builds it")
    return trained(runs, "hvd2", frameworks.horovodrun(), "-np", "2", "-H", "localhost:2",
                   "--gloo", tfrecord=tfrecord)  # fmt: skip


def steps_of(rank_events, epoch: int) -> list:
    return [e for e in rank_events
            if e.event == Event.STEP and e.fields[Workload.EPOCH] == epoch]  # fmt: skip


def assert_epoch_is_its_steps(rank_events, ends) -> None:
    """Every step and epoch event adds up, and an epoch's parts are its steps' (every step
    is sent: --step-every 1)."""
    for end in ends:
        steps = steps_of(rank_events, end.fields[Workload.EPOCH])
        for event in [*steps, end]:
            assert_parts_add_up(event)
            assert event.fields[Workload.COMPUTE_SECONDS] > 0, event.fields
        for part in (*ANATOMY_PARTS, Workload.SECONDS):
            total = sum(step.fields[part] for step in steps)
            assert end.fields[part] == pytest.approx(total, rel=1e-6, abs=1e-6), part


def test_one_process_has_no_communication(one_process):
    (rank,) = one_process.values()
    ends = check_epochs(rank, epochs=EPOCHS, images=TRAIN, steps=TRAIN // BATCH)
    start = rank[0].fields
    assert start[Workload.WORLD_SIZE] == 1 and start[Workload.MODEL] == "hvd_cnn"
    assert start[Workload.BATCH_SIZE] == BATCH and rank[0].framework == "tensorflow"
    assert_epoch_is_its_steps(rank, ends)
    for event in [e for e in rank if e.event in (Event.STEP, Event.EPOCH_END)]:
        assert event.fields[Workload.COMMUNICATION_SECONDS] == 0, event.fields


def test_two_processes_split_off_the_all_reduce_in_every_epoch(two_processes):
    assert sorted(two_processes) == [0, 1]  # horovodrun itself (Python too) is no rank
    for rank in two_processes.values():
        # the data set sharded by rank: half of it each, in batches of BATCH
        ends = check_epochs(rank, epochs=EPOCHS, images=TRAIN // 2, steps=TRAIN // 2 // BATCH)
        assert rank[0].fields[Workload.WORLD_SIZE] == 2
        assert rank[0].fields[Workload.MODEL] == "hvd_cnn"
        assert_epoch_is_its_steps(rank, ends)
        communication = [end.fields[Workload.COMMUNICATION_SECONDS] for end in ends]
        assert all(seconds > 0 for seconds in communication), communication
