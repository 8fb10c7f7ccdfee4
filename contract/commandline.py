"""How every ``collector`` and ``workloads`` command line behaves, in one place.

- ``Parser``: an ``argparse.ArgumentParser`` whose unknown option is named in one line with
  the nearest known one (``workloads run: unknown option --framwork: did you mean
  --framework?``, exit 2), instead of the whole usage and whatever else went wrong because
  of it (``required: --framework``). Its subcommands' parsers are ``Parser`` too.
- ``quiet_broken_pipe``: ``collector report ... | head`` ends quietly, as Unix tools do,
  where Python would print a ``BrokenPipeError`` traceback.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

USAGE_STATUS = 2
# what a shell reports for a command that a closed pipe ended (128 + SIGPIPE)
BROKEN_PIPE_STATUS = 128 + signal.SIGPIPE
_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


class _Probing(Exception):
    """Raised by ``Parser.error`` while it re-reads a command line to find what it missed."""


def _option_like(token: str) -> bool:
    return token.startswith("-") and token != "-" and not _NUMBER.match(token)


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` that says which option it does not know, and the nearest
    one it does."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._given: list[str] = []
        self._probing = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._given = list(sys.argv[1:] if args is None else args)
        namespace, extras = super().parse_known_args(self._given, namespace)
        if not self._probing:
            unknown = self._unknown(extras)
            if unknown:
                self._unknown_option_exit(unknown)
        return namespace, extras

    def error(self, message: str) -> NoReturn:
        if self._probing:
            raise _Probing(message)
        unknown = self._unknown(self._extras_without_required())
        if unknown:
            self._unknown_option_exit(unknown)
        super().error(message)

    def _unknown(self, extras: list[str]) -> str | None:
        """The first of ``extras`` that is written as an option (before any ``--``)."""
        for token in extras:
            if token == "--":
                return None
            if _option_like(token):
                return token.split("=", 1)[0]
        return None

    def _extras_without_required(self) -> list[str]:
        """What this command line leaves over when nothing is required: a misspelt option
        is also a missing one, and argparse says only the latter."""
        actions = [a for a in self._actions if a.required]
        groups = [g for g in self._mutually_exclusive_groups if g.required]
        for item in (*actions, *groups):
            item.required = False
        self._probing = True
        try:
            return super().parse_known_args(list(self._given), None)[1]
        except (_Probing, SystemExit):
            return []
        finally:
            self._probing = False
            for item in (*actions, *groups):
                item.required = True

    def _unknown_option_exit(self, option: str) -> NoReturn:
        known = sorted({o for a in self._actions for o in a.option_strings})
        import difflib  # only when an option is misspelt

        near = difflib.get_close_matches(option, known, n=1, cutoff=0.6)
        hint = f"did you mean {near[0]}?" if near else f"see `{self.prog} --help`"
        self.exit(USAGE_STATUS, f"{self.prog}: unknown option {option}: {hint}\n")


def quiet_broken_pipe(main: Callable[[], int]) -> int:
    """``main()``, or ``BROKEN_PIPE_STATUS`` without a word when its reader went away (the
    rest of the output goes nowhere, so that Python's last flush at exit is quiet too)."""
    try:
        status = main()
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
        return BROKEN_PIPE_STATUS
