"""The training timed by ``run.py``: a PyTorch loop that times itself, so the figure is
the same clock with and without ``workloads profile`` around it.

In-memory random images through a ``DataLoader`` (no storage in the figure), SGD, a
``validate`` pass per epoch; images/s = the training passes of epochs 2.. (epoch 1 warms
up) over their wall time, and the CPU time the process spent on them (every thread:
the hooks' event shipping too), which a loaded machine inflates far less than wall time
when torch runs one thread (``--threads 1``: no intra-op threads spinning). Prints
``RESULT {"images_per_second": ..., "cpu_seconds_per_image": ...}``.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from workloads.train.torch_resnet import ResNet50

parser = argparse.ArgumentParser()
parser.add_argument("--model", choices=("resnet50", "small"), default="resnet50")
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--image-size", type=int, default=32)
parser.add_argument("--images", type=int, default=256)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--threads", type=int, default=2)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(args.threads)
classes = 10
images = torch.randn(args.images, 3, args.image_size, args.image_size)
labels = torch.randint(classes, (args.images,))
train_loader = DataLoader(TensorDataset(images, labels), batch_size=args.batch_size, shuffle=True)
val_loader = DataLoader(TensorDataset(images[:64], labels[:64]), batch_size=args.batch_size)
if args.model == "resnet50":
    model = ResNet50(num_classes=classes)
else:
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(128, classes),
    )
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

timed_images, timed_seconds, timed_cpu = 0, 0.0, 0.0
for epoch in range(args.epochs):
    model.train()
    began, began_cpu = time.perf_counter(), time.process_time()
    for batch, target in train_loader:
        loss = criterion(model(batch), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if epoch > 0:
        timed_seconds += time.perf_counter() - began
        timed_cpu += time.process_time() - began_cpu
        timed_images += len(images)
    model.eval()
    with torch.no_grad():
        correct = sum((model(x).argmax(1) == y).sum().item() for x, y in val_loader)
result = {"images_per_second": timed_images / timed_seconds,
          "cpu_seconds_per_image": timed_cpu / timed_images}  # fmt: skip
print("RESULT " + json.dumps(result), flush=True)
