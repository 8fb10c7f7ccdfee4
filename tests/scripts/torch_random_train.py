"""A plain PyTorch training loop, nothing of epochscope in it: a tiny model on random
tensors, 2 epochs of 4 steps (batch 4 of 16 samples), then a validation pass per epoch.
What a Slurm job of a user runs; ``tests/system/test_slurm_zerotouch.py`` submits it as the batch
script itself (with a ``#!`` line naming the Python) and the site's TaskProlog alone
makes it a profiled run. Prints ``done`` at the end."""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def random_set(samples: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(samples, 8, generator=generator)
    labels = torch.randint(0, 3, (samples,), generator=generator)
    return TensorDataset(inputs, labels)


def main() -> None:
    torch.manual_seed(0)
    train = DataLoader(random_set(16, 1), batch_size=4, shuffle=True)
    val = DataLoader(random_set(8, 2), batch_size=4)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.CrossEntropyLoss()
    for epoch in range(2):
        model.train()
        for inputs, labels in train:
            optimizer.zero_grad()
            loss = criterion(model(inputs), labels)
            loss.backward()
            optimizer.step()
        model.eval()
        correct = 0
        with torch.no_grad():
            for inputs, labels in val:
                correct += (model(inputs).argmax(1) == labels).sum().item()
        print(f"epoch {epoch + 1}: loss {loss.item():.3f} acc {correct / 8:.3f}", flush=True)
    print("done")


if __name__ == "__main__":
    main()
