"""HTTP/1.1 framing the collector checks itself: request heads, error answers,
Content-Length, chunk sizes and gzip bodies (RFC 9110, 9112, 1952)."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from http import HTTPStatus


class HttpError(Exception):
    """An error answer: status, InfluxDB error code and message."""

    def __init__(self, status: int, code: str, message: str, close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.close = close  # the body was not read: the connection cannot be reused


@dataclass
class Head:
    """A request head as ``parse_head`` read it: what the connection's loop frames the body
    by and what the handler answers, the same reading for both."""

    raw: bytes
    method: str
    target: str
    version: str
    headers: dict[str, list[str]]  # lower-case name -> values, in order
    close: bool = True  # the connection closes after the answer
    problem: HttpError | None = None  # the head is refused: the answer, no body read

    def one(self, name: str) -> str | None:
        values = self.headers.get(name)
        return values[0] if values else None


MAX_HEADER_LINES = 100
HTTP2_PREFACE = "PRI * HTTP/2.0"  # its first line (RFC 9113 3.4)
_VERSION = re.compile(r"HTTP/([0-9]{1,9})\.([0-9]{1,9})")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 5.6.2


def _refused(status: int, message: str) -> HttpError:
    code = "not implemented" if status == HTTPStatus.NOT_IMPLEMENTED else "invalid"
    return HttpError(status, code, message, close=True)


def parse_head(raw: bytes) -> Head:
    """The one reading of a request head (RFC 9112 2 to 5), taken by the connection's loop
    (how to frame the body, whether to read it) and by the handler (what to answer).

    Two readers disagreed before: ``http.server`` turned ``//api/v2/write`` into
    ``/api/v2/write`` while the loop did not (the body went unread: "body truncated"), took
    ``Transfer-Encoding :`` for no header (411), and stopped reading headers at a line
    without a colon (``Connection: close`` after it was lost). Here a header name followed
    by blanks, a line without a colon, a folded line, a name that is no token: 400 for the
    whole request; versions 2 and up 505; HTTP/0.9 (no version) 400.
    """
    lines = [line.removesuffix(b"\r").decode("latin-1") for line in raw.split(b"\n")]
    request_line = lines[0]
    words = request_line.split()
    method, target = (words[0], words[1]) if len(words) >= 2 else ("", "")
    version = words[2] if len(words) == 3 else ""
    head = Head(raw, method, target, version, {})
    if request_line == HTTP2_PREFACE:
        head.problem = _refused(
            HTTPStatus.BAD_REQUEST,
            "this is the HTTP/2 connection preface: the collector speaks HTTP/1.1 only",
        )
        return head
    if len(words) != 3:
        head.problem = _refused(
            HTTPStatus.BAD_REQUEST,
            f"bad request line {request_line[:80]!r}: expected METHOD TARGET HTTP/1.1",
        )
        return head
    match = _VERSION.fullmatch(version)
    if match is None:
        head.problem = _refused(HTTPStatus.BAD_REQUEST, f"bad request version {version[:20]!r}")
        return head
    major, minor = int(match[1]), int(match[2])
    if major != 1:
        head.problem = _refused(
            HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, f"HTTP version {version[:20]} not supported"
        )
        return head
    headers = head.headers
    for number, line in enumerate(lines[1:], 2):
        if not line:
            break
        if number - 1 > MAX_HEADER_LINES:
            head.problem = _refused(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                f"more than {MAX_HEADER_LINES} headers",
            )
            return head
        name, colon, value = line.partition(":")
        problem = None
        if line[0] in " \t":
            problem = "a folded header line (obsolete line folding)"
        elif not colon:
            problem = "a header line without a colon"
        elif name != name.rstrip(" \t"):
            problem = "blanks between a header name and its colon"
        elif not _TOKEN.fullmatch(name):
            problem = "a header name that is not a token"
        if problem:
            head.problem = _refused(
                HTTPStatus.BAD_REQUEST, f"bad request head: line {number} is {problem}"
            )
            return head
        headers.setdefault(name.lower(), []).append(value.strip(" \t"))
    options = {
        option.strip().lower()
        for value in headers.get("connection", [])
        for option in value.split(",")
    }
    head.close = "close" in options or (minor == 0 and "keep-alive" not in options)
    return head


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
# Members one body may hold. One writer sends one (the agent, Telegraf, influx clients);
# a few concatenated files are fine; 4 MiB of empty 20-byte members are 200,000 inflaters.
MAX_GZIP_MEMBERS = 1024


def _gunzip(raw: bytes, limit: int, too_large: HttpError) -> bytes:
    """Inflate a gzip body completely and exactly, or refuse it (400) whole.

    Several members one after the other are all decoded, as gzip readers do (RFC 1952
    2.2). A body that ends inside a member (truncated), holds garbage, or has bytes after
    its last member that are not another member is refused: nothing of it is stored.
    Inflating stops as soon as the output grows past ``limit`` (gzip bombs), and at
    member ``MAX_GZIP_MEMBERS + 1``.

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
        if member > MAX_GZIP_MEMBERS:
            raise HttpError(
                HTTPStatus.BAD_REQUEST,
                "invalid",
                f"bad gzip body: more than {MAX_GZIP_MEMBERS} gzip members "
                "(send one member, or a few concatenated)",
                close=True,
            )
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
