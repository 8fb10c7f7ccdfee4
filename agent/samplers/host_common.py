"""Small helpers shared by the host samplers (cpu, memory, disk, net).

Parsers take an optional ``problems`` list and append one ``"line N: ..."`` message per
line they had to skip, so a malformed line loses only itself. The sampler hands that
list to a :class:`ProblemLog`, which logs each distinct message once: a bad line that is
still there a second later must not flood the log at the sampling rate.
"""

from __future__ import annotations

import logging
from pathlib import Path

# Enough to remember every distinct problem of a sick host; past it we stop logging new
# ones rather than grow without bound.
_MAX_REMEMBERED = 1000


class ProblemLog:
    """Logs each distinct parse problem of one source file once."""

    def __init__(self, logger: logging.Logger, source: Path) -> None:
        self._logger = logger
        self._source = source
        self._seen: set[str] = set()

    def report(self, problems: list[str]) -> None:
        for problem in problems:
            if problem in self._seen or len(self._seen) >= _MAX_REMEMBERED:
                continue
            self._seen.add(problem)
            self._logger.warning("%s: %s", self._source, problem)


def to_ints(words: list[str]) -> list[int] | None:
    """The words as non-negative integers, or None if any is not one."""
    joined = "".join(words)  # one check for all: much faster on 480-CPU hosts
    if not (joined.isascii() and joined.isdigit()):
        return None
    return list(map(int, words))
