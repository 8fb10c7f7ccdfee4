"""A command's ``main`` run in this process, as its console script runs it: its exit status
and what it printed, for tests that only read a command's output (issue 41: "CLI output
tests in-process where they can be"). A subprocess costs an interpreter start and the
command's imports, seconds each on a loaded 2-core machine; what a real process adds (a
reader that goes away, signals, a server's port) stays with the tests that need it."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class Ran:
    """What ``subprocess.run(..., capture_output=True, text=True)`` would have given."""

    returncode: int
    stdout: str
    stderr: str


def run_main(
    main: Callable[[list[str]], int | None],
    argv: Sequence[str],
    capture: pytest.CaptureFixture[str],
) -> Ran:
    """``main(argv)`` with its exit status as the interpreter would make it: ``SystemExit``'s
    code (argparse's 2), a string code printed to stderr with status 1. ``capture`` is the
    test's ``capfd`` (also what child processes print) or ``capsys``. The environment is
    restored after (commands set defaults for the ranks they would start)."""
    capture.readouterr()  # what the test printed before is not the command's
    saved_environment = dict(os.environ)
    try:
        status = main(list(argv))
    except SystemExit as stopped:
        status = stopped.code
    finally:
        os.environ.clear()
        os.environ.update(saved_environment)
    out, err = capture.readouterr()
    if status is None:
        return Ran(0, out, err)
    if isinstance(status, int):
        return Ran(status, out, err)
    return Ran(1, out, err + f"{status}\n")


ESCAPES = re.compile(r"\x1b\[[0-9;]*m")


def collector_in_terminal(
    argv: Sequence[str], columns: int, env: dict[str, str], term: str = "xterm"
) -> str:
    """What `collector ARGV` prints to a terminal ``columns`` characters wide, colour
    escapes removed (TERM=xterm: rich takes a dumb terminal to be 80 wide whatever it is
    told; `collector report` reads COLUMNS itself)."""
    leader, follower = pty.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "collector", *argv],
            stdin=subprocess.DEVNULL,
            stdout=follower,
            stderr=subprocess.PIPE,
            env={**env, "COLUMNS": str(columns), "NO_COLOR": "1", "TERM": term},
        )
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the command closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert process.wait(timeout=60) == 0, process.stderr.read()
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)
    return ESCAPES.sub("", b"".join(chunks).decode().replace("\r\n", "\n"))
