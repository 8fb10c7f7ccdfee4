"""``dashboard serve --collector URL``: the dashboard over a remote ``collector serve``.

``RemoteSource`` answers every question the pages ask ``DataSource`` from the collector's
read API (``GET /api/v1/dashboard/<question>``, ``collector.queries.questions``), which
computes the answer with the same query layer from the collector's own store (and keeps
finished runs' answers there). Nothing is computed here but the live charts' one-grid
rule (``DataSource._timeseries``); what a question sends back is bounded (no raw samples
or events).

The token (``--token-file``) goes in the ``Authorization`` header only; it is never
logged or put in a URL.
"""

from __future__ import annotations

import json
import ssl
import threading
import urllib.parse
from contextlib import nullcontext
from typing import Any

from collector.api.client import RemoteError, fetch_view
from collector.api.routes import DASHBOARD
from collector.queries.questions import run_info_of
from collector.store.api import RunInfo
from dashboard.source import DEFAULT_MAX_POINTS, DataSource, Timeseries


class RemoteSource(DataSource):
    """A ``DataSource`` whose store is a remote collector's read API."""

    def __init__(
        self,
        url: str,
        token: str | None,
        max_points: int = DEFAULT_MAX_POINTS,
        tls: ssl.SSLContext | None = None,  # https: the collector verified with it
    ) -> None:
        # no local store: every question goes to the collector (its RunCache keeps
        # finished runs' answers), so nothing is prepared or completed here
        self.url = url.rstrip("/")
        self.token = token
        self.tls = tls
        self.max_points = max_points
        self.complete_ahead = False
        self._background: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self.prepared: frozenset[str] = frozenset()

    def ask(self, question: str, **params: Any) -> Any:
        """The collector's JSON answer to one question; ``RemoteError`` as the client says."""
        query = {name: str(value) for name, value in params.items() if value is not None}
        return json.loads(fetch_view(self.url, DASHBOARD + question, query, self.token, self.tls))

    def check(self) -> None:
        """One question, so that a wrong URL or token is said at start, not on every page."""
        self.ask("runs")

    def request(self):  # type: ignore[override]
        return nullcontext()

    def close(self) -> None:
        """Nothing to close (one HTTP request per question)."""

    # -- runs ------------------------------------------------------------------------------
    def runs(self) -> list[dict[str, Any]]:
        return self.ask("runs")

    def run(self, run_id: str) -> dict[str, Any] | None:
        return self.ask("run", run_id=run_id)

    def run_info(self, run_id: str) -> RunInfo | None:
        found = self.ask("run_info", run_id=run_id)
        return None if found is None else run_info_of(found)

    def prepare(self, run_id: str) -> bool:
        return False  # the collector keeps finished runs' answers itself

    def start_preparing(self, newest: int, every_s: float = 30.0) -> threading.Event:
        return threading.Event()

    def forget(self, timeout: float = 60.0) -> None:
        pass

    # -- one run ---------------------------------------------------------------------------
    def complete_in_background(self, run_id: str) -> None:
        pass

    def _series(
        self,
        run_id: str,
        bucket_ns: int | None = None,
        since: dict[str, int] | None = None,
    ) -> dict[str, dict[str, Any]]:
        return self.ask(
            "timeseries",
            run_id=run_id,
            max_points=self.max_points,
            bucket_ns=bucket_ns,
            since=json.dumps(since, separators=(",", ":")) if since else None,
        )

    def _timeseries(self, run_id: str, live: bool) -> Timeseries:
        charts = _charts(self._series(run_id))
        buckets = {series["bucket_ns"] for series in charts.hosts.values()}
        if live and len(buckets) > 1:  # one grid for every host (DataSource._timeseries)
            bucket = max(buckets)
            charts = _charts(self._series(run_id, bucket_ns=bucket), bucket)
        return charts

    def timeseries_since(self, run_id: str, since: dict[str, int], bucket_ns: int) -> Timeseries:
        return _charts(self._series(run_id, bucket_ns=bucket_ns, since=since), bucket_ns)

    def boundaries(self, run_id: str) -> dict[str, list[dict[str, Any]]]:
        return self.ask("boundaries", run_id=run_id)

    def epochs(self, run_id: str) -> list[dict[str, Any]]:
        return self.ask("epochs", run_id=run_id)

    def rank_parts(self, run_id: str) -> list[dict[str, Any]]:
        return self.ask("rank_parts", run_id=run_id)

    def steps_after(self, run_id: str, since_ns: int | None) -> int:
        return int(self.ask("steps_after", run_id=run_id, since_ns=since_ns))

    def step_shares(self, run_id: str) -> dict[str, list[dict[str, Any]]]:
        return self.ask("step_shares", run_id=run_id, max_points=self.max_points)

    def findings(self, run_id: str) -> list[dict[str, Any]]:
        return self.ask("findings", run_id=run_id)

    def kept_findings(self, run_id: str) -> list[dict[str, Any]] | None:
        return self.ask("kept_findings", run_id=run_id)

    # -- all runs --------------------------------------------------------------------------
    def scaling(self) -> list[dict[str, Any]]:
        return self.ask("scaling")

    def forecast(self, run_id: str) -> dict[str, Any] | None:
        return self.ask("forecast", run_id=run_id)

    def inference_runs(self) -> list[dict[str, Any]]:
        return self.ask("inference_runs")

    def inference(self, run_id: str) -> dict[str, Any] | None:
        return self.ask("inference", run_id=run_id)


def _charts(hosts: dict[str, dict[str, Any]], bucket_ns: int | None = None) -> Timeseries:
    hosts = dict(sorted(hosts.items()))
    if bucket_ns is None:
        bucket_ns = max((s["bucket_ns"] for s in hosts.values()), default=0)
    return Timeseries(bucket_ns=bucket_ns, hosts=hosts)


def shown_url(url: str) -> str:
    """The URL without any user:password part, for messages and logs."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


__all__ = ["RemoteError", "RemoteSource", "shown_url"]
