"""What splitting Keras' train function costs per step (``workloads profile`` on ``fit``).

``workloads.autoprofile.keras_hooks.TimedTrainFunction`` replaces ``fit``'s compiled
``train_function(iterator)`` (which calls ``next`` inside the graph) by ``next(iterator)``
in Python, then a compiled step on that batch. This times both on the same model and the
same ``tf.data`` pipeline, in-process, interleaved in blocks (which runs first alternates),
and reports the median seconds per step of each and their difference:

- ``tiny``: a 10 -> 10 dense layer, batch 32 (the step is almost all call overhead: the
  worst case for a per-step cost);
- ``cnn``: the profile tests' small CNN (conv 3x3x8, pooling, dense), batch 8 of 32 px.

    nice -n -10 .venv/bin/python bench/profile_overhead/keras_step_split.py \\
        --out bench/profile_overhead/results-keras-step-split.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def models(tf):
    tiny = tf.keras.Sequential([tf.keras.layers.Dense(10, input_shape=(10,))], name="tiny")
    tiny_data = tf.data.Dataset.from_tensor_slices(
        (tf.random.normal((1024, 10)), tf.random.uniform((1024,), 0, 10, tf.int64))
    )
    cnn = tf.keras.Sequential(
        [
            tf.keras.layers.Conv2D(8, 3, activation="relu", input_shape=(32, 32, 3)),
            tf.keras.layers.GlobalAveragePooling2D(),
            tf.keras.layers.Dense(4),
        ],
        name="cnn",
    )
    cnn_data = tf.data.Dataset.from_tensor_slices(
        (tf.random.uniform((256, 32, 32, 3)), tf.random.uniform((256,), 0, 4, tf.int64))
    )
    return [(tiny, tiny_data, 32), (cnn, cnn_data, 8)]


def per_step(function, iterator, steps: int) -> float:
    began = time.perf_counter()
    for _ in range(steps):
        outputs = function(iterator)
    outputs["loss"].numpy()  # the last step done
    return (time.perf_counter() - began) / steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    import tensorflow as tf
    from keras.src.engine import training

    from workloads.autoprofile.keras_hooks import TimedTrainFunction

    tf.config.threading.set_intra_op_parallelism_threads(1)
    results = {"load_average": os.getloadavg(), "tensorflow": tf.__version__, "models": {}}
    for model, data, batch in models(tf):
        model.compile(
            optimizer="sgd",
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        pipeline = data.repeat().batch(batch).prefetch(tf.data.AUTOTUNE)
        iterator = iter(pipeline)
        variants = {
            "plain": model.make_train_function(force=True),
            "split": TimedTrainFunction(model, training, tf),
        }
        for function in variants.values():
            per_step(function, iterator, 20)  # trace, warm up
        times: dict[str, list[float]] = {name: [] for name in variants}
        for block in range(args.blocks):
            order = list(variants) if block % 2 == 0 else list(reversed(variants))
            for name in order:
                times[name].append(per_step(variants[name], iterator, args.steps))
        medians = {name: statistics.median(values) for name, values in times.items()}
        results["models"][model.name] = {
            "batch": batch,
            "median_seconds_per_step": medians,
            "added_microseconds_per_step": 1e6 * (medians["split"] - medians["plain"]),
            "ratio_split_to_plain": medians["split"] / medians["plain"],
            "blocks": times,
        }
        print(f"{model.name}: plain {1e6 * medians['plain']:.0f} us/step, split "
              f"{1e6 * medians['split']:.0f} us/step "
              f"({1e6 * (medians['split'] - medians['plain']):+.0f} us)")  # fmt: skip
    results["load_average_after"] = os.getloadavg()
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
