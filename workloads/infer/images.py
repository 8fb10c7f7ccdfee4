"""A data set's pictures as the network's input: decoded once, kept in memory.

The validation transform of the PyTorch workload (resize of the central 87.5 % square to
the network's side, ImageNet mean and standard deviation), so the exported network sees
what it saw in validation during training. Decoding happens before any timing: inference
is timed on tensors already in memory (docs/inference.md says what that leaves out).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workloads.train.datasets import DatasetError, DatasetInfo


@dataclass(frozen=True)
class Images:
    pixels: np.ndarray  # float32, N x 3 x S x S
    labels: np.ndarray  # int64, N

    def __len__(self) -> int:
        return len(self.labels)


def split_dir(info: DatasetInfo, split: str) -> Path:
    if info.format != "jpeg":
        raise DatasetError(
            f"workloads infer reads the PyTorch workload's JPEG layout but {info.root} holds "
            f"{info.format}: make one with `workloads dataset make --format jpeg ...`"
        )
    return Path(info.root) / ("train" if split == "train" else "val")


def check_splits(info: DatasetInfo) -> None:
    """Before any work: the data set is JPEG and has the validation pictures top-1 is
    measured on (a data set made with ``--val-images 0`` has none)."""
    val = split_dir(info, "val")
    if info.val.images == 0 or not val.is_dir():
        raise DatasetError(
            f"{info.root} has no validation split ({val} is missing): workloads infer "
            "measures top-1 on it; make the data set again with `workloads dataset make "
            "--format jpeg ... --val-images N`"
        )


def load_split(
    info: DatasetInfo, split: str, image_size: int, limit: int | None = None, seed: int = 0
) -> Images:
    """Up to ``limit`` pictures of ``split`` ("train" or "val") as network input.

    With a limit, the pictures are a random sample (``seed``) over every class rather than
    the first folders'. An empty split is an error naming it."""
    from workloads.train.torch_train import JpegFolder

    folder = JpegFolder(split_dir(info, split), image_size, train=False)
    if not folder.items:
        raise DatasetError(f"{info.root} has no {split} pictures")
    indices = np.arange(len(folder.items))
    if limit is not None and limit < len(indices):
        indices = np.sort(np.random.default_rng(seed).choice(indices, limit, replace=False))
    pixels = np.empty((len(indices), 3, image_size, image_size), dtype=np.float32)
    labels = np.empty(len(indices), dtype=np.int64)
    for row, index in enumerate(indices):
        pixels[row], labels[row] = folder[int(index)]
    return Images(pixels, labels)
