"""A PyTorch loop that measures its untrained accuracy twice, then evaluates every few
steps on a small held-out loader (many short DataLoader passes inside each epoch) and
validates at each epoch's end: what ``workloads profile`` must recognise unmodified
without asking the agent for an edge sample at each short pass. In-memory tensors (no
files). Usage: torch_eval_every.py [--epochs N] [--eval-every S]; prints ``evaluation
passes: N`` at the end."""

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class TinyNet(nn.Module):
    def __init__(self, features, classes):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(features, 16), nn.ReLU(), nn.Linear(16, classes))

    def forward(self, x):
        return self.layers(x)


def dataset(samples, features, classes, seed):
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(samples, features, generator=generator)
    labels = torch.randint(0, classes, (samples,), generator=generator)
    return TensorDataset(inputs, labels)


def evaluate(loader, model):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for inputs, labels in loader:
            correct += (model(inputs).argmax(1) == labels).sum().item()
            total += labels.size(0)
    model.train()
    return correct / max(total, 1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--eval-every", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    features, classes = 8, 4
    train_loader = DataLoader(dataset(64, features, classes, 1), batch_size=4, shuffle=True)
    probe_loader = DataLoader(dataset(8, features, classes, 2), batch_size=4)  # 2 batches
    val_loader = DataLoader(dataset(16, features, classes, 3), batch_size=8)
    model = TinyNet(features, classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.CrossEntropyLoss()
    for _ in range(2):
        print(f"untrained: acc {evaluate(val_loader, model):.3f}")
    passes = 0
    for epoch in range(args.epochs):
        for step, (inputs, labels) in enumerate(train_loader, 1):
            loss = criterion(model(inputs), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % args.eval_every == 0:
                evaluate(probe_loader, model)
                passes += 1
        print(f"epoch {epoch + 1}: acc {evaluate(val_loader, model):.3f}")
    print(f"evaluation passes: {passes}")


if __name__ == "__main__":
    main()
