"""The collector's connections: one event loop does all network I/O, a bounded pool of
threads handles complete requests.

Why not a thread per connection (``ThreadingHTTPServer``, what the collector had): a
client that opens a connection and sends nothing, or its headers a byte at a time, holds a
thread and a descriptor for as long as it likes. About a thousand of them reached the
default 1,024-descriptor limit; ``accept`` then failed with EMFILE on every pass of the
server loop (100 % CPU) and no writer got in. 2,000 slow clients would be 2,000 threads.

Here one asyncio loop owns every socket. It reads a request's head and body with deadlines
(a silent or slow client costs a descriptor and a few KiB, no thread), and only a complete
request goes to one of ``workers`` threads, which runs the HTTP handler over the request's
bytes in memory and hands back the response bytes; the loop writes them. Parsing and the
store's writes run in those threads (the store serializes its writes anyway; large bodies
go on to the parse processes).

Limits (``collector serve`` options; ``netserve.limits.ConnectionLimits``, the policy the
agent's /metrics and the dashboard share, with the same names and meanings):

- ``--header-timeout`` (10 s): a request's head must be complete within it, counted from
  the connection's accept for the first request and from the first byte for later ones.
  A client that sent nothing is closed; one that sent part of a head gets 408.
- ``--idle-timeout`` (75 s): a kept-alive connection with no new request is closed.
- ``--body-timeout`` (30 s) and ``--body-min-rate`` (4 KiB/s): a minimum transfer rate;
  each 30 s of a body must bring 120 KiB, or it is cut: 408 and close. A large body on a
  slow link passes; one trickled a byte at a time, or sent fast and then stalled, is cut.
- ``--body-memory-bytes`` (256 MiB): one budget for the bodies of all connections, held
  from their first byte until their answer is written. A body whose next bytes would pass
  it gets 503 with ``Retry-After`` and its connection is closed (40 connections each
  sending 63 MiB and stalling held 3 GiB before). Bodies are read into one growing buffer
  (not a list of pieces joined at the end, which held each body twice), handed to the
  handler without a copy, and once large ones are let go, the memory is handed back to
  the system (``netserve.memory``): after such a flood the process held 3.5 GiB for good.
- Heads: at most ``MAX_HEAD_BYTES`` (16 KiB; nginx's default is 8 KiB a line), read
  through a stream buffer of about as much. An unauthenticated client sending an
  unfinished head costs about that: before, a 64 KiB limit and a 65 KiB buffer held
  ~75 KiB per connection (9,000 of them +670 MiB).
- ``--max-connections`` (10,000, and never more than the descriptor limit minus
  ``RESERVED_DESCRIPTORS``): at the cap a new connection first makes room by closing the
  connection that has waited longest without a request (idle, or still sending its head,
  which gets 503); only when every connection is busy with a request is the new one
  refused: 503 with ``Retry-After`` and a one-line reason, then closed. So slow clients
  cannot lock writers out, and the process never runs out of descriptors.

The loop counts the descriptors it holds for clients and accepts itself (asyncio's own
accept loop, on EMFILE, logs and retries once per pending connection: thousands of log
lines a second). Should the process run out anyway (files held elsewhere in it), it stops
accepting for a second, logged at most once a minute.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import http.client
import io
import json
import logging
import resource
import socket
import time
from collections.abc import Callable
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

from collector.ingest.http import (
    MAX_HEADER_LINES,
    Head,
    HttpError,
    parse_chunk_size,
    parse_content_length,
    parse_head,
)
from netserve.limits import BodyBudget, BodyRate, ConnectionCap, ConnectionLimits
from netserve.memory import TRIM_AFTER_BYTES, TRIM_INTERVAL_SECONDS, MemoryReturner
from netserve.refusals import (
    BODY_MEMORY_SPENT,
    EVICTED,
    PLAIN_HTTP_ANSWER,
    PLAIN_HTTP_TO_TLS,
    REQUEST_TIMEOUT,
    looks_like_plain_http,
    refuse_connection,
    too_many_connections,
)
from netserve.tls import ServerTls

log = logging.getLogger("collector.ingest.server")

RESERVED_DESCRIPTORS = 64  # the store, parse processes, logs: never given to clients
MAX_HEAD_BYTES = 16 * 1024
WRITE_PATHS = ("/api/v2/write", "/write")
LINGER_SECONDS = 2.0  # reading (and dropping) an unread body before closing
LINGER_BYTES = 1 << 20
_CHUNK = 1 << 16
STREAM_LIMIT = MAX_HEAD_BYTES + 1024  # longest line a connection's reader takes; it
# also sizes the reader's buffer (reading pauses beyond twice this)
ACCEPT_BATCH = 16  # connections accepted per wake-up of the loop
ACCEPT_ROOM = 32  # descriptors beyond the cap for refusals and evictions in flight
TRIM_AFTER_CONNECTIONS = 256  # this many closed, half of those open at the peak: trim


def raise_descriptor_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as error:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, error)
    return soft


def connection_cap(wanted: int, descriptor_limit: int) -> int:
    """At most ``wanted`` connections, and never more than the descriptors allow."""
    return max(1, min(wanted, descriptor_limit - RESERVED_DESCRIPTORS))


def listening_socket(host: str, port: int, backlog: int = 1024) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=backlog)


class ClientGone(Exception):
    """The client closed or reset the connection, or was evicted: nothing to answer."""


def response_bytes(
    status: int, payload: dict, headers: dict[str, str] | None = None, close: bool = True
) -> bytes:
    """A complete JSON response, written by the loop itself (no handler involved)."""
    body = json.dumps(payload).encode("utf-8")
    lines = [
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
        "Content-Type: application/json; charset=utf-8",
        f"Content-Length: {len(body)}",
        *(f"{name}: {value}" for name, value in (headers or {}).items()),
    ]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class Connection:
    """One client connection and where it stands."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer: tuple = tuple(peer[:2]) if peer else ("-", 0)
        self.accepted = time.monotonic()
        self.partial = False  # bytes of a request head have arrived
        self.evicted = False
        self.held = 0  # bytes of the body budget this connection's request holds

    def send_and_close(self, data: bytes) -> None:
        if not self.writer.is_closing():
            with contextlib.suppress(ConnectionError, RuntimeError):
                self.writer.write(data)
        self.writer.close()


class HttpFront:
    """Accepts, reads and frames requests on an asyncio loop; ``handle(head, body, peer)``
    (run in a worker thread) turns one complete request into ``(response bytes, close)``."""

    def __init__(
        self,
        sock: socket.socket,
        handle: Callable[[Head, bytes | bytearray, tuple], tuple[bytes, bool]],
        limits: ConnectionLimits,
        max_body_bytes: int,
        body_wanted: Callable[[Head], bool],
        note_refusal: Callable[[int, str, str, str], object],
        tls: ServerTls | None = None,
    ) -> None:
        problem = limits.problem()
        if problem:
            raise ValueError(problem)
        if max_body_bytes > limits.body_memory_bytes:
            raise ValueError(
                f"the body memory budget ({limits.body_memory_bytes} bytes) is smaller than "
                f"the largest body taken ({max_body_bytes} bytes)"
            )
        self.sock = sock
        self.handle = handle
        self.limits = limits
        self.max_body_bytes = max_body_bytes
        self.body_wanted = body_wanted  # False: answer from the head (401, 404)
        self.note_refusal = note_refusal
        self.tls = tls  # every connection TLS, renewed files picked up (netserve.tls)
        self.connections: set[Connection] = set()
        self.budget = BodyBudget(limits.body_memory_bytes)
        self.memory = MemoryReturner()
        self._trim_pending = False
        self._open_peak = 0  # most connections open since the last trim for closed ones
        self.cap: ConnectionCap[Connection] = ConnectionCap(limits.max_connections)
        self.open = 0  # accepted sockets not yet closed: descriptors held for clients
        self.evicting = 0  # of which closed to make room, not yet gone
        # connections still in their TLS handshake, oldest first: they hold a descriptor
        # and have shown nothing, so at the cap they are the first to make room (45 silent
        # sockets at a cap of 40 locked every writer out: issue 44, item 2)
        self._handshaking: dict[asyncio.Task, None] = {}
        self._handshakes_evicted: set[asyncio.Task] = set()
        self._accepting = False
        self._descriptor_warning = -1e9
        # once stopped: requests in hand then that finished, and those cut off after 10 s
        self.finished_at_stop = 0
        self.cut_at_stop = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    @property
    def refused(self) -> int:
        """New connections refused at the cap."""
        return self.cap.refused

    @property
    def evicted(self) -> int:
        """Waiting connections closed to make room."""
        return self.cap.evicted

    # ---------------------------------------------------------------- life cycle

    def serve_forever(self) -> None:
        asyncio.run(self._serve())

    def shutdown(self) -> None:
        """Stop serving (from any thread or a signal handler)."""
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            loop.call_soon_threadsafe(stopping.set)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.set_exception_handler(self._loop_error)
        self._stopping = asyncio.Event()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            self.limits.workers, thread_name_prefix="request"
        )
        self.sock.setblocking(False)
        self._resume_accepting()
        try:
            await self._stopping.wait()
        finally:
            self._pause_accepting()
            self.sock.close()
            for connection in list(self.cap.waiting):
                connection.writer.close()
            in_hand = len(self.connections) - len(self.cap.waiting)
            deadline = time.monotonic() + 10.0  # let requests in hand finish
            while self.connections and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            self.cut_at_stop = min(len(self.connections), max(in_hand, 0))
            self.finished_at_stop = max(in_hand - self.cut_at_stop, 0)
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        error = context.get("exception")
        if isinstance(error, ConnectionError | TimeoutError):
            log.debug("connection error: %s", error)
        else:
            log.error("event loop: %s", context.get("message"), exc_info=error)

    # ---------------------------------------------------------------- accepting

    def _resume_accepting(self) -> None:
        if not self._accepting and self.sock.fileno() >= 0:
            assert self._loop is not None
            self._loop.add_reader(self.sock.fileno(), self._accept)
            self._accepting = True

    def _pause_accepting(self) -> None:
        if self._accepting:
            assert self._loop is not None
            self._loop.remove_reader(self.sock.fileno())
            self._accepting = False

    def _accept(self) -> None:
        """Accept what is waiting (a few at a time, so that accepting never starves the
        connections already open). Descriptors are counted here: beyond the cap a new
        connection evicts a waiting one or is refused, and accepting pauses rather than
        ever asking for a descriptor the process cannot have."""
        cap = self.limits.max_connections
        assert self._loop is not None
        for _ in range(ACCEPT_BATCH):
            if self.open >= cap + ACCEPT_ROOM:
                self._pause_accepting()  # resumed as connections close
                return
            try:
                client, peer = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as error:  # EMFILE and the like: held elsewhere in the process
                self._out_of_descriptors(error)
                return
            self.open += 1
            self._open_peak = max(self._open_peak, self.open)
            client.setblocking(False)
            if self.cap.full(self.open - self.evicting - 1) and not self._evict_one():
                self._refuse(client, peer)
                continue
            self._loop.create_task(self._connection(client, peer))

    def _out_of_descriptors(self, error: OSError) -> None:
        now = time.monotonic()
        if now - self._descriptor_warning >= 60.0:
            self._descriptor_warning = now
            log.warning(
                "cannot accept connections: %s; pausing 1 s (%d open; raise LimitNOFILE or "
                "lower --max-connections); logged at most once a minute",
                error,
                self.open,
            )
        self._pause_accepting()
        assert self._loop is not None
        self._loop.call_later(1.0, self._resume_accepting)

    def _closed(self, connection: Connection | None) -> None:
        self.open -= 1
        # many connections gone (a flood of heads: a few KiB each, in the heap): trim
        gone = self._open_peak - self.open
        if gone >= TRIM_AFTER_CONNECTIONS and self.open <= self._open_peak // 2:
            self._open_peak = self.open
            self._trim_soon()
        if connection is not None and connection.evicted:
            self.evicting -= 1
        if not self._accepting and self.open < self.limits.max_connections + ACCEPT_ROOM:
            self._resume_accepting()

    def _refuse(self, client: socket.socket, peer: tuple) -> None:
        """503 at the cap, every connection busy with a request (``make_room`` counted it):
        answered and closed at once."""
        refusal = too_many_connections(self.limits.max_connections)
        self.note_refusal(refusal.status, peer[0], "-", refusal.reason)
        if self.tls is None:  # a plain answer would be noise to a TLS client: closed
            refuse_connection(client, refusal.json())
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_WR)
        client.close()
        self._closed(None)

    def _evict_one(self) -> bool:
        """Make room at the cap: end the oldest TLS handshake still going, else close the
        connection that has waited longest without a request (idle keep-alive: closed, as
        its idle timeout would; still sending its head: 503 with Retry-After)."""
        if self._handshaking:
            task = next(iter(self._handshaking))
            del self._handshaking[task]
            self._handshakes_evicted.add(task)
            self.evicting += 1
            self.cap.evicted += 1
            task.cancel()
            return True
        victim = self.cap.make_room()
        if victim is None:
            return False
        victim.evicted = True
        self.evicting += 1
        if victim.partial:
            self.note_refusal(EVICTED.status, victim.peer[0], "-", EVICTED.reason)
            victim.send_and_close(EVICTED.json())
        else:
            victim.writer.close()
        return True

    # ---------------------------------------------------------------- one connection

    async def _connection(self, client: socket.socket, peer: tuple) -> None:
        task = asyncio.current_task()
        if self.tls is not None and task is not None:
            self._handshaking[task] = None
        try:
            if self.tls is not None and await self._plain_http(client, peer):
                raise ConnectionRefusedError("plain HTTP sent to the TLS port")
            reader, writer = await self._open(client)
        except (OSError, TimeoutError, asyncio.CancelledError) as error:
            # a failed TLS handshake (no CA, a wrong client certificate, plain HTTP), or one
            # ended to make room at the cap
            log.debug("connection from %s not opened: %r", peer[0], error)
            client.close()
            self._handshaking.pop(task, None)  # type: ignore[arg-type]
            if task in self._handshakes_evicted:
                self._handshakes_evicted.discard(task)  # type: ignore[arg-type]
                self.evicting -= 1
            self._closed(None)
            return
        self._handshaking.pop(task, None)  # type: ignore[arg-type]
        connection = Connection(reader, writer)
        self.connections.add(connection)
        try:
            await self._serve_connection(connection)
        except (ClientGone, ConnectionError, TimeoutError, asyncio.IncompleteReadError) as error:
            log.debug("client %s left (%s)", connection.peer[0], type(error).__name__)
        except Exception:
            log.exception("connection from %s failed", connection.peer[0])
        finally:
            self._let_go(connection)
            self.connections.discard(connection)
            self.cap.busy(connection)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self._closed(connection)

    async def _plain_http(self, client: socket.socket, peer: tuple) -> bool:
        """Whether ``client`` began in plain HTTP instead of TLS; if so the refusal is logged
        (once a minute per client) and answered in clear, 400 with ``PLAIN_HTTP_ANSWER``.
        Waits for the first bytes within the header timeout: a TLS client sends its hello
        at once."""
        loop = asyncio.get_running_loop()
        readable = loop.create_future()
        loop.add_reader(client.fileno(), lambda: readable.done() or readable.set_result(None))
        try:
            await asyncio.wait_for(readable, self.limits.header_timeout)
        finally:
            loop.remove_reader(client.fileno())
        try:
            first = client.recv(8, socket.MSG_PEEK)
        except BlockingIOError:
            return False
        if not looks_like_plain_http(first):
            return False
        self.note_refusal(HTTPStatus.BAD_REQUEST, peer[0], "-", PLAIN_HTTP_TO_TLS)
        with contextlib.suppress(OSError):  # what it sent is read: closing over it resets
            for _ in range(16):
                if not client.recv(65536):
                    break
        with contextlib.suppress(OSError):  # small: the socket's buffer takes it at once
            client.send(PLAIN_HTTP_ANSWER)
        return True

    async def _open(
        self, client: socket.socket
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Streams over ``client``; with TLS, after its handshake, which must be done within
        the header timeout (it is part of the first request's head, as far as a slow
        client is concerned)."""
        if self.tls is None:
            return await asyncio.open_connection(sock=client, limit=STREAM_LIMIT)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=STREAM_LIMIT, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        transport, _ = await loop.connect_accepted_socket(
            lambda: protocol,
            sock=client,
            ssl=self.tls.context(),
            ssl_handshake_timeout=self.limits.header_timeout,
        )
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)

    async def _serve_connection(self, connection: Connection) -> None:
        limits = self.limits
        first = True
        while True:
            self.cap.waits(connection)
            if first:
                deadline = connection.accepted + limits.header_timeout
                first_byte = await self._read(connection, connection.reader.read(1), deadline)
            else:
                idle_deadline = time.monotonic() + limits.idle_timeout
                first_byte = await self._read(connection, connection.reader.read(1), idle_deadline)
                deadline = time.monotonic() + limits.header_timeout
            if not first_byte or connection.evicted:
                return
            connection.partial = True
            head = await self._read_head(connection, first_byte, deadline)
            if head is None or connection.evicted:
                return
            self.cap.busy(connection)  # never evicted from here on
            if head.problem is not None:  # the handler answers it; no body is read
                body, close_after = b"", True
            else:
                body, close_after = await self._read_body(connection, head)
            if body is None:
                return
            assert self._loop is not None
            response, close = await self._loop.run_in_executor(
                self._pool, self.handle, head, body, connection.peer
            )
            del body
            if not response:
                return
            connection.writer.write(response)
            await asyncio.wait_for(connection.writer.drain(), limits.write_timeout)
            self._let_go(connection)
            if close or close_after:
                await self._lingering_close(connection)
                return
            connection.partial = False
            first = False

    async def _read(self, connection: Connection, read, deadline: float) -> bytes:
        """Await a read of ``connection`` until ``deadline``; ``b""`` when the client
        closed; on time out: close (408 when part of a request arrived)."""
        try:
            return await asyncio.wait_for(read, max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            if connection.evicted:
                raise ClientGone from None
            if connection.partial:
                refusal = REQUEST_TIMEOUT
                self.note_refusal(refusal.status, connection.peer[0], "-", refusal.reason)
                await self._answer_and_close(connection, refusal.json())
            raise ClientGone from None

    async def _read_head(
        self, connection: Connection, first_byte: bytes, deadline: float
    ) -> Head | None:
        reader = connection.reader
        lines: list[bytes] = []
        size = 0
        pending = first_byte
        while True:
            try:
                line = pending + await self._read(connection, reader.readline(), deadline)
            except ValueError:  # a line longer than the stream's limit
                line = b"x" * (MAX_HEAD_BYTES + 1)
            pending = b""
            if not lines and line in (b"\r\n", b"\n"):
                continue  # empty lines before a request line are ignored (RFC 9112 2.2)
            size += len(line)
            if size > MAX_HEAD_BYTES or len(lines) > MAX_HEADER_LINES + 1:
                too_long = not lines or len(lines[0]) > MAX_HEAD_BYTES
                status = (
                    HTTPStatus.REQUEST_URI_TOO_LONG
                    if too_long
                    else HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE
                )
                self.note_refusal(status, connection.peer[0], "-", HTTPStatus(status).phrase)
                await self._answer_and_close(
                    connection,
                    response_bytes(
                        status,
                        {
                            "code": "invalid",
                            "message": f"request head over {MAX_HEAD_BYTES} bytes or "
                            f"{MAX_HEADER_LINES} headers",
                        },
                    ),
                )
                return None
            if not line:  # the client closed mid-head
                if not lines:
                    return None
                break
            lines.append(line)
            if line in (b"\r\n", b"\n") or not line.endswith(b"\n"):
                break
        return parse_head(b"".join(lines))

    # ---------------------------------------------------------------- bodies and memory

    async def _take(self, connection: Connection, count: int) -> bool:
        """Hold ``count`` more bytes of ``connection``'s body against the budget; when that
        would pass it, 503 with Retry-After, what the body held let go, and close: False."""
        if self.budget.take(count):
            connection.held += count
            return True
        self._let_go(connection)
        refusal = BODY_MEMORY_SPENT
        self.note_refusal(refusal.status, connection.peer[0], "-", refusal.reason)
        await self._answer_and_close(connection, refusal.json())
        return False

    def _let_go(self, connection: Connection) -> None:
        """Give back what ``connection``'s request held; after a large body, hand free memory
        back to the system (one trim a second at most, always one after the last)."""
        held, connection.held = connection.held, 0
        if not held:
            return
        self.budget.give(held)
        if held >= TRIM_AFTER_BYTES:
            self._trim_soon()

    def _trim_soon(self) -> None:
        """Hand free memory back a second from now (one trim pending at a time)."""
        if not self._trim_pending and self.memory.available and self._loop is not None:
            self._trim_pending = True
            self._loop.call_later(TRIM_INTERVAL_SECONDS, self._trim)

    def _trim(self) -> None:
        self._trim_pending = False
        assert self._loop is not None
        self._loop.run_in_executor(None, self.memory.trim)

    async def _read_part(
        self, connection: Connection, read, rate: BodyRate, body: bytearray
    ) -> bytes | None:
        """One read of a body at the minimum rate, held against the budget and appended to
        ``body``; ``b""`` when the client closed, None when refused (answered, closing)."""
        part = await self._read(connection, read, rate.deadline)
        if part:
            if not await self._take(connection, len(part)):
                return None
            rate.received(len(part), time.monotonic())
            body += part
        return part

    async def _read_body(
        self, connection: Connection, head: Head
    ) -> tuple[bytes | bytearray | None, bool]:
        """The body's raw bytes as they came (chunk framing included), and whether the
        connection must close after the answer (a body that was not read). ``b""`` when
        the handler answers from the head alone (it refuses the request, or has none);
        None when the body was refused here (answered, closing)."""
        transfer_encoding = head.one("transfer-encoding")
        lengths = head.headers.get("content-length", [])
        has_body = transfer_encoding is not None or any(v.strip(" \t") != "0" for v in lengths)
        if not has_body:
            return b"", False
        if not self.body_wanted(head):
            return b"", True
        if transfer_encoding is not None:
            if transfer_encoding.strip(" \t").lower() != "chunked":
                return b"", True
            self._continue(connection, head)
            # Content-Length beside chunked: the chunks are the body, and the connection
            # closes after the answer (RFC 9112 6.1: the two could frame it differently
            # for a proxy in front, and the next "request" be smuggled)
            chunked = await self._read_chunked(connection)
            return chunked, chunked is None or bool(lengths)
        try:
            length = parse_content_length(lengths)
        except HttpError:
            return b"", True
        if length > self.max_body_bytes:
            return b"", True
        self._continue(connection, head)
        rate = BodyRate(self.limits, time.monotonic())
        body = bytearray()
        remaining = length
        while remaining:
            read = connection.reader.read(min(remaining, _CHUNK))
            part = await self._read_part(connection, read, rate, body)
            if part is None:
                return None, True
            if not part:  # the client closed early: the handler answers "body truncated"
                break
            remaining -= len(part)
        return body, False

    async def _read_chunked(self, connection: Connection) -> bytearray | None:
        """Chunks as they came, up to the last one and its trailers, or up to the first
        fault (a bad size line, too large, the client gone): the handler then answers with
        the same checks as it parses them."""
        reader = connection.reader
        rate = BodyRate(self.limits, time.monotonic())
        body = bytearray()
        total = 0
        while True:
            try:
                size_line = await self._read_part(connection, reader.readline(), rate, body)
            except ValueError:
                return body + b"?\n"  # an endless size line: not a hex number
            if size_line is None:
                return None
            try:
                size = parse_chunk_size(size_line[:1024])
            except HttpError:
                return body
            if size == 0:
                for _ in range(101):
                    trailer = await self._read_part(connection, reader.readline(), rate, body)
                    if trailer is None:
                        return None
                    if trailer in (b"\r\n", b"\n", b""):
                        break
                return body
            total += size
            if total > self.max_body_bytes:
                return body
            remaining = size
            while remaining:
                read = reader.read(min(remaining, _CHUNK))
                part = await self._read_part(connection, read, rate, body)
                if part is None:
                    return None
                if not part:
                    return body
                remaining -= len(part)
            line_end = await self._read_part(connection, reader.readline(), rate, body)
            if line_end is None:
                return None
            if line_end not in (b"\r\n", b"\n"):
                return body  # the handler names the fault

    def _continue(self, connection: Connection, head: Head) -> None:
        """``Expect: 100-continue``: the body will be read, tell the client to send it."""
        expect = (head.one("expect") or "").strip().lower()
        if expect == "100-continue" and head.version == "HTTP/1.1":
            connection.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    async def _answer_and_close(self, connection: Connection, answer: bytes) -> None:
        """Answer a request that will not be read to its end (408, 431), then close the
        way every answer closes: a client still sending must get the answer, not a reset."""
        if connection.writer.is_closing():
            return
        with contextlib.suppress(ConnectionError, RuntimeError):
            connection.writer.write(answer)
        await self._lingering_close(connection)

    async def _lingering_close(self, connection: Connection) -> None:
        """Close after the answer has gone out, reading and dropping what the client still
        sends for a moment (a refused body): closing a socket with unread data resets the
        connection, and the client could lose the answer."""
        writer = connection.writer
        try:
            if writer.can_write_eof():
                writer.write_eof()
            deadline = time.monotonic() + LINGER_SECONDS
            dropped = 0
            while dropped < LINGER_BYTES:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                part = await asyncio.wait_for(connection.reader.read(_CHUNK), remaining)
                if not part:
                    break
                dropped += len(part)
        except (ConnectionError, TimeoutError, OSError):
            pass


class BodyReader:
    """A request's body as the handler's ``rfile``: reading all of it at once hands over
    the body itself (a 64 MiB body is not copied again), anything else reads a copy."""

    def __init__(self, body: bytes | bytearray) -> None:
        self.body = body
        self.position = 0

    def read(self, size: int = -1) -> bytes | bytearray:
        end = len(self.body) if size < 0 else min(len(self.body), self.position + size)
        if self.position == 0 and end == len(self.body):
            part = self.body
        else:
            part = bytes(self.body[self.position : end])
        self.position = end
        return part

    def readline(self, size: int = -1) -> bytes:
        end = self.body.find(b"\n", self.position)
        end = len(self.body) if end < 0 else end + 1
        if size >= 0:
            end = min(end, self.position + size)
        part = bytes(self.body[self.position : end])
        self.position = end
        return part


def buffered_request(
    handler_class: type, server: object, head: Head, body: bytes | bytearray, peer: tuple
) -> tuple[bytes, bool]:
    """Run a ``BaseHTTPRequestHandler`` over one complete request held in memory, read by
    ``parse_head`` (the one reading of heads: ``http.server``'s own is not used): the
    response bytes, and whether the connection must close."""
    handler = handler_class.__new__(handler_class)
    handler.server = server
    handler.client_address = peer
    handler.request = None
    handler.rfile = BodyReader(body)
    handler.wfile = io.BytesIO()
    handler.requestline = head.raw.split(b"\n", 1)[0].rstrip(b"\r").decode("latin-1")
    handler.command, handler.path = head.method, head.target
    handler.request_version = head.version or handler.protocol_version
    handler.close_connection = head.close
    message = http.client.HTTPMessage()
    for name, values in head.headers.items():
        for value in values:
            message[name] = value
    handler.headers = message
    try:
        if head.problem is not None:
            handler.send_error(head.problem.status, head.problem.message)
        elif not hasattr(handler, "do_" + head.method):
            handler.send_error(HTTPStatus.NOT_IMPLEMENTED, f"unsupported method {head.method!r}")
        else:
            getattr(handler, "do_" + head.method)()
    except Exception:
        log.exception("request from %s failed", peer[0])
        return (
            response_bytes(
                HTTPStatus.INTERNAL_SERVER_ERROR,
                {"code": "internal error", "message": "request failed"},
            ),
            True,
        )
    return handler.wfile.getvalue(), bool(handler.close_connection)


def query_of(target: str) -> tuple[str, dict[str, list[str]]]:
    url = urlsplit(target)
    return url.path, parse_qs(url.query)
