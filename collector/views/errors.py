"""The error a ``collector`` command reports, with its exit status (1: not there, 2: bad
arguments)."""

from __future__ import annotations


class CliError(Exception):
    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status
