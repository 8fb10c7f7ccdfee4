"""Prometheus /metrics: the latest sample, as Prometheus metric families.

A field becomes ``epochscope_<measurement>_<field>`` (``schema.prometheus_name``; counters
end in ``_total``) with the point's tags as labels and the schema's help line as HELP.
Counters are counter families, gauges gauge families; text fields are not exposed, and
neither are fields the schema does not know (logged once each). A scrape renders the
sample the loop published last: it never reads /proc or /sys itself.

The collector sits on its own registry (no process/platform/GC collectors of the client
library: the ``agent`` measurement reports the agent's own cost).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client.core import CollectorRegistry, Metric
from prometheus_client.registry import Collector

from agent import schema
from agent.point import Point

log = logging.getLogger(__name__)


def metric_families(points: Sequence[Point]) -> list[Metric]:
    """Group the numeric fields of ``points`` into metric families, in first-seen order."""
    families: dict[str, Metric] = {}
    unknown: list[tuple[str, str]] = []
    for point in points:
        labels = {key: str(value) for key, value in point.tags.items() if value != ""}
        for field, value in point.fields.items():
            spec = schema.field_spec(point.measurement, field)
            if spec is None:
                unknown.append((point.measurement, field))
                continue
            if spec.kind is schema.Kind.TEXT or isinstance(value, str):
                continue
            name = schema.prometheus_name(point.measurement, spec)
            family = families.get(name)
            if family is None:
                if spec.is_counter:
                    family = Metric(name.removesuffix("_total"), spec.help, "counter")
                else:
                    family = Metric(name, spec.help, "gauge")
                families[name] = family
            family.add_sample(name, labels, float(value))
    _log_unknown_once(unknown)
    return list(families.values())


_unknown_seen: set[tuple[str, str]] = set()


def _log_unknown_once(unknown: list[tuple[str, str]]) -> None:
    for measurement, field in unknown:
        if (measurement, field) not in _unknown_seen:
            _unknown_seen.add((measurement, field))
            log.warning("field %s.%s is not in agent/schema.py: not exposed", measurement, field)


class LatestSample(Collector):
    """Holds the last published sample; a scrape renders it."""

    def __init__(self) -> None:
        self._points: Sequence[Point] = ()
        self._lock = threading.Lock()

    def publish(self, points: Sequence[Point]) -> None:
        with self._lock:
            self._points = tuple(points)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            points = self._points
        yield from metric_families(points)


class MetricsServer:
    """/metrics over HTTP on ``address:port`` (port 0: any free port)."""

    def __init__(self, address: str, port: int) -> None:
        from prometheus_client import start_http_server

        self.latest = LatestSample()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.latest)
        self._server: Any
        self._server, self._thread = start_http_server(port, address, registry=self.registry)
        self.address, self.port = self._server.server_address[:2]

    def publish(self, points: Sequence[Point]) -> None:
        self.latest.publish(points)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
