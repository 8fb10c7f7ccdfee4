"""Keras 2 ``Model.fit``: a callback added to every call, and a counter on its data.

- epochs: ``on_epoch_begin`` .. ``on_epoch_end`` (validation, run by ``fit`` before
  ``on_epoch_end``, is inside the epoch, as in the bundled runs);
- steps: ``on_train_batch_end``; a step's images are the batch size, and an epoch's
  images are counted exactly when ``x`` is a ``tf.data.Dataset``: ``fit`` then reads it
  through a ``map`` that adds each batch's first dimension to a variable;
- loss and validation accuracy: the epoch's logs (``loss``; ``val_accuracy``, or
  ``val_sparse_categorical_accuracy`` / ``val_categorical_accuracy`` / ``val_acc``;
  ``val_top_k_categorical_accuracy`` or its sparse form for top-5).

Input wait is not measured here: Keras reads its input inside a compiled function.
"""

from __future__ import annotations

from types import ModuleType

from workloads.autoprofile import session as sessions

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


def make_callback(keras_callback: type, batch_size: int | None, counter: object):
    class EpochscopeCallback(keras_callback):
        """Hands ``fit``'s epochs and steps to this process's session."""

        def __init__(self) -> None:
            super().__init__()
            self.counted_before = 0

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

        def on_train_batch_end(self, batch, logs=None) -> None:
            session = sessions.current()
            if session is not None and session.epoch is not None:
                loss = (logs or {}).get("loss")
                session.step(batch_size or 0, None, None if loss is None else float(loss))

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
    callbacks_module = __import__(module.__name__.rsplit(".engine", 1)[0] + ".callbacks",
                                  fromlist=["Callback"])  # fmt: skip

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
        return original_fit(self, x, *args, **kwargs)

    model_class.fit = fit
