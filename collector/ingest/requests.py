"""What every request of ``collector serve`` shares: the HTTP handler over a request's
bytes in memory (``collector.ingest.connections`` reads and writes the sockets), the token
that identifies it, its body (length, chunked, gzip, the size limit), its answer (InfluxDB's
headers, JSON errors) and logging that never shows a token."""

from __future__ import annotations

import json
import logging
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from collector.ingest.http import HttpError, _gunzip, parse_chunk_size, parse_content_length
from collector.ingest.scopes import offered_tokens
from netserve.tokens import Identity

if TYPE_CHECKING:
    from collector.ingest.server import CollectorServer

log = logging.getLogger("collector.ingest.server")  # one logger name for the whole server
VERSION = "2.7.0-epochscope"  # what /ping and /health report; clients only check it exists


# A client that hangs up, resets or stalls is collector.ingest.connections' business (one debug
# line); a handler reads bytes in memory, so only a backend can raise these inside it.
CLIENT_GONE = (ConnectionError, TimeoutError)


class RequestHandler(BaseHTTPRequestHandler):
    """The parts of a request the read and write endpoints share."""

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
