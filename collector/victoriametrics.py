"""VictoriaMetrics as the scale-out sample store (``--backend victoriametrics=URL``).

Writes: ``collector serve`` still parses every body (to answer 400 per line, and to keep
workload events), then forwards the valid lines to VictoriaMetrics' InfluxDB endpoint
(``/write``). Bodies of numeric lines with timestamps go as they came; any other body is
re-encoded from what was parsed, numeric fields only (VictoriaMetrics would store a string
field as a 0 series) and with the server time made explicit. Workload events go there too
(their numeric fields: ``workload_epoch``, ``workload_images``, ...) and also into the local
SQLite ``events`` table, where runs and epochs are listed from.

Reads (:class:`VictoriaMetricsStore`, a ``ReadStore``): VictoriaMetrics names an InfluxDB
field ``<measurement>_<field>`` and keeps tags as labels, with ms timestamps (it trims ns).

* ``list_series``: ``/api/v1/series`` for that metric name (and host).
* ``read_series``: ``/api/v1/export`` (raw samples) over the range widened by
  ``EXPORT_MARGIN_MS`` on each side, one request per metric name; the nearest samples
  beyond the range, when not within the margin, come from MetricsQL
  ``tlast_over_time``/``last_over_time`` (and ``tfirst_``/``first_over_time``) instant
  queries over ``NEIGHBOUR_WINDOW``.
* ``hosts``, ``runs``, ``events``: the ``host`` label values plus the local events store.

A series id is a stable 63-bit hash of the metric name and labels, the same in every
process. Caveat: ``cpu_user_seconds`` may equally be measurement ``cpu_user``, field
``seconds``; the schema has no such pair, so ``list_series`` trusts the name.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import threading
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import numpy as np

from agent.point import Point, encode_line
from agent.schema import Tag
from collector.lineprotocol import ParsedBody
from collector.store import SqliteStore
from collector.store_api import RunInfo, SeriesData, SeriesInfo, WorkloadEvent

EXPORT_MARGIN_MS = 10 * 60 * 1000
NEIGHBOUR_WINDOW = "30d"  # VictoriaMetrics' default export limit is 30 days
_FAR_FUTURE_S = 4_102_444_800  # 2100-01-01: the end of "all time" for /api/v1/series
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


class BackendError(RuntimeError):
    """VictoriaMetrics did not take a write or answer a query."""


def parse_backend(spec: str) -> str:
    """The URL of ``victoriametrics=URL``."""
    kind, _, url = spec.partition("=")
    if kind != "victoriametrics" or not url.startswith(("http://", "https://")):
        raise SystemExit(
            f"collector: --backend wants victoriametrics=http://HOST:PORT, not {spec!r}"
        )
    return url.rstrip("/")


class _Http:
    """Keep-alive connections to one base URL, one per thread."""

    def __init__(self, url: str, timeout: float = 60.0) -> None:
        parts = urlsplit(url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            factory = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
            conn = self._local.conn = factory(self.host, self.port, timeout=self.timeout)
        return conn

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict | None = None
    ) -> tuple[int, bytes]:
        for attempt in (1, 2):  # a kept-alive connection may have been closed meanwhile
            conn = self._connection()
            try:
                conn.request(method, self.prefix + path, body=body, headers=headers or {})
                response = conn.getresponse()
                return response.status, response.read()
            except (OSError, http.client.HTTPException) as error:
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise BackendError(
                        f"victoriametrics: {type(error).__name__}: {error}"
                    ) from error
        raise AssertionError("unreachable")

    def form(self, path: str, fields: list[tuple[str, str]]) -> bytes:
        """POST a form (many ``match[]`` do not fit in a URL); the body of a 200."""
        status, reply = self.request(
            "POST",
            path,
            urlencode(fields).encode(),
            {"Content-Type": "application/x-www-form-urlencoded"},
        )
        if status != 200:
            raise BackendError(f"victoriametrics {path}: HTTP {status}: {reply[:300]!r}")
        return reply


class Forwarder:
    """The write side: parsed bodies to VictoriaMetrics' InfluxDB endpoint."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = _Http(url)

    def forward(self, parsed: ParsedBody, body: bytes, precision: str) -> None:
        if parsed.errors or parsed.untimed_lines or parsed.events or b'"' in body:
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


def series_id(name: str, labels: dict[str, str]) -> int:
    """A stable id for a metric name and its labels (63 bits, so it fits SQLite and numpy)."""
    canonical = json.dumps([name, sorted(labels.items())], separators=(",", ":"))
    digest = hashlib.blake2b(canonical.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def _quote(value: str) -> str:
    return json.dumps(value)  # a MetricsQL string literal: double quotes, backslash escapes


def _selector(name: str, labels: dict[str, str]) -> str:
    matchers = [f"__name__={_quote(name)}"]
    matchers += [f"{key}={_quote(value)}" for key, value in sorted(labels.items())]
    return "{" + ",".join(matchers) + "}"


def _host_selector(name: str, hosts: Iterable[str]) -> str:
    pattern = "|".join(re.escape(host) for host in sorted(set(hosts)))
    return "{" + f"__name__={_quote(name)},{Tag.HOST}=~{_quote(pattern)}" + "}"


def _seconds(ms: int) -> str:
    return f"{ms / 1000:.3f}"


class VictoriaMetricsStore:
    """``ReadStore`` over VictoriaMetrics' Prometheus API, with events from SQLite."""

    def __init__(
        self, url: str, events: SqliteStore | str | os.PathLike[str] | None = None
    ) -> None:
        """``events``: the SQLite store (or its path) ``collector serve --backend`` keeps the
        workload events in; by default the ``--db`` default (``$EPOCHSCOPE_DB`` or
        runs/epochscope.sqlite) when that file exists."""
        self.url = url.rstrip("/")
        self.http = _Http(self.url)
        if events is None:
            from collector.cli import DEFAULT_DB

            events = DEFAULT_DB if Path(DEFAULT_DB).is_file() else None
        if isinstance(events, str | os.PathLike):
            events = SqliteStore(events)
        self.events_store = events

    # ---------------------------------------------------------------- series

    def list_series(
        self, measurement: str, field: str, host: str | None = None
    ) -> list[SeriesInfo]:
        name = f"{measurement}_{field}"
        labels = {Tag.HOST: host} if host is not None else {}
        reply = self.http.form(
            "/api/v1/series",
            [("match[]", _selector(name, labels)), ("start", "1"), ("end", str(_FAR_FUTURE_S))],
        )
        found = []
        for series_labels in json.loads(reply)["data"]:
            series_labels.pop("__name__", None)
            series_host = series_labels.pop(Tag.HOST, "")
            found.append(
                SeriesInfo(
                    series_id(name, {Tag.HOST: series_host, **series_labels}),
                    measurement,
                    series_host,
                    field,
                    series_labels,
                )
            )
        found.sort(key=lambda info: (info.host, sorted(info.tags.items())))
        return found

    def read_series(self, series: list[SeriesInfo], start_ns: int, end_ns: int) -> list[SeriesData]:
        start_ms = -(-start_ns // 1_000_000)  # samples are whole ms: the first at or after
        end_ms = end_ns // 1_000_000
        by_name: dict[str, list[SeriesInfo]] = {}
        for info in series:
            by_name.setdefault(f"{info.measurement}_{info.field}", []).append(info)
        samples: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for name, infos in by_name.items():
            exported = self._export(
                name,
                infos,
                max(start_ms - EXPORT_MARGIN_MS, 1),
                end_ms + EXPORT_MARGIN_MS,
            )
            samples.update(exported)
        results = []
        for info in series:
            times_ms, values = samples.get(
                info.series_id, (np.empty(0, dtype=np.int64), np.empty(0))
            )
            results.append((info, times_ms, values))
        self._add_neighbours(results, start_ms, end_ms)
        out = []
        for info, times_ms, values in results:
            first = max(int(np.searchsorted(times_ms, start_ms, "left")) - 1, 0)
            stop = int(np.searchsorted(times_ms, end_ms, "right")) + 1
            out.append(
                SeriesData(info, times_ms[first:stop] * 1_000_000, values[first:stop].copy())
            )
        return out

    def _export(
        self, name: str, infos: list[SeriesInfo], start_ms: int, end_ms: int
    ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        wanted = {info.series_id for info in infos}
        reply = self.http.form(
            "/api/v1/export",
            [
                ("match[]", _host_selector(name, (info.host for info in infos))),
                ("start", _seconds(start_ms)),
                ("end", _seconds(end_ms)),
            ],
        )
        found: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for line in reply.splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            labels = dict(item["metric"])
            labels.pop("__name__", None)
            labels.setdefault(Tag.HOST, "")
            key = series_id(name, labels)
            if key not in wanted:
                continue
            times = np.asarray(item["timestamps"], dtype=np.int64)
            values = np.asarray(item["values"], dtype=np.float64)
            if key in found:  # a series split over parts: merge
                times = np.concatenate((found[key][0], times))
                values = np.concatenate((found[key][1], values))
            order = np.argsort(times, kind="stable")
            found[key] = (times[order], values[order])
        return found

    def _add_neighbours(self, results: list, start_ms: int, end_ms: int) -> None:
        """Fill in the nearest sample before start (after end) when the export margin did
        not reach it, by MetricsQL instant queries over ``NEIGHBOUR_WINDOW``."""
        for before in (True, False):
            lacking: dict[str, list[int]] = {}
            for index, (info, times_ms, _) in enumerate(results):
                has = (
                    times_ms.size and times_ms[0] < start_ms
                    if before
                    else times_ms.size and times_ms[-1] > end_ms
                )
                if not has:
                    lacking.setdefault(f"{info.measurement}_{info.field}", []).append(index)
            for name, indexes in lacking.items():
                infos = [results[i][0] for i in indexes]
                if before:
                    at_ms = max(start_ms - EXPORT_MARGIN_MS - 1, 1)
                    functions = ("tlast_over_time", "last_over_time")
                else:
                    at_ms = end_ms + EXPORT_MARGIN_MS + 30 * 86_400_000
                    functions = ("tfirst_over_time", "first_over_time")
                stamps = self._instant(functions[0], name, infos, at_ms)
                values = self._instant(functions[1], name, infos, at_ms)
                for i in indexes:
                    info, times_ms, series_values = results[i]
                    if info.series_id not in stamps or info.series_id not in values:
                        continue
                    stamp_ms = round(stamps[info.series_id] * 1000)
                    if (before and stamp_ms >= start_ms) or (not before and stamp_ms <= end_ms):
                        continue
                    times_ms = np.concatenate(
                        ([stamp_ms], times_ms) if before else (times_ms, [stamp_ms])
                    ).astype(np.int64)
                    series_values = np.concatenate(
                        ([values[info.series_id]], series_values)
                        if before
                        else (series_values, [values[info.series_id]])
                    )
                    results[i] = (info, times_ms, series_values)

    def _instant(
        self, function: str, name: str, infos: list[SeriesInfo], at_ms: int
    ) -> dict[int, float]:
        query = f"{function}({_host_selector(name, (i.host for i in infos))}[{NEIGHBOUR_WINDOW}])"
        reply = self.http.form(
            "/api/v1/query", [("query", query), ("time", _seconds(at_ms)), ("nocache", "1")]
        )
        found = {}
        for item in json.loads(reply)["data"]["result"]:
            labels = dict(item["metric"])
            labels.pop("__name__", None)
            labels.setdefault(Tag.HOST, "")
            found[series_id(name, labels)] = float(item["value"][1])
        return found

    # ---------------------------------------------------------------- the rest

    def hosts(self) -> list[str]:
        reply = self.http.form(
            f"/api/v1/label/{Tag.HOST}/values", [("start", "1"), ("end", str(_FAR_FUTURE_S))]
        )
        found = set(json.loads(reply)["data"])
        if self.events_store is not None:
            found.update(self.events_store.hosts())
        return sorted(host for host in found if host)

    def runs(self) -> list[RunInfo]:
        return self.events_store.runs() if self.events_store is not None else []

    def events(
        self, run_id: str, since_ns: int | None = None, kinds: tuple[str, ...] | None = None
    ) -> list[WorkloadEvent]:
        if self.events_store is None:
            return []
        return self.events_store.events(run_id, since_ns, kinds)

    def flush(self) -> None:
        """Make recent writes searchable now (VictoriaMetrics buffers them ~1 s)."""
        status, _ = self.http.request("GET", "/internal/force_flush")
        if status != 200:
            raise BackendError(f"victoriametrics force_flush: HTTP {status}")
