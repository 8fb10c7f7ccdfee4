"""The one reader of token files: the collector's, the agent's, and every client's.

A token file holds one token; surrounding whitespace is ignored. A file that cannot be
read, is empty, or holds a token no HTTP header can carry (a line break inside it, a
character outside latin-1) is refused with a message that names the file, never the token.
A file others can read is accepted with a warning: it holds a secret (chmod 600 it).
"""

from __future__ import annotations

import logging
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
