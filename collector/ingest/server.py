"""``collector serve``: the InfluxDB write API in front of the store.

Endpoints (what InfluxDB 2 answers, so the agent, the workloads, Telegraf and any InfluxDB
client can write here):

``POST /api/v2/write?bucket=B&org=O&precision=ns|us|ms|s``
``POST /write?db=D&precision=n|ns|u|us|ms|s|m|h`` (InfluxDB 1 compatible)
    Line protocol, optionally ``Content-Encoding: gzip``, plain or chunked. Bucket, org and
    db are accepted and ignored: there is one store. Answers 204 once every valid line is
    committed; 400 ``{"code": "invalid", "message": "... line N: ..."}`` when some lines are
    malformed (the valid lines of the body are stored all the same, like InfluxDB's partial
    writes); 401 without the token; 413 for a body over ``--max-body-bytes`` (decided from
    Content-Length before reading, and while reading chunked or gzip bodies).
``GET /health``, ``GET /ready``, ``GET|HEAD /ping`` (204): InfluxDB's shapes.

Retention (``--retention-days``) applies to the SQLite store; with ``--backend
victoriametrics=URL`` the samples live in VictoriaMetrics, whose own ``-retentionPeriod``
applies. ``--backend prometheus=URL`` forwards nothing (collector.store.backends).

Tokens: ``Authorization: Token <t>`` (or ``Bearer``); on ``/write`` also Basic auth or
``?p=`` with the token as password. ``--tokens-file`` holds scoped tokens' hashes
(``collector token add``): a node token writes its own host's samples, a run token the
events of the runs it created, an admin token everything; what a token may not write is
left out of the batch, the rest stored, and the answer is 403 naming what was refused
(collector.ingest.scopes). ``--token-file`` is one admin token (a warning says so). Without
either, writes are open (the default listen address is loopback). No token is logged, nor
is a query string.

Connections (collector.ingest.connections): one asyncio loop reads and writes every socket, with
header, idle and body timeouts and a connection cap (503 with ``Retry-After`` beyond it);
complete requests are handled in a bounded pool of threads. Bodies over
``PARALLEL_PARSE_BYTES`` are parsed in a pool of worker processes (parsing is CPU-bound
Python, and the GIL would otherwise keep it on one core); the store keeps one writer
connection behind a lock. Background maintenance folds new points into blocks (and merges
a finished window's blocks once) every ``COMPACT_SECONDS`` and applies
``--retention-days``; another thread checkpoints the WAL every ``CHECKPOINT_SECONDS``, so
that no write's commit does (``Checkpointer``).
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import multiprocessing
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

from collector import lineprotocol
from collector.api import server as read_api
from collector.export.findings_metrics import CONTENT_TYPE as FINDINGS_CONTENT_TYPE
from collector.export.findings_metrics import FindingsPage
from collector.ingest.connections import (
    WRITE_PATHS,
    HttpFront,
    buffered_request,
    connection_cap,
    listening_socket,
    query_of,
    raise_descriptor_limit,
)
from collector.ingest.http import (
    Head,
    HttpError,
    _gunzip,
    parse_chunk_size,
    parse_content_length,
)
from collector.ingest.ownership import Ownership
from collector.ingest.scopes import offered_tokens, within_scope
from collector.lineprotocol import ParsedBody, PrecisionError
from collector.store import SqliteStore
from collector.store.backends import serve_spec
from collector.store.database import WRITE_BUSY_SECONDS, StoreBusy
from collector.store.victoriametrics import BackendError, Forwarder
from netserve import listen
from netserve.limits import ConnectionLimits
from netserve.listen import ListenError
from netserve.ratelog import RateLimitedLog
from netserve.refusals import RefusalLog
from netserve.tls import ServerTls, TlsConfigError, server_tls_of
from netserve.tokens import OPEN, Authenticator, Identity, Scope, TokenFileError

log = logging.getLogger("collector.ingest.server")
# a write that fails for a lasting cause (a full disk) fails every request alike: its
# traceback once, then one line a minute with the count (before: 3,860 lines in 8 s)
_failed_writes = RateLimitedLog(log)

VERSION = "2.7.0-epochscope"  # what /ping and /health report; clients only check it exists
PARALLEL_PARSE_BYTES = 256 * 1024
COMPACT_SECONDS = 30.0
CHECKPOINT_SECONDS = 1.0  # how often the WAL is copied into the store file
RETENTION_SECONDS = 3600.0  # how often retention runs
_READ_CHUNK = 1 << 16
START_LOCK_SECONDS = 5.0  # a start that cannot take the store's write lock in this long exits
V2_PRECISIONS = ("ns", "us", "ms", "s")


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


def exit_with_parent(parent_pid: int) -> None:
    """In a worker process: exit as soon as ``parent_pid`` (the collector) is gone.

    The workers are children of the forkserver, not of the collector, so a kill -9 of the
    collector would leave them behind (no atexit, no pool shutdown runs). A daemon thread
    waits on a pidfd of the collector (no polling); where pidfds are not available it
    checks once a second. The forkserver itself exits when the collector's end of its
    pipe closes.
    """

    def watch() -> None:
        try:
            pidfd = os.pidfd_open(parent_pid)
        except (AttributeError, OSError):
            while _process_exists(parent_pid):
                time.sleep(1.0)
        else:
            select.select([pidfd], [], [])
        os._exit(0)

    if not _process_exists(parent_pid):
        os._exit(0)
    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ParsePool:
    """Worker processes that parse large bodies; small ones are parsed in the caller."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ProcessPoolExecutor | None = None
        self._parsing_here = threading.Lock()

    def _pool(self) -> concurrent.futures.ProcessPoolExecutor:
        with self._lock:
            if self._executor is None:
                context = multiprocessing.get_context("forkserver")
                context.set_forkserver_preload(["collector.lineprotocol"])
                self._executor = concurrent.futures.ProcessPoolExecutor(
                    max_workers=self.workers,
                    mp_context=context,
                    initializer=exit_with_parent,
                    initargs=(os.getpid(),),
                )
            return self._executor

    def start(self) -> None:
        """Start the workers now rather than on the first large body."""
        if self.workers > 1:
            try:
                futures = [self._pool().submit(os.getpid) for _ in range(self.workers)]
                concurrent.futures.wait(futures)
            except (OSError, concurrent.futures.BrokenExecutor) as error:
                log.warning("parse workers unavailable (%s); parsing in the server", error)
                self.workers = 1

    def parse(self, body: bytes, precision: str | None, now_ns: int) -> ParsedBody:
        if len(body) < PARALLEL_PARSE_BYTES:
            return lineprotocol.parse_body_bytes(body, precision, now_ns)
        if self.workers < 2:
            return self._parse_here(body, precision, now_ns)
        try:
            future = self._pool().submit(lineprotocol.parse_body_bytes, body, precision, now_ns)
            return future.result()
        except concurrent.futures.BrokenExecutor:
            log.warning("a parse worker died; starting new workers")
            with self._lock:
                self._executor = None
        except OSError as error:  # no processes to be had: parse here from now on
            log.warning("parse workers unavailable (%s); parsing in the server", error)
            self.workers = 1
        return self._parse_here(body, precision, now_ns)

    def _parse_here(self, body: bytes, precision: str | None, now_ns: int) -> ParsedBody:
        """A large body parsed in the server: one at a time. Parsing holds about 13 times
        a body of short lines (its text, then a Python object per line until the columns
        are built); with 16 request threads at once that was the 5.6x peak of issue 30."""
        with self._parsing_here:
            return lineprotocol.parse_body_bytes(body, precision, now_ns)

    def close(self) -> None:
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=True, cancel_futures=True)
                self._executor = None


# A client that hangs up, resets or stalls is collector.ingest.connections' business (one debug
# line); a handler reads bytes in memory, so only a backend can raise these inside it.
CLIENT_GONE = (ConnectionError, TimeoutError)


class CollectorServer:
    """The write and read API on one listening socket: connections are read and written by
    an event loop, complete requests handled by ``WriteHandler`` in a bounded pool of
    threads (collector.ingest.connections says why and what the limits are)."""

    def __init__(
        self,
        address: tuple[str, int],
        sink: Sink,
        token: str | None = None,
        max_body_bytes: int = 64 * 1024 * 1024,
        parse_pool: ParsePool | None = None,
        limits: ConnectionLimits | None = None,
        tls: ServerTls | None = None,
        auth: Authenticator | None = None,
        read_gate: read_api.ReadGate | None = None,
    ) -> None:
        """``token``: one admin token; ``auth``: the token files' (scoped tokens);
        ``read_gate``: how many read-API requests are built at once and wait."""
        self.socket = listening_socket(*address)  # OSError: collector.ingest.server.cannot_listen
        self.server_address = self.socket.getsockname()
        self.sink = sink
        self.auth = auth or Authenticator(token=token)
        self.read_gate = read_gate or read_api.ReadGate()
        self.max_body_bytes = max_body_bytes
        self.parse_pool = parse_pool or ParsePool(1)
        self.started = datetime.now(UTC)
        self.started_monotonic = time.monotonic()
        self.read_store = sink.store  # what the read API reads (run() may give a backend's)
        self.findings_page = FindingsPage()  # GET /metrics: the live findings as gauges
        self.refusals = RefusalLog(log)
        self.limits = limits or ConnectionLimits()
        self.front = HttpFront(
            self.socket,
            self.handle,
            self.limits,
            max_body_bytes,
            self.body_wanted,
            self.refusals.refused,
            tls,
        )

    def handle(self, head: Head, body: bytes | bytearray, peer: tuple) -> tuple[bytes, bool]:
        """One complete request (in a worker thread): response bytes, close or not."""
        return buffered_request(WriteHandler, self, head, body, peer)

    def body_wanted(self, head: Head) -> bool:
        """Read this request's body? Only for a write the token allows: anything else is
        answered from its head (404, 401) without taking the body in."""
        path, query = query_of(head.target)
        if head.method != "POST" or path not in WRITE_PATHS:
            return False
        offered = offered_tokens(head.one("authorization") or "", query, path == "/write")
        return self.auth.identify(offered) is not None

    def serve_forever(self) -> None:
        self.front.serve_forever()

    def shutdown(self) -> None:
        self.front.shutdown()

    def server_close(self) -> None:
        self.socket.close()


class WriteHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "epochscope-collector"
    server: CollectorServer

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """A head ``parse_head`` refuses (a bad request line or version, the HTTP/2 preface,
        a malformed header line) or an unknown method: the collector's JSON error, with a
        status line whatever the request line said, and the connection closed. (Once
        ``http.server`` read heads here, and left the status line out for a version it had
        not taken: ``HTTP/9.9`` and the HTTP/2 preface got a bare HTML page.)"""
        self.request_version = self.protocol_version
        status = HTTPStatus(code)
        self._send_error(
            HttpError(
                status,
                "not implemented" if status == HTTPStatus.NOT_IMPLEMENTED else "invalid",
                message or status.phrase,
                close=True,
            )
        )

    # ---------------------------------------------------------------- dispatch

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        try:
            if url.path == "/api/v2/write":
                self._write(parse_qs(url.query), v1=False)
            elif url.path == "/write":
                self._write(parse_qs(url.query), v1=True)
            else:
                raise HttpError(HTTPStatus.NOT_FOUND, "not found", "path not found", close=True)
        except HttpError as error:
            self._send_error(error)
        except StoreBusy as busy:  # another process holds the store's lock: nothing stored
            self._send_json(
                HTTPStatus.SERVICE_UNAVAILABLE,
                {"code": "unavailable", "message": str(busy)},
                headers={"Retry-After": str(StoreBusy.RETRY_AFTER_SECONDS)},
            )
        except CLIENT_GONE:
            raise  # not the client (its bytes are in memory): buffered_request answers 500
        except Exception as error:
            reason = f"{type(error).__name__}: {error}"[:200]
            _failed_writes.log(logging.ERROR, reason, "write failed: %s", reason, exc_info=True)
            self._send_error(
                HttpError(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error", "write failed")
            )

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/ping":
            self._ping(parse_qs(url.query))
        elif url.path == "/health":
            self._health()
        elif (view := read_api.view_of(url.path)) is not None:
            self._read_view(view, parse_qs(url.query))
        elif url.path == "/metrics":
            self._findings_metrics(parse_qs(url.query))
        elif url.path == "/ready":
            up = time.monotonic() - self.server.started_monotonic
            started = self.server.started.isoformat(timespec="microseconds")
            self._send_json(
                HTTPStatus.OK,
                {"status": "ready", "started": started.replace("+00:00", "Z"), "up": f"{up:.3f}s"},
            )
        else:
            self._send_error(HttpError(HTTPStatus.NOT_FOUND, "not found", "path not found"))

    def do_HEAD(self) -> None:
        if urlsplit(self.path).path == "/ping":
            self._ping({})
        else:
            self._send(HTTPStatus.NOT_FOUND, b"", "application/json; charset=utf-8", head=True)

    # ---------------------------------------------------------------- endpoints

    def _ping(self, query: dict[str, list[str]]) -> None:
        if query.get("verbose", [""])[0].lower() == "true":
            self._send_json(HTTPStatus.OK, {"version": VERSION})
        else:
            self._send(HTTPStatus.NO_CONTENT, b"", None, head=self.command == "HEAD")

    def _health(self) -> None:
        health = {
            "name": "epochscope-collector",
            "message": "ready for queries and writes",
            "status": "pass",
            "checks": [],
            "version": VERSION,
            "commit": "",
        }
        # a store that cannot write, compact or be read fails, as InfluxDB's does
        problems = self.server.sink.health()
        if problems:
            health.update(status="fail", message="store unavailable: " + "; ".join(problems))
            self._send_json(HTTPStatus.SERVICE_UNAVAILABLE, health)
            return
        self._send_json(HTTPStatus.OK, health)

    def _read_view(self, view: str, query: dict[str, list[str]]) -> None:
        """``GET /api/v1/runs|report|scaling``: collector.api.server, behind a read token."""

        def answer() -> tuple[int, bytes, str | None]:
            self._authorize_read(query, "the read API")
            with self.server.read_gate.turn():
                result = read_api.answer(view, query, self.server.read_store)
            return result.status, result.body, result.content_type

        self._serve_read(answer, f"read of {view}", "read failed")

    def _findings_metrics(self, query: dict[str, list[str]]) -> None:
        """``GET /metrics``: the findings of live runs and running jobs as Prometheus gauges
        (collector.export.findings_metrics), behind a read token as the read API is."""

        def answer() -> tuple[int, bytes, str | None]:
            self._authorize_read(query, "/metrics")
            if query:
                raise HttpError(
                    HTTPStatus.BAD_REQUEST,
                    "invalid",
                    f"GET /metrics takes no query ({', '.join(sorted(query))} given)",
                )
            with self.server.read_gate.turn():
                page = self.server.findings_page.page(self.server.read_store)
            return HTTPStatus.OK, page.encode(), FINDINGS_CONTENT_TYPE

        self._serve_read(answer, "findings for /metrics", "findings failed")

    def _authorize_read(self, query: dict[str, list[str]], what: str) -> None:
        """HttpError unless the request's token may read: run and admin tokens may; an
        agent's node token writes its host's samples and never reads."""
        identity = self._authorize(query, v1=False)
        if identity.scope == Scope.NODE:
            raise HttpError(
                HTTPStatus.FORBIDDEN,
                "forbidden",
                f"{identity.name} is a node token: it writes its host's samples only "
                f"({what} takes run and admin tokens)",
            )

    def _serve_read(
        self, answer: Callable[[], tuple[int, bytes, str | None]], what: str, failed: str
    ) -> None:
        """Send one read's ``answer`` (status, body, content type), its failures answered as
        every read answers them: the HTTP error, 503 with Retry-After when the reads are
        busy or the backend is down, 500 (logged as ``what``) for anything else."""
        try:
            status, body, content_type = answer()
        except HttpError as error:
            self._send_error(error)
        except read_api.ReadsBusy as busy:
            retry = str(read_api.ReadGate.RETRY_AFTER_SECONDS)
            self._send_json(
                HTTPStatus.SERVICE_UNAVAILABLE,
                {"code": "unavailable", "message": str(busy)},
                headers={"Retry-After": retry},
            )
        except CLIENT_GONE:
            raise
        except BackendError as error:  # the backend is down or refuses: say so, not 500
            self._send_error(HttpError(HTTPStatus.SERVICE_UNAVAILABLE, "unavailable", str(error)))
        except Exception:
            log.exception("%s failed", what)
            self._send_error(HttpError(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error", failed))
        else:
            self._send(status, body, content_type)

    def _write(self, query: dict[str, list[str]], v1: bool) -> None:
        identity = self._authorize(query, v1)
        precision = query.get("precision", ["ns"])[0] or "ns"
        if not v1 and precision not in V2_PRECISIONS:
            raise HttpError(
                HTTPStatus.BAD_REQUEST,
                "invalid",
                f"invalid precision {precision!r}: use one of {', '.join(V2_PRECISIONS)}",
                close=True,
            )
        try:
            lineprotocol.precision_factor(precision)
        except PrecisionError as error:
            raise HttpError(HTTPStatus.BAD_REQUEST, "invalid", str(error), close=True) from None
        body = self._read_body()
        now_ns = time.time_ns()
        parsed = self.server.parse_pool.parse(body, precision, now_ns)
        stored, refused = self.server.sink.write(parsed, body, precision, identity)
        if refused:
            # like malformed lines: the rest is stored, and the message has the partial
            # write's shape (the agent's shipper counts the lines not stored from it)
            shown = "; ".join(refused[:10] + [str(e) for e in parsed.errors[:10]])
            rejected = parsed.points - stored + len(parsed.errors)
            raise HttpError(
                HTTPStatus.FORBIDDEN,
                "forbidden",
                f"partial write: {stored} points written, {rejected} line(s) rejected: {shown}",
            )
        if parsed.errors:
            shown = "; ".join(str(error) for error in parsed.errors[:10])
            more = f" (and {len(parsed.errors) - 10} more)" if len(parsed.errors) > 10 else ""
            raise HttpError(
                HTTPStatus.BAD_REQUEST,
                "invalid",
                f"partial write: {parsed.points} points written, "
                f"{len(parsed.errors)} line(s) rejected: {shown}{more}",
            )
        self._send(HTTPStatus.NO_CONTENT, b"", None)

    # ---------------------------------------------------------------- request parts

    def _authorize(self, query: dict[str, list[str]], v1: bool) -> Identity:
        """Who the request's token names; 401 for none the collector knows."""
        offered = offered_tokens(self.headers.get("Authorization", ""), query, v1)
        identity = self.server.auth.identify(offered)
        if identity is None:
            raise HttpError(
                HTTPStatus.UNAUTHORIZED, "unauthorized", "unauthorized access", close=True
            )
        return identity

    def _read_body(self) -> bytes:
        limit = self.server.max_body_bytes
        too_large = HttpError(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            "request too large",
            f"request body exceeds the limit of {limit} bytes",
            close=True,
        )
        encoding = self.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("identity", "gzip", ""):
            raise HttpError(
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                "unsupported media type",
                f"Content-Encoding {encoding!r} is not supported (use gzip or none)",
                close=True,
            )
        transfer_encoding = self.headers.get("Transfer-Encoding")
        if transfer_encoding is not None:
            if transfer_encoding.strip(" \t").lower() != "chunked":
                raise HttpError(
                    HTTPStatus.NOT_IMPLEMENTED,
                    "invalid",
                    f"Transfer-Encoding {transfer_encoding!r} is not supported (use chunked)",
                    close=True,
                )
            if self.headers.get_all("Content-Length"):  # RFC 9112 6.1: chunked wins, then close
                self.close_connection = True
            raw = self._read_chunked(limit, too_large)
        else:
            length = parse_content_length(self.headers.get_all("Content-Length") or [])
            if length > limit:
                raise too_large
            raw = self.rfile.read(length)
            if len(raw) != length:
                raise HttpError(HTTPStatus.BAD_REQUEST, "invalid", "body truncated", close=True)
        if encoding == "gzip":
            return _gunzip(raw, limit, too_large)
        return raw

    def _read_chunked(self, limit: int, too_large: HttpError) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            size = parse_chunk_size(self.rfile.readline(1024))
            if size == 0:
                # trailers end with an empty line
                for _ in range(100):
                    if self.rfile.readline(1024) in (b"\r\n", b"\n", b""):
                        return b"".join(parts)
                raise HttpError(HTTPStatus.BAD_REQUEST, "invalid", "too many trailers", close=True)
            total += size
            if total > limit:
                raise too_large
            chunk = self.rfile.read(size)
            if len(chunk) != size:
                raise HttpError(HTTPStatus.BAD_REQUEST, "invalid", "body truncated", close=True)
            parts.append(chunk)
            if self.rfile.readline(8) not in (b"\r\n", b"\n"):
                raise HttpError(
                    HTTPStatus.BAD_REQUEST,
                    "invalid",
                    "bad chunked encoding: a chunk is longer than its size line says",
                    close=True,
                )

    # ---------------------------------------------------------------- responses

    def _send(
        self,
        status: int,
        body: bytes,
        content_type: str | None,
        head: bool = False,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        self.send_header("X-Influxdb-Version", VERSION)
        self.send_header("X-Influxdb-Build", "OSS")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if status != HTTPStatus.NO_CONTENT:
            self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if body and not head:
            self.wfile.write(body)

    def _send_json(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode("utf-8")
        self._send(status, body, "application/json; charset=utf-8", headers=headers)

    def _send_error(self, error: HttpError) -> None:
        if error.close:
            self.close_connection = True
        headers = None
        path = urlsplit(self.path).path if hasattr(self, "path") else "-"
        if error.status < HTTPStatus.INTERNAL_SERVER_ERROR:  # the phrase: messages quote lines
            reason = HTTPStatus(error.status).phrase
            self.server.refusals.refused(error.status, self.client_address[0], path, reason)
        if error.status == HTTPStatus.UNAUTHORIZED:
            headers = {"WWW-Authenticate": 'Token realm="epochscope"'}
        self._send_json(error.status, {"code": error.code, "message": error.message}, headers)

    # Request lines can carry the token (``/write?p=``): log method, path and status only.
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        path = urlsplit(self.path).path if hasattr(self, "path") else "-"
        log.debug("%s %s %s", getattr(self, "command", "-"), path, code)

    def log_error(self, format: str, *args: object) -> None:
        log.debug("bad request from %s", self.client_address[0])

    def log_message(self, format: str, *args: object) -> None:
        log.debug("request from %s", self.client_address[0])


# -------------------------------------------------------------------- process


def authenticator_of(token_file: str | None, tokens_file: str | None) -> Authenticator:
    """Who may write and read: ``--tokens-file``'s scoped tokens and ``--token-file``'s
    single token (an admin: every writer may then rewrite every other's data, which the
    warning says); a file that cannot be used exits with one line."""
    try:
        auth = Authenticator(token_file=token_file, tokens_file=tokens_file)
    except TokenFileError as error:
        raise SystemExit(f"collector: {error}") from None
    if token_file is not None:
        log.warning(
            "--token-file %s is one admin token: whoever holds it may write any host's "
            "samples and any run's events; give agents and job users scoped tokens "
            "(--tokens-file, `collector token add`, docs/deploy.md)",
            token_file,
        )
    return auth


def parse_listen(text: str) -> tuple[str, int]:
    """``--listen`` (``netserve.listen``): ``:PORT`` is loopback's."""
    try:
        return listen.parse_listen(text, default_host="127.0.0.1")
    except ListenError as error:
        if error.port is None:
            raise SystemExit(f"collector: --listen wants HOST:PORT, got {text!r}") from None
        raise SystemExit(f"collector: --listen {text!r}: {error}") from None


def cannot_listen(host: str, port: int, error: OSError) -> str:
    """One line saying why ``host:port`` cannot be listened on, and what to do."""
    return listen.cannot_listen(host, port, error, who="another collector?")


class Checkpointer(threading.Thread):
    """Copies the store's WAL into its file every ``CHECKPOINT_SECONDS``, beside the writes
    (a commit that checkpointed itself held every writer for the copy and its fsync: the
    30 s fold's commit took 0.8 s of its 2 s under the write lock that way)."""

    def __init__(self, store: SqliteStore) -> None:
        super().__init__(name="store-checkpoint", daemon=True)
        self.store = store
        self.stopping = threading.Event()

    def run(self) -> None:
        failing = ""  # logged once while it lasts (a full disk fails it every second)
        while not self.stopping.wait(CHECKPOINT_SECONDS):
            try:
                self.store.checkpoint()
            except Exception as error:
                if str(error) != failing:
                    failing = str(error)
                    log.warning("store checkpoint failed: %s (the WAL grows meanwhile)", error)
                continue
            if failing:
                failing = ""
                log.info("store checkpoint works again")


class Maintenance(threading.Thread):
    """Compacts small blocks and applies retention in the background."""

    def __init__(self, store: SqliteStore, retention_days: float | None) -> None:
        super().__init__(name="store-maintenance", daemon=True)
        self.store = store
        self.retention_days = retention_days
        self.stopping = threading.Event()

    def run(self) -> None:
        last_retention = 0.0
        while not self.stopping.wait(COMPACT_SECONDS):
            try:
                self.store.compact()
                now = time.monotonic()
                if self.retention_days is not None and now - last_retention >= RETENTION_SECONDS:
                    last_retention = now
                    cutoff = time.time_ns() - int(self.retention_days * 86400e9)
                    dropped = self.store.delete_before(cutoff)
                    if dropped:
                        log.info("retention: dropped %d blocks", dropped)
            except Exception:
                log.exception("store maintenance failed")


def run(args) -> int:
    logging.basicConfig(
        level=os.environ.get("EPOCHSCOPE_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    auth = authenticator_of(args.token_file, getattr(args, "tokens_file", None))
    token = auth.required
    host, port = parse_listen(args.listen)
    backend = serve_spec(args.backend, getattr(args, "backend_auth_file", None))  # bad: exit 2
    try:
        tls = server_tls_of(args)
    except TlsConfigError as error:
        raise SystemExit(f"collector: {error}") from None
    if token and tls is None and not listen.is_loopback(host):
        log.warning(
            "the token crosses the network in clear on %s: give --tls-cert-file and "
            "--tls-key-file (docs/deploy.md)",
            host,
        )
    # StoreError: one line (collector.cli)
    store = SqliteStore(args.db, check_integrity=True, background_checkpoints=True)
    # prometheus=URL forwards nothing: pushed samples are stored here
    forwarding = backend is not None and backend.forwards_writes
    forwarder = Forwarder(backend.url, backend.authorization) if forwarding else None
    locked = store.db.write_lock_wait(START_LOCK_SECONDS)
    if locked:
        store.close()
        raise SystemExit(f"collector: {locked} (another collector serve on this file?)")
    store.set_samples_backend(backend.label if backend is not None else None)
    workers = args.parse_workers or min(os.cpu_count() or 1, 8)
    pool = ParsePool(workers)
    descriptors = raise_descriptor_limit()
    max_connections = connection_cap(args.max_connections, descriptors)
    if max_connections < args.max_connections:
        log.warning(
            "--max-connections %d lowered to %d: the open-file limit is %d "
            "(raise it: LimitNOFILE= in the systemd unit, ulimit -n)",
            args.max_connections,
            max_connections,
            descriptors,
        )
    limits = ConnectionLimits(
        max_connections=max_connections,
        header_timeout=args.header_timeout,
        idle_timeout=args.idle_timeout,
        body_timeout=args.body_timeout,
        body_min_rate=args.body_min_rate,
        body_memory_bytes=args.body_memory_bytes,
    )
    if args.max_body_bytes > limits.body_memory_bytes:
        raise SystemExit(
            f"collector: --body-memory-bytes {limits.body_memory_bytes} is smaller than "
            f"--max-body-bytes {args.max_body_bytes}: no body that large could be read"
        )
    read_concurrency = getattr(args, "read_concurrency", 2)
    read_queue = getattr(args, "read_queue", 8)
    if read_concurrency + read_queue >= limits.workers:
        raise SystemExit(
            f"collector: --read-concurrency {read_concurrency} + --read-queue {read_queue} "
            f"would take all {limits.workers} request threads: writes need some"
        )
    try:
        server = CollectorServer(
            (host, port),
            Sink(store, forwarder),
            auth=auth,
            read_gate=read_api.ReadGate(read_concurrency, read_queue),
            max_body_bytes=args.max_body_bytes,
            parse_pool=pool,
            limits=limits,
            tls=tls,
        )
    except OSError as error:
        pool.close()
        store.close()
        raise SystemExit(f"collector: {cannot_listen(host, port, error)}") from None
    # worker processes import numpy: start them beside the server, once it has its port
    threading.Thread(target=pool.start, name="parse-pool-start", daemon=True).start()
    if forwarder is not None:
        threading.Thread(
            target=forwarder.warn_if_duplicates_kept, name="backend-check", daemon=True
        ).start()
    if backend is not None:  # the read API answers from where the samples are read
        from collector.store.backends import open_backend_store

        server.read_store = open_backend_store(backend, store)
    maintenance = Maintenance(store, args.retention_days)
    maintenance.start()
    checkpointer = Checkpointer(store)
    checkpointer.start()

    stopped_by: list[str] = []

    def stop(signum: int, frame: object) -> None:
        stopped_by.append(signal.Signals(signum).name)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    bound_host, bound_port = server.server_address[:2]
    where = f"backend {args.backend.partition('=')[0]}" if args.backend else f"db {args.db}"
    log.info(
        "listening on %s://%s:%d (%s, token %s, at most %d connections%s)",
        "https" if tls else "http",
        bound_host,
        bound_port,
        where,
        "required" if token else "not required",
        max_connections,
        ", client certificates required" if tls and tls.files.client_ca_file else "",
    )
    sys.stderr.flush()
    try:
        server.serve_forever()
    finally:
        maintenance.stopping.set()
        checkpointer.stopping.set()
        checkpointer.join()
        server.server_close()
        pool.close()
        store.close()
    if stopped_by:
        log.info("%s", stop_line(stopped_by[0], server, where))
    return 0


def stop_line(signal_name: str, server: CollectorServer, where: str) -> str:
    """The one line ``collector serve`` logs when a signal stops it: what it took, and that
    what it acknowledged is in the store (a write is answered once committed)."""
    sink, front = server.sink, server.front
    cut = f", {front.cut_at_stop} cut off" if front.cut_at_stop else ""
    return (
        f"stopped by {signal_name}: {sink.writes} writes ({sink.points} points) taken since "
        f"start, every one answered is committed to the {where}; "
        f"{front.finished_at_stop} requests in hand finished{cut}; store closed"
    )
