"""The PyTorch workload's checkpoint: what `workloads run --framework pytorch` leaves behind
and `workloads infer --checkpoint` reads.

Rank 0 writes ``<runs-dir>/<run-id>/checkpoint.pt`` after every epoch (the last epoch's
replaces the one before, written to a temporary file and renamed, so a run killed while
writing keeps the previous epoch's). It holds the model's ``state_dict`` and what is needed
to build the same network again: classes, stages, stem width and the image side it was
trained at.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

CHECKPOINT_NAME = "checkpoint.pt"
CHECKPOINT_FORMAT = "epochscope-torch-checkpoint/1"


@dataclass(frozen=True)
class Architecture:
    """How to build the network again (``workloads.train.torch_resnet.ResNet50``'s arguments)."""

    model: str = "resnet50"
    num_classes: int = 1000
    stages: tuple[tuple[int, int, int], ...] = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))
    stem_width: int = 64
    image_size: int = 224

    @property
    def name(self) -> str:
        """``resnet50``, or for a narrowed network its shape (``resnet[16x1,32x1]/16``)."""
        if self.stages == Architecture.stages and self.stem_width == Architecture.stem_width:
            return self.model
        shape = ",".join(f"{width}x{blocks}" for width, blocks, _ in self.stages)
        return f"resnet[{shape}]/{self.stem_width}"

    def build(self):
        from workloads.train.torch_resnet import ResNet50

        return ResNet50(self.num_classes, stages=self.stages, stem_width=self.stem_width)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Architecture:
        data = dict(data)
        data["stages"] = tuple(tuple(int(v) for v in stage) for stage in data["stages"])
        return cls(**data)


def unwrap(model):
    """The module itself, not its DistributedDataParallel wrapper."""
    return getattr(model, "module", model)


def save_checkpoint(
    path: Path, model, architecture: Architecture, epoch: int, top1: float | None = None
) -> Path:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    state = {key: value.detach().cpu() for key, value in unwrap(model).state_dict().items()}
    payload = {
        "format": CHECKPOINT_FORMAT,
        "architecture": asdict(architecture),
        "epoch": epoch,
        "top1": top1,
        "state_dict": state,
    }
    partial = path.with_name(path.name + ".partial")
    torch.save(payload, partial)
    os.replace(partial, path)
    return path


@dataclass
class Checkpoint:
    path: Path
    architecture: Architecture
    epoch: int
    top1: float | None
    state_dict: dict


class CheckpointError(ValueError):
    pass


def find_checkpoint(where: Path) -> Path:
    """A checkpoint file, or a run directory holding one (``runs/<run-id>``)."""
    if where.is_dir():
        where = where / CHECKPOINT_NAME
    if not where.is_file():
        raise CheckpointError(
            f"no checkpoint at {where}: `workloads run --framework pytorch` writes "
            f"<runs-dir>/<run-id>/{CHECKPOINT_NAME}"
        )
    return where


def load_checkpoint(where: Path) -> Checkpoint:
    import torch

    path = find_checkpoint(where)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a truncated or foreign file: say which
        raise CheckpointError(f"{path} is not a readable checkpoint: {error}") from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} is not an epochscope checkpoint ({CHECKPOINT_FORMAT})")
    return Checkpoint(
        path=path,
        architecture=Architecture.from_json(payload["architecture"]),
        epoch=int(payload["epoch"]),
        top1=payload.get("top1"),
        state_dict=payload["state_dict"],
    )
