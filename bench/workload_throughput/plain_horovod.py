"""A plain Horovod + TensorFlow synthetic ResNet-50 benchmark, tf_cnn_benchmarks-style.

The yardstick for ``workloads run --framework tensorflow --synthetic``: the same Keras
ResNet-50 (weights=None, float32 logits), the same SGD with momentum, batch, image side
and thread settings, but a bare ``tf.function`` training step with
``hvd.DistributedGradientTape`` on one random batch, and no events, callbacks or Keras
``fit`` loop. Each step is timed on its own after the warm-up steps; the result line is
tf_cnn_benchmarks' "total images/sec" (mean per-rank images/s x ranks).

    horovodrun -np 2 -H localhost:2 --gloo python bench/workload_throughput/plain_horovod.py \
        --batch-size 16 --image-size 64 --num-warmup-batches 5 --num-batches 20
"""

from __future__ import annotations

import argparse
import json
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--num-warmup-batches", type=int, default=10)
    parser.add_argument("--num-batches", type=int, default=100)
    parser.add_argument("--learning-rate", type=float, default=0.0125)
    args = parser.parse_args()

    import horovod.tensorflow as hvd
    import tensorflow as tf

    hvd.init()
    threads = max(1, len(os.sched_getaffinity(0)) // hvd.local_size())
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(min(2, threads))

    inputs = tf.keras.Input(shape=(args.image_size, args.image_size, 3))
    backbone = tf.keras.applications.ResNet50(
        weights=None, input_tensor=inputs, classes=args.num_classes, classifier_activation=None
    )
    model = tf.keras.Model(inputs, tf.keras.layers.Activation("linear")(backbone.output))
    optimizer = tf.keras.optimizers.legacy.SGD(args.learning_rate * hvd.size(), momentum=0.9)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    shape = (args.batch_size, args.image_size, args.image_size, 3)
    data = tf.random.uniform(shape, -1.0, 1.0)
    target = tf.random.uniform((args.batch_size,), 0, args.num_classes, dtype=tf.int32)

    @tf.function
    def train_step(first_batch: bool):
        with tf.GradientTape() as tape:
            loss = loss_fn(target, model(data, training=True))
        tape = hvd.DistributedGradientTape(tape)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(optimizer.variables(), root_rank=0)
        return loss

    for step in range(args.num_warmup_batches):
        train_step(step == 0).numpy()
    seconds = []
    for _ in range(args.num_batches):
        start = time.perf_counter()
        train_step(False).numpy()
        seconds.append(time.perf_counter() - start)
    rank_rate = args.batch_size * len(seconds) / sum(seconds)
    rates = hvd.allgather_object(rank_rate)
    if hvd.rank() == 0:
        total = sum(rates)
        print(f"Total img/sec on {hvd.size()} process(es): {total:.2f}", flush=True)
        print("RESULT " + json.dumps({"images_per_second": total, "ranks": rates}), flush=True)


if __name__ == "__main__":
    main()
