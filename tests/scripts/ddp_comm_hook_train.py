"""A DDP training in the style of PyTorch's DDP tutorial and its communication-hook recipe
(torch.multiprocessing.spawn, gloo, a hook of the script's own registered on the model):
what ``workloads profile`` must leave working. Each rank writes what its hook did to
MARKER_DIR/rank-N.json. Usage: ddp_comm_hook_train.py MARKER_DIR --hook HOOK --port P
[--epochs E] [--images N] [--batch-size B]

Hooks: ``counting-fp16`` (the script's own function counting its calls around
``fp16_compress_hook``), ``powersgd`` (PowerSGD, compressing from its 3rd step),
``builtin-fp16`` (DDP's C++ FP16 hook, ``_register_builtin_comm_hook``)."""

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class ToyNet(nn.Module):
    def __init__(self, classes=4):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4)
        )
        self.classifier = nn.Linear(8 * 16, classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def counting_fp16_hook(state, bucket):
    state["calls"] += 1
    return default_hooks.fp16_compress_hook(None, bucket)


def worker(rank, world_size, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    images = torch.randn(args.images, 3, 32, 32)
    labels = torch.randint(0, 4, (args.images,))
    data = TensorDataset(images, labels)
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    model = nn.parallel.DistributedDataParallel(ToyNet())
    state = None
    if args.hook == "counting-fp16":
        state = {"calls": 0}
        model.register_comm_hook(state, counting_fp16_hook)
    elif args.hook == "powersgd":
        state = powerSGD.PowerSGDState(
            process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2
        )
        model.register_comm_hook(state, powerSGD.powerSGD_hook)
    else:
        model._register_builtin_comm_hook(dist.BuiltinCommHookType.FP16_COMPRESS)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for batch, target in loader:
            loss = criterion(model(batch), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"rank {rank} epoch {epoch + 1}: loss {loss.item():.3f}", flush=True)
    did = {"hook": args.hook}
    if args.hook == "counting-fp16":
        did["calls"] = state["calls"]
    elif args.hook == "powersgd":
        did["iterations"] = state.iter  # PowerSGD counts the steps it ran in
    with open(os.path.join(args.markers, f"rank-{rank}.json"), "w") as out:
        json.dump(did, out)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("markers")
    parser.add_argument("--hook", choices=["counting-fp16", "powersgd", "builtin-fp16"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--images", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=4)
    args = parser.parse_args()
    mp.spawn(worker, args=(2, args), nprocs=2, join=True)


if __name__ == "__main__":
    main()
