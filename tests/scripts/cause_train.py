"""A small PyTorch training that produces one named cause for real, for the scenario suite
(tests/scenarios/test_causes.py): run alone or under torchrun (gloo DDP), reading a
class-per-folder JPEG tree decoded with PIL in its DataLoader workers.

Usage: cause_train.py DATA_DIR [--epochs N] [--batch-size B] [--workers W]
[--persistent-workers] [--worker-start-ms MS] [--threads T] [--sleep-rank R --sleep-ms MS]
[--cgroup-rank R] [--cgroup-workers] [--images N] [--item-sleep-ms MS] [--lr LR] [--validate]
[--stop-top1 X]

- ``--item-sleep-ms MS``: the Dataset's ``__getitem__`` sleeps MS per picture before
  decoding it (a slow loader: a remote store, a heavy decode);
- ``--lr LR``: SGD's learning rate, as the user chose it (not scaled with the ranks);
- ``--validate``: top-1 on the data set's ``val`` pictures after every epoch (each rank
  the whole split); ``--stop-top1 X``: stop after the epoch whose top-1 reached X;
- ``--worker-start-ms MS``: each loader worker spends MS starting (its ``worker_init_fn``),
  as workers that import libraries or open files do before their first batch;

- ``--threads T``: ``torch.set_num_threads(T)`` (else the environment's OMP_NUM_THREADS,
  which torchrun sets to 1 for more than one rank);
- ``--sleep-rank R --sleep-ms MS``: rank R sleeps between ``backward()`` and
  ``optimizer.step()`` at every step (a rank slowed outside backward);
- ``--cgroup-rank R``: rank R moves itself (and so the loader workers it starts) into the
  cgroup v1 directory named by ``$CAUSE_CGROUP`` before it trains (a CPU quota on one rank);
- ``--cgroup-workers``: each loader worker moves itself into that cgroup as it starts, the
  ranks staying out (a CPU quota on decoding only: the workers open and decode the JPEGs).
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from torch_folder_train import JpegFolder  # this script's folder is on sys.path


class SmallNet(nn.Module):
    """Convolutions with batch norm: DDP broadcasts its buffers at the start of forward."""

    def __init__(self, classes):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
        )  # fmt: skip
        self.classifier = nn.Linear(32 * 16, classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


class SlowItems(JpegFolder):
    """The JPEG folder, each picture ``seconds`` slower to fetch."""

    def __init__(self, root, seconds: float) -> None:
        super().__init__(root)
        self.seconds = seconds

    def __getitem__(self, index):
        if self.seconds > 0:
            time.sleep(self.seconds)
        return super().__getitem__(index)


class WorkerStart:
    """A loader worker's start-up: ``seconds`` of work before its first batch, after moving
    into the cgroup v1 directory ``cgroup`` where given (picklable, for workers started by
    spawn as well as fork)."""

    def __init__(self, seconds: float, cgroup: str | None = None) -> None:
        self.seconds = seconds
        self.cgroup = cgroup

    def __call__(self, worker_id: int) -> None:
        if self.cgroup:
            with open(os.path.join(self.cgroup, "cgroup.procs"), "w") as procs:
                procs.write(str(os.getpid()))
        time.sleep(self.seconds)


def top1(model, loader) -> float:
    model.eval()
    correct = seen = 0
    with torch.no_grad():
        for images, target in loader:
            correct += int((model(images).argmax(1) == target).sum())
            seen += len(target)
    model.train()
    return correct / seen


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("data")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--persistent-workers", action="store_true")
    parser.add_argument("--worker-start-ms", type=float, default=0.0)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--sleep-rank", type=int)
    parser.add_argument("--sleep-ms", type=float, default=150.0)
    parser.add_argument("--cgroup-rank", type=int)
    parser.add_argument("--cgroup-workers", action="store_true")
    parser.add_argument("--images", type=int, help="train on the first N pictures only")
    parser.add_argument("--item-sleep-ms", type=float, default=0.0)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--validate", action="store_true")
    parser.add_argument("--stop-top1", type=float)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank() if distributed else 0
    if args.cgroup_rank == rank:
        with open(os.path.join(os.environ["CAUSE_CGROUP"], "cgroup.procs"), "w") as procs:
            procs.write(str(os.getpid()))
    train_set = SlowItems(os.path.join(args.data, "train"), args.item_sleep_ms / 1000)
    if args.images:
        train_set.samples = train_set.samples[:: max(1, len(train_set) // args.images)]
    sampler = DistributedSampler(train_set) if distributed else None
    loader = DataLoader(
        train_set,
        batch_size=args.batch_size,
        shuffle=sampler is None,
        sampler=sampler,
        num_workers=args.workers,
        persistent_workers=args.persistent_workers and args.workers > 0,
        worker_init_fn=WorkerStart(
            args.worker_start_ms / 1000,
            os.environ["CAUSE_CGROUP"] if args.cgroup_workers else None,
        )
        if args.workers
        else None,
    )
    torch.manual_seed(0)
    model = SmallNet(len(os.listdir(os.path.join(args.data, "train"))))
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    val_loader = None
    if args.validate:
        val_loader = DataLoader(JpegFolder(os.path.join(args.data, "val")), batch_size=32)
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for images, target in loader:
            loss = criterion(model(images), target)
            optimizer.zero_grad()
            loss.backward()
            if args.sleep_rank == rank:
                time.sleep(args.sleep_ms / 1000)
            optimizer.step()
        reached = top1(model, val_loader) if val_loader is not None else None
        accuracy = "" if reached is None else f", top-1 {reached:.3f}"
        print(f"rank {rank} epoch {epoch + 1}: loss {loss.item():.3f}{accuracy}", flush=True)
        if reached is not None and args.stop_top1 is not None and reached >= args.stop_top1:
            break  # every rank validates the same weights on the same split: all stop
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
