"""PyTorch Lightning ``Trainer.fit``: a callback added to every call (``lightning`` and
``pytorch_lightning``, Lightning 2.x).

- epochs: ``on_train_epoch_start`` .. ``on_train_epoch_end`` (Lightning runs the
  validation of an epoch before ``on_train_epoch_end``: it is inside the epoch, as in the
  bundled runs); the sanity check before training is in none;
- steps: one per optimizer step (``trainer.global_step`` advanced at a training batch's
  end), on the images of the batches since the previous one (gradient accumulation);
- input wait: the time blocked in the ``__next__`` of the fit's training DataLoaders
  (``torch_hooks`` times every loader) since the previous step; Lightning fetches one
  batch ahead, so a step's wait is the wait for the batch after it, and an epoch's is
  every wait of its training loaders;
- the step's anatomy as for a plain PyTorch loop (``torch_hooks``): the input wait, then
  compute until the end of ``backward`` (under DDP, until backward's graph has run; the
  all-reduce DDP still runs after it is communication, Lightning's DDP too), the
  rest (optimizer update, Lightning's hooks) until the batch's end;
- the training loaders' worker processes started in each epoch after the first
  (``loader_workers_started``: 0 when they keep their workers), and at ``run_start`` their
  worker count and ``persistent_workers`` when the fit has one training loader;
- loss: the ``loss`` ``training_step`` returned; validation accuracy: ``val_acc`` or
  ``val_accuracy`` (or Keras' names) as the module logged it, read when validation ends.

While ``fit`` runs, the recognition of plain PyTorch loops stands aside
(``Session.driver``): Lightning's own loop says what an epoch and a step are.

Multi-process strategies: under ``strategy="ddp"`` Lightning starts the other ranks by
running the script again (each calls ``fit``, which is patched there too); under
``ddp_spawn`` it pickles the trainer, callbacks included, into processes started by
``torch.multiprocessing``, which never call ``fit``: the callback's class is therefore a
module-level one (``callback_class``), and its ``setup`` makes Lightning the driver in
the process that trains. Each rank's place comes from ``torch.distributed``, initialised
before its first epoch.
"""

from __future__ import annotations

from types import ModuleType

from workloads.autoprofile import session as sessions
from workloads.autoprofile.keras_hooks import TOP1_KEYS, TOP5_KEYS, first_of

# what a LightningModule logs with self.log(..., on_epoch=True) (and "_epoch" when it logs
# on_step too)
LIGHTNING_TOP1_KEYS = tuple(key + end for key in TOP1_KEYS for end in ("", "_epoch"))
LIGHTNING_TOP5_KEYS = tuple(key + end for key in TOP5_KEYS for end in ("", "_epoch"))


def training_loaders(trainer: object) -> list:
    """The DataLoaders ``fit`` trains on (one, or a list/dict of them)."""
    loaders = getattr(trainer, "train_dataloader", None)
    if isinstance(loaders, dict):
        return list(loaders.values())
    if isinstance(loaders, list | tuple):
        return list(loaders)
    return [] if loaders is None else [loaders]


def loss_of(outputs: object) -> object:
    """The loss ``training_step`` returned (a tensor, or a dict holding ``loss``)."""
    loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
    detach = getattr(loss, "detach", None)
    return detach() if callable(detach) else None


# the callback class made for each Lightning package (``callback_class``), by its name here
PACKAGES = {
    "LightningCallback": "lightning.pytorch",
    "PytorchLightningCallback": "pytorch_lightning",
}


def callback_class(name: str) -> type:
    """The callback class for one Lightning package, made on first use and kept as an
    attribute of this module: a ``ddp_spawn`` strategy pickles the trainer (with this
    callback in it) into fresh processes, which find the class here by its name."""
    made = globals().get(name)
    if made is None:
        package = __import__(PACKAGES[name] + ".callbacks", fromlist=["Callback"])
        made = globals()[name] = type(name, (EpochscopeCallback, package.Callback),
                                      {"__module__": __name__, "__qualname__": name})  # fmt: skip
    return made


def __getattr__(name: str) -> type:  # pickle looks the class up by name in a new process
    if name in PACKAGES:
        return callback_class(name)
    raise AttributeError(name)


class EpochscopeCallback:
    """Hands ``fit``'s epochs and steps to this process's session (mixed into the
    Lightning package's ``Callback`` by ``callback_class``)."""

    def __init__(self) -> None:
        super().__init__()
        self.loaders: list = []
        self.waited = 0.0  # the training loaders' input wait when the last step ended
        self.global_step = 0
        self.images = 0  # since the last optimizer step
        self.workers_started: int | None = None  # by the training loaders, at the last epoch end

    def _waited(self) -> float:
        from workloads.autoprofile import torch_hooks

        waited = torch_hooks.TRACKER.waited
        return sum(waited.get(loader, 0.0) for loader in self.loaders)

    def setup(self, trainer, pl_module, stage) -> None:
        # in the process that trains (under ddp_spawn not the one that called fit):
        # Lightning's loop names the epochs and steps, not the recognition of plain loops
        session = sessions.current()
        if session is not None and session.driver != "track":
            session.driver = "lightning"

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        session = sessions.current()
        if session is None:
            return
        self.loaders = training_loaders(trainer)
        if not session.started:
            sizes = {getattr(loader, "batch_size", None) for loader in self.loaders}
            batch_size = sizes.pop() if len(sizes) == 1 else None
            loader = self.loaders[0] if len(self.loaders) == 1 else None  # its workers sent
            session.start("pytorch", type(pl_module).__name__, batch_size, loader=loader)
        session.epoch_start()
        self.waited, self.global_step, self.images = self._waited(), trainer.global_step, 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        from workloads.autoprofile import torch_hooks

        session = sessions.current()
        if session is None or session.epoch is None:
            return
        self.images += torch_hooks.batch_size(batch)
        if trainer.global_step == self.global_step:
            return  # gradient accumulation: no optimizer step yet
        self.global_step = trainer.global_step
        now = self._waited()
        wait, self.waited = now - self.waited, now
        # the wait came first in the step (Lightning fetches before training_step)
        marks = torch_hooks.TRACKER.step_marks(session, None, session.step_start + wait)
        session.step(self.images, wait, loss_of(outputs), marks)
        self.images = 0

    def on_validation_end(self, trainer, pl_module) -> None:
        session = sessions.current()
        if session is None or session.epoch is None or trainer.sanity_checking:
            return
        metrics = dict(trainer.callback_metrics)
        session.epoch.top1 = first_of(metrics, LIGHTNING_TOP1_KEYS)
        session.epoch.top5 = first_of(metrics, LIGHTNING_TOP5_KEYS)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        from workloads.autoprofile import torch_hooks

        session = sessions.current()
        if session is not None and session.epoch is not None:
            # the workers the training loaders started since the last epoch's end: this
            # epoch's (Lightning may make the epoch's iterator before or after its start hook)
            started = torch_hooks.TRACKER.workers_started
            total = sum(started.get(loader, 0) for loader in self.loaders)
            if self.workers_started is not None:
                session.epoch.loader_workers_started = total - self.workers_started
            self.workers_started = total
            session.epoch_end(now=True)


def patch_trainer(module: ModuleType) -> None:
    trainer_class = module.Trainer
    original_fit = trainer_class.fit
    package = module.__name__.rsplit(".trainer.trainer", 1)[0]
    name = next(key for key, value in PACKAGES.items() if value == package)

    def fit(self, *args, **kwargs):
        session = sessions.current()
        if session is None or session.driver == "track":  # the script names its epochs
            return original_fit(self, *args, **kwargs)
        if not any(isinstance(c, EpochscopeCallback) for c in self.callbacks):
            self.callbacks.append(callback_class(name)())
        session.driver = "lightning"  # Lightning's loop names the epochs and steps
        return original_fit(self, *args, **kwargs)

    trainer_class.fit = fit
