"""A user's PyTorch loop whose loader is slow for a reason that is neither storage nor decode:
each sample of in-memory random tensors sleeps ``--item-sleep-ms`` in ``__getitem__`` (a
remote store, a heavy transform). Alone or under torchrun (gloo DDP). Nothing of epochscope
in it.

Usage: slow_loader.py [--epochs N] [--samples N] [--batch-size B] [--item-sleep-ms MS]
[--workers W]"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class SlowTensors(Dataset):
    def __init__(self, samples: int, seconds: float) -> None:
        generator = torch.Generator().manual_seed(1)
        self.inputs = torch.randn(samples, 3, 32, 32, generator=generator)
        self.labels = torch.randint(0, 4, (samples,), generator=generator)
        self.seconds = seconds

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index):
        time.sleep(self.seconds)
        return self.inputs[index], self.labels[index]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--item-sleep-ms", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    data = SlowTensors(args.samples, args.item_sleep_ms / 1000)
    sampler = DistributedSampler(data) if distributed else None
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=sampler is None,
                        sampler=sampler, num_workers=args.workers,
                        persistent_workers=args.workers > 0)  # fmt: skip
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
                          nn.Flatten(), nn.Linear(128, 4))  # fmt: skip
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    criterion = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for inputs, labels in loader:
            optimizer.zero_grad()
            criterion(model(inputs), labels).backward()
            optimizer.step()
    if distributed:
        dist.destroy_process_group()
    print("done")


if __name__ == "__main__":
    main()
