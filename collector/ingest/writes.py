"""``collector serve``'s write endpoints (``POST /api/v2/write``, ``POST /write``): the
token, the precision, the body, its parse (``collector.ingest.parsing``) and its write
(``collector.ingest.sink``); 204 once stored, 400 naming malformed lines by number, 403
naming what the token may not write, 503 when the store or backend cannot take it now."""

from __future__ import annotations

import logging
import time
from http import HTTPStatus

from collector import lineprotocol
from collector.ingest.http import HttpError
from collector.ingest.requests import CLIENT_GONE, RequestHandler
from collector.lineprotocol import PrecisionError
from collector.store.database import StoreBusy
from netserve.ratelog import RateLimitedLog

log = logging.getLogger("collector.ingest.server")  # one logger name for the whole server
# a write that fails for a lasting cause (a full disk) fails every request alike: its
# traceback once, then one line a minute with the count (before: 3,860 lines in 8 s)
_failed_writes = RateLimitedLog(log)
V2_PRECISIONS = ("ns", "us", "ms", "s")


class WriteEndpoints(RequestHandler):
    """The POST endpoints (``WriteHandler`` dispatches to them)."""

    def _post_write(self, query: dict[str, list[str]], v1: bool) -> None:
        """One write, its failures answered as every write's are."""
        try:
            self._write(query, v1)
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
