"""Export the agent's samples as OpenTelemetry metrics: OTLP/HTTP with the JSON encoding.

Beside Prometheus ``/metrics`` (pulled) and InfluxDB line protocol (``[push]``), for sites
whose collectors speak OTLP (an OpenTelemetry Collector, dynolog or TraceML pipelines).
OTLP/HTTP JSON is part of the OTLP specification and every OTLP/HTTP receiver accepts it
(``Content-Type: application/json``); it needs no compiled protobuf classes, so the agent
keeps the standard library as its only dependency for this.

Mapping (``metrics_request``), from ``contract.schema`` once for every view:

- a metric per field, named as on the agent's ``/metrics`` without the ``_total`` suffix
  (``epochscope_disk_read_bytes``; a shared family such as ``epochscope_cpu_seconds`` with
  the family's labels as attributes): an OTel Collector's ``prometheus`` exporter adds
  ``_total`` to a monotonic sum, so the names match the agent's own exposition;
- counters -> ``sum`` (cumulative, monotonic, start time: when this exporter started);
  gauges -> ``gauge``; text fields and NaN/Inf values are not metrics and are left out;
- tags -> data point attributes; the ``host`` tag -> the resource attribute ``host.name``
  (with ``service.name = epochscope-agent``).

Delivery: ``submit`` puts a tick's points in a bounded memory queue and never waits on the
network; a thread sends what is queued every ``batch_seconds`` (one request for several
ticks). While the endpoint is down or answers 5xx/429 the points stay queued and are
retried with a doubling backoff; past ``max_queued_points`` the oldest are dropped and
counted (``points_dropped``): the InfluxDB push keeps the durable disk spool, OTLP is an
extra view. A 4xx other than 408/429 drops the batch (counted, logged with the server's
message). Outages are logged once until it works again; header values are never logged.
"""

from __future__ import annotations

import collections
import json
import logging
import math
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from contract.point import Point
from contract.schema import FieldName, Tag, field_spec, prometheus_labels, prometheus_name
from netserve.otlp import post_json, string_attributes

if TYPE_CHECKING:
    from agent.samplers.agent import AgentStats

log = logging.getLogger(__name__)

SERVICE_NAME = "epochscope-agent"
SCOPE_NAME = "epochscope.agent"
AGGREGATION_TEMPORALITY_CUMULATIVE = 2  # opentelemetry.proto.metrics.v1.AggregationTemporality
DEFAULT_MAX_QUEUED_POINTS = 200_000
DEFAULT_BATCH_SECONDS = 5.0
BACKOFF_MAX_SECONDS = 30.0
# The schema's units in UCUM, as OTLP expects; others go as they are.
_UCUM_UNITS = {"bytes": "By", "seconds": "s", "bytes/s": "By/s", "count": "1", "fraction": "1"}


def _number(value: object) -> dict[str, Any] | None:
    if isinstance(value, bool):
        return {"asInt": str(int(value))}
    if isinstance(value, int):
        return {"asInt": str(value)}  # int64 is a decimal string in OTLP JSON
    if isinstance(value, float):
        return {"asDouble": value} if math.isfinite(value) else None
    return None  # text: not a metric


@dataclass
class _Metric:
    spec: FieldName
    points: list[dict[str, Any]]


def metrics_request(points: Sequence[Point], start_time_ns: int) -> dict[str, Any]:
    """The ``ExportMetricsServiceRequest`` (OTLP JSON mapping) of ``points``."""
    by_host: dict[str, dict[str, _Metric]] = {}
    for point in points:
        host = point.tags.get(Tag.HOST, "")
        attributes = [(key, value) for key, value in point.tags.items() if key != Tag.HOST]
        metrics = by_host.setdefault(host, {})
        for field, value in point.fields.items():
            spec = field_spec(point.measurement, field)
            number = _number(value)
            if spec is None or number is None:
                continue
            name = prometheus_name(point.measurement, spec).removesuffix("_total")
            data_point: dict[str, Any] = {
                "attributes": string_attributes([*attributes, *prometheus_labels(spec).items()]),
                "timeUnixNano": str(point.time_ns),
                **number,
            }
            if spec.is_counter:
                data_point["startTimeUnixNano"] = str(min(start_time_ns, point.time_ns))
            metrics.setdefault(name, _Metric(spec, [])).points.append(data_point)
    return {
        "resourceMetrics": [
            {
                "resource": {
                    "attributes": string_attributes(
                        [("service.name", SERVICE_NAME), *([("host.name", host)] if host else [])]
                    )
                },
                "scopeMetrics": [
                    {
                        "scope": {"name": SCOPE_NAME},
                        "metrics": [_metric_json(name, metric) for name, metric in metrics.items()],
                    }
                ],
            }
            for host, metrics in by_host.items()
        ]
    }


def _metric_json(name: str, metric: _Metric) -> dict[str, Any]:
    spec = metric.spec
    body: dict[str, Any] = {
        "name": name,
        "description": spec.family_help or spec.help,
        "unit": _UCUM_UNITS.get(spec.unit, spec.unit),
    }
    if spec.is_counter:
        body["sum"] = {
            "dataPoints": metric.points,
            "aggregationTemporality": AGGREGATION_TEMPORALITY_CUMULATIVE,
            "isMonotonic": True,
        }
    else:
        body["gauge"] = {"dataPoints": metric.points}
    return body


class OtlpExporter:
    """Sends submitted points to an OTLP/HTTP metrics endpoint from a background thread."""

    def __init__(
        self,
        endpoint: str,
        headers: Mapping[str, str] | None = None,
        batch_seconds: float = DEFAULT_BATCH_SECONDS,
        max_queued_points: int = DEFAULT_MAX_QUEUED_POINTS,
        stats: AgentStats | None = None,
    ) -> None:
        self.endpoint = endpoint
        self._headers = dict(headers or {})
        self.batch_seconds = batch_seconds
        self.max_queued_points = max_queued_points
        self.start_time_ns = time.time_ns()
        self.points_sent = 0
        self._points_dropped = 0
        self.stats = stats  # its otlp_points_dropped mirrors points_dropped
        if stats is not None:
            stats.otlp_points_dropped = 0
        self.requests = 0
        self._queue: collections.deque[list[Point]] = collections.deque()
        self._queued_points = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._run, name="otlp-export", daemon=True)
        self._outage_logged = False

    def __repr__(self) -> str:  # never the headers: they carry credentials
        return f"OtlpExporter({self.endpoint!r})"

    @property
    def points_dropped(self) -> int:
        return self._points_dropped

    def _count_dropped(self, points: int) -> None:
        self._points_dropped += points
        if self.stats is not None:
            self.stats.otlp_points_dropped = self._points_dropped

    def start(self) -> None:
        self._thread.start()

    def submit(self, points: Sequence[Point]) -> None:
        if not points:
            return
        with self._lock:
            self._queue.append(list(points))
            self._queued_points += len(points)
            self._idle.clear()
            if self.batch_seconds <= 0:
                self._wake.set()
            while self._queued_points > self.max_queued_points and len(self._queue) > 1:
                dropped = self._queue.popleft()
                self._queued_points -= len(dropped)
                self._count_dropped(len(dropped))

    def flush(self, timeout: float) -> bool:
        """Send what is queued now; whether the queue emptied within ``timeout``."""
        self._wake.set()
        return self._idle.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        self.flush(timeout)
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._queued_points:
            log.warning(
                "OTLP export to %s stopped with %d points unsent",
                self.endpoint,
                self._queued_points,
            )

    def _take(self) -> list[list[Point]]:
        with self._lock:
            batch, self._queue = list(self._queue), collections.deque()
            return batch

    def _put_back(self, batch: list[list[Point]]) -> None:
        with self._lock:
            self._queue.extendleft(reversed(batch))

    def _run(self) -> None:
        backoff = 0.5
        while not self._stopping.is_set():
            self._wake.wait(self.batch_seconds if self.batch_seconds > 0 else None)
            self._wake.clear()
            batch = self._take()
            if not batch:
                self._idle.set()
                continue
            points = [point for tick in batch for point in tick]
            body = json.dumps(metrics_request(points, self.start_time_ns)).encode()
            outcome = post_json(self.endpoint, body, self._headers)
            self.requests += 1
            if outcome.delivered or not outcome.retry:
                with self._lock:
                    self._queued_points -= len(points)
                    if outcome.delivered:
                        self.points_sent += len(points)
                    else:
                        self._count_dropped(len(points))
                    if not self._queue:
                        self._idle.set()
                if outcome.delivered:
                    if self._outage_logged:
                        log.info("OTLP export to %s works again", self.endpoint)
                    self._outage_logged, backoff = False, 0.5
                else:
                    log.warning(
                        "OTLP endpoint %s refused %d points (HTTP %d: %s): dropped",
                        self.endpoint,
                        len(points),
                        outcome.status,
                        outcome.message,
                    )
                continue
            self._put_back(batch)
            with self._lock:  # past the cap while it was down: the oldest go
                while self._queued_points > self.max_queued_points and len(self._queue) > 1:
                    dropped = self._queue.popleft()
                    self._queued_points -= len(dropped)
                    self._count_dropped(len(dropped))
            if not self._outage_logged:
                self._outage_logged = True
                what = f"HTTP {outcome.status}" if outcome.status else "unreachable"
                log.warning(
                    "OTLP export to %s failed (%s: %s): keeping up to %d points and retrying; "
                    "logged once until it works",
                    self.endpoint,
                    what,
                    outcome.message,
                    self.max_queued_points,
                )
            self._stopping.wait(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_SECONDS)
