"""Small helpers for tests that talk to real servers on 127.0.0.1."""

from __future__ import annotations

import http.client
import socket


def free_port() -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_request(
    port: int, method: str, path: str, body: bytes | None = None, timeout: float = 30
) -> tuple[int, bytes]:
    """One request to ``127.0.0.1:port``: (status, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def http_get(port: int, path: str) -> tuple[int, bytes]:
    return http_request(port, "GET", path)


def http_post(port: int, path: str, body: bytes) -> tuple[int, bytes]:
    return http_request(port, "POST", path, body)
