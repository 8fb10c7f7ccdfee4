"""ResNet-50 with tf.keras and Horovod (horovod.tensorflow.keras), over TFRecord shards.

The input pipeline is tf_cnn_benchmarks' over ImageNet TFRecords: this rank's share of
the shard files (record-level sharding when there are fewer files than ranks), parallel
interleave, a 10,000-record shuffle buffer (never more than the rank's share of the
data set: past that the buffer would only hold repeats, and a small data set of large
pictures would fill memory with them), JPEG decode with a random distorted crop,
resize, random flip, batch, prefetch. ``--synthetic`` feeds one random batch over and
over, as tf_cnn_benchmarks' synthetic mode does.
"""

from __future__ import annotations

import math
import os
import re
import time
import types

from workloads.record.spec import RunSpec
from workloads.train.placement import Placement, cpu_threads_per_rank, steps_per_epoch

SHUFFLE_BUFFER = 10_000
INTERLEAVE_CYCLE = 10
CENTRAL_CROP = 0.875
POLICIES = {"fp16": "mixed_float16", "bf16": "mixed_bfloat16"}
# The share of the old moving mean/variance kept at each step: PyTorch's (momentum=0.1) and
# MXNet Gluon's (0.9). Keras' 0.99 leaves the moving statistics mostly at their initial 0/1
# for the first hundreds of steps: validation (which uses them) then saw one class for
# every picture, top-1 exactly chance, while training accuracy was already near 1.
BATCH_NORM_MOMENTUM = 0.9
# Goyal et al. (2017) ramp the learning rate up linearly over the first 5 epochs of a
# 90-epoch run; the bundled runs are a few epochs long, so the ramp is their first epoch.
LEARNING_RATE_WARMUP_EPOCHS = 1


def _single_process() -> types.SimpleNamespace:
    """What the trainer uses of horovod.tensorflow.keras, for one process without it."""
    return types.SimpleNamespace(
        init=lambda: None,
        rank=lambda: 0,
        size=lambda: 1,
        local_rank=lambda: 0,
        local_size=lambda: 1,
        DistributedOptimizer=lambda optimizer: optimizer,
        broadcast_callbacks=[],
        allreduce_sum=lambda values: values,
    )


def _horovod() -> types.SimpleNamespace:
    try:
        import horovod.tensorflow.keras as hvd
    except ImportError:
        if int(os.environ.get("HOROVOD_SIZE", "1")) > 1:
            raise  # started by horovodrun: Horovod is not optional
        return _single_process()
    hvd.init()
    return types.SimpleNamespace(
        init=hvd.init,
        rank=hvd.rank,
        size=hvd.size,
        local_rank=hvd.local_rank,
        local_size=hvd.local_size,
        DistributedOptimizer=hvd.DistributedOptimizer,
        broadcast_callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)],
        allreduce_sum=lambda values: hvd.allreduce(values, op=hvd.Sum, name="eval_counts"),
    )


def build_model(tf, spec: RunSpec):
    """tf.keras.applications.ResNet50 without weights; float32 logits out."""
    inputs = tf.keras.Input(shape=(spec.image_size, spec.image_size, 3))
    backbone = tf.keras.applications.ResNet50(
        weights=None,
        include_top=True,
        input_tensor=inputs,
        classes=spec.num_classes,
        classifier_activation=None,
    )
    for layer in backbone.layers:
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            layer.momentum = BATCH_NORM_MOMENTUM
    zero_init_last_batch_norms(tf, backbone)
    logits = tf.keras.layers.Activation("linear", dtype="float32")(backbone.output)
    return tf.keras.Model(inputs, logits, name="resnet50")


def last_batch_norm_names(layer_names: list[str]) -> list[str]:
    """The names of each residual block's last batch-norm in Keras's ResNet-50
    (``conv2_block1_3_bn`` ... ``conv5_block3_3_bn``: the third convolution's, not the
    shortcut's ``_0_bn``)."""
    return [name for name in layer_names if re.fullmatch(r"conv\d+_block\d+_3_bn", name)]


def zero_init_last_batch_norms(tf, backbone) -> int:
    """Start each residual block's last batch-norm scale (gamma) at zero, so every block
    starts as the identity, as the PyTorch and MXNet trainers do (Goyal et al., 2017).
    Returns how many blocks it changed.

    With Keras's default (gamma 1) the demo's loss stayed 1.8-5x a uniform guess's for
    all 3 epochs and 1 run in 5 read as a divergence (issue 42, item 1). Horovod's
    broadcast then hands rank 0's zeros to every rank."""
    names = last_batch_norm_names([layer.name for layer in backbone.layers])
    for name in names:
        gamma = backbone.get_layer(name).gamma
        gamma.assign(tf.zeros_like(gamma))
    return len(names)


def learning_rate_warmup_steps(steps_in_epoch: int) -> int:
    """The steps over which the learning rate ramps up: the first epoch's."""
    return max(1, LEARNING_RATE_WARMUP_EPOCHS * steps_in_epoch)


def warmup_learning_rate(step: int, peak: float, warmup_steps: int) -> float:
    """The learning rate of (0-based) ``step``: ``peak * (step + 1) / warmup_steps`` over
    the warm-up, ``peak`` after it. The value ``learning_rate_schedule`` computes, here
    without TensorFlow for the tests."""
    return peak * min(1.0, (step + 1) / max(1, warmup_steps))


def learning_rate_schedule(tf, peak: float, warmup_steps: int):
    """``warmup_learning_rate`` as a Keras schedule (or the constant ``peak`` when the
    warm-up is a single step). A built-in schedule, so Horovod's DistributedOptimizer,
    which rebuilds the optimizer from its config, rebuilds it too: PolynomialDecay of power
    1 from ``peak / warmup_steps`` at step 0 *up* to ``peak`` at step ``warmup_steps - 1``,
    then held there."""
    if warmup_steps <= 1:
        return peak
    return tf.keras.optimizers.schedules.PolynomialDecay(
        initial_learning_rate=peak / warmup_steps,
        decay_steps=warmup_steps - 1,
        end_learning_rate=peak,
        power=1.0,
    )


def _parse(tf, record):
    features = tf.io.parse_single_example(
        record,
        {
            "image/encoded": tf.io.FixedLenFeature([], tf.string, ""),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64, -1),
        },
    )
    # ImageNet's TFRecord labels are 1-based (0 is the background class).
    label = tf.cast(features["image/class/label"], tf.int32) - 1
    return features["image/encoded"], label


def _train_image(tf, encoded, size: int):
    shape = tf.image.extract_jpeg_shape(encoded)
    begin, crop, _ = tf.image.sample_distorted_bounding_box(
        shape,
        bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
        min_object_covered=0.1,
        aspect_ratio_range=(0.75, 1.33),
        area_range=(0.08, 1.0),
        max_attempts=10,
        use_image_if_no_bounding_boxes=True,
    )
    offset_y, offset_x, _ = tf.unstack(begin)
    height, width, _ = tf.unstack(crop)
    window = tf.stack([offset_y, offset_x, height, width])
    image = tf.image.decode_and_crop_jpeg(encoded, window, channels=3)
    image = tf.image.resize(image, [size, size])
    image = tf.image.random_flip_left_right(image)
    return image / 127.5 - 1.0


def _eval_image(tf, encoded, size: int):
    image = tf.image.decode_jpeg(encoded, channels=3)
    image = tf.image.central_crop(image, CENTRAL_CROP)
    image = tf.image.resize(image, [size, size])
    return image / 127.5 - 1.0


def shuffle_buffer(spec: RunSpec, world_size: int) -> int:
    """tf_cnn_benchmarks' 10,000 records, or the rank's share of the data set if smaller."""
    share = -(-spec.dataset["train"]["images"] // world_size) if spec.dataset else SHUFFLE_BUFFER
    return max(1, min(SHUFFLE_BUFFER, share))


def without_autotune_thread(tf, dataset):
    """The same pipeline without tf.data's autotuning thread. Destroying an iterator waits
    for that thread's current sleep, which grows to 60 s in TF 2.15: the end of fit()
    (and of every validation pass) would stall up to a minute. AUTOTUNE values then take
    tf.data's fixed defaults (as many parallel calls as cores)."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def train_dataset(tf, spec: RunSpec, files: list[str], placement: Placement):
    autotune = tf.data.AUTOTUNE
    paths = tf.data.Dataset.from_tensor_slices(files)
    shard_files = len(files) >= placement.world_size
    if shard_files:
        paths = paths.shard(placement.world_size, placement.rank)
    paths = paths.shuffle(len(files), seed=spec.seed + placement.rank).repeat()
    records = paths.interleave(
        tf.data.TFRecordDataset,
        cycle_length=min(INTERLEAVE_CYCLE, len(files)),
        num_parallel_calls=autotune,
        deterministic=False,
    )
    if not shard_files:
        records = records.shard(placement.world_size, placement.rank)
    records = records.shuffle(
        shuffle_buffer(spec, placement.world_size), seed=spec.seed + placement.rank
    )

    def decode(record):
        encoded, label = _parse(tf, record)
        return _train_image(tf, encoded, spec.image_size), label

    batches = records.map(decode, num_parallel_calls=autotune)
    batches = batches.batch(spec.batch_size, drop_remainder=True).prefetch(autotune)
    return without_autotune_thread(tf, batches)


def eval_dataset(tf, spec: RunSpec, files: list[str], placement: Placement):
    records = tf.data.TFRecordDataset(files).shard(placement.world_size, placement.rank)

    def decode(record):
        encoded, label = _parse(tf, record)
        return _eval_image(tf, encoded, spec.image_size), label

    batches = records.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    return without_autotune_thread(tf, batches.batch(spec.batch_size).prefetch(tf.data.AUTOTUNE))


def synthetic_dataset(tf, spec: RunSpec):
    shape = (spec.batch_size, spec.image_size, spec.image_size, 3)
    images = tf.random.uniform(shape, -1.0, 1.0, seed=spec.seed)
    labels = tf.random.uniform(
        (spec.batch_size,), 0, spec.num_classes, dtype=tf.int32, seed=spec.seed
    )
    return without_autotune_thread(tf, tf.data.Dataset.from_tensors((images, labels)).repeat())


def evaluate(tf, model, dataset, allreduce_sum) -> tuple[float, float]:
    """(top-1, top-5) over every rank's share of the validation set."""
    k = min(5, model.output_shape[-1])

    @tf.function
    def counts(images, labels):
        logits = model(images, training=False)
        top1 = tf.reduce_sum(tf.cast(tf.math.in_top_k(labels, logits, 1), tf.float64))
        topk = tf.reduce_sum(tf.cast(tf.math.in_top_k(labels, logits, k), tf.float64))
        seen = tf.cast(tf.shape(labels)[0], tf.float64)
        return tf.stack([top1, topk, seen])

    totals = tf.zeros([3], tf.float64)
    for images, labels in dataset:
        totals += counts(images, labels)
    top1, top5, seen = allreduce_sum(totals).numpy().tolist()
    if seen == 0:
        return math.nan, math.nan
    return top1 / seen, top5 / seen


def horovod_allreduces(optimizer: object) -> bool:
    """Whether ``optimizer`` is Horovod's ``DistributedOptimizer`` and its ``_allreduce``
    really all-reduces: by Horovod's own rule (``_allreduce_cond``), this process is in the
    optimizer's process set and the set holds more than one process. Otherwise (one
    process) ``_allreduce`` is an identity behind a ``tf.cond``: a stamp at its entry would
    time the executor's gap behind that ``tf.cond`` as "communication" (0.07% of a
    1-process ResNet-50 epoch; 10% of a small CNN's second epoch, 5 ms steps), so the step
    has no communication part."""
    if getattr(optimizer, "_allreduce", None) is None:
        return False
    process_set = getattr(optimizer, "process_set", None)
    if process_set is None:  # a Horovod without process sets: the launcher's size
        return int(os.environ.get("HOROVOD_SIZE", "1")) > 1
    size = process_set.size()
    return bool(process_set.included()) and size is not None and size > 1


def first_present(grads) -> list:
    """The first layer's gradient (the first trainable variable's), as a one-item list."""
    return next(([g] for g in grads if g is not None), [])


class StepStamps:
    """The step's anatomy from inside Keras' compiled train step.

    Stamps (``time.time()`` read by a ``tf.py_function``) are placed in the graph, each
    fed one element of every tensor it must follow, so it runs once those exist:

    - ``begin``: with no inputs, it runs as the compiled step starts (the first step's
      tracing and graph optimisation before it count as the step's *other* time);
    - ``input``: once the batch is in the step;
    - ``computed``: once the first layer's gradient exists: backward computes it last
      (it is handed to Horovod's ``_allreduce``; nothing waits for this stamp, so the
      all-reduce is not held back);
    - ``reduced``: once every all-reduced gradient exists (one element of each, a single
      strided slice per gradient: following only the first layer's let up to a quarter
      of a second of all-reduce per step slip into *other*).

    (``tf.timestamp()`` or a ``py_function`` under ``tf.control_dependencies`` does not
    work: TF 2.15 runs it at the start of the function whatever it is told to follow.) The
    stamps come back in the step's logs and are
    moved onto the recorder's clock. Horovod all-reduces tensor by tensor in its own
    thread, with no per-tensor hook here: the overlap with backward is not measured."""

    KEYS = ("_anatomy_begin", "_anatomy_input", "_anatomy_computed", "_anatomy_reduced")

    def __init__(self, tf) -> None:
        self.tf = tf
        self.traced: dict[str, object] = {}

    def _stamp(self, key: str, after: list) -> None:
        tf = self.tf

        def probe(tensor):
            """One element of ``tensor``: a single strided slice when its rank is known."""
            rank = tensor.shape.rank
            element = tensor[(0,) * rank] if rank else tf.reshape(tensor, [-1])[0]
            return element if element.dtype == tf.float32 else tf.cast(element, tf.float32)

        probes = [probe(t) for t in after if isinstance(t, tf.Tensor)]
        inputs = [tf.stack(probes)] if probes else []
        self.traced[key] = tf.py_function(lambda *_: time.time(), inputs, tf.float64)

    def instrument(self, model, optimizer) -> None:
        """The *computed* stamp only where Horovod all-reduces (``horovod_allreduces``);
        without it *compute* ends at *reduced* and the step has no communication part."""
        tf = self.tf
        begin_key, input_key, computed_key, reduced_key = self.KEYS
        train_step = model.train_step

        def stamped_train_step(data):
            self.traced.clear()
            self._stamp(begin_key, [])
            self._stamp(input_key, tf.nest.flatten(data))
            logs = dict(train_step(data))
            logs.update({key: self.traced[key] for key in self.KEYS if key in self.traced})
            return logs

        model.train_step = stamped_train_step

        if horovod_allreduces(optimizer):
            allreduce = optimizer._allreduce

            def stamped_allreduce(grads, variables):
                self._stamp(computed_key, first_present(grads))
                return allreduce(grads, variables)

            optimizer._allreduce = stamped_allreduce

        apply_gradients = optimizer.apply_gradients

        def stamped_apply_gradients(grads_and_vars, *args, **kwargs):
            pairs = list(grads_and_vars)
            self._stamp(reduced_key, [g for g, _ in pairs])
            return apply_gradients(pairs, *args, **kwargs)

        optimizer.apply_gradients = stamped_apply_gradients

    def mark(self, recorder, logs) -> None:
        """Put this step's stamps on the recorder (wall clock -> the recorder's clock)."""
        if not logs or self.KEYS[1] not in logs:
            return
        offset = recorder.now() - time.time()

        def at(key: str) -> float | None:
            return float(logs[key]) + offset if key in logs else None

        begin_key, input_key, computed_key, reduced_key = self.KEYS
        recorder.input_requested(at(begin_key))
        recorder.input_ready(at(input_key))
        computed, reduced = at(computed_key), at(reduced_key)
        if computed is None:  # one process: no all-reduce
            recorder.compute_done(reduced)
            return
        recorder.compute_done(computed)
        recorder.communication_done(reduced)


def run(spec: RunSpec, start_recorder):
    import tensorflow as tf

    hvd = _horovod()
    placement = Placement(hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size())
    threads = cpu_threads_per_rank(placement.local_size)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(min(2, threads))
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.set_visible_devices(gpus[placement.local_rank % len(gpus)], "GPU")
        tf.config.experimental.set_memory_growth(gpus[placement.local_rank % len(gpus)], True)
    if spec.precision in POLICIES:
        tf.keras.mixed_precision.set_global_policy(POLICIES[spec.precision])
    tf.random.set_seed(spec.seed)

    recorder = start_recorder(placement)
    model = build_model(tf, spec)
    # Goyal et al.'s linear scaling rule (the rate times the world size) and their linear
    # warm-up to it: as the residual blocks' zero-init, so a fresh network is not hit by
    # the full rate at its first steps (issue 42, item 1).
    steps_in_epoch = steps_per_epoch(spec, placement.world_size)
    optimizer = tf.keras.optimizers.legacy.SGD(
        learning_rate=learning_rate_schedule(
            tf,
            spec.learning_rate * placement.world_size,
            learning_rate_warmup_steps(steps_in_epoch),
        ),
        momentum=0.9,
    )
    optimizer = hvd.DistributedOptimizer(optimizer)
    stamps = StepStamps(tf)
    if spec.anatomy:
        stamps.instrument(model, optimizer)
    model.compile(
        optimizer=optimizer,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    if spec.synthetic:
        data = synthetic_dataset(tf, spec)
        val = None
    else:
        root = spec.dataset["root"]
        data = train_dataset(
            tf, spec, [f"{root}/{f}" for f in spec.dataset["train"]["files"]], placement
        )
        val_files = [f"{root}/{f}" for f in spec.dataset["val"]["files"]]
        val = eval_dataset(tf, spec, val_files, placement) if val_files and spec.validate else None

    class Events(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            recorder.epoch_start(epoch + 1)

        def on_train_batch_end(self, batch, logs=None):
            stamps.mark(recorder, logs)
            recorder.step_done(lambda: float(logs["loss"]))

        def on_epoch_end(self, epoch, logs=None):
            top1 = top5 = None
            if val is not None:
                top1, top5 = evaluate(tf, self.model, val, hvd.allreduce_sum)
            loss = (logs or {}).get("loss")  # none sent rather than a NaN read as divergence
            recorder.epoch_end(loss=None if loss is None else float(loss), top1=top1, top5=top5)

    model.fit(
        data,
        epochs=spec.epochs,
        steps_per_epoch=steps_in_epoch,
        callbacks=[*hvd.broadcast_callbacks, Events()],
        verbose=0,
    )
    return recorder
