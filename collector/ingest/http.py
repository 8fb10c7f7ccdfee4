"""HTTP/1.1 framing the collector checks itself: error answers, Content-Length, chunk
sizes and gzip bodies (RFC 9110, 9112, 1952)."""

from __future__ import annotations

import re
import zlib
from http import HTTPStatus


class HttpError(Exception):
    """An error answer: status, InfluxDB error code and message."""

    def __init__(self, status: int, code: str, message: str, close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.close = close  # the body was not read: the connection cannot be reused


_DIGITS = re.compile(rb"[0-9]{1,18}")
_HEX_DIGITS = re.compile(rb"[0-9A-Fa-f]{1,15}")


def parse_content_length(values: list[str]) -> int:
    """The body length from the Content-Length header(s), as RFC 9110 spells it: digits
    only (optional blanks around). ``+19``, ``1_9``, ``-1``, ``0x13``, ``1 9``: 400, as is
    a missing header or several that disagree (request smuggling)."""
    if not values:
        raise HttpError(
            HTTPStatus.LENGTH_REQUIRED,
            "invalid",
            "Content-Length or chunked transfer encoding required",
            close=True,
        )
    lengths = set()
    for value in values:
        text = value.strip(" \t").encode("latin-1", "replace")
        if not _DIGITS.fullmatch(text):
            raise HttpError(
                HTTPStatus.BAD_REQUEST,
                "invalid",
                f"bad Content-Length {value[:40]!r}: expected a number of bytes (digits only)",
                close=True,
            )
        lengths.add(int(text))
    if len(lengths) > 1:
        raise HttpError(
            HTTPStatus.BAD_REQUEST,
            "invalid",
            "several different Content-Length headers",
            close=True,
        )
    return lengths.pop()


def parse_chunk_size(line: bytes) -> int:
    """The size of a chunk from its size line (hex digits, optional ``;extensions``).

    Python's ``int(x, 16)`` would take ``-1`` (read until the client closes), ``+5``,
    ``1_0`` and ``0x10``; HTTP allows hex digits only."""
    if not line.endswith(b"\n"):
        raise HttpError(
            HTTPStatus.BAD_REQUEST, "invalid", "bad chunked encoding: size line cut", close=True
        )
    token = line.split(b";", 1)[0].strip(b" \t\r\n")
    if not _HEX_DIGITS.fullmatch(token):
        raise HttpError(
            HTTPStatus.BAD_REQUEST,
            "invalid",
            f"bad chunked encoding: chunk size {token[:20].decode('latin-1')!r} "
            "is not a hexadecimal number",
            close=True,
        )
    return int(token, 16)


_GZIP_MAGIC = b"\x1f\x8b"
_FIRST_PIECE = 64  # bytes a member's inflater is first given; doubled for each further piece


def _gunzip(raw: bytes, limit: int, too_large: HttpError) -> bytes:
    """Inflate a gzip body completely and exactly, or refuse it (400) whole.

    Several members one after the other are all decoded, as gzip readers do (RFC 1952
    2.2). A body that ends inside a member (truncated), holds garbage, or has bytes after
    its last member that are not another member is refused: nothing of it is stored.
    Inflating stops as soon as the output grows past ``limit`` (gzip bombs).

    Linear in the body: each member's inflater is fed from a view of the body in pieces
    that start small and double, so what it hands back past its member's end
    (``unused_data``, a copy) is at most about the member's own size. Fed the whole rest
    of the body, as before, a body of many tiny members cost a copy of the rest per member
    (quadratic: 4 MiB of empty members took 40 s, and their empty output never reached
    ``limit``).
    """
    if not raw:
        return b""
    out = bytearray()
    view = memoryview(raw)
    size = len(raw)
    position = 0
    member = 0
    while position < size:
        member += 1
        if view[position : position + 2] != _GZIP_MAGIC:
            raise HttpError(
                HTTPStatus.BAD_REQUEST,
                "invalid",
                f"bad gzip body: {size - position} bytes after gzip member {member - 1} "
                "that are not a gzip member"
                if member > 1
                else "bad gzip body: it does not start with the gzip header",
                close=True,
            )
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        piece = _FIRST_PIECE
        while not inflater.eof:
            if position >= size:
                raise HttpError(
                    HTTPStatus.BAD_REQUEST,
                    "invalid",
                    f"bad gzip body: member {member} is truncated "
                    f"(the body ends before the gzip stream does; {size} bytes received)",
                    close=True,
                )
            given = view[position : position + piece]
            try:
                chunk = inflater.decompress(given, limit + 1 - len(out))
            except zlib.error as error:
                raise HttpError(
                    HTTPStatus.BAD_REQUEST,
                    "invalid",
                    f"bad gzip body: member {member}: {error}",
                    close=True,
                ) from None
            out += chunk
            if len(out) > limit or inflater.unconsumed_tail:
                raise too_large
            position += len(given) - len(inflater.unused_data)
            piece *= 2
    return bytes(out)
