"""The one reader of token files: the collector's, the agent's, and every client's.

A token file holds one token; surrounding whitespace is ignored. A file that cannot be
read, is empty, or holds a token no HTTP header can carry (a line break inside it, a
character outside latin-1) is refused with a message that names the file, never the token.
A file others can read is accepted with a warning: it holds a secret (chmod 600 it).
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)


class TokenFileError(ValueError):
    """The token file cannot be used; the message says why (and never quotes the token)."""


def header_safe(token: str) -> bool:
    """Whether ``token`` can travel in an ``Authorization`` header as it is."""
    try:
        token.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return not any(ch in token for ch in "\r\n\0")


def read_token_file(path: str | Path, what: str = "token file") -> str:
    """The token in ``path``; ``TokenFileError`` when it cannot be used."""
    path = Path(path)
    try:
        token = path.read_text(encoding="utf-8").strip()
        mode = path.stat().st_mode
    except OSError as error:
        raise TokenFileError(f"cannot read {what} {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise TokenFileError(f"{what} {path} is not UTF-8 text") from None
    if not token:
        raise TokenFileError(f"{what} {path} is empty")
    if not header_safe(token):
        raise TokenFileError(
            f"{what} {path} holds a line break or a character no HTTP header can carry "
            "(one token, on one line)"
        )
    warn_if_readable_by_others(path, what, mode)
    return token


def warn_if_readable_by_others(path: Path, what: str, mode: int | None = None) -> None:
    if mode is None:
        try:
            mode = path.stat().st_mode
        except OSError:
            return
    if mode & 0o077:
        log.warning(
            "%s %s is readable by group/others (mode %o): chmod 600 it", what, path, mode & 0o777
        )


class WatchedToken:
    """A server's token from a file, read again when the file changes (its modification
    time or size, looked at most once a second): a rotated token takes effect without a
    restart. A file that stops being usable keeps the last good token (and says so once)."""

    def __init__(self, path: str | Path, what: str = "token file", check_seconds: float = 1.0):
        self.path = Path(path)
        self.what = what
        self.check_seconds = check_seconds
        self._token = read_token_file(self.path, what)
        self._state = self._stat()
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    def _stat(self) -> tuple[int, int] | None:
        try:
            info = self.path.stat()
        except OSError:
            return None
        return info.st_mtime_ns, info.st_size

    def matches(self, offered: str) -> bool:
        """Whether ``offered`` is the token (compared in constant time)."""
        return hmac.compare_digest(offered.encode("latin-1", "replace"), self.token().encode())

    def token(self) -> str:
        now = time.monotonic()
        with self._lock:
            if now - self._checked >= self.check_seconds:
                self._checked = now
                state = self._stat()
                if state != self._state:
                    self._state = state
                    try:
                        self._token = read_token_file(self.path, self.what)
                        log.info("%s %s changed: the new token is in use", self.what, self.path)
                    except TokenFileError as error:
                        log.warning("%s; keeping the previous token", error)
            return self._token
