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

This module assembles the server (``CollectorServer``, the routes of ``WriteHandler``,
``run``); each job has its module in ``collector.ingest``:

- ``connections``: one asyncio loop reads and writes every socket, with header, idle and
  body timeouts and a connection cap (503 with ``Retry-After`` beyond it); complete
  requests are handled in a bounded pool of threads;
- ``requests``: what every request shares (token, body, answers); ``writes`` the write
  endpoints, ``reads`` the read side (ping, health, ready, the read API and ``/metrics``
  behind the read gate);
- ``parsing``: bodies over ``PARALLEL_PARSE_BYTES`` parsed in worker processes (parsing is
  CPU-bound Python, and the GIL would otherwise keep it on one core);
- ``sink``: the write path: scopes, ownership, then the store (one writer connection
  behind a lock) or VictoriaMetrics, the trainings' events kept in the store either way;
- ``maintenance``: folding new points into blocks (and merging a finished window's blocks
  once) every ``COMPACT_SECONDS``, ``--retention-days``, and WAL checkpoints every
  ``CHECKPOINT_SECONDS`` on their own thread, so that no write's commit does.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

from collector.api import server as read_api
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
from collector.ingest.http import Head, HttpError
from collector.ingest.maintenance import Checkpointer, Maintenance
from collector.ingest.parsing import PARALLEL_PARSE_BYTES, ParsePool, default_workers
from collector.ingest.reads import ReadEndpoints
from collector.ingest.requests import VERSION
from collector.ingest.scopes import offered_tokens
from collector.ingest.sink import Sink
from collector.ingest.writes import WriteEndpoints
from collector.store import SqliteStore
from collector.store.backends import serve_spec
from collector.store.victoriametrics import Forwarder
from netserve import listen
from netserve.limits import ConnectionLimits
from netserve.listen import ListenError
from netserve.refusals import RefusalLog
from netserve.tls import ServerTls, TlsConfigError, server_tls_of
from netserve.tokens import Authenticator, TokenFileError

# what other modules, tests and benches import from here
__all__ = [
    "PARALLEL_PARSE_BYTES",
    "VERSION",
    "Checkpointer",
    "CollectorServer",
    "Maintenance",
    "ParsePool",
    "Sink",
    "WriteHandler",
    "run",
]

log = logging.getLogger("collector.ingest.server")
START_LOCK_SECONDS = 5.0  # a start that cannot take the store's write lock in this long exits


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


# -------------------------------------------------------------------- process


class WriteHandler(WriteEndpoints, ReadEndpoints):
    """One request (``CollectorServer.handle`` runs it in a request thread): its method
    and path to its endpoint, the write side (collector.ingest.writes) or the read side
    (collector.ingest.reads). Every path the server answers is routed here."""

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/api/v2/write":
            self._post_write(parse_qs(url.query), v1=False)
        elif url.path == "/write":
            self._post_write(parse_qs(url.query), v1=True)
        else:
            self._send_error(
                HttpError(HTTPStatus.NOT_FOUND, "not found", "path not found", close=True)
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
            self._ready()
        else:
            self._send_error(HttpError(HTTPStatus.NOT_FOUND, "not found", "path not found"))

    def do_HEAD(self) -> None:
        if urlsplit(self.path).path == "/ping":
            self._ping({})
        else:
            self._send(HTTPStatus.NOT_FOUND, b"", "application/json; charset=utf-8", head=True)


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
    pool = ParsePool(args.workers or default_workers())
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
