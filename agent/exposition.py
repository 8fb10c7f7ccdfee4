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
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CollectorRegistry, Metric
from prometheus_client.registry import Collector

from agent import schema
from agent.point import Point

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Exposed:
    """How one (measurement, field) is exposed: sample name, family name, type, help."""

    sample_name: str
    family_name: str
    type: str
    help: str


# (measurement, field) -> how it is exposed, or None: not exposed (text or unknown).
_exposed_cache: dict[tuple[str, str], _Exposed | None] = {}


def _exposed(measurement: str, field: str) -> _Exposed | None:
    key = (measurement, field)
    if key in _exposed_cache:
        return _exposed_cache[key]
    spec = schema.field_spec(measurement, field)
    exposed = None
    if spec is None:
        log.warning("field %s.%s is not in agent/schema.py: not exposed", measurement, field)
    elif spec.kind is not schema.Kind.TEXT:
        name = schema.prometheus_name(measurement, spec)
        if spec.is_counter:
            # The client library adds "_total" to a counter family's samples itself.
            exposed = _Exposed(name, name.removesuffix("_total"), "counter", spec.help)
        else:
            exposed = _Exposed(name, name, "gauge", spec.help)
    _exposed_cache[key] = exposed
    return exposed


def metric_families(points: Sequence[Point]) -> list[Metric]:
    """Group the numeric fields of ``points`` into metric families, in first-seen order."""
    families: dict[str, Metric] = {}
    for point in points:
        labels = {key: str(value) for key, value in point.tags.items() if value != ""}
        for field, value in point.fields.items():
            exposed = _exposed(point.measurement, field)
            if exposed is None or isinstance(value, str):
                continue
            family = families.get(exposed.family_name)
            if family is None:
                family = Metric(exposed.family_name, exposed.help, exposed.type)
                families[exposed.family_name] = family
            family.add_sample(exposed.sample_name, labels, float(value))
    return list(families.values())


class LatestSample(Collector):
    """Holds the last published sample; a scrape renders it."""

    def __init__(self) -> None:
        self._points: Sequence[Point] = ()
        self._families: list[Metric] | None = None
        self._lock = threading.Lock()

    def publish(self, points: Sequence[Point]) -> None:
        with self._lock:
            self._points = tuple(points)
            self._families = None

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            points = self._points
            families = self._families
            if families is None:  # first scrape of this sample: group it once
                families = self._families = metric_families(points)
        yield from families


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
