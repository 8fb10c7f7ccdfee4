"""Keras ``Model.fit`` on a ``tf.data`` TFRecord pipeline, in the style of the TensorFlow
tutorials (TFRecordDataset -> map(parse) -> batch -> prefetch; compile; fit with
validation_data). Nothing in it knows about epochscope.

Usage: keras_fit.py DATA_DIR [--epochs N] [--batch-size B] [--image-size S]
                    [--steps-per-execution K --steps-per-epoch S --validation-steps V]
"""

import argparse
import glob
import os

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("data")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--image-size", type=int, default=32)
parser.add_argument("--classes", type=int, default=4)
parser.add_argument("--steps-per-execution", type=int, default=1)
parser.add_argument("--steps-per-epoch", type=int)  # Keras needs them beside the above
parser.add_argument("--validation-steps", type=int)
args = parser.parse_args()

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
    name="small_cnn",
)
model.compile(
    optimizer="sgd",
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
    steps_per_execution=args.steps_per_execution,
)
history = model.fit(
    dataset("train"),
    validation_data=dataset("validation"),
    epochs=args.epochs,
    steps_per_epoch=args.steps_per_epoch,
    validation_steps=args.validation_steps,
    verbose=2,
)
print("val_accuracy", " ".join(f"{value:.6f}" for value in history.history["val_accuracy"]))
