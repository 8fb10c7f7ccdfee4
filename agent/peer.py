"""A measured peer throughput: TCP from this node to a small receiver on another.

``agent ceilings --serve-peer`` on one node runs ``serve``: it takes one connection at a
time, reads what the sender sends (bounded in seconds and bytes per connection, and the
whole server in its own lifetime), and answers with what it received and over how long.
``agent ceilings --peer HOST[:PORT]`` on another runs ``measure``: it sends for a few
seconds and takes the *receiver's* count, so that nothing sitting in the send buffers
flatters the rate. The first ``WARMUP_SECONDS`` of the transfer (TCP's slow start, a token
bucket's burst) are left out where the transfer lasted long enough.

The wire: the sender writes ``MAGIC`` then any bytes, and shuts its side down; the receiver
answers ``REPLY`` (bytes counted, nanoseconds they took). Anything else is closed unread.
One stream: a Python sender fills a link up to a few GB/s; faster links need iperf3 -P.
"""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

MAGIC = b"ESPEER1\n"
REPLY = struct.Struct("!QQ")  # bytes counted, nanoseconds
DEFAULT_PORT = 5291
CHUNK = 1 << 20
WARMUP_SECONDS = 0.5
MAX_CONNECTION_SECONDS = 60.0
MAX_CONNECTION_BYTES = 64 << 30
MAX_SEND_SECONDS = 30.0  # the sender stays well inside the receiver's bound


@dataclass(frozen=True)
class Received:
    """What the receiver counted: after the warm-up when the transfer outlasted it."""

    bytes: int
    seconds: float

    @property
    def bytes_per_second(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0


def parse_peer(text: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """``HOST``, ``HOST:PORT`` or ``[V6]:PORT`` -> (host, port); ValueError otherwise."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest.removeprefix(":") if rest.startswith(":") else ""
        if rest and not rest.startswith(":"):
            raise ValueError(f"not HOST[:PORT]: {text!r}")
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, ""  # a bare name, or an IPv6 address without a port
    if not host:
        raise ValueError(f"no host in {text!r}")
    port = int(port_text) if port_text else default_port
    if not 0 < port < 65536:
        raise ValueError(f"port {port} out of range")
    return host, port


def _receive(connection: socket.socket, max_seconds: float, max_bytes: int) -> Received | None:
    """Count one sender's bytes; None when it did not start with ``MAGIC``."""
    connection.settimeout(max_seconds)
    head = b""
    while len(head) < len(MAGIC):
        part = connection.recv(len(MAGIC) - len(head))
        if not part:
            return None
        head += part
    if head != MAGIC:
        return None
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    total = 0
    first = last = mark = 0.0
    mark_bytes = 0
    while total < max_bytes:
        got = connection.recv_into(view)
        now = time.perf_counter()
        if not got:
            break
        if total == 0:
            first = mark = now
        total += got
        last = now
        if mark == first and now - first >= WARMUP_SECONDS:
            mark, mark_bytes = now, total
        if now - first > max_seconds:
            break
    if mark > first and last - mark > 0:  # outlasted the warm-up: leave it out
        return Received(total - mark_bytes, last - mark)
    return Received(total, last - first)


def serve(
    bind: str,
    port: int,
    lifetime_seconds: float,
    max_seconds: float = MAX_CONNECTION_SECONDS,
    max_bytes: int = MAX_CONNECTION_BYTES,
    ready: Callable[[str, int], None] | None = None,
    max_transfers: int | None = None,
) -> int:
    """Receive senders one at a time until ``lifetime_seconds`` have passed, or until
    ``max_transfers`` were measured; the number of transfers measured."""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    measured = 0
    with socket.socket(family, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((bind, port))
        listener.listen(1)
        address, bound_port = listener.getsockname()[:2]
        if ready is not None:
            ready(address, bound_port)
        deadline = time.monotonic() + lifetime_seconds
        while (left := deadline - time.monotonic()) > 0:
            if max_transfers is not None and measured >= max_transfers:
                break
            listener.settimeout(left)
            try:
                connection, sender = listener.accept()
            except TimeoutError:
                break
            with connection:
                try:
                    received = _receive(connection, max_seconds, max_bytes)
                    if received is None:
                        log.warning("peer: %s did not speak the protocol; closed", sender[0])
                        continue
                    connection.sendall(REPLY.pack(received.bytes, int(received.seconds * 1e9)))
                except OSError as error:
                    log.warning("peer: %s: %s", sender[0], error)
                    continue
            measured += 1
            log.info("peer: %s sent %.1f MB/s", sender[0], received.bytes_per_second / 1e6)
    return measured


def _read_exactly(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        part = connection.recv(size - len(data))
        if not part:
            raise ConnectionError("the receiver closed without its count")
        data += part
    return data


def measure(host: str, port: int, seconds: float) -> Received:
    """Send to the receiver at ``host:port`` for ``seconds`` (at most ``MAX_SEND_SECONDS``)
    and return what it counted; OSError when it cannot be reached or answers nothing."""
    seconds = min(seconds, MAX_SEND_SECONDS)
    payload = bytes(CHUNK)
    with socket.create_connection((host, port), timeout=seconds + 30) as connection:
        connection.sendall(MAGIC)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            connection.sendall(payload)
        connection.shutdown(socket.SHUT_WR)
        count, nanoseconds = REPLY.unpack(_read_exactly(connection, REPLY.size))
    return Received(count, nanoseconds / 1e9)
