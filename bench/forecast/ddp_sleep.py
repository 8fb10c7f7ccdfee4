"""A PyTorch DDP training whose compute is a fixed sleep and whose gradients are real.

Each step draws a batch from a DataLoader, sleeps ``--compute-seconds`` in the model's
forward (in place of an accelerator's work: ranks sharing this machine's two cores do not
share that time), and backward fills real gradients of ``--gradient-mb`` MB of float32
parameters, which DistributedDataParallel all-reduces with gloo over whatever network the
ranks reach each other on. ``workloads profile -- python ddp_sleep.py`` sees it as any
PyTorch training: a DataLoader pass per epoch, an optimizer step per step.

The rendezvous is the environment's (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as
torchrun sets it; without them it runs as one rank.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

PARAMETER_TENSORS = 4  # several DDP buckets' worth, as a real model's layers


class SleepModel(nn.Module):
    def __init__(self, gradient_bytes: int, compute_seconds: float) -> None:
        super().__init__()
        elements = gradient_bytes // 4 // PARAMETER_TENSORS
        self.weights = nn.ParameterList(
            nn.Parameter(torch.zeros(elements)) for _ in range(PARAMETER_TENSORS)
        )
        self.head = nn.Linear(16, 4)
        self.compute_seconds = compute_seconds

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        time.sleep(self.compute_seconds)
        # every parameter takes part, so backward gives each a whole gradient tensor
        scale = sum(weight.sum() for weight in self.weights) * 1e-9
        return self.head(images.flatten(1)) + scale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gradient-mb", type=float, default=24.0)
    parser.add_argument("--compute-seconds", type=float, default=0.5)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps-per-epoch", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()

    torch.set_num_threads(1)
    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    model: nn.Module = SleepModel(int(args.gradient_mb * 1e6), args.compute_seconds)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    images = torch.randn(args.steps_per_epoch * args.batch_size, 1, 4, 4)
    labels = torch.randint(0, 4, (len(images),))
    loader = DataLoader(TensorDataset(images, labels), batch_size=args.batch_size)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_function = nn.CrossEntropyLoss()
    for _ in range(args.epochs):
        for batch, target in loader:
            optimizer.zero_grad(set_to_none=False)
            loss = loss_function(model(batch), target)
            loss.backward()
            optimizer.step()
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
