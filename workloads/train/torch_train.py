"""ResNet-50 v1.5 with PyTorch DistributedDataParallel over gloo (nccl on GPUs).

Started by torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT in
the environment) or in-process for one process. Input: ``loader_workers`` DataLoader
worker processes per rank over ``train/<class>/*.JPEG``, each picture decoded with PIL,
randomly resized-cropped and flipped (ImageNet training augmentation); a
DistributedSampler gives each rank its share, reshuffled every epoch. Validation:
``val/<class>/*.JPEG``, resize + centre crop; correct counts are summed over ranks.
"""

from __future__ import annotations

import math
import os
import random
import sys
from collections.abc import MutableMapping
from pathlib import Path

import numpy as np

from workloads.record.anatomy import BackwardMarks
from workloads.record.spec import RunSpec
from workloads.train.datasets import DatasetError, jpeg_files
from workloads.train.placement import Placement, cpu_threads_per_rank, steps_per_epoch

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
CENTRAL_CROP = 0.875
DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
OPENMP_WAIT_POLICY = "OMP_WAIT_POLICY"


def openmp_threads_sleep(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Make torch's OpenMP threads sleep, not spin, while they wait for each other, unless
    the user chose (``OMP_WAIT_POLICY`` already set). True when the policy is passive.

    A rank computes with one OpenMP thread per core it owns (every core for one process).
    By default libgomp *spins* at the end of each parallel region until every thread
    arrives, and ResNet-50's step is thousands of regions. When the threads cannot all
    run at once (the rank's DataLoader workers, the agent or other jobs share the cores),
    the first thread spins through its whole time slice while the other waits for a core:
    a 1-process run here took 14-19 s per step against 2 s for each single-threaded rank
    of a 2-process run (bench/anatomy/openmp_wait.py measures it). libgomp reads the
    policy once, when torch loads it, so this must run before ``import torch``."""
    if OPENMP_WAIT_POLICY not in environ and "torch" not in sys.modules:
        environ[OPENMP_WAIT_POLICY] = "PASSIVE"
    return environ.get(OPENMP_WAIT_POLICY, "").upper() == "PASSIVE"


def random_resized_crop(width: int, height: int, rng: random.Random) -> tuple[int, int, int, int]:
    """(left, top, right, bottom) of a crop covering 8-100 % of the area, aspect 3/4..4/3."""
    area = width * height
    for _ in range(10):
        target = area * rng.uniform(0.08, 1.0)
        aspect = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        crop_w = round(math.sqrt(target * aspect))
        crop_h = round(math.sqrt(target / aspect))
        if 0 < crop_w <= width and 0 < crop_h <= height:
            left = rng.randint(0, width - crop_w)
            top = rng.randint(0, height - crop_h)
            return left, top, left + crop_w, top + crop_h
    side = min(width, height)  # fall back to the central square
    left, top = (width - side) // 2, (height - side) // 2
    return left, top, left + side, top + side


def centre_crop(width: int, height: int) -> tuple[int, int, int, int]:
    side = round(min(width, height) * CENTRAL_CROP)
    left, top = (width - side) // 2, (height - side) // 2
    return left, top, left + side, top + side


class JpegFolder:
    """ImageNet-layout pictures as (CHW float32 array, class index) pairs."""

    def __init__(self, split_dir: Path, image_size: int, train: bool, seed: int = 0) -> None:
        self.items = jpeg_files(split_dir)
        self.image_size = image_size
        self.train = train
        self.rng = random.Random(seed)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int):
        path, label = self.items[index]
        try:
            return self._load(path, label)
        except (OSError, ValueError, SyntaxError) as error:  # PIL's errors for a bad file
            raise DatasetError(f"{path}: cannot decode this picture: {error}") from error

    def _load(self, path: Path, label: int):
        from PIL import Image

        with Image.open(path) as image:
            image = image.convert("RGB")
            if self.train:
                box = random_resized_crop(*image.size, self.rng)
            else:
                box = centre_crop(*image.size)
            size = (self.image_size, self.image_size)
            image = image.resize(size, Image.BILINEAR, box=box)
            if self.train and self.rng.random() < 0.5:
                image = image.transpose(Image.FLIP_LEFT_RIGHT)
            pixels = np.asarray(image, dtype=np.float32) / 255.0
        pixels = (pixels - MEAN) / STD
        return np.ascontiguousarray(pixels.transpose(2, 0, 1)), label


def _seed_worker(worker_id: int) -> None:
    import torch

    seed = torch.initial_seed() % 2**32
    dataset = torch.utils.data.get_worker_info().dataset
    dataset.rng = random.Random(seed)


def placement_from_env() -> Placement:
    return Placement(
        rank=int(os.environ.get("RANK", "0")),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        local_size=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
    )


def _loader(torch, dataset, spec: RunSpec, placement: Placement, train: bool):
    sampler = None
    if placement.world_size > 1:
        sampler = torch.utils.data.distributed.DistributedSampler(
            dataset, placement.world_size, placement.rank, shuffle=train, seed=spec.seed
        )
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=spec.batch_size,
        shuffle=train and sampler is None,
        sampler=sampler,
        num_workers=spec.loader_workers,
        drop_last=train,
        persistent_workers=spec.loader_workers > 0,
        worker_init_fn=_seed_worker,
        prefetch_factor=4 if spec.loader_workers > 0 else None,
    )


def evaluate(torch, model, loader, device, autocast) -> tuple[float, float]:
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64)
    with torch.no_grad():
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            with autocast():
                logits = model(images).float()
            k = min(5, logits.shape[1])
            ranked = logits.topk(k, dim=1).indices
            hits = ranked == labels.view(-1, 1)
            totals += torch.tensor(
                [hits[:, 0].sum().item(), hits.sum().item(), len(labels)], dtype=torch.float64
            )
    if torch.distributed.is_initialized():
        torch.distributed.all_reduce(totals)  # gloo reduces CPU tensors
    model.train()
    correct1, correct5, seen = totals.tolist()
    if seen == 0:
        return math.nan, math.nan
    return correct1 / seen, correct5 / seen


def _save_checkpoint(spec: RunSpec, model, epoch: int, top1: float | None) -> None:
    """``<checkpoint_dir>/checkpoint.pt``: what ``workloads infer --checkpoint`` reads."""
    from workloads.train.checkpoint import CHECKPOINT_NAME, Architecture, save_checkpoint

    architecture = Architecture(
        model=spec.model, num_classes=spec.num_classes, image_size=spec.image_size
    )
    save_checkpoint(Path(spec.checkpoint_dir) / CHECKPOINT_NAME, model, architecture, epoch, top1)


def run(spec: RunSpec, start_recorder):
    import contextlib

    openmp_threads_sleep()  # before torch loads libgomp
    import torch

    from workloads.train.torch_resnet import ResNet50

    placement = placement_from_env()
    torch.set_num_threads(cpu_threads_per_rank(placement.local_size))
    torch.manual_seed(spec.seed)
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{placement.local_rank}" if cuda else "cpu")
    if placement.world_size > 1:
        torch.distributed.init_process_group("nccl" if cuda else "gloo")

    recorder = start_recorder(placement)
    model = ResNet50(spec.num_classes).to(device).to(memory_format=torch.channels_last)
    backward = None  # DDP's all-reduce (its own C++ one) timed around backward
    if placement.world_size > 1:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[placement.local_rank] if cuda else None
        )
        if spec.anatomy:
            backward = BackwardMarks(recorder.now)
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=spec.learning_rate * placement.world_size,
        momentum=0.9,
        weight_decay=1e-4,
    )
    loss_fn = torch.nn.CrossEntropyLoss()
    dtype = getattr(torch, DTYPES[spec.precision]) if spec.precision in DTYPES else None
    device_type = "cuda" if cuda else "cpu"

    def autocast():
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device_type, dtype=dtype)

    scaler = torch.amp.GradScaler(device_type, enabled=spec.precision == "fp16" and cuda)

    steps = steps_per_epoch(spec, placement.world_size)
    if spec.synthetic:
        shape = (spec.batch_size, 3, spec.image_size, spec.image_size)
        images = torch.randn(shape, device=device).to(memory_format=torch.channels_last)
        labels = torch.randint(0, spec.num_classes, (spec.batch_size,), device=device)
        train_loader = val_loader = None
    else:
        root = Path(spec.dataset["root"])
        train_set = JpegFolder(root / "train", spec.image_size, train=True, seed=spec.seed)
        train_loader = _loader(torch, train_set, spec, placement, train=True)
        val_loader = None
        if spec.dataset["val"]["images"] and spec.validate:
            val_set = JpegFolder(root / "val", spec.image_size, train=False)
            val_loader = _loader(torch, val_set, spec, placement, train=False)

    model.train()
    for epoch in range(1, spec.epochs + 1):
        if train_loader is not None and isinstance(
            train_loader.sampler, torch.utils.data.distributed.DistributedSampler
        ):
            train_loader.sampler.set_epoch(epoch)
        recorder.epoch_start(epoch)
        loss_sum, loss_count = 0.0, 0
        stream = iter(train_loader) if train_loader is not None else None
        for _ in range(steps):
            if stream is not None:
                try:
                    images, labels = next(stream)
                except StopIteration:  # --steps-per-epoch beyond one pass: go round again
                    stream = iter(train_loader)
                    images, labels = next(stream)
                images = images.to(device, non_blocking=True).contiguous(
                    memory_format=torch.channels_last
                )
                labels = labels.to(device, non_blocking=True)
            if spec.anatomy:
                recorder.input_ready()
            optimizer.zero_grad(set_to_none=True)
            with autocast():
                loss = loss_fn(model(images), labels)
            scaled = scaler.scale(loss)
            if backward is not None:
                backward.watch(scaled)
            scaled.backward()  # DDP: returns once every bucket is all-reduced
            if spec.anatomy:
                if cuda:
                    torch.cuda.synchronize(device)
                if backward is not None:
                    backward.backward_returned()
                    recorder.compute_done(backward.compute_done)
                    recorder.communication_done(backward.communication_done)
                else:
                    recorder.compute_done()
            scaler.step(optimizer)
            scaler.update()
            if cuda:
                torch.cuda.synchronize(device)
            value = loss.item()
            loss_sum, loss_count = loss_sum + value, loss_count + 1
            recorder.step_done(value)
        top1 = top5 = None
        if val_loader is not None:
            top1, top5 = evaluate(torch, model, val_loader, device, autocast)
        recorder.epoch_end(loss=loss_sum / max(1, loss_count), top1=top1, top5=top5)
        if spec.checkpoint_dir and placement.rank == 0:  # after the epoch's events: untimed
            _save_checkpoint(spec, model, epoch, top1)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return recorder
