"""Slow HTTP clients over real loopback sockets, for the servers' limit tests."""

from __future__ import annotations

import select
import socket
import time

ENDLESS_HEAD = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "  # then "a" for ever


def read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def trickle_head(port: int, gap: float, give_up: float = 60.0) -> tuple[bytes, float]:
    """Send a request head that never ends, a byte every ``gap`` seconds, until the server
    answers or closes; (what it answered, seconds from the connect to that). A timeout per
    read longer than ``gap`` never stops such a client: only a deadline for the whole head
    does."""
    with socket.create_connection(("127.0.0.1", port), timeout=give_up) as sock:
        started = time.monotonic()
        sent = 0
        while time.monotonic() - started < give_up:
            readable, _, _ = select.select([sock], [], [], gap)
            if readable:
                reply = read_until_closed(sock)
                return reply, time.monotonic() - started
            byte = ENDLESS_HEAD[sent : sent + 1] or b"a"
            try:
                sock.sendall(byte)
            except (BrokenPipeError, ConnectionResetError):
                return read_until_closed(sock), time.monotonic() - started
            sent += 1
        raise AssertionError(f"the server kept a trickling client for {give_up} s")


def silent_client(port: int, give_up: float = 60.0) -> tuple[bytes, float]:
    """Connect and send nothing; (what the server sent, seconds until it closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=give_up) as sock:
        started = time.monotonic()
        return read_until_closed(sock), time.monotonic() - started
