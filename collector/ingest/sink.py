"""The write path of ``collector serve``: what a parsed body's identity may write
(``collector.ingest.scopes``, ``collector.ingest.ownership``) goes to the SQLite store, or
to VictoriaMetrics with the trainings' events kept in the store first (the events path).
A write returns once stored or forwarded: the 204 is sent only after it."""

from __future__ import annotations

import threading
from http import HTTPStatus

from collector.ingest.http import HttpError
from collector.ingest.ownership import Ownership
from collector.ingest.scopes import within_scope
from collector.lineprotocol import ParsedBody
from collector.store import SqliteStore
from collector.store.database import WRITE_BUSY_SECONDS
from collector.store.victoriametrics import BackendError, Forwarder
from netserve.tokens import OPEN, Identity


class Sink:
    """Where parsed bodies go: the SQLite store, or VictoriaMetrics plus local events."""

    def __init__(self, store: SqliteStore, forwarder: Forwarder | None = None) -> None:
        self.store = store
        self.forwarder = forwarder
        self.ownership = Ownership(store.db)
        self._counts_lock = threading.Lock()
        self.writes = 0  # bodies stored (or forwarded) since start: the stop line says so
        self.points = 0

    def write(
        self, parsed: ParsedBody, body: bytes | None, precision: str, identity: Identity = OPEN
    ) -> tuple[int, list[str]]:
        """Store (or forward) what ``identity`` may write of ``parsed``: the points stored,
        and what it may not write, one line each (``collector.ingest.scopes``). ``body``:
        the lines as sent, None once some were left out (the forwarder encodes the rest)."""
        allowed, refused = within_scope(identity, parsed)
        allowed, not_owned = self.ownership.check(identity, allowed)
        refused += not_owned
        if refused:
            body = None
        stored, refused_runs = self._write(allowed, body, precision, identity)
        with self._counts_lock:
            self.writes += 1
            self.points += stored
        return stored, refused + refused_runs

    def _write(
        self, parsed: ParsedBody, body: bytes | None, precision: str, identity: Identity
    ) -> tuple[int, list[str]]:
        """(points stored, runs refused)."""
        writer, admin = identity.name, identity.is_admin
        if self.forwarder is None:
            result = self.store.write(parsed, writer, admin, WRITE_BUSY_SECONDS)
            return result.points, result.refused
        result = None
        if parsed.events:
            # the trainings' events are kept here first, whatever the backend does
            events = ParsedBody(events=parsed.events, points=len(parsed.events))
            result = self.store.write(events, writer, admin, WRITE_BUSY_SECONDS)
        stored = parsed.points - (len(parsed.events) - (result.events if result else 0))
        refused = result.refused if result else []
        try:
            self.forwarder.forward(parsed, body, precision)
        except BackendError as error:
            if not parsed.groups:
                return stored, refused  # events only: kept (the backend's copy is not read)
            # the samples are not stored: the client keeps the batch and sends it again
            # (its events, already kept, replace themselves)
            raise HttpError(HTTPStatus.SERVICE_UNAVAILABLE, "unavailable", str(error)) from None
        return stored, refused

    def health(self) -> list[str]:
        """What keeps writes from being stored now: the SQLite store's problems, and the
        backend's when samples are forwarded."""
        problems = self.store.health()
        if self.forwarder is not None:
            problems += [f"sample backend: {problem}" for problem in self.forwarder.health()]
        return problems
