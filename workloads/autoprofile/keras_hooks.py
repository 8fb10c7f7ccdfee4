"""Keras 2 ``Model.fit``: a callback added to every call, and a counter on its data.

- epochs: ``on_epoch_begin`` .. ``on_epoch_end`` (validation, run by ``fit`` before
  ``on_epoch_end``, is inside the epoch, as in the bundled runs);
- steps: ``on_train_batch_end``, once per execution of the train function (of
  ``steps_per_execution`` batches); a step's images are its batches' size, and an epoch's
  images are counted exactly when ``x`` is a ``tf.data.Dataset``: ``fit`` then reads it
  through a ``map`` that adds each batch's first dimension to a variable;
- loss and validation accuracy: the epoch's logs (``loss``; ``val_accuracy``, or
  ``val_sparse_categorical_accuracy`` / ``val_categorical_accuracy`` / ``val_acc``;
  ``val_top_k_categorical_accuracy`` or its sparse form for top-5);
- the step's anatomy (``TimedTrainFunction``): Keras' own train function takes the
  data iterator and calls ``next`` on it inside the compiled step, where nothing can time
  it. ``fit``'s train function is replaced by one that does the same work in two calls:
  ``next(iterator)`` in Python (the time blocked there is the step's *input wait*), then a
  compiled step on that batch (``train_step`` under the model's strategy, as Keras'
  ``make_train_function`` builds it: the same counter, XLA when the model asks for it,
  the iterator's own element spec as its signature, so it is traced once). Its time is
  *compute*; the rest of the step (callbacks, Keras' loop) is *other*. Under Horovod's
  ``DistributedOptimizer`` with more than one process (``tf_train.horovod_allreduces``:
  with one, there is no all-reduce and communication is 0) two stamps placed in the
  compiled step, as the bundled TensorFlow workload places them
  (``workloads.train.tf_train.StepStamps``), split off the all-reduce: *compute* ends when the
  first layer's gradient exists (backward computes it last), *communication* when every
  all-reduced gradient does; all-reduce that ran while backward computed stays in compute
  (its overlap is not measured).
  Where this cannot be done the same way (``steps_per_execution`` above 1, a distribution
  strategy, a parameter-server coordinator, ``run_eagerly``) ``fit`` runs as it is, with
  one line on stderr, and its steps carry no anatomy (nor do those of a model class that
  makes its own train function). A rank of several whose all-reduce no stamp shows (not
  Horovod's optimizer) reports input wait only.
"""

from __future__ import annotations

import sys
import time
from types import ModuleType

from workloads.autoprofile import session as sessions
from workloads.record.anatomy import StepMarks

TOP1_KEYS = ("val_accuracy", "val_sparse_categorical_accuracy", "val_categorical_accuracy",
             "val_acc")  # fmt: skip
TOP5_KEYS = ("val_sparse_top_k_categorical_accuracy", "val_top_k_categorical_accuracy")


def first_of(logs: dict, keys: tuple[str, ...]) -> float | None:
    for key in keys:
        if logs.get(key) is not None:
            return float(logs[key])
    return None


def dataset_batch_size(dataset: object) -> int | None:
    """The batch size of a batched ``tf.data.Dataset``, read from its pipeline."""
    node, seen = dataset, 0
    while node is not None and seen < 64:
        size = getattr(node, "_batch_size", None)
        if size is not None:
            try:
                return int(size)
            except (TypeError, ValueError):
                return None
        node, seen = getattr(node, "_input_dataset", None), seen + 1
    return None


def counted(dataset: object):
    """(the dataset read through a counting map, its image counter)."""
    import tensorflow as tf

    counter = tf.Variable(0, dtype=tf.int64, trainable=False)

    def count(*element):
        first = tf.nest.flatten(element)[0]
        counter.assign_add(tf.cast(tf.shape(first)[0], tf.int64))
        return element if len(element) > 1 else element[0]

    return dataset.map(count), counter


COMPUTED, REDUCED = "computed", "reduced"


# Keras runs an execution's batches in one compiled loop (``next`` inside it); timing each
# batch's wait apart from its step would take the host once per batch, in the loop (a
# ``py_function`` stamp) or around it (a fetch in Python): the round trips that
# steps_per_execution exists to save (docs/anatomy.md).
STEPS_PER_EXECUTION = (
    "steps_per_execution is above 1: an execution reads its batches inside one compiled "
    "loop, and telling its input wait from compute needs the host once per batch, the round "
    "trips steps_per_execution exists to save; a step is one execution"
)


def why_not_timed(model: object, tf) -> str | None:
    """Why ``model``'s train function cannot be split into fetch and compiled step."""
    steps = getattr(model, "_steps_per_execution", None)
    if (steps is not None and int(steps.numpy()) != 1) or model.autotune_steps_per_execution:
        return STEPS_PER_EXECUTION
    if model.run_eagerly:
        return "the model runs eagerly"
    if getattr(model, "_cluster_coordinator", None) is not None:
        return "a parameter-server coordinator schedules the steps"
    if getattr(model, "_distribution_strategy", None) is not None or tf.distribute.has_strategy():
        return "a distribution strategy runs the steps"
    return None


class TimedTrainFunction:
    """``fit``'s train function as two calls: ``next(iterator)``, then the compiled step
    on that batch; the step's marks (``perf_counter``) for the callback to take."""

    def __init__(self, model: object, training: ModuleType, tf) -> None:
        self.model, self.training, self.tf = model, training, tf
        self.compiled: dict[str, object] = {}  # per element spec
        self.marks: StepMarks | None = None

    def _compile(self, spec: object):
        tf, model, training = self.tf, self.model, self.training
        # no stamps (Python calls) inside an XLA-compiled step
        stamps = HorovodStamps(tf, None if model.jit_compile else model.optimizer)

        def run_step(data):
            outputs = model.train_step(data)
            with tf.control_dependencies(training._minimum_control_deps(outputs)):
                model._train_counter.assign_add(1)
            return outputs

        if model.jit_compile:
            run_step = tf.function(run_step, jit_compile=True, reduce_retracing=True)

        def step(data):
            with stamps:
                outputs = model.distribute_strategy.run(run_step, args=(data,))
            outputs = training.reduce_per_replica(
                outputs, model.distribute_strategy, reduction=model.distribute_reduction_method
            )
            return outputs, dict(stamps.traced)

        return tf.function(step, input_signature=[spec])

    def __call__(self, iterator):
        requested = time.perf_counter()
        data = next(iterator)
        ready = time.perf_counter()
        spec = iterator.element_spec
        key = repr(spec)
        function = self.compiled.get(key)
        if function is None:
            function = self.compiled[key] = self._compile(spec)
        outputs, stamps = function(data)
        done = time.perf_counter()
        marks = StepMarks(input_requested=requested, input_ready=ready, compute_done=done)
        if COMPUTED in stamps and REDUCED in stamps:
            offset = done - time.time()
            marks.compute_done = float(stamps[COMPUTED]) + offset
            marks.communication_done = float(stamps[REDUCED]) + offset
        self.marks = marks
        return outputs

    def take(self) -> StepMarks | None:
        marks, self.marks = self.marks, None
        return marks


class HorovodStamps:
    """While a compiled step is traced: the stamps of Horovod's all-reduce (an optimizer
    with ``_allreduce``: ``horovod.tensorflow.keras.DistributedOptimizer``), placed as the
    bundled TensorFlow workload places them, where it all-reduces (``horovod_allreduces``:
    more than one process); nothing for one process or any other optimizer (or None)."""

    def __init__(self, tf, optimizer: object) -> None:
        from workloads.train.tf_train import StepStamps

        self.optimizer = optimizer
        self.stamps = StepStamps(tf)
        self.traced: dict[str, object] = {}
        self._saved: dict[str, object] | None = None  # while the stamps are placed

    def __enter__(self):
        from workloads.train.tf_train import first_present, horovod_allreduces

        optimizer = self.optimizer
        self.stamps.traced.clear()
        if not horovod_allreduces(optimizer):
            return self
        allreduce = optimizer._allreduce
        apply_gradients = optimizer.apply_gradients
        stamp = self.stamps._stamp

        def stamped_allreduce(grads, variables):
            stamp(COMPUTED, first_present(grads))
            return allreduce(grads, variables)

        def stamped_apply_gradients(grads_and_vars, *args, **kwargs):
            pairs = list(grads_and_vars)
            stamp(REDUCED, [g for g, _ in pairs])
            return apply_gradients(pairs, *args, **kwargs)

        self._saved = {name: optimizer.__dict__[name] for name in
                       ("_allreduce", "apply_gradients") if name in optimizer.__dict__}  # fmt: skip
        optimizer._allreduce = stamped_allreduce
        optimizer.apply_gradients = stamped_apply_gradients
        return self

    def __exit__(self, *error) -> None:
        if self._saved is not None:  # the optimizer as it was
            for name in ("_allreduce", "apply_gradients"):
                if name in self._saved:
                    setattr(self.optimizer, name, self._saved[name])
                else:
                    self.optimizer.__dict__.pop(name, None)
            self._saved = None
        self.traced = dict(self.stamps.traced)


def make_callback(keras_callback: type, batch_size: int | None, counter: object):
    class EpochscopeCallback(keras_callback):
        """Hands ``fit``'s epochs and steps to this process's session."""

        def __init__(self) -> None:
            super().__init__()
            self.counted_before = 0
            self.last_batch = -1  # the index of the epoch's last batch trained so far
            # the logs as tensors: no conversion to numpy (a device sync) at every step
            self._supports_tf_logs = True

        def on_train_begin(self, logs=None) -> None:
            session = sessions.current()
            if session is not None:
                model = self.model
                name = type(model).__name__
                if name in ("Sequential", "Functional", "Model"):
                    name = model.name
                session.start("tensorflow", name, batch_size)

        def on_epoch_begin(self, epoch, logs=None) -> None:
            session = sessions.current()
            if session is not None and session.started:
                session.epoch_start()
                self.counted_before = int(counter.numpy()) if counter is not None else 0
                self.last_batch = -1

        def on_train_batch_end(self, batch, logs=None) -> None:
            session = sessions.current()
            if session is None or session.epoch is None:
                return
            function = getattr(self.model, "train_function", None)
            marks = function.take() if isinstance(function, TimedTrainFunction) else None
            wait = None
            placement = session.placement
            alone = placement is None or placement.world_size == 1
            if marks is not None and marks.communication_done is None and not alone:
                # an all-reduce inside the compiled step that no stamp shows: input wait only
                wait, marks = marks.input_ready - marks.input_requested, None
            loss = (logs or {}).get("loss") if session.step_is_sent() else None
            # ``batch``: the execution's last batch (steps_per_execution batches in one call)
            batches, self.last_batch = batch - self.last_batch, batch
            session.step((batch_size or 0) * batches, wait, loss, marks)

        def on_epoch_end(self, epoch, logs=None) -> None:
            session = sessions.current()
            if session is None or session.epoch is None:
                return
            logs = logs or {}
            current = session.epoch
            if counter is not None:
                current.images = int(counter.numpy()) - self.counted_before
            if logs.get("loss") is not None:
                current.loss = float(logs["loss"])
            current.top1, current.top5 = first_of(logs, TOP1_KEYS), first_of(logs, TOP5_KEYS)
            session.epoch_end(now=True)  # after validation, which fit ran

    return EpochscopeCallback()


CALLBACKS_POSITION = 4  # in fit's arguments after x


def patch_fit(module: ModuleType) -> None:
    model_class = module.Model
    original_fit = model_class.fit
    original_make_train_function = model_class.make_train_function
    callbacks_module = __import__(module.__name__.rsplit(".engine", 1)[0] + ".callbacks",
                                  fromlist=["Callback"])  # fmt: skip
    told: set[str] = set()

    def fit(self, x=None, *args, **kwargs):
        session = sessions.current()
        if session is None or session.explicit:
            return original_fit(self, x, *args, **kwargs)
        import tensorflow as tf

        counter, batch_size = None, None
        if isinstance(x, tf.data.Dataset):
            batch_size = dataset_batch_size(x)
            x, counter = counted(x)
        elif kwargs.get("batch_size") is not None:
            batch_size = int(kwargs["batch_size"])
        elif x is not None and not isinstance(x, tf.data.Dataset):
            batch_size = 32  # Keras' default for arrays
        ours = make_callback(callbacks_module.Callback, batch_size, counter)
        if len(args) > CALLBACKS_POSITION:  # fit(x, y, batch_size, epochs, verbose, callbacks)
            args = list(args)
            args[CALLBACKS_POSITION] = [*(args[CALLBACKS_POSITION] or []), ours]
        else:
            kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), ours]
        self._epochscope_fit = True
        try:
            return original_fit(self, x, *args, **kwargs)
        finally:
            self._epochscope_fit = False

    def make_train_function(self, force=False):
        function = original_make_train_function(self, force)
        if not getattr(self, "_epochscope_fit", False) or isinstance(function, TimedTrainFunction):
            return function
        import tensorflow as tf

        reason = why_not_timed(self, tf)
        if reason is not None:
            if reason not in told:
                told.add(reason)
                print(f"epochscope: Keras fit: no step anatomy ({reason}); epochs and steps "
                      "are recorded", file=sys.stderr)  # fmt: skip
            return function
        self.train_function = TimedTrainFunction(self, module, tf)
        return self.train_function

    model_class.fit = fit
    model_class.make_train_function = make_train_function
