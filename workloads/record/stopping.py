"""How a run is stopped, as the launcher and its ranks both see it: the signals a process
turns into ``Interrupted``, and the run's stop file, which the launcher writes before it
signals the ranks so that a rank can tell the user's stop from another rank's failure
(``workloads.launch.processes`` does the stopping)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterable
from pathlib import Path

STOP_FILE_NAME = "stopped"  # --runs-dir/<run_id>/stopped: the user stopped the run


class Interrupted(BaseException):
    """SIGINT or SIGTERM reached the process; unwinds like KeyboardInterrupt."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum  # what a shell reports for a process the signal killed


def raise_on_signals(signums: Iterable[int] = (signal.SIGINT, signal.SIGTERM)) -> None:
    """Turn the first of ``signums`` into ``Interrupted`` in the main thread; later ones
    (a second Ctrl-C while the run is being stopped) are ignored, so the stopping itself
    is never cut short. Handlers are reset to the default in exec'd children."""
    fired: list[int] = []

    def handler(signum: int, frame) -> None:
        if fired:
            return
        fired.append(signum)
        raise Interrupted(signum)

    for signum in signums:
        signal.signal(signum, handler)


def ask_to_stop(stop_file: Path, reason: str) -> None:
    """Say to the ranks that the user stopped the run (before they are signalled)."""
    with contextlib.suppress(OSError):  # a rank then says failed: the run is still stopped
        stop_file.parent.mkdir(parents=True, exist_ok=True)
        stop_file.write_text(f"{reason}\n")


def stop_was_asked(stop_file: str | None) -> bool:
    """Whether the signal that stopped a rank was the user's: for a rank whose launcher
    names a stop file (torchrun's or horovodrun's child), when the file is there (a rank on
    another host, which cannot see it, says failed); without one (the one-process run in
    the launcher's own process) the signal was sent to this process itself."""
    return stop_file is None or Path(stop_file).exists()
