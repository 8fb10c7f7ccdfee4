"""VictoriaMetrics as the scale-out sample store (``--backend victoriametrics=URL``).

Writes: ``collector serve`` still parses every body (to answer 400 per line, and to keep
workload events), stores the workload events in its SQLite file first (``events`` table,
where runs and epochs are listed from: a training's events never wait on VictoriaMetrics),
then forwards the valid lines to VictoriaMetrics' InfluxDB endpoint (``/write``). Bodies
of numeric lines with timestamps go as they came; any other body is re-encoded from what
was parsed, numeric fields only (VictoriaMetrics would store a string field as a 0 series)
and with the server time made explicit. The events' numeric fields (``workload_epoch``,
``workload_images``, ...) go along; nothing reads them from there.

While VictoriaMetrics does not take writes, bodies with samples are answered 503 (the
agents keep them and send them again; their events are already kept, and a re-sent event
replaces itself); an events-only body is answered 204 once its events are in SQLite. The
:class:`Forwarder` logs the outage once when it starts and once when it ends, and
``/health`` fails while it lasts.

Duplicates: a body VictoriaMetrics took whose answer never reached the agent (the collector
restarted in between) is sent again, and VictoriaMetrics keeps both copies of each sample
unless started with ``-dedup.minScrapeInterval=1ms`` (one sample per series and
millisecond; docs/scale-out.md). Reads keep one sample per timestamp either way.

Reads (:class:`VictoriaMetricsStore`, a ``ReadStore`` built on
``collector.store.promql.PromqlStore``): VictoriaMetrics names an InfluxDB field
``<measurement>_<field>`` and keeps tags as labels, with ms timestamps (it trims ns).

* ``list_series``: ``/api/v1/series`` for that metric name (and host).
* ``read_series``: ``/api/v1/export`` (raw samples) over the range widened by
  ``EXPORT_MARGIN_MS`` on each side, one request per metric name; the nearest samples
  beyond the range, when not within the margin, come from MetricsQL
  ``tlast_over_time``/``last_over_time`` (and ``tfirst_``/``first_over_time``) instant
  queries over ``NEIGHBOUR_WINDOW``.
* ``hosts``, ``runs``, ``events``: the ``host`` label values plus the local events store.

Caveat: ``cpu_user_seconds`` may equally be measurement ``cpu_user``, field ``seconds``;
the schema has no such pair, so ``list_series`` trusts the name.
"""

from __future__ import annotations

import json
import logging
import threading
import time

import numpy as np

from collector.lineprotocol import ParsedBody
from collector.store.api import SeriesInfo
from collector.store.promql import (
    BackendError,
    HttpClient,
    PromqlStore,
    Samples,
    host_selector,
    seconds,
    series_id,
)
from contract.point import Point, encode_line

__all__ = ["BackendError", "Forwarder", "VictoriaMetricsStore", "series_id"]

log = logging.getLogger("collector.store.victoriametrics")
HEALTH_TIMEOUT_SECONDS = 2.0

EXPORT_MARGIN_MS = 10 * 60 * 1000
NEIGHBOUR_WINDOW = "30d"  # VictoriaMetrics' default export limit is 30 days
# our precision names -> what VictoriaMetrics' /write understands
_VM_PRECISION = {
    "ns": "ns",
    "n": "ns",
    "us": "u",
    "u": "u",
    "ms": "ms",
    "s": "s",
    "m": "m",
    "h": "h",
}


class Forwarder:
    """The write side: parsed bodies to VictoriaMetrics' InfluxDB endpoint."""

    def __init__(self, url: str, authorization: str | None = None) -> None:
        self.url = url
        self.http = HttpClient(url, "victoriametrics", authorization=authorization)
        self.probe = HttpClient(
            url, "victoriametrics", timeout=HEALTH_TIMEOUT_SECONDS, authorization=authorization
        )
        self._state_lock = threading.Lock()
        self.down_since: float | None = None  # monotonic time of the first failed write
        self.refused_writes = 0  # writes not forwarded during the present outage

    def forward(self, parsed: ParsedBody, body: bytes | None, precision: str) -> None:
        """Send the body's numeric lines; ``BackendError`` when VictoriaMetrics does not
        take them (the outage is logged once, not per write)."""
        try:
            self._forward(parsed, body, precision)
        except BackendError as error:
            self._failed(str(error))
            raise
        self._succeeded()

    def _failed(self, reason: str) -> None:
        with self._state_lock:
            self.refused_writes += 1
            if self.down_since is not None:
                return
            self.down_since = time.monotonic()
        log.error(
            "victoriametrics at %s does not take writes (%s): writes with samples are "
            "answered 503 and kept by the agents until it is back; events are kept here",
            self.url,
            reason,
        )

    def _succeeded(self) -> None:
        with self._state_lock:
            if self.down_since is None:
                return
            seconds, refused = time.monotonic() - self.down_since, self.refused_writes
            self.down_since, self.refused_writes = None, 0
        log.warning(
            "victoriametrics at %s takes writes again after %.1f s (%d writes not forwarded "
            "meanwhile)",
            self.url,
            seconds,
            refused,
        )

    def health(self) -> list[str]:
        """Why VictoriaMetrics cannot take writes now (its ``/health``, asked with a short
        timeout), or nothing."""
        try:
            status, reply = self.probe.request("GET", "/health")
        except BackendError as error:
            return [str(error)]
        if status != 200:
            return [self.http.refusal("/health", status, reply)]
        return []

    def duplicates_kept(self) -> bool | None:
        """Whether VictoriaMetrics keeps a re-sent sample twice: True when its ``/flags``
        lack a ``-dedup.minScrapeInterval``, None when it cannot tell (down, a proxy)."""
        try:
            status, reply = self.probe.request("GET", "/flags")
        except BackendError:
            return None
        if status != 200:
            return None
        for line in reply.decode("utf-8", "replace").splitlines():
            name, _, value = line.partition("=")
            if name.strip() == "-dedup.minScrapeInterval":
                return value.strip().strip('"') in ("", "0", "0s", "0ms")
        return True

    def warn_if_duplicates_kept(self) -> None:
        """Log once (at start) when a re-sent batch would be stored twice."""
        if self.duplicates_kept():
            log.warning(
                "victoriametrics at %s runs without -dedup.minScrapeInterval: a batch it "
                "took whose answer was lost (a collector restart) is re-sent and each of "
                "its samples stored twice; start it with -dedup.minScrapeInterval=1ms",
                self.url,
            )

    def _forward(self, parsed: ParsedBody, body: bytes | None, precision: str) -> None:
        # body None: some lines were left out (a token's scope), so what is left is encoded
        if body is None or parsed.errors or parsed.untimed_lines or parsed.events or b'"' in body:
            payload = _encode_numeric(parsed).encode("utf-8")
            precision = "ns"
        else:
            payload = body
        if not payload.strip():
            return
        status, reply = self.http.request(
            "POST",
            f"/write?precision={_VM_PRECISION.get(precision, 'ns')}",
            payload,
            {"Content-Type": "text/plain; charset=utf-8"},
        )
        if status in (401, 403):
            raise BackendError(self.http.refusal("/write", status, reply))
        if status != 204:
            raise BackendError(f"victoriametrics refused a write: HTTP {status}: {reply[:300]!r}")

    def flush(self) -> None:
        """Make what was written searchable now (tests; VictoriaMetrics flushes every ~1 s)."""
        self.http.request("GET", "/internal/force_flush")


def _encode_numeric(parsed: ParsedBody) -> str:
    lines = []
    for group in parsed.groups:
        tags = group.tags
        values = group.values
        for column, time_ns in enumerate(group.times_ns.tolist()):
            fields = dict(zip(group.fields, values[:, column].tolist(), strict=True))
            lines.append(encode_line(Point(group.measurement, tags, fields, time_ns)))
    for event in parsed.events:
        numeric = {k: v for k, v in event.fields.items() if not isinstance(v, str)}
        lines.append(encode_line(Point(event.measurement, event.tags, numeric, event.time_ns)))
    return "\n".join(line for line in lines if line)


class VictoriaMetricsStore(PromqlStore):
    """``ReadStore`` over VictoriaMetrics: InfluxDB field ``f`` of ``m`` is ``m_f``."""

    backend = "victoriametrics"

    def metric_name(self, measurement: str, field: str) -> str | None:
        return f"{measurement}_{field}"

    def _fetch(
        self, name: str, infos: list[SeriesInfo], start_ms: int, end_ms: int
    ) -> dict[int, Samples]:
        reply = self.http.form(
            "/api/v1/export",
            [
                ("match[]", host_selector(name, (info.host for info in infos))),
                ("start", seconds(max(start_ms - EXPORT_MARGIN_MS, 1))),
                ("end", seconds(end_ms + EXPORT_MARGIN_MS)),
            ],
        )
        items = []
        for line in reply.splitlines():
            if line.strip():
                item = json.loads(line)
                times = np.asarray(item["timestamps"], dtype=np.int64)
                values = np.asarray(item["values"], dtype=np.float64)
                items.append((item["metric"], (times, values)))
        return self.collect(name, items, {info.series_id for info in infos})

    def _neighbours(
        self, name: str, infos: list[SeriesInfo], start_ms: int, end_ms: int, before: bool
    ) -> dict[int, tuple[int, float]]:
        """The nearest sample before start (after end) beyond the export margin, by
        MetricsQL ``tlast_over_time``/``last_over_time`` (``tfirst_``/``first_``) instant
        queries over ``NEIGHBOUR_WINDOW``."""
        if before:
            at_ms = max(start_ms - EXPORT_MARGIN_MS - 1, 1)
            functions = ("tlast_over_time", "last_over_time")
        else:
            at_ms = end_ms + EXPORT_MARGIN_MS + 30 * 86_400_000
            functions = ("tfirst_over_time", "first_over_time")
        wanted = {info.series_id for info in infos}
        stamps = self._instant(functions[0], name, infos, at_ms, wanted)
        values = self._instant(functions[1], name, infos, at_ms, wanted)
        found = {}
        for key, stamp in stamps.items():
            stamp_ms = round(stamp * 1000)
            beyond = stamp_ms < start_ms if before else stamp_ms > end_ms
            if beyond and key in values:
                found[key] = (stamp_ms, values[key])
        return found

    def _instant(
        self, function: str, name: str, infos: list[SeriesInfo], at_ms: int, wanted: set[int]
    ) -> dict[int, float]:
        hosts = (info.host for info in infos)
        query = f"{function}({host_selector(name, hosts)}[{NEIGHBOUR_WINDOW}])"
        found = {}
        for item in self.http.query(query, at_ms):
            key = self.key(name, item["metric"])
            if key in wanted:
                found[key] = float(item["value"][1])
        return found

    def flush(self) -> None:
        """Make recent writes searchable now (VictoriaMetrics buffers them ~1 s)."""
        status, _ = self.http.request("GET", "/internal/force_flush")
        if status != 200:
            raise BackendError(f"victoriametrics force_flush: HTTP {status}")
