"""Horovod's Keras example (examples/tensorflow2/tensorflow2_keras_mnist.py) on a
TFRecord ``tf.data`` pipeline: hvd.init, the data sharded by rank, DistributedOptimizer,
BroadcastGlobalVariablesCallback, ``fit``. Nothing in it knows about epochscope.

Usage: horovodrun -np 2 python keras_horovod_fit.py DATA_DIR [--epochs N] [--batch-size B]
"""

import argparse
import glob
import os

import horovod.tensorflow.keras as hvd
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("data")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--image-size", type=int, default=32)
parser.add_argument("--classes", type=int, default=4)
args = parser.parse_args()

hvd.init()
tf.config.threading.set_intra_op_parallelism_threads(1)

FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
}


def parse(record):
    example = tf.io.parse_single_example(record, FEATURES)
    image = tf.io.decode_jpeg(example["image/encoded"], channels=3)
    image = tf.image.resize(image, [args.image_size, args.image_size]) / 255.0
    return image, example["image/class/label"] - 1


files = sorted(glob.glob(os.path.join(args.data, "train-*")))
dataset = (
    tf.data.TFRecordDataset(files)
    .shard(hvd.size(), hvd.rank())
    .map(parse)
    .batch(args.batch_size)
    .prefetch(tf.data.AUTOTUNE)
)
model = tf.keras.Sequential(
    [
        tf.keras.layers.Conv2D(
            8, 3, activation="relu", input_shape=(args.image_size, args.image_size, 3)
        ),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(args.classes),
    ],
    name="hvd_cnn",
)
optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01 * hvd.size()))
model.compile(
    optimizer=optimizer,
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
model.fit(dataset, epochs=args.epochs, callbacks=callbacks, verbose=2 if hvd.rank() == 0 else 0)
