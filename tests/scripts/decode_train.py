"""A user's small PyTorch training whose input pipeline is nearly all JPEG decoding, for
the decode-ceiling scenario (tests/scenarios/test_decode_bound.py): its Dataset opens each
picture of a class-per-folder tree with PIL, decodes it and resizes it to 224 px in the
training process (no loader workers), and the model is one linear layer over every 16th
pixel of each row and column, so the step's own compute is a small part of the time.

Usage: decode_train.py DATA_DIR [--epochs N] [--batch-size B] [--tensors FILE]

- ``--tensors FILE``: train on the pictures decoded beforehand, as a ``torch.save``d
  uint8 tensor (N, 3, 224, 224) and its labels (the usual fix: decode once, not every
  epoch); DATA_DIR is then not read.
"""

import argparse
import os

import numpy as np
import torch
import torch.nn as nn
from PIL import Image
from torch.utils.data import DataLoader, Dataset, TensorDataset

SIZE = 224


class JpegFiles(Dataset):
    def __init__(self, root):
        classes = sorted(os.listdir(root))
        self.samples = [
            (os.path.join(root, c, f), i)
            for i, c in enumerate(classes)
            for f in sorted(os.listdir(os.path.join(root, c)))
        ]

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        path, label = self.samples[index]
        with Image.open(path) as image:
            picture = image.convert("RGB").resize((SIZE, SIZE))
        return torch.from_numpy(np.asarray(picture).transpose(2, 0, 1).copy()), label


def decode_all(root, out):
    """Decode every picture once and save them with their labels (for ``--tensors``)."""
    pictures = JpegFiles(root)
    decoded = [pictures[i] for i in range(len(pictures))]
    images = torch.stack([image for image, _ in decoded])
    torch.save((images, torch.tensor([label for _, label in decoded])), out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("data")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--tensors")
    parser.add_argument("--decode-to", help="decode DATA_DIR's train pictures into this file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    train = os.path.join(args.data, "train")
    if args.decode_to:
        decode_all(train, args.decode_to)
        return
    train_set = TensorDataset(*torch.load(args.tensors)) if args.tensors else JpegFiles(train)
    loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 14 * 14, 4))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(args.epochs):
        for images, target in loader:
            loss = criterion(model(images[:, :, ::16, ::16].float() / 255), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch + 1}: loss {loss.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
