"""What the step anatomy costs per step, measured in-process side by side.

End-to-end throughput ratios on a shared 2-core machine swing by 20% from run to run, far
more than the anatomy costs; this measures the added work directly, interleaving the
instrumented and plain variants in blocks and taking medians:

- ``recorder``: the recorder's marks and ``split_step`` per step (every trainer);
- ``tensorflow``: the four ``tf.py_function`` stamps in a compiled step over 161
  gradient-like tensors (ResNet-50 has 161): *computed* fed one element of the first,
  *reduced* one element of each;
- ``mxnet``: the two engine probes (``add_n`` over one-element views of 161 arrays) and
  the thread that waits for them.

    nice .venv/bin/python bench/anatomy/step_cost.py --out bench/anatomy/step-cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from workloads.record.events import EventWriter, MemorySink  # noqa: E402
from workloads.record.timing import Recorder  # noqa: E402

GRADIENTS = 161  # ResNet-50's trainable tensors


def interleaved(plain, instrumented, blocks: int, per_block: int) -> dict[str, float]:
    """Median seconds per call of each, over blocks alternating which runs first."""
    times: dict[str, list[float]] = {"plain": [], "instrumented": []}
    for block in range(blocks):
        order = [("plain", plain), ("instrumented", instrumented)]
        for name, function in order if block % 2 == 0 else order[::-1]:
            started = time.perf_counter()
            for _ in range(per_block):
                function()
            times[name].append((time.perf_counter() - started) / per_block)
    plain_s = statistics.median(times["plain"])
    instrumented_s = statistics.median(times["instrumented"])
    return {
        "plain_seconds": plain_s,
        "instrumented_seconds": instrumented_s,
        "added_microseconds_per_step": (instrumented_s - plain_s) * 1e6,
    }


def recorder_cost(blocks: int) -> dict[str, float]:
    def recorder() -> Recorder:
        writer = EventWriter(MemorySink(), "r", 0, "bench", host="h")
        made = Recorder(writer, batch_size=8, warmup_steps=0, step_every=10**9)
        made.read_io = lambda: None
        made.epoch_start(1)
        return made

    plain, marked = recorder(), recorder()

    def marked_step() -> None:
        marked.input_ready()
        marked.compute_done()
        marked.communication_done()
        marked.step_done(1.0)

    return interleaved(lambda: plain.step_done(1.0), marked_step, blocks, 2000)


def tensorflow_cost(blocks: int) -> dict[str, float]:
    import tensorflow as tf

    from workloads.train.tf_train import StepStamps, first_present

    tensors = [tf.Variable(tf.random.normal((64, 64))) for _ in range(GRADIENTS)]
    stamps = StepStamps(tf)

    def body(instrument: bool):
        @tf.function
        def step(x):
            grads = [t * x for t in tensors]
            if instrument:
                stamps._stamp("_anatomy_begin", [])
                stamps._stamp("_anatomy_input", [x])
                stamps._stamp("_anatomy_computed", first_present(grads))
                stamps._stamp("_anatomy_reduced", grads)
                return tf.add_n([g[0, 0] for g in grads]), dict(stamps.traced)
            return tf.add_n([g[0, 0] for g in grads]), {}

        return step

    plain, instrumented = body(False), body(True)
    x = tf.constant(1.0)
    plain(x), instrumented(x)  # trace both first
    return interleaved(lambda: plain(x), lambda: instrumented(x), blocks, 50)


def mxnet_cost(blocks: int) -> dict[str, float]:
    import mxnet as mx

    from workloads.train.mx_train import EngineClock

    arrays = [mx.nd.ones((64, 64)) for _ in range(GRADIENTS)]
    engine = EngineClock(time.perf_counter)
    first, every = engine.views(arrays[:1]), engine.views(arrays)

    def work() -> None:
        for array in arrays[:8]:
            array += 1.0

    def plain() -> None:
        work()
        mx.nd.waitall()

    def instrumented() -> None:
        work()
        engine.watch(mx, "computed", first)
        engine.watch(mx, "reduced", every)
        mx.nd.waitall()
        engine.collect()

    return interleaved(plain, instrumented, blocks, 50)


def pytorch_cost(blocks: int) -> dict[str, float]:
    """DDP's all-reduce untimed against timed as the PyTorch workload times it
    (``anatomy.BackwardMarks`` around ``backward``) over a 1-process gloo group: a small
    model in ResNet-50's number of buckets (DDP's default 25 MB cap puts its 161
    gradients, 98 MB, in ~4-5), so the step is mostly DDP's own work. (The 2-rank
    ResNet-50 side by side is ``ddp_hook_cost.py``.)"""
    import torch
    import torch.distributed as dist

    from workloads.record.anatomy import BackwardMarks
    from workloads.record.events import EventWriter, MemorySink

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=0, world_size=1)
    torch.manual_seed(0)

    def model() -> torch.nn.Module:
        layers = [torch.nn.Linear(64, 64) for _ in range(GRADIENTS // 2)]
        return torch.nn.Sequential(*layers)

    recorder = Recorder(
        EventWriter(MemorySink(), "r", 0, "bench", host="h"),
        batch_size=8, warmup_steps=0, step_every=10**9,
    )  # fmt: skip
    recorder.read_io = lambda: None
    recorder.epoch_start(1)
    # bucket_cap_mb: ~4.5 buckets over the 0.8 MB of gradients, as ResNet-50 has
    plain = torch.nn.parallel.DistributedDataParallel(model(), bucket_cap_mb=0.18)
    timed = torch.nn.parallel.DistributedDataParallel(model(), bucket_cap_mb=0.18)
    marks = BackwardMarks(recorder.now)
    x = torch.randn(8, 64)

    def step(ddp) -> None:
        ddp.zero_grad(set_to_none=True)
        loss = ddp(x).sum()
        if ddp is timed:
            marks.watch(loss)
        loss.backward()
        if ddp is timed:
            marks.backward_returned()
            recorder.compute_done(marks.compute_done)
            recorder.communication_done(marks.communication_done)

    step(plain), step(timed)  # buckets rebuilt on the first step
    return interleaved(lambda: step(plain), lambda: step(timed), blocks, 20)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--parts", default="recorder,tensorflow,mxnet,pytorch")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    measures = {
        "recorder": recorder_cost,
        "tensorflow": tensorflow_cost,
        "mxnet": mxnet_cost,
        "pytorch": pytorch_cost,
    }
    results = {"load_average_at_start": os.getloadavg()}
    for part in args.parts.split(","):
        results[part] = measures[part](args.blocks)
        print(part, json.dumps(results[part]), flush=True)
    results["load_average_at_end"] = os.getloadavg()
    text = json.dumps(results, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
