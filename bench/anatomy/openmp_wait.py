"""Why a 1-process PyTorch run was 7-50x slower per step than each rank of a 2-process
run on the shared 2-core machine, measured: PyTorch's OpenMP threads spinning at barriers.

A 1-process rank computes with 2 OpenMP threads (one per core; a 2-process run's ranks get
1 each). libgomp's default is to *spin* (300,000 rounds, ``GOMP_SPINCOUNT``) at the end of
every parallel region for the other thread to arrive before it sleeps; ResNet-50's
forward and backward are thousands of regions per step.
When the two threads cannot run at the same time (the DataLoader worker, the agent,
other jobs share the cores), the thread that arrived first spins through its whole
time slice while the other waits for a core: each region costs a scheduler quantum.
``OMP_WAIT_POLICY=PASSIVE`` makes the waiting thread sleep at once.

Each variant is a fresh process (the policy is read once, when torch loads) timing
forward + backward + SGD of ResNet-50 on one batch; the variants are interleaved round by
round (the order reversed every other round), with ``--contenders`` busy processes beside
them standing in for the other work on the machine. Reports the median seconds per step
and the CPU seconds per step of each variant, and the load average.

    nice .venv/bin/python bench/anatomy/openmp_wait.py --contenders 0 \
        --out bench/anatomy/results/openmp-wait.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

VARIANTS = {
    # name: (torch threads, OMP_WAIT_POLICY or None for libgomp's default, which spins
    # GOMP_SPINCOUNT = 300,000 times before it sleeps; PASSIVE: 0, ACTIVE: 30 billion)
    "1 thread": (1, None),
    "2 threads, libgomp default (spin, then sleep)": (2, None),
    "2 threads, passive (the workloads' default)": (2, "PASSIVE"),
}

STEPS = """
import json, os, sys, time
import torch
sys.path.insert(0, sys.argv[1])
from workloads.train.torch_resnet import ResNet50
torch.set_num_threads(int(sys.argv[2]))
steps, batch, size = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.manual_seed(0)
model = ResNet50(4).to(memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
images = torch.randn(batch, 3, size, size).contiguous(memory_format=torch.channels_last)
labels = torch.randint(0, 4, (batch,))
wall, cpu = [], []
for step in range(steps + 1):
    started, started_cpu = time.perf_counter(), time.process_time()
    optimizer.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(model(images), labels).backward()
    optimizer.step()
    if step:  # the first step allocates and warms up
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
print(json.dumps({"wall": wall, "cpu": cpu}))
"""

SPIN = "import time, sys\nend = time.time() + float(sys.argv[1])\nwhile time.time() < end: pass"


def run_variant(threads: int, policy: str | None, args) -> dict[str, list[float]]:
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    env.pop("OMP_NUM_THREADS", None)
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    command = [sys.executable, "-c", STEPS, str(ROOT), str(threads), str(args.steps),
               str(args.batch_size), str(args.image_size)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--contenders", type=int, default=2, help="busy processes beside")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    spinners = [
        subprocess.Popen([sys.executable, "-c", SPIN, "3600"]) for _ in range(args.contenders)
    ]
    load_before = os.getloadavg()
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in VARIANTS}
    try:
        for round_index in range(args.rounds):
            names = list(VARIANTS)
            for name in names if round_index % 2 == 0 else names[::-1]:
                measured = run_variant(*VARIANTS[name], args)
                figures = {
                    "seconds_per_step": statistics.median(measured["wall"]),
                    "cpu_seconds_per_step": statistics.median(measured["cpu"]),
                }
                rounds[name].append(figures)
                print(f"round {round_index + 1} {name}: {figures['seconds_per_step']:.3f} s/step,"
                      f" {figures['cpu_seconds_per_step']:.3f} CPU s/step", flush=True)  # fmt: skip
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    summary: dict[str, object] = {
        "contenders": args.contenders,
        "batch_size": args.batch_size,
        "image_size": args.image_size,
        "steps_per_round": args.steps,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "variants": {},
    }
    for name, figures in rounds.items():
        per_step = [f["seconds_per_step"] for f in figures]
        summary["variants"][name] = {  # type: ignore[index]
            "median_seconds_per_step": statistics.median(per_step),
            "min_seconds_per_step": min(per_step),
            "max_seconds_per_step": max(per_step),
            "median_cpu_seconds_per_step": statistics.median(
                f["cpu_seconds_per_step"] for f in figures
            ),
            "rounds": figures,
        }
    text = json.dumps(summary, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
