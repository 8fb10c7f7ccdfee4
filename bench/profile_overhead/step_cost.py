"""What ``workloads profile``'s instrumentation adds to a PyTorch step, measured in one
process side by side.

End-to-end runs (``run.py``) on a shared 2-core machine swing by a factor of 2-4 with
the load, far more than 1 %. This interleaves, in one process, training epochs with the
instrumentation switched in (the patched ``DataLoader.__iter__``/``__next__`` and
``Tensor.backward``, the optimizer step hook, a DDP-less session spooling its events
through the real shipper to a real ``collector serve`` on loopback) and epochs with the
originals put back, alternating which comes first, and takes the medians of the seconds
per step (and their fastest epochs: load only adds time, so the fastest epoch of each
variant is the nearest to a quiet core): both variants share each moment's load. An
epoch is one pass over a DataLoader, so the per-epoch work (epoch events, the
/proc/<pid>/io reads) is in it. Three clocks: wall time; the training thread's CPU time
(what the hooks add to the step itself); the process's CPU time (the event thread's
spooling and sending too, which runs beside the training on another core where one is
free).

    nice .venv/bin/python bench/profile_overhead/step_cost.py --model small \\
        --out bench/profile_overhead/results-step-cost-small.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=("resnet50", "small"), default="small")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=64, help="steps per epoch")
    parser.add_argument("--epochs", type=int, default=20, help="epochs of each variant")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--step-every", type=int, default=10, help="as workloads profile's")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import subprocess

    from workloads.autoprofile.config import RUN_ENV, ProfileConfig
    from workloads.launch.local_stack import child_env, free_port, stop, wait_for_port

    scratch = Path(tempfile.mkdtemp(prefix="epochscope-step-cost-"))
    port = free_port()
    log = scratch / "collector.log"
    collector = subprocess.Popen(
        [sys.executable, "-m", "collector", "serve", "--db", str(scratch / "c.sqlite"),
         "--listen", f"127.0.0.1:{port}"],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, env=child_env(),
    )  # fmt: skip
    wait_for_port(port, collector, "collector", log)
    config = ProfileConfig("step-cost", f"http://127.0.0.1:{port}", str(scratch / "spool"),
                           step_every=args.step_every)  # fmt: skip
    os.environ[RUN_ENV] = config.encode()

    import torch
    import torch.optim.optimizer as optimizer_module
    import torch.utils.data.dataloader as loader_module
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from workloads.autoprofile import session as sessions
    from workloads.autoprofile import torch_hooks

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    originals = {
        (loader_module.DataLoader, "__iter__"): loader_module.DataLoader.__iter__,
        (loader_module._BaseDataLoaderIter, "__next__"):
            loader_module._BaseDataLoaderIter.__next__,
        (torch.Tensor, "backward"): torch.Tensor.backward,
    }  # fmt: skip
    torch_hooks.patch_dataloader(loader_module)
    torch_hooks.patch_backward(torch._tensor)
    patched = {key: getattr(*key) for key in originals}

    def switch(on: bool) -> object:
        for (owner, name), function in (patched if on else originals).items():
            setattr(owner, name, function)
        return torch_hooks.patch_optimizer(optimizer_module) if on else None

    images = args.batch_size * args.steps
    data = TensorDataset(torch.randn(images, 3, args.image_size, args.image_size),
                         torch.randint(10, (images,)))  # fmt: skip
    train_loader = DataLoader(data, batch_size=args.batch_size, shuffle=True)
    if args.model == "resnet50":
        from workloads.train.torch_resnet import ResNet50

        model = ResNet50(num_classes=10)
    else:
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
                              nn.Flatten(), nn.Linear(128, 10))  # fmt: skip
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    clocks = {"wall": time.perf_counter, "thread_cpu": time.thread_time,
              "process_cpu": time.process_time}  # fmt: skip

    def epoch() -> dict[str, float]:
        began = {name: clock() for name, clock in clocks.items()}
        for batch, target in train_loader:
            loss = criterion(model(batch), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return {name: (clock() - began[name]) / args.steps for name, clock in clocks.items()}

    handle = switch(True)
    epoch()  # warm-up; the session starts (run_start) at its first step
    handle.remove()
    switch(False)
    epoch()
    seconds = {name: {"plain": [], "instrumented": []} for name in clocks}
    loads = []
    for index in range(args.epochs):
        order = [False, True] if index % 2 == 0 else [True, False]
        loads.append(float(Path("/proc/loadavg").read_text().split()[0]))
        for on in order:
            handle = switch(on)
            measured = epoch()
            if handle is not None:
                handle.remove()
            switch(False)
            for name, value in measured.items():
                seconds[name]["instrumented" if on else "plain"].append(value)
        wall = seconds["wall"]
        print(f"epoch pair {index + 1}: plain {1e3 * wall['plain'][-1]:.2f} ms/step, "
              f"instrumented {1e3 * wall['instrumented'][-1]:.2f}", flush=True)  # fmt: skip
    sessions.current().finish()  # the run's end, delivered
    stop(collector)

    def summary(figures: dict[str, list[float]]) -> dict[str, float]:
        plain = statistics.median(figures["plain"])
        instrumented = statistics.median(figures["instrumented"])
        pairs = [p / i for p, i in zip(figures["plain"], figures["instrumented"], strict=True)]
        # load only ever adds time: the fastest epoch of each is the nearest to a quiet core
        fastest_plain, fastest_instrumented = min(figures["plain"]), min(figures["instrumented"])
        return {
            "plain_ms_per_step": 1e3 * plain,
            "instrumented_ms_per_step": 1e3 * instrumented,
            "added_microseconds_per_step": 1e6 * (instrumented - plain),
            "fastest_plain_ms_per_step": 1e3 * fastest_plain,
            "fastest_instrumented_ms_per_step": 1e3 * fastest_instrumented,
            "fastest_added_microseconds_per_step": 1e6 * (fastest_instrumented - fastest_plain),
            "instrumented_over_plain_images_per_second": plain / instrumented,
            "pair_ratios": {
                "median": statistics.median(pairs),
                "min": min(pairs),
                "max": max(pairs),
            },
        }

    result = {
        "config": vars(args) | {"out": str(args.out) if args.out else None},
        **{name: summary(figures) for name, figures in seconds.items()},
        "load_average": {
            "median": statistics.median(loads),
            "min": min(loads),
            "max": max(loads),
        },
        "rounds": seconds,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "rounds"}, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
