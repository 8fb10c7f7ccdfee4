"""A PyTorch training script in the style of pytorch/examples' imagenet/main.py, reading a
class-per-folder JPEG tree with PIL (no torchvision): what ``workloads profile`` must
recognise unmodified. Usage: torch_folder_train.py DATA_DIR [--epochs N] [--batch-size B]
[--workers W] [--distributed] [--fail-in-epoch N]"""

import argparse
import os

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


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


class SmallNet(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4)
        )
        self.classifier = nn.Linear(8 * 16, classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def validate(loader, model):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for images, target in loader:
            output = model(images)
            correct += (output.argmax(1) == target).sum().item()
            total += target.size(0)
    return correct / max(total, 1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("data")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--distributed", action="store_true")
    parser.add_argument("--fail-in-epoch", type=int, help="raise in this epoch (a crash)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.distributed:
        dist.init_process_group("gloo", init_method="env://")
    train_set = JpegFolder(os.path.join(args.data, "train"))
    val_set = JpegFolder(os.path.join(args.data, "val"))
    sampler = DistributedSampler(train_set) if args.distributed else None
    train_loader = DataLoader(
        train_set,
        batch_size=args.batch_size,
        shuffle=sampler is None,
        sampler=sampler,
        num_workers=args.workers,
    )
    val_loader = DataLoader(val_set, batch_size=args.batch_size, num_workers=args.workers)
    model = SmallNet(len(os.listdir(os.path.join(args.data, "train"))))
    if args.distributed:
        model = nn.parallel.DistributedDataParallel(model)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        model.train()
        for images, target in train_loader:
            if args.fail_in_epoch == epoch + 1:
                raise RuntimeError(f"the script failed in epoch {epoch + 1}")
            loss = criterion(model(images), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch + 1}: loss {loss.item():.3f} acc {validate(val_loader, model):.3f}")
    if args.distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
