"""The one small interface every sampler implements."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from agent.point import Point


@dataclass(frozen=True)
class Roots:
    """Where /proc and /sys are: the live host by default, a captured tree in tests."""

    proc: Path = Path("/proc")
    sys: Path = Path("/sys")


class Sampler(Protocol):
    name: str

    def __init__(self, roots: Roots) -> None: ...

    def available(self) -> bool:
        """Does this host have the data? (Checked once at start.)"""
        ...

    def sample(self, now_ns: int) -> list[Point]:
        """Read and parse; points carry no ``host`` tag (the agent adds it)."""
        ...


def read_text(path: Path) -> str | None:
    """A file's text, or None when it is missing or unreadable (a device went away)."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None
