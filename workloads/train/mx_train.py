"""ResNet-50 v1 from the Gluon model zoo with Horovod (horovod.mxnet), over RecordIO.

Input: ``mx.io.ImageRecordIter`` over ``train.rec``/``train.idx``, this rank's part
(``num_parts``/``part_index``), decoded by ``loader_workers`` threads with a random
resized crop and mirror. ``--synthetic`` feeds one random batch over and over.
Validation: ``val.rec`` with a centre crop; correct counts are summed over ranks.
"""

from __future__ import annotations

import math
import os
import types

from workloads.record.cpus import MXNET_THREADS_ENV
from workloads.record.spec import RunSpec
from workloads.train.placement import Placement, cpu_threads_per_rank, steps_per_epoch

MEAN_RGB = (123.68, 116.779, 103.939)
STD_RGB = (58.393, 57.12, 57.375)


def _single_process() -> types.SimpleNamespace:
    return types.SimpleNamespace(
        rank=lambda: 0, size=lambda: 1, local_rank=lambda: 0, local_size=lambda: 1
    )


def _horovod():
    """horovod.mxnet, or None for one process when Horovod has no MXNet extension."""
    try:
        import horovod.mxnet as hvd
    except ImportError as error:
        if int(os.environ.get("HOROVOD_SIZE", "1")) > 1:
            raise RuntimeError(f"horovod built without MXNet: {error}") from error
        return None
    hvd.init()
    return hvd


def zero_init_last_batch_norms(net, gluon) -> int:
    """Start each residual block's last batch-norm scale (gamma) at zero, so every block
    starts as the identity: what the PyTorch trainer does (Goyal et al., 2017). Returns
    how many blocks it changed.

    With Gluon's default (gamma 1), each of the 16 blocks adds its full variance to the
    trunk and the first steps' gradients are large: the loss jumped from 2.5 to 8 within
    5 steps at learning rate 0.0125, the convolutions before each batch-norm grew (the
    stem's batch-norm's moving variance went 1 -> 41 -> 154 over two epochs of 8 steps)
    and the moving statistics, always behind the growing weights, no longer described
    the activations: validation (which uses them) gave every picture one class, top-1 at
    chance in every run, while the same network in training mode was right."""
    from mxnet.gluon.model_zoo.vision.resnet import BottleneckV1

    blocks = [
        block
        for stage in net.features
        if isinstance(stage, gluon.nn.HybridSequential)
        for block in stage
        if isinstance(block, BottleneckV1)
    ]
    for block in blocks:
        block.body[-1].gamma.init = "zeros"  # read when the deferred initialisation runs
    return len(blocks)


def set_compute_threads(mx, threads: int) -> None:
    """Compute with ``threads`` OpenMP threads, as the TensorFlow and PyTorch trainers set
    theirs: the host's cores shared by its ranks. MXNet's default (one per core in every
    rank) made the bundled 2-rank run on 2 cores trip the oversubscription warning (issue
    45, item 5). Gluon has no setter; the C API's ``MXSetNumOMPThreads`` is one. The count
    is left in ``MXNET_THREADS_ENV`` for the rank's ``run_start`` (workloads/record/cpus.py),
    as MXNet has no getter either."""
    import ctypes

    mx.base.check_call(mx.base._LIB.MXSetNumOMPThreads(ctypes.c_int(threads)))
    os.environ[MXNET_THREADS_ENV] = str(threads)


def _context(mx, placement: Placement):
    gpus = mx.context.num_gpus()
    return mx.gpu(placement.local_rank % gpus) if gpus else mx.cpu()


def train_iterator(mx, spec: RunSpec, placement: Placement, threads: int):
    root = spec.dataset["root"]
    rec = f"{root}/{spec.dataset['train']['files'][0]}"
    return mx.io.ImageRecordIter(
        path_imgrec=rec,
        path_imgidx=rec[: -len(".rec")] + ".idx",
        data_shape=(3, spec.image_size, spec.image_size),
        batch_size=spec.batch_size,
        shuffle=True,
        seed=spec.seed + placement.rank,
        rand_mirror=True,
        random_resized_crop=True,
        min_random_area=0.08,
        max_random_area=1.0,
        min_aspect_ratio=0.75,
        max_aspect_ratio=1.33,
        mean_r=MEAN_RGB[0], mean_g=MEAN_RGB[1], mean_b=MEAN_RGB[2],
        std_r=STD_RGB[0], std_g=STD_RGB[1], std_b=STD_RGB[2],
        num_parts=placement.world_size,
        part_index=placement.rank,
        preprocess_threads=threads,
        round_batch=True,
    )  # fmt: skip


def val_iterator(mx, spec: RunSpec, placement: Placement, threads: int):
    files = spec.dataset["val"]["files"]
    if not files or not spec.validate:
        return None
    rec = f"{spec.dataset['root']}/{files[0]}"
    return mx.io.ImageRecordIter(
        path_imgrec=rec,
        path_imgidx=rec[: -len(".rec")] + ".idx",
        data_shape=(3, spec.image_size, spec.image_size),
        batch_size=spec.batch_size,
        resize=int(spec.image_size / 0.875),
        mean_r=MEAN_RGB[0], mean_g=MEAN_RGB[1], mean_b=MEAN_RGB[2],
        std_r=STD_RGB[0], std_g=STD_RGB[1], std_b=STD_RGB[2],
        num_parts=placement.world_size,
        part_index=placement.rank,
        preprocess_threads=threads,
        round_batch=False,
    )  # fmt: skip


def batches(iterator, steps: int):
    """``steps`` batches, restarting the iterator when a pass ends (every rank does the
    same number of steps, whatever its part of the file holds)."""
    done = 0
    while done < steps:
        for batch in iterator:
            yield batch
            done += 1
            if done == steps:
                break
        iterator.reset()


def evaluate(mx, net, iterator, ctx, dtype, hvd) -> tuple[float, float]:
    correct1 = correct5 = seen = 0.0
    iterator.reset()
    for batch in iterator:
        data = batch.data[0].as_in_context(ctx).astype(dtype)
        labels = batch.label[0].as_in_context(ctx)
        valid = data.shape[0] - batch.pad
        logits = net(data).astype("float32")[:valid]
        labels = labels[:valid]
        k = min(5, logits.shape[1])
        ranked = mx.nd.topk(logits, k=k, ret_typ="indices").astype("float32")
        hits = ranked == labels.reshape((-1, 1))
        correct1 += float(hits[:, 0].sum().asscalar())
        correct5 += float(hits.sum().asscalar())
        seen += valid
    totals = mx.nd.array([correct1, correct5, seen], dtype="float64")
    if hvd is not None:
        totals = hvd.allreduce(totals, average=False, name="eval_counts")
    correct1, correct5, seen = totals.asnumpy().tolist()
    if seen == 0:
        return math.nan, math.nan
    return correct1 / seen, correct5 / seen


class EngineClock:
    """When MXNet's asynchronous engine has finished writing some arrays.

    A step is pushed to the engine and runs behind Python's back; reading the clock in
    the training loop would time the pushing, not the work. Instead a *probe* is pushed
    (``add_n`` over one-element views of the arrays: one tiny op that reads them, so the
    engine runs it right after their last writer) and a thread blocked in the probe's
    ``wait_to_read`` (ctypes: the GIL is free meanwhile) notes the time it returns."""

    def __init__(self, clock) -> None:
        import queue
        import threading

        self.clock = clock
        self.pending: queue.Queue = queue.Queue()
        self.times: dict[str, float] = {}
        threading.Thread(target=self._wait, name="engine-clock", daemon=True).start()

    def _wait(self) -> None:
        while True:
            name, probe = self.pending.get()
            try:
                probe.wait_to_read()
                self.times[name] = self.clock()
            finally:
                self.pending.task_done()

    @staticmethod
    def views(arrays: list) -> list:
        """One-element views of ``arrays`` (made once: they share the arrays' memory)."""
        return [array.reshape((-1,))[0:1] for array in arrays]

    def watch(self, mx, name: str, views: list) -> None:
        """Note when the engine has finished writing the arrays behind ``views``."""
        self.pending.put((name, mx.nd.add_n(*views)))

    def collect(self) -> dict[str, float]:
        """The times of every probe watched so far (waits for the last ones)."""
        self.pending.join()
        times, self.times = self.times, {}
        return times


def run(spec: RunSpec, start_recorder):
    import mxnet as mx
    from mxnet import autograd, gluon

    hvd = _horovod()
    dist = hvd or _single_process()
    placement = Placement(dist.rank(), dist.size(), dist.local_rank(), dist.local_size())
    threads = min(spec.loader_workers, cpu_threads_per_rank(placement.local_size))
    set_compute_threads(mx, cpu_threads_per_rank(placement.local_size))
    ctx = _context(mx, placement)
    dtype = "float16" if spec.precision == "fp16" else "float32"
    mx.random.seed(spec.seed)

    recorder = start_recorder(placement)
    net = gluon.model_zoo.vision.resnet50_v1(classes=spec.num_classes)
    zero_init_last_batch_norms(net, gluon)
    net.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2), ctx=ctx)
    if dtype == "float16":
        net.cast(dtype)
    net.hybridize(static_alloc=True, static_shape=True)
    params = net.collect_params()
    optimizer_params = {
        "learning_rate": spec.learning_rate * placement.world_size,
        "momentum": 0.9,
        "wd": 1e-4,
        "multi_precision": dtype == "float16",
    }
    if hvd is not None:
        # Parameters are created lazily: one forward pass first, then broadcast rank 0's.
        net(mx.nd.zeros((1, 3, spec.image_size, spec.image_size), ctx=ctx, dtype=dtype))
        hvd.broadcast_parameters(params, root_rank=0)
        trainer = hvd.DistributedTrainer(params, "sgd", optimizer_params)
    else:
        trainer = gluon.Trainer(params, "sgd", optimizer_params, kvstore=None)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    grads = [p.list_grad()[0] for p in params.values() if p.grad_req != "null"]
    engine = EngineClock(recorder.now)
    first_grad, every_grad = engine.views(grads[:1]), engine.views(grads)

    steps = steps_per_epoch(spec, placement.world_size)
    if spec.synthetic:
        shape = (spec.batch_size, 3, spec.image_size, spec.image_size)
        data = mx.nd.random.uniform(-1, 1, shape=shape, ctx=ctx, dtype=dtype)
        labels = mx.nd.random.randint(0, spec.num_classes, shape=(spec.batch_size,), ctx=ctx)
        source = None
        val = None
    else:
        source = train_iterator(mx, spec, placement, threads)
        val = val_iterator(mx, spec, placement, threads)

    for epoch in range(1, spec.epochs + 1):
        recorder.epoch_start(epoch)
        loss_sum, loss_count = mx.nd.zeros((1,), ctx=ctx), 0
        stream = batches(source, steps) if source is not None else range(steps)
        for batch in stream:
            if source is not None:
                data = batch.data[0].as_in_context(ctx).astype(dtype, copy=False)
                labels = batch.label[0].as_in_context(ctx)
            if spec.anatomy:
                recorder.input_ready()
            with autograd.record():
                loss = loss_fn(net(data).astype("float32"), labels)
            loss.backward()
            # The first layer's gradient is backward's last; probing only it (before the
            # all-reduce of it is pushed) holds no other gradient's all-reduce back.
            if spec.anatomy:
                engine.watch(mx, "computed", first_grad)
            trainer.step(spec.batch_size)
            if spec.anatomy and placement.world_size > 1:  # one process: no all-reduce
                engine.watch(mx, "reduced", every_grad)  # after every all-reduce's write
            mx.nd.waitall()  # the step is over only when the engine is done with it
            if spec.anatomy:
                done = engine.collect()
                recorder.compute_done(done.get("computed"))
                if "reduced" in done:
                    recorder.communication_done(done["reduced"])
            loss_sum, loss_count = loss_sum + loss.mean(), loss_count + 1
            recorder.step_done(lambda loss=loss: float(loss.mean().asscalar()))
        mean_loss = float(loss_sum.asscalar()) / max(1, loss_count)
        top1 = top5 = None
        if val is not None:
            top1, top5 = evaluate(mx, net, val, ctx, dtype, hvd)
        recorder.epoch_end(loss=mean_loss, top1=top1, top5=top5)
    return recorder
