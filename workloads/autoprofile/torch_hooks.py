"""PyTorch loops recognised from what the script does, never from what it is called.

- A *pass* is one iteration over a ``DataLoader`` (``DataLoader.__iter__``), timed in the
  iterator's ``__next__``: the time blocked there is the step's input wait.
- The loader whose batches are followed by optimizer steps (the global optimizer
  step hook) is the training loader: each of its passes is an epoch, which began when the
  pass did; each optimizer step is a step, on the images of the batches drawn since the
  previous step (gradient accumulation draws several).
- A pass of another loader while an epoch is open is validation: the epoch runs until it
  ends. Its accuracy is recorded when it is recognisable: batches of (inputs, integer
  labels) and a module called on tensors shaped like the inputs that returns one row of
  class scores per input; top-1 and top-5 are then counted from those scores.
- Edges are exact where they can be: the local agent is asked for an edge sample
  (``Session.edge_ns``) where a pass may turn out to be an epoch's edge, before it is
  known to be one:
  - at the start of a pass before training is seen (the one whose batches are followed
    by optimizer steps keeps its sample as the first epoch's start), except a pass of a
    loader that has already run a whole pass with no optimizer step (evaluation before
    training, or no training at all);
  - at the end (``StopIteration``) of a pass while an epoch is open: the training pass,
    then each validation pass after it (the last one is the epoch's end). A pass of
    another loader that ends while the training pass goes on (evaluation every N steps)
    is asked for once: when a step of that same training pass follows, such passes are
    known to run inside epochs, and their ends are stamped with the process's clock from
    then on (a loop that also leaves its training loader early then has that epoch's end
    interpolated, and the report says so).
  Later epochs start at their pass's ``epoch_start``, sampled there. A loop that leaves
  its loader before ``StopIteration`` ends its epoch at its last step, an interpolated
  edge. Each request is bounded in time (``workloads.record.events.AgentEdges``: a kept
  connection, and a budget of the process's time past which edges are interpolated).
- The loss is the scalar tensor ``backward`` was called on, summed without a device sync
  and read at the epoch's end (and in sampled step events).
- The model's name is the class of the first module called on a training batch's inputs
  (the model inside ``DistributedDataParallel``).
- The step's anatomy (``workloads.record.anatomy``): input wait from the time the step asked for
  its first batch (the pass's start for a pass's first step, so starting the loader's
  workers counts, as in the bundled runs) until it arrived, plus the waits for any further
  batches of the step (gradient accumulation); compute until the end of ``backward``; the
  rest until the optimizer step ended. Once a ``DistributedDataParallel`` model is made,
  DDP's own all-reduce (its C++ one, or the hook the script registers) is left alone:
  compute ends when the autograd engine has run the whole graph (``BackwardMarks``, a
  final callback queued before DDP's), communication when ``backward`` returns (DDP's
  final callback waits for every bucket's all-reduce); all-reduce hidden behind backward
  is not seen (the overlap is None). A distributed rank whose all-reduce is not seen (no
  DDP) reports input wait only.
"""

from __future__ import annotations

import time
import weakref
from types import ModuleType

from workloads.autoprofile import session as sessions
from workloads.record.anatomy import BackwardMarks, StepMarks

TRAIN, OTHER = "train", "other"
TOP5_CLASSES = 5


def workers_starting(loader: object) -> int:
    """The worker processes ``DataLoader.__iter__`` is about to start: its ``num_workers``,
    unless it keeps them (``persistent_workers``) and has its iterator from an earlier pass,
    which it resets instead (PyTorch's ``DataLoader.__iter__``). A loader made anew each
    epoch starts its workers again whatever its ``persistent_workers``."""
    workers = int(getattr(loader, "num_workers", 0) or 0)
    has_iterator = getattr(loader, "_iterator", None) is not None
    return 0 if getattr(loader, "persistent_workers", False) and has_iterator else workers


class Pass:
    def __init__(
        self,
        loader: object,
        io: object = None,
        start_ns: int | None = None,
        residency: dict[str, int] | None = None,
        start: float | None = None,
        cpu: float | None = None,
    ) -> None:
        self.loader = weakref.ref(loader)
        self.cpu = cpu  # the process's CPU seconds when the pass began
        self.residency = residency  # the data set's, when a pass that may be the first began
        self.start_ns = start_ns or time.time_ns()
        # perf_counter: the pass was asked for (``start``), and epochscope's own work at its
        # start (an agent edge sample, the reads so far) was done (``opened``): the first
        # step's input wait runs from ``opened``, the time before it is the step's other
        self.opened = time.perf_counter()
        self.start = self.opened if start is None else start
        self.io = io  # the process's reads when the pass began
        self.batches = 0
        self.images = 0  # drawn since the last optimizer step
        self.input_wait = 0.0
        self.requested: float | None = None  # perf_counter: the step asked for its batch
        self.ready: float | None = None  # perf_counter when the step's first batch arrived
        self.later_wait = 0.0  # input wait after that (gradient accumulation)
        self.inputs_shape: tuple | None = None
        self.labels = None
        self.outermost: object = None  # the last-returning module called on the inputs
        self.ended = False  # StopIteration reached


class Tracker:
    """What the hooks saw, turned into the session's epochs and steps."""

    def __init__(self) -> None:
        self.ddp_models = 0  # DistributedDataParallel models made under the session
        self.backward_marks = BackwardMarks(time.perf_counter)
        self.waited: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # loader: s
        # worker processes each loader started so far, over all its passes
        self.workers_started: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.roles: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.last: Pass | None = None  # the pass whose batch came last
        self.training: Pass | None = None  # the open epoch's training pass
        # loaders that ran a whole pass before training was seen, with no optimizer step
        self.untrained: weakref.WeakSet = weakref.WeakSet()
        # learnt: another loader's passes end inside training passes (evaluation every N
        # steps), so their ends are no epoch edges
        self.evaluates_inside_epochs = False
        self._inside_edge_asked = False  # an edge asked at such an end, since the last step
        self.model: str | None = None
        self.loss = None
        self.backward_done: float | None = None  # the last backward returned
        self.graph_done: float | None = None  # ...having run its whole graph (DDP only)
        self._forward_hook = None
        self._correct = [None, None]  # top-1, top-5 tensors summed over a validation pass
        self._scored = 0
        self._classes = 0

    # DataLoader.__iter__, before its workers start (``workers_starting`` of them)
    def pass_started(self, loader: object, workers_started: int = 0) -> Pass:
        asked = time.perf_counter()
        session = sessions.current()
        if session is None or session.explicit:
            return Pass(loader)
        role = self.roles.get(loader)
        # before training is seen, a pass may be the first epoch: its start is an edge
        maybe_first = not session.started and loader not in self.untrained
        if maybe_first:  # the data set's residency before the loader's workers read ahead
            residency = session.residency_fields()
            current = Pass(loader, session.process_io(), session.edge_ns(), residency,
                           start=asked, cpu=session.process_cpu())  # fmt: skip
        else:
            current = Pass(loader, session.process_io(), start=asked, cpu=session.process_cpu())
        if session.started:
            if role == TRAIN:
                epoch = session.epoch_start(None, current.start, current.io, current.cpu)  # edge
                epoch.loader_workers_started = workers_started
                self.training, self._inside_edge_asked = current, False
            elif session.epoch is not None:
                self._watch_forward(current)
        elif role is None and self.model is None:
            self._watch_forward(current)  # to learn the model's name at its first batch
        return current

    # _BaseDataLoaderIter.__next__ returned a batch (asked for at ``began``)
    def batch(self, current: Pass, batch: object, began: float, wait: float) -> None:
        loader = current.loader()
        if loader is not None:
            self.waited[loader] = self.waited.get(loader, 0.0) + wait
        current.batches += 1
        current.images += batch_size(batch)
        current.input_wait += wait
        if current.ready is None:
            current.requested = current.opened if current.batches == 1 else began
            current.ready = began + wait
        else:
            current.later_wait += wait
        self.last = current
        inputs, labels = inputs_and_labels(batch)
        current.inputs_shape = tuple(inputs.shape) if inputs is not None else None
        current.labels = labels

    # _BaseDataLoaderIter.__next__ raised StopIteration
    def pass_ended(self, current: Pass) -> None:
        current.ended = True
        session = sessions.current()
        loader = current.loader()
        if loader is None or session is None or not session.started or session.explicit:
            if loader is not None and session is not None and not session.started:
                self.untrained.add(loader)  # a whole pass and no optimizer step
            self._stop_watching()
            return
        if self.roles.get(loader) is None:
            self.roles[loader] = OTHER
        if self.roles[loader] == OTHER and session.epoch is not None:
            top1, top5 = self._accuracy()
            if top1 is not None:
                session.epoch.top1, session.epoch.top5 = top1, top5
        if session.epoch is not None:  # the epoch ran until now, and may end here: an edge
            training = self.training
            inside = self.roles[loader] == OTHER and training is not None and not training.ended
            if inside and self.evaluates_inside_epochs:
                session.extend_epoch()  # the training pass goes on: not the epoch's end
            else:
                session.extend_epoch(session.edge_ns())
                self._inside_edge_asked = inside
        self._stop_watching()

    # the global optimizer step post hook
    def optimizer_stepped(
        self, compute_done: float | None = None, accelerator_busy: float | None = None
    ) -> None:
        """A training step ended now (``compute_done``, ``accelerator_busy``: an emulated
        accelerator's step, ``emulated_step``)."""
        end = time.time_ns(), time.perf_counter()
        current = self.last
        session = sessions.current()
        if current is None or session is None or session.explicit or current.images == 0:
            return  # no batch since the last step (a second optimizer on the same batch)
        loader = current.loader()
        if loader is None:
            return
        if self.roles.get(loader) != TRAIN:
            self.roles[loader] = TRAIN
            if self.model is None and current.outermost is not None:
                self.model = model_name(current.outermost)
            batch = getattr(loader, "batch_size", None)
            # a nanosecond before the epoch it starts with: first in time order, as it was sent
            session.start("pytorch", self.model, batch, current.start_ns - 1, loader,
                          current.residency)  # fmt: skip
            session.epoch_start(current.start_ns, current.start, current.io, current.cpu)
            self.training = current
            self._stop_watching()
            # the session's own start-up is the first step's (its other), which AU leaves
            # out, not the next one's
            end = time.time_ns(), time.perf_counter()
        elif self._inside_edge_asked and current is self.training:
            self.evaluates_inside_epochs = True  # that pass's end was not the epoch's end
        self._inside_edge_asked = False
        loss, self.loss = self.loss, None
        marks = self._marks(current, session, compute_done)
        session.step(current.images, current.input_wait, loss, marks, end, accelerator_busy)
        current.images, current.input_wait = 0, 0.0
        current.requested, current.ready, current.later_wait = None, None, 0.0

    def emulated_step(self, started: float, busy: float) -> None:
        """A step of an emulated accelerator ended now (DLIO's ``compute``, a sleep of
        ``busy`` seconds from ``started`` on perf_counter: no optimizer, no backward, no
        all-reduce): its compute ran from its batch's arrival until the emulated work was
        done, and only that work is the accelerator's (``Session.step``)."""
        done = min(started + busy, time.perf_counter())
        self.optimizer_stepped(compute_done=done, accelerator_busy=busy)

    def _marks(
        self, current: Pass, session: sessions.Session, compute_done: float | None = None
    ) -> StepMarks | None:
        if current.ready is None:
            self.step_marks(session, 0.0, 0.0)  # forget the step's all-reduce and backward
            return None
        if compute_done is not None:
            self.step_marks(session, 0.0, 0.0)
            return StepMarks(input_requested=current.requested,
                             input_ready=current.ready + current.later_wait,
                             compute_done=compute_done)  # fmt: skip
        # the waits for the step's further batches count as input wait, not compute
        return self.step_marks(session, current.requested, current.ready + current.later_wait)

    def step_marks(
        self, session: sessions.Session, requested: float | None, ready: float
    ) -> StepMarks | None:
        """The marks of the step now ending, whose batch was asked for at ``requested`` and
        was in hand at ``ready``; None where its parts cannot be told apart. Forgets the
        step's end of backward and all-reduce either way."""
        backward_done, self.backward_done = self.backward_done, None
        graph_done, self.graph_done = self.graph_done, None
        if backward_done is None:
            return None
        alone = session.placement is not None and session.placement.world_size == 1
        if alone:
            return StepMarks(input_requested=requested, input_ready=ready,
                             compute_done=backward_done)  # fmt: skip
        if not self.ddp_models:
            return None  # an all-reduce epochscope does not see may run inside backward
        # DDP: backward returns once every bucket is all-reduced
        return StepMarks(input_requested=requested, input_ready=ready,
                         compute_done=graph_done, communication_done=backward_done)  # fmt: skip

    # torch.Tensor.backward
    def backward(self, tensor: object) -> None:
        if getattr(tensor, "numel", lambda: 0)() == 1:
            self.loss = tensor.detach()
        if self.ddp_models:
            self.backward_marks.watch(tensor)

    def backward_ended(self) -> None:
        marks = self.backward_marks
        marks.backward_returned()
        self.backward_done, self.graph_done = marks.communication_done, marks.compute_done

    # --- the model's forward: its name, validation accuracy ---------------------------
    def _watch_forward(self, current: Pass) -> None:
        import torch

        self._stop_watching()
        self._correct, self._scored = [None, None], 0
        self._forward_hook = torch.nn.modules.module.register_module_forward_hook(
            lambda module, args, output: self._forward(current, module, args, output)
        )

    def _stop_watching(self) -> None:
        if self._forward_hook is not None:
            self._forward_hook.remove()
            self._forward_hook = None

    def _forward(self, current: Pass, module: object, args: tuple, output: object) -> None:
        if self.last is not current or current.inputs_shape is None or not args:
            return
        first = args[0]
        if tuple(getattr(first, "shape", ())) != current.inputs_shape:
            return
        current.outermost = module  # forward hooks return innermost first
        labels = current.labels
        if labels is None or getattr(output, "dim", lambda: 0)() != 2:
            return
        if output.shape[0] != labels.shape[0] or output.shape[1] < 2:
            return
        current.labels = None  # this batch is scored (an outer wrapper returns it again)
        with _no_grad():
            top = output.topk(min(5, output.shape[1]), dim=1).indices.to(labels.device)
            hits = top == labels.view(-1, 1)
            top1, top5 = hits[:, :1].sum(), hits.sum()
        self._correct[0] = top1 if self._correct[0] is None else self._correct[0] + top1
        self._correct[1] = top5 if self._correct[1] is None else self._correct[1] + top5
        self._scored += labels.shape[0]
        self._classes = output.shape[1]

    def _accuracy(self) -> tuple[float | None, float | None]:
        if not self._scored or self._correct[0] is None:
            return None, None
        top1 = float(self._correct[0]) / self._scored
        if self._classes <= TOP5_CLASSES:
            return top1, None  # every class is in a top-5: not a measurement
        return top1, float(self._correct[1]) / self._scored


def model_name(module: object) -> str:
    """The class of the model, inside a (Distributed)DataParallel wrapper."""
    inner = getattr(module, "module", None)
    if type(module).__name__ in ("DistributedDataParallel", "DataParallel") and inner is not None:
        module = inner
    return type(module).__name__


def _no_grad():
    import torch

    return torch.no_grad()


def _tensors(batch: object) -> list:
    import torch

    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, dict):
        return [v for v in batch.values() if isinstance(v, torch.Tensor)]
    if isinstance(batch, list | tuple):
        return [v for v in batch if isinstance(v, torch.Tensor)]
    return []


def batch_size(batch: object) -> int:
    """Samples in a batch: the first dimension of its first tensor."""
    for tensor in _tensors(batch):
        if tensor.dim() > 0:
            return int(tensor.shape[0])
    return 0


def inputs_and_labels(batch: object) -> tuple[object, object]:
    """(inputs, integer class labels) of an ``(inputs, labels, ...)`` batch, else what is
    known of it."""
    tensors = _tensors(batch)
    if not tensors:
        return None, None
    inputs = tensors[0]
    if len(tensors) > 1:
        labels = tensors[1]
        if labels.dim() == 1 and not labels.is_floating_point() and len(labels) == len(inputs):
            return inputs, labels
    return inputs, None


TRACKER = Tracker()


def patch_dataloader(module: ModuleType) -> None:
    loader_class = module.DataLoader
    iterator_class = module._BaseDataLoaderIter
    original_iter = loader_class.__iter__
    original_next = iterator_class.__next__

    def __iter__(self):
        starting = workers_starting(self)
        TRACKER.workers_started[self] = TRACKER.workers_started.get(self, 0) + starting
        current = TRACKER.pass_started(self, starting)
        iterator = original_iter(self)
        iterator._epochscope_pass = current
        return iterator

    def __next__(self):
        current = getattr(self, "_epochscope_pass", None)
        if current is None:
            return original_next(self)
        began = time.perf_counter()
        try:
            batch = original_next(self)
        except StopIteration:
            TRACKER.pass_ended(current)
            raise
        TRACKER.batch(current, batch, began, time.perf_counter() - began)
        return batch

    loader_class.__iter__ = __iter__
    iterator_class.__next__ = __next__


def patch_optimizer(module: ModuleType) -> object:
    """The global optimizer step post hook; returns its handle (``remove()``)."""

    def stepped(optimizer: object, args: object, kwargs: object) -> None:
        TRACKER.optimizer_stepped()

    return module.register_optimizer_step_post_hook(stepped)


def patch_backward(module: ModuleType) -> None:
    tensor_class = module.Tensor
    original = tensor_class.backward

    def backward(self, *args, **kwargs):
        TRACKER.backward(self)
        try:
            return original(self, *args, **kwargs)
        finally:
            TRACKER.backward_ended()

    tensor_class.backward = backward


def patch_distributed_data_parallel(module: ModuleType) -> None:
    """Counts the ``DistributedDataParallel`` models made: their all-reduce (DDP's own, or
    the script's hook) is timed around ``backward`` and nothing of DDP is replaced."""
    ddp_class = module.DistributedDataParallel
    original_init = ddp_class.__init__

    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        session = sessions.current()
        if session is not None and session.driver != "track":
            TRACKER.ddp_models += 1

    ddp_class.__init__ = __init__
