"""The user scripts' own step clock (``user_scripts.py``): the same stamps with and without
``workloads profile`` around the script, so the plain run's images/s comes from the same
timestamps as the profiled one's.

A script stamps on ``time.perf_counter`` every epoch's start (before its first batch is
asked for) and every step's end (after ``optimizer.step()``, or Keras'
``on_train_batch_end``): the rule of the profile session, a step runs from the previous
step's end or the epoch's start, so waiting for input counts. At exit the stamps go to
``$STEPLOG_DIR/rank-<RANK>.json``; without ``STEPLOG_DIR`` nothing is written.
"""

from __future__ import annotations

import atexit
import json
import os
import time
from pathlib import Path


class StepLog:
    def __init__(self) -> None:
        self.epochs: list[dict] = []
        directory = os.environ.get("STEPLOG_DIR")
        if directory:
            path = Path(directory) / f"rank-{os.environ.get('RANK', '0')}.json"
            atexit.register(lambda: path.write_text(json.dumps(self.epochs)))

    def epoch_start(self) -> None:
        self.epochs.append({"start": time.perf_counter(), "steps": []})

    def step(self, images: int) -> None:
        self.epochs[-1]["steps"].append([time.perf_counter(), images])


def keras_callback(log: StepLog, batch_size: int):
    """The same stamps from a Keras ``fit`` (every batch holds ``batch_size`` images)."""
    import tensorflow as tf

    class Stamps(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            log.epoch_start()

        def on_train_batch_end(self, batch, logs=None):
            log.step(batch_size)

    return Stamps()
