"""``collector serve``'s read side: ``/ping``, ``/health``, ``/ready``, the read API
(``/api/v1/...``, collector.api.server) and ``/metrics`` (the live findings), behind a read
token and the read gate (so many built at once, so many waiting, then 503 with
Retry-After: writes keep their CPU)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from http import HTTPStatus

from collector.api import server as read_api
from collector.export.findings_metrics import CONTENT_TYPE as FINDINGS_CONTENT_TYPE
from collector.ingest.http import HttpError
from collector.ingest.requests import CLIENT_GONE, VERSION, RequestHandler
from collector.store.victoriametrics import BackendError
from netserve.tokens import Scope

log = logging.getLogger("collector.ingest.server")  # one logger name for the whole server


class ReadEndpoints(RequestHandler):
    """The GET and HEAD endpoints (``WriteHandler`` dispatches to them)."""

    def _ready(self) -> None:
        up = time.monotonic() - self.server.started_monotonic
        started = self.server.started.isoformat(timespec="microseconds")
        self._send_json(
            HTTPStatus.OK,
            {"status": "ready", "started": started.replace("+00:00", "Z"), "up": f"{up:.3f}s"},
        )

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
