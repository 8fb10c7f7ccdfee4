"""The one reader of token files: the collector's, the agent's, and every client's.

A token file holds one token; surrounding whitespace is ignored. A file that cannot be
read, is empty, or holds a token no HTTP header can carry (a line break inside it, a
character outside latin-1) is refused with a message that names the file, never the token.
A file others can read is accepted with a warning: it holds a secret (chmod 600 it).

A tokens file (the collector's ``--tokens-file``) holds scoped tokens: JSON, each token's
SHA-256 with its scope (node, run, admin) and subject (a host, a user), never the token;
``mint_token`` writes it 0600 and returns the new token once.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import os
import secrets
import threading
import time
from dataclasses import dataclass
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


# -------------------------------------------------------------------- scoped tokens


class Scope:
    """What a token may write (``collector token add --scope``)."""

    NODE = "node"  # an agent's: samples whose host tag is its subject, nothing else
    RUN = "run"  # a job user's ranks: the events of the runs it created, no samples
    ADMIN = "admin"  # everything, the read API included

    ALL = (NODE, RUN, ADMIN)


@dataclass(frozen=True)
class Identity:
    """Who a request's token says wrote it: ``node:node07``, ``run:alice``, ``admin:...``."""

    scope: str
    subject: str

    @property
    def name(self) -> str:
        return f"{self.scope}:{self.subject}"

    @property
    def is_admin(self) -> bool:
        return self.scope == Scope.ADMIN


# writes with no token file configured (loopback by default) and the single --token-file
OPEN = Identity(Scope.ADMIN, "open")
LEGACY_ADMIN = Identity(Scope.ADMIN, "token-file")

TOKENS_FILE_VERSION = 1
_SUBJECT_CHARACTERS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def token_digest(token: str) -> str:
    """What a tokens file keeps of a token: its SHA-256, hex (a token is 32 random bytes,
    so no salt or slow hash is needed: nothing about it can be guessed from its digest)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class TokenEntry:
    digest: str
    scope: str
    subject: str
    created: str

    @property
    def identity(self) -> Identity:
        return Identity(self.scope, self.subject)


def check_subject(scope: str, subject: str) -> None:
    """ValueError for a scope or subject a tokens file may not hold."""
    if scope not in Scope.ALL:
        raise ValueError(f"scope {scope!r}: use one of {', '.join(Scope.ALL)}")
    if not subject or len(subject) > 253 or not set(subject) <= _SUBJECT_CHARACTERS:
        raise ValueError(
            f"subject {subject!r}: a host or user name (letters, digits, '.', '_' and '-')"
        )


def parse_tokens_file(text: str, where: str) -> list[TokenEntry]:
    """The entries of a tokens file's JSON text; TokenFileError naming ``where`` and the
    entry for anything else (a digest is never quoted)."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise TokenFileError(f"{where}: not JSON (line {error.lineno}: {error.msg})") from None
    if not isinstance(document, dict) or not isinstance(document.get("tokens"), list):
        raise TokenFileError(f'{where}: expected {{"version": 1, "tokens": [...]}}')
    entries: list[TokenEntry] = []
    for index, item in enumerate(document["tokens"], 1):
        if not isinstance(item, dict):
            raise TokenFileError(f"{where}: token {index} is not an object")
        digest, scope, subject = item.get("sha256"), item.get("scope"), item.get("subject")
        if not isinstance(digest, str) or len(digest) != 64:
            raise TokenFileError(f"{where}: token {index} has no sha256 of 64 hex digits")
        try:
            check_subject(str(scope), str(subject))
        except ValueError as error:
            raise TokenFileError(f"{where}: token {index}: {error}") from None
        entries.append(TokenEntry(digest, str(scope), str(subject), str(item.get("created", ""))))
    return entries


def read_tokens_file(path: str | Path) -> list[TokenEntry]:
    """The entries of the tokens file at ``path`` (a missing file: none)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except OSError as error:
        raise TokenFileError(f"cannot read tokens file {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise TokenFileError(f"tokens file {path} is not UTF-8 text") from None
    warn_if_readable_by_others(path, "tokens file")
    return parse_tokens_file(text, f"tokens file {path}")


def write_tokens_file(path: str | Path, entries: list[TokenEntry]) -> None:
    """``entries`` into ``path`` atomically, mode 0600 from its creation."""
    path = Path(path)
    document = {
        "version": TOKENS_FILE_VERSION,
        "tokens": [
            {"sha256": e.digest, "scope": e.scope, "subject": e.subject, "created": e.created}
            for e in entries
        ],
    }
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            json.dump(document, file, indent=1)
            file.write("\n")
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def mint_token(path: str | Path, scope: str, subject: str) -> str:
    """A new token of ``scope`` for ``subject``, its digest added to the tokens file at
    ``path``; the token itself is returned once and kept nowhere."""
    check_subject(scope, subject)
    entries = read_tokens_file(path)
    token = secrets.token_urlsafe(32)
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    write_tokens_file(path, [*entries, TokenEntry(token_digest(token), scope, subject, created)])
    return token


def revoke_tokens(path: str | Path, scope: str | None, subject: str) -> int:
    """Remove the tokens of ``subject`` (of ``scope`` if given); how many were removed."""
    entries = read_tokens_file(path)
    kept = [
        e for e in entries if not (e.subject == subject and (scope is None or e.scope == scope))
    ]
    if len(kept) != len(entries):
        write_tokens_file(path, kept)
    return len(entries) - len(kept)


class FixedToken:
    def __init__(self, token: str) -> None:
        self._token = token.encode("utf-8")

    def matches(self, offered: str) -> bool:
        return hmac.compare_digest(offered.encode("utf-8", "replace"), self._token)


class Authenticator:
    """Who an offered token is: the collector's single ``--token-file`` (admin, watched
    like ``WatchedToken``) and a ``--tokens-file`` of scoped tokens (read again when it
    changes, at most once a second). Without either, every request is ``OPEN``."""

    def __init__(
        self,
        token_file: str | Path | None = None,
        tokens_file: str | Path | None = None,
        check_seconds: float = 1.0,
        token: str | None = None,
    ) -> None:
        """``token``: a single admin token given as it is (embedded servers, tests)."""
        self.single: WatchedToken | FixedToken | None = None
        if token_file:
            self.single = WatchedToken(token_file, check_seconds=check_seconds)
        elif token is not None:
            self.single = FixedToken(token)
        self.tokens_path = Path(tokens_file) if tokens_file else None
        self.check_seconds = check_seconds
        self._lock = threading.Lock()
        self._entries: dict[str, TokenEntry] = {}
        self._state: tuple[int, int] | None = None
        self._checked = -math.inf
        if self.tokens_path is not None:
            self._reload(first=True)

    @property
    def required(self) -> bool:
        return self.single is not None or self.tokens_path is not None

    def _reload(self, first: bool = False) -> None:
        assert self.tokens_path is not None
        try:
            info = self.tokens_path.stat()
            state: tuple[int, int] | None = (info.st_mtime_ns, info.st_size)
        except OSError:
            state = None
        if state == self._state and not first:
            return
        self._state = state
        try:
            entries = read_tokens_file(self.tokens_path)
        except TokenFileError as error:
            if first:
                raise
            log.warning("%s; keeping the previous tokens", error)
            return
        self._entries = {entry.digest: entry for entry in entries}
        if not first:
            log.info("tokens file %s changed: %d tokens in use", self.tokens_path, len(entries))

    def identify(self, offered: list[str]) -> Identity | None:
        """The identity of the first offered token that is known; None if none is (and
        ``OPEN`` when no token is required)."""
        if not self.required:
            return OPEN
        entries = self._current_entries()
        for given in offered:
            if self.single is not None and self.single.matches(given):
                return LEGACY_ADMIN
            # the lookup is by digest: what is compared is a hash of the offered token, so
            # its time says nothing about the token's bytes; the match is confirmed in
            # constant time all the same
            digest = token_digest(given)
            entry = entries.get(digest)
            if entry is not None and hmac.compare_digest(entry.digest, digest):
                return entry.identity
        return None

    def _current_entries(self) -> dict[str, TokenEntry]:
        if self.tokens_path is None:
            return {}
        now = time.monotonic()
        with self._lock:
            if now - self._checked >= self.check_seconds:
                self._checked = now
                self._reload()
            return self._entries
