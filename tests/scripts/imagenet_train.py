"""pytorch/examples' imagenet/main.py, cut to its bones and run on CPU: ImageFolder +
DataLoader + SGD with a ``validate`` function, launched one of the example's three ways:

    python imagenet_train.py DATA                               (one process)
    python imagenet_train.py DATA --multiprocessing-distributed --nprocs 2 \\
        --dist-url tcp://127.0.0.1:PORT                         (torch.multiprocessing.spawn)
    torchrun --nproc-per-node 2 imagenet_train.py DATA --dist-url env://

Nothing in it knows about epochscope: ``workloads profile`` must recognise it unmodified.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.utils.data
import torch.utils.data.distributed
import torchvision.datasets as datasets
import torchvision.models as models
import torchvision.transforms as transforms

parser = argparse.ArgumentParser(description="PyTorch ImageNet Training")
parser.add_argument("data", metavar="DIR")
parser.add_argument("-a", "--arch", default="resnet18")
parser.add_argument("-j", "--workers", default=1, type=int)
parser.add_argument("--epochs", default=2, type=int)
parser.add_argument("-b", "--batch-size", default=8, type=int)
parser.add_argument("--lr", "--learning-rate", default=0.1, type=float)
parser.add_argument("--image-size", default=32, type=int)
parser.add_argument("--dist-url", default=None, type=str)
parser.add_argument("--dist-backend", default="gloo", type=str)
parser.add_argument("--multiprocessing-distributed", action="store_true")
parser.add_argument("--nprocs", default=2, type=int, help="processes per node (CPU: no GPUs)")


def main():
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.multiprocessing_distributed:
        mp.spawn(main_worker, nprocs=args.nprocs, args=(args.nprocs, args))
    else:
        main_worker(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), args)


def main_worker(rank, world_size, args):
    torch.set_num_threads(1)
    distributed = args.dist_url is not None
    if distributed:
        dist.init_process_group(
            backend=args.dist_backend, init_method=args.dist_url, world_size=world_size, rank=rank
        )
    model = models.__dict__[args.arch](
        num_classes=len(os.listdir(os.path.join(args.data, "train")))
    )
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=0.9, weight_decay=1e-4)

    normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    train_dataset = datasets.ImageFolder(
        os.path.join(args.data, "train"),
        transforms.Compose(
            [
                transforms.RandomResizedCrop(args.image_size),
                transforms.RandomHorizontalFlip(),
                transforms.ToTensor(),
                normalize,
            ]
        ),
    )
    val_dataset = datasets.ImageFolder(
        os.path.join(args.data, "val"),
        transforms.Compose(
            [
                transforms.Resize(args.image_size),
                transforms.CenterCrop(args.image_size),
                transforms.ToTensor(),
                normalize,
            ]
        ),
    )
    train_sampler = (
        torch.utils.data.distributed.DistributedSampler(train_dataset) if distributed else None
    )
    train_loader = torch.utils.data.DataLoader(
        train_dataset,
        batch_size=args.batch_size,
        shuffle=(train_sampler is None),
        num_workers=args.workers,
        sampler=train_sampler,
    )
    val_loader = torch.utils.data.DataLoader(
        val_dataset, batch_size=args.batch_size, shuffle=False, num_workers=args.workers
    )

    for epoch in range(args.epochs):
        if distributed:
            train_sampler.set_epoch(epoch)
        train(train_loader, model, criterion, optimizer)
        acc1 = validate(val_loader, model)
        if rank == 0:
            print(f"Epoch {epoch + 1}: * Acc@1 {acc1:.3f}", flush=True)
    if distributed:
        dist.destroy_process_group()


def train(train_loader, model, criterion, optimizer):
    model.train()
    for images, target in train_loader:
        output = model(images)
        loss = criterion(output, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def validate(val_loader, model):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for images, target in val_loader:
            output = model(images)
            correct += accuracy(output, target, topk=(1,))[0] * target.size(0) / 100
            total += target.size(0)
    return 100.0 * correct / total


def accuracy(output, target, topk=(1,)):
    with torch.no_grad():
        maxk = max(topk)
        _, pred = output.topk(maxk, 1, True, True)
        correct = pred.t().eq(target.view(1, -1).expand_as(pred.t()))
        return [
            correct[:k].reshape(-1).float().sum(0).item() * 100.0 / target.size(0) for k in topk
        ]


if __name__ == "__main__":
    main()
