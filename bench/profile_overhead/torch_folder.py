"""A user's PyTorch training as ``user_scripts.py`` measures it: a class-per-folder JPEG tree
read with PIL through a ``DataLoader`` (one worker), ResNet-50 (the project's, 32 px), SGD,
a ``validate`` pass after every epoch; ``--distributed`` for ``torchrun`` (gloo, env://,
``DistributedSampler``, ``DistributedDataParallel``). Nothing in it knows about epochscope;
the only addition is ``steplog`` (the same stamps in both variants).

Usage: torch_folder.py DATA_DIR [--epochs N] [--batch-size B] [--distributed]
"""

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.profile_overhead.steplog import StepLog
from workloads.train.torch_resnet import ResNet50


class JpegFolder(Dataset):
    def __init__(self, root, size=32):
        classes = sorted(os.listdir(root))
        self.samples = [
            (os.path.join(root, c, f), i)
            for i, c in enumerate(classes)
            for f in sorted(os.listdir(os.path.join(root, c)))
        ]
        self.size = size

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        path, label = self.samples[index]
        image = Image.open(path).convert("RGB").resize((self.size, self.size))
        array = np.asarray(image, dtype=np.float32).transpose(2, 0, 1) / 255.0
        return torch.from_numpy(array), label


def validate(loader, model):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for images, target in loader:
            correct += (model(images).argmax(1) == target).sum().item()
            total += target.size(0)
    return correct / max(total, 1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("data")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--distributed", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # one core for the model, the other for the loader's worker
    if args.distributed:
        dist.init_process_group("gloo", init_method="env://")
    train_set = JpegFolder(os.path.join(args.data, "train"))
    val_set = JpegFolder(os.path.join(args.data, "val"))
    sampler = DistributedSampler(train_set) if args.distributed else None
    train_loader = DataLoader(
        train_set, batch_size=args.batch_size, shuffle=sampler is None, sampler=sampler,
        num_workers=1, drop_last=True,
    )  # fmt: skip
    val_loader = DataLoader(val_set, batch_size=args.batch_size, num_workers=1)
    model = ResNet50(num_classes=len(os.listdir(os.path.join(args.data, "train"))))
    if args.distributed:
        model = nn.parallel.DistributedDataParallel(model)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    log = StepLog()
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        model.train()
        log.epoch_start()
        for images, target in train_loader:
            loss = criterion(model(images), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            log.step(len(images))
        print(f"epoch {epoch + 1}: loss {loss.item():.3f} acc {validate(val_loader, model):.3f}")
    if args.distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
