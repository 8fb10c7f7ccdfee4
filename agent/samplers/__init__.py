"""One module per sampler. ``SAMPLER_NAMES`` is the order they run in."""

from __future__ import annotations

import importlib

from agent.samplers.base import Roots, Sampler

SAMPLER_NAMES: tuple[str, ...] = (
    "cpu",
    "memory",
    "disk",
    "net",
    "infiniband",
    "nfs",
    "jobs",
    "processes",
    "gpu",
    "ceilings",
    "agent",
)


def make_sampler(name: str, roots: Roots) -> Sampler:
    """Build the sampler called ``name`` (its module's ``SAMPLER`` class)."""
    if name not in SAMPLER_NAMES:
        raise ValueError(f"unknown sampler {name!r}; known: {', '.join(SAMPLER_NAMES)}")
    module = importlib.import_module(f"agent.samplers.{name}")
    return module.SAMPLER(roots)


__all__ = ["SAMPLER_NAMES", "Roots", "Sampler", "make_sampler"]
