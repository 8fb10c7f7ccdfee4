"""Synthetic ImageNet-like pictures whose content depends on their class.

Each class has its own colour and stripe orientation/frequency; every picture adds a random
phase, brightness and noise on top. A ResNet can therefore learn the classes (accuracy rises
above chance within a few epochs), which lets the tests and demos show top-1 moving, while
the JPEG bytes stay as costly to decode as real photos of that size.
"""

from __future__ import annotations

import io
import math

import numpy as np
from PIL import Image

GOLDEN_RATIO = (1 + math.sqrt(5)) / 2
JPEG_QUALITY = 90


def class_style(label: int, classes: int) -> tuple[np.ndarray, float, float]:
    """(RGB base colour 0..1, stripe angle in radians, stripe frequency in cycles per side)."""
    hue = (label / max(classes, 1)) % 1.0
    # Hue wheel to RGB without colorsys: three cosines 120 degrees apart.
    colour = 0.5 + 0.4 * np.cos(2 * np.pi * (hue - np.array([0.0, 1 / 3, 2 / 3])))
    angle = (label * GOLDEN_RATIO * np.pi) % np.pi
    frequency = 2.0 + (label % 5)
    return colour, float(angle), frequency


def make_image(label: int, classes: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """One size x size x 3 uint8 picture of class ``label``."""
    colour, angle, frequency = class_style(label, classes)
    coords = np.linspace(0.0, 1.0, size, dtype=np.float32)
    ys, xs = np.meshgrid(coords, coords, indexing="ij")
    along = xs * math.cos(angle) + ys * math.sin(angle)
    phase = rng.uniform(0, 2 * np.pi)
    stripes = 0.5 + 0.5 * np.sin(2 * np.pi * frequency * along + phase)
    brightness = rng.uniform(0.7, 1.1)
    image = brightness * (0.55 * colour[None, None, :] + 0.45 * stripes[:, :, None] * colour)
    image += rng.normal(0.0, 0.06, size=image.shape)
    return (np.clip(image, 0.0, 1.0) * 255).astype(np.uint8)


def encode_jpeg(pixels: np.ndarray, quality: int = JPEG_QUALITY) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels, mode="RGB").save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def labels_for(images: int, classes: int, seed: int) -> list[int]:
    """Balanced labels in a shuffled order (ImageNet's shards are shuffled too)."""
    labels = [index % classes for index in range(images)]
    np.random.default_rng(seed).shuffle(labels)
    return labels
