"""What a rank or the launcher says when a run's events could not all be delivered: the
exit status (the run trained, but some events wait in a spool) and the command that
delivers them later."""

from __future__ import annotations

import shlex
from pathlib import Path

UNDELIVERED_EXIT = 3  # the run trained, but some of its events wait in a spool


def resend_command(spool: Path, url: str, token_file: str | None) -> str:
    """The ``workloads resend`` command that delivers ``spool``, ready to copy."""
    argv = ["workloads", "resend", "--spool", str(spool), "--collector", url]
    if token_file:
        argv += ["--token-file", token_file]
    return shlex.join(argv)


def holds_events(spool: Path) -> bool:
    """The spool directory exists and holds a non-empty segment: only then is it named,
    with the command that delivers it."""
    return spool.is_dir() and any(p.is_file() and p.stat().st_size for p in spool.rglob("*"))
