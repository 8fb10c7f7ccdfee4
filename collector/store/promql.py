"""The read side the Prometheus-API sample stores share (``collector.store.victoriametrics``,
``collector.store.prometheus``): a ``ReadStore`` whose samples come from a server that answers
the Prometheus HTTP API and whose runs and events come from the collector's SQLite file.

What a subclass decides:

* ``metric_name(measurement, field)``: the server's name for a field (``None``: the store
  cannot hold it, e.g. a text field), and ``metric_labels(measurement, field)``: labels
  that pick the field out of a family it shares (``mode="user"`` of
  ``epochscope_cpu_seconds_total``; none by default);
* ``scrape_labels``: labels the scraper added (``instance``, ``job``), which are not part
  of a series' identity; the ``host`` label is;
* ``_fetch(name, infos, start_ms, end_ms)``: raw samples of those series, at least every
  one in [start_ms, end_ms], plus any in a margin around it;
* ``_neighbours(name, infos, start_ms, end_ms, before)``: for series whose fetch held no
  sample before start (after end), the nearest one there, when there is one.

The base class lists series (``/api/v1/series``), merges what the server keeps as several
series into one identity (the same point scraped by two jobs, or a series split over
parts), trims to [last before start, first after end] and hands out events from SQLite.

Times are whole milliseconds on these servers. A series id is a stable 63-bit hash of the
metric name, the host and the other identity labels, the same in every process.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import numpy as np

from collector.store import EventStore, SqliteStore
from collector.store.api import RunInfo, SeriesData, SeriesInfo, StepTable, WorkloadEvent
from contract.schema import Tag

FAR_FUTURE_S = 4_102_444_800  # 2100-01-01: the end of "all time" for /api/v1/series

# (times in ms, int64 ascending; values, float64)
Samples = tuple[np.ndarray, np.ndarray]
_NO_SAMPLES: Samples = (np.empty(0, dtype=np.int64), np.empty(0))


class BackendError(RuntimeError):
    """The backend did not take a write or answer a query."""


class HttpClient:
    """Keep-alive connections to one base URL, one per thread."""

    def __init__(
        self, url: str, backend: str, timeout: float = 60.0, authorization: str | None = None
    ) -> None:
        parts = urlsplit(url)
        self.url = url  # without credentials (backends.parse_backend_spec refuses them)
        self.backend = backend  # named in error messages
        self.https = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self._authorization = authorization  # never logged nor shown
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
        headers = dict(headers or {})
        if self._authorization is not None:
            headers["Authorization"] = self._authorization
        for attempt in (1, 2):  # a kept-alive connection may have been closed meanwhile
            conn = self._connection()
            try:
                conn.request(method, self.prefix + path, body=body, headers=headers)
                response = conn.getresponse()
                return response.status, response.read()
            except (OSError, http.client.HTTPException) as error:
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise BackendError(
                        f"{self.backend} at {self.url} is unreachable: "
                        f"{type(error).__name__}: {error}"
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
            raise BackendError(self.refusal(path, status, reply))
        return reply

    def refusal(self, path: str, status: int, reply: bytes) -> str:
        """What a non-200 answer means, in one line (401/403: the credentials)."""
        if status in (401, 403):
            return (
                f"{self.backend} at {self.url} refused {path} (HTTP {status}): give or check "
                "--backend-auth-file"
            )
        return f"{self.backend} {path}: HTTP {status}: {reply[:300]!r}"

    def get(self, path: str, fields: list[tuple[str, str]]) -> bytes:
        """GET with a query string (Prometheus takes label values by GET only)."""
        status, reply = self.request("GET", f"{path}?{urlencode(fields)}")
        if status != 200:
            raise BackendError(self.refusal(path, status, reply))
        return reply

    def query(self, promql: str, at_ms: int) -> list[dict[str, Any]]:
        """An instant query at ``at_ms``: its ``result`` list."""
        reply = self.form(
            "/api/v1/query", [("query", promql), ("time", seconds(at_ms)), ("nocache", "1")]
        )
        return json.loads(reply)["data"]["result"]


def series_id(name: str, labels: dict[str, str]) -> int:
    """A stable id for a metric name and its labels (63 bits, so it fits SQLite and numpy)."""
    canonical = json.dumps([name, sorted(labels.items())], separators=(",", ":"))
    digest = hashlib.blake2b(canonical.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def quote(value: str) -> str:
    return json.dumps(value)  # a PromQL string literal: double quotes, backslash escapes


def selector(name: str, labels: dict[str, str]) -> str:
    matchers = [f"__name__={quote(name)}"]
    matchers += [f"{key}={quote(value)}" for key, value in sorted(labels.items())]
    return "{" + ",".join(matchers) + "}"


def host_selector(name: str, hosts: Iterable[str]) -> str:
    """Every series of ``name`` on those hosts (the caller keeps the ones it wants)."""
    pattern = "|".join(re.escape(host) for host in sorted(set(hosts)))
    return "{" + f"__name__={quote(name)},{Tag.HOST}=~{quote(pattern)}" + "}"


def seconds(ms: int) -> str:
    return f"{ms / 1000:.3f}"


def samples_of(pairs: list[list]) -> Samples:
    """``[[1700000000.123, "5"], ...]`` (the API's ``values``) as ms and floats."""
    times = np.fromiter((round(float(t) * 1000) for t, _ in pairs), np.int64, len(pairs))
    values = np.fromiter((float(v) for _, v in pairs), np.float64, len(pairs))
    return times, values


def merge(found: dict[int, Samples], key: int, times: np.ndarray, values: np.ndarray) -> None:
    """Add samples to ``found[key]``, keeping it sorted with one sample per timestamp."""
    if key in found:
        times = np.concatenate((found[key][0], times))
        values = np.concatenate((found[key][1], values))
    order = np.argsort(times, kind="stable")
    times, values = times[order], values[order]
    if times.size > 1 and not np.all(times[1:] > times[:-1]):
        times, first = np.unique(times, return_index=True)
        values = values[first]
    found[key] = (times, values)


class PromqlStore:
    """``ReadStore`` over a Prometheus-API server, with runs and events from SQLite."""

    backend = "prometheus-api"  # in error messages
    # the servers keep whole milliseconds: the analysis compares edges at this precision
    time_resolution_ns = 1_000_000
    scrape_labels: frozenset[str] = frozenset()
    host_match: str | None = None  # a match[] that limits hosts() to our series

    def __init__(
        self,
        url: str,
        events: EventStore | SqliteStore | str | os.PathLike[str] | None = None,
        authorization: str | None = None,
    ) -> None:
        """``events``: the store file (its path, its ``EventStore``, or a ``SqliteStore``
        over it) ``collector serve`` keeps the workload events in; by default the ``--db``
        default (``$EPOCHSCOPE_DB`` or runs/epochscope.sqlite) when that file exists.
        ``authorization``: the ``Authorization`` header every request carries."""
        self.url = url.rstrip("/")
        self.http = HttpClient(self.url, self.backend, authorization=authorization)
        if events is None:
            from collector.store.database import DEFAULT_DB

            events = DEFAULT_DB if Path(DEFAULT_DB).is_file() else None
        if isinstance(events, str | os.PathLike):
            events = EventStore.open(events)
        elif isinstance(events, SqliteStore):
            events = events.event_store
        self.events_store: EventStore | None = events

    # ------------------------------------------------------------- subclass hooks

    def metric_name(self, measurement: str, field: str) -> str | None:
        raise NotImplementedError

    def metric_labels(self, measurement: str, field: str) -> dict[str, str]:
        return {}

    def _fetch(
        self, name: str, infos: list[SeriesInfo], start_ms: int, end_ms: int
    ) -> dict[int, Samples]:
        raise NotImplementedError

    def _neighbours(
        self, name: str, infos: list[SeriesInfo], start_ms: int, end_ms: int, before: bool
    ) -> dict[int, tuple[int, float]]:
        raise NotImplementedError

    # ------------------------------------------------------------- identity

    def identity(self, labels: dict[str, str]) -> tuple[str, dict[str, str]]:
        """(host, other identity labels) of a series' labels as the server returns them."""
        tags = {
            key: value
            for key, value in labels.items()
            if key != "__name__" and key not in self.scrape_labels
        }
        return tags.pop(Tag.HOST, ""), tags

    def key(self, name: str, labels: dict[str, str]) -> int:
        host, tags = self.identity(labels)
        return series_id(name, {Tag.HOST: host, **tags})

    def collect(
        self, name: str, items: Iterable[tuple[dict[str, str], Samples]], wanted: set[int]
    ) -> dict[int, Samples]:
        """Samples by series id from (labels, samples) pairs, merging what shares an id."""
        found: dict[int, Samples] = {}
        for labels, (times, values) in items:
            key = self.key(name, labels)
            if key in wanted:
                merge(found, key, times, values)
        return found

    # ------------------------------------------------------------- series

    def list_series(
        self, measurement: str, field: str, host: str | None = None
    ) -> list[SeriesInfo]:
        name = self.metric_name(measurement, field)
        if name is None:
            return []
        labels = self.metric_labels(measurement, field)
        if host is not None:
            labels[Tag.HOST] = host
        reply = self.http.form(
            "/api/v1/series",
            [("match[]", selector(name, labels)), ("start", "1"), ("end", str(FAR_FUTURE_S))],
        )
        found: dict[int, SeriesInfo] = {}
        for series_labels in json.loads(reply)["data"]:
            series_host, tags = self.identity(series_labels)
            key = series_id(name, {Tag.HOST: series_host, **tags})
            found.setdefault(key, SeriesInfo(key, measurement, series_host, field, tags))
        return sorted(found.values(), key=lambda info: (info.host, sorted(info.tags.items())))

    def read_series(self, series: list[SeriesInfo], start_ns: int, end_ns: int) -> list[SeriesData]:
        start_ms = -(-start_ns // 1_000_000)  # samples are whole ms: the first at or after
        end_ms = end_ns // 1_000_000
        by_name: dict[str, list[SeriesInfo]] = {}
        for info in series:
            name = self.metric_name(info.measurement, info.field)
            if name is not None:
                by_name.setdefault(name, []).append(info)
        samples: dict[int, Samples] = {}
        for name, infos in by_name.items():
            samples.update(self._fetch(name, infos, start_ms, end_ms))
            for before in (True, False):
                lacking = [
                    info
                    for info in infos
                    if not _has_neighbour(
                        samples.get(info.series_id, _NO_SAMPLES), start_ms, end_ms, before
                    )
                ]
                if not lacking:
                    continue
                found = self._neighbours(name, lacking, start_ms, end_ms, before)
                for key, (time_ms, value) in found.items():
                    merge(
                        samples,
                        key,
                        np.array([time_ms], dtype=np.int64),
                        np.array([value], dtype=np.float64),
                    )
        out = []
        for info in series:
            times_ms, values = samples.get(info.series_id, _NO_SAMPLES)
            first = max(int(np.searchsorted(times_ms, start_ms, "left")) - 1, 0)
            stop = int(np.searchsorted(times_ms, end_ms, "right")) + 1
            out.append(
                SeriesData(info, times_ms[first:stop] * 1_000_000, values[first:stop].copy())
            )
        return out

    # ------------------------------------------------------------- the rest

    def hosts(self) -> list[str]:
        fields = [("start", "1"), ("end", str(FAR_FUTURE_S))]
        if self.host_match is not None:
            fields.append(("match[]", self.host_match))
        reply = self.http.get(f"/api/v1/label/{Tag.HOST}/values", fields)
        found = set(json.loads(reply)["data"])
        if self.events_store is not None:
            found.update(self.events_store.hosts())
        return sorted(host for host in found if host)

    def runs(self) -> list[RunInfo]:
        return self.events_store.runs() if self.events_store is not None else []

    def run(self, run_id: str) -> RunInfo | None:
        return self.events_store.run(run_id) if self.events_store is not None else None

    def events(
        self, run_id: str, since_ns: int | None = None, kinds: tuple[str, ...] | None = None
    ) -> list[WorkloadEvent]:
        if self.events_store is None:
            return []
        return self.events_store.events(run_id, since_ns, kinds)

    def steps(self, run_id: str, since_ns: int | None = None) -> StepTable:
        if self.events_store is None:
            return StepTable.empty()
        return self.events_store.steps(run_id, since_ns)

    def close(self) -> None:
        """Close the events file (``dashboard serve`` calls this on the way out)."""
        if self.events_store is not None:
            self.events_store.close()


def _has_neighbour(samples: Samples, start_ms: int, end_ms: int, before: bool) -> bool:
    times = samples[0]
    if not times.size:
        return False
    return bool(times[0] < start_ms) if before else bool(times[-1] > end_ms)


def by_value(pairs: Iterable[tuple[int, int]]) -> Iterator[tuple[int, list[int]]]:
    """Group (key, value) pairs by value: (value, [keys]) in value order."""
    groups: dict[int, list[int]] = {}
    for key, value in pairs:
        groups.setdefault(value, []).append(key)
    yield from sorted(groups.items())
