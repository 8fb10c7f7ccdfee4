"""A user's Keras training as ``user_scripts.py`` measures it: ``Model.fit`` on a
``tf.data`` TFRecord pipeline (TFRecordDataset -> map(parse) -> batch -> prefetch), Keras'
ResNet-50 (weights=None, 32 px), validation every epoch. Nothing in it knows about
epochscope; the only addition is ``steplog``'s callback (the same stamps in both variants).

Usage: keras_fit.py DATA_DIR [--epochs N] [--batch-size B] [--classes C]
"""

import argparse
import glob
import os
import sys
from pathlib import Path

import tensorflow as tf

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.profile_overhead.steplog import StepLog, keras_callback

parser = argparse.ArgumentParser()
parser.add_argument("data")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--image-size", type=int, default=32)
parser.add_argument("--classes", type=int, default=10)
args = parser.parse_args()
tf.keras.utils.set_random_seed(0)

FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
}


def parse(record):
    example = tf.io.parse_single_example(record, FEATURES)
    image = tf.io.decode_jpeg(example["image/encoded"], channels=3)
    image = tf.image.resize(image, [args.image_size, args.image_size]) / 255.0
    return image, example["image/class/label"] - 1  # ImageNet labels are 1-based


def dataset(split):
    files = sorted(glob.glob(os.path.join(args.data, f"{split}-*")))
    return (
        tf.data.TFRecordDataset(files)
        .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(args.batch_size, drop_remainder=split == "train")
        .prefetch(tf.data.AUTOTUNE)
    )


model = tf.keras.applications.ResNet50(
    weights=None, input_shape=(args.image_size, args.image_size, 3), classes=args.classes
)
model.compile(
    optimizer=tf.keras.optimizers.SGD(0.01, momentum=0.9),
    loss=tf.keras.losses.SparseCategoricalCrossentropy(),
    metrics=["accuracy"],
)
model.fit(
    dataset("train"),
    validation_data=dataset("validation"),
    epochs=args.epochs,
    verbose=2,
    callbacks=[keras_callback(StepLog(), args.batch_size)],
)
