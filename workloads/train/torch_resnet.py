"""ResNet-50 v1.5 in plain PyTorch (torchvision's compiled ops do not load with the CPU
torch wheel used here, so the model is written out).

v1.5 differs from the original v1 in the bottleneck: the stride-2 downsampling sits on the
3x3 convolution instead of the first 1x1 (NVIDIA's and torchvision's ResNet-50). Layers:
7x7/2 conv 64, 3x3/2 max-pool, stages of [3, 4, 6, 3] bottlenecks with widths 64, 128,
256, 512 (x4 expansion), global average pool, fully connected to the classes. The last
batch-norm of each block starts at zero, so every block starts as the identity.
"""

from __future__ import annotations

import torch
from torch import nn

STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # width, blocks, first stride
EXPANSION = 4


class Bottleneck(nn.Module):
    def __init__(self, in_channels: int, width: int, stride: int) -> None:
        super().__init__()
        out_channels = width * EXPANSION
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        nn.init.zeros_(self.bn3.weight)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + self.shortcut(x))


class ResNet50(nn.Module):
    """ResNet-50 by default; ``stages`` and ``stem_width`` make the same network narrower and
    shallower (the inference tests train one in seconds). A checkpoint records both."""

    def __init__(
        self,
        num_classes: int = 1000,
        stages: tuple[tuple[int, int, int], ...] = STAGES,
        stem_width: int = 64,
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, stem_width, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(stem_width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        blocks: list[nn.Module] = []
        channels = stem_width
        for width, count, stride in stages:
            for index in range(count):
                blocks.append(Bottleneck(channels, width, stride if index == 0 else 1))
                channels = width * EXPANSION
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))
