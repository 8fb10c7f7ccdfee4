"""Prometheus as the scale-out sample store (``--backend prometheus=URL``).

Prometheus scrapes every agent's ``/metrics`` (agent.exposition): a field is
``epochscope_<measurement>_<field>`` (``schema.prometheus_name``; counters end in
``_total``) with the point's tags as labels, ``host`` among them; the scrape adds
``instance`` and ``job``. The CPU modes share ``epochscope_cpu_seconds_total`` and are
told apart by ``mode`` (``metric_labels``); a series of one mode is read as that field,
whose tags then include ``mode``. ``collector serve --backend prometheus=URL`` forwards nothing
(what is pushed to it is stored in its SQLite file as without a backend); the runs and
their workload events come from that SQLite file.

Reads (:class:`PrometheusStore`, a ``ReadStore`` built on
``collector.store.promql.PromqlStore``) use only the standard Prometheus HTTP API, so they
work against VictoriaMetrics' Prometheus API too:

* ``list_series``: ``/api/v1/series`` for the metric name (and host). A series' identity
  is its ``host`` and its other labels *without* ``instance`` and ``job``: the same point
  scraped by two jobs, or from a new address after a restart, is one series (its samples
  are merged, one per timestamp).
* ``read_series``: raw samples, never ``query_range`` (which returns values re-sampled at
  its steps, while the per-epoch arithmetic needs the real sample times). An instant
  query of a range-vector selector, ``name{...}[Wms]`` at time t, returns the raw samples
  in [t - W, t] (Prometheus 2; 3 leaves t - W out); the range [start - ``MARGIN_MS``,
  end + ``MARGIN_MS``] is read in consecutive such windows sized to hold about
  ``TARGET_SAMPLES`` samples each (the first is ``FIRST_CHUNK_MS``; an empty window
  doubles the next, so a wide range over sparse data costs few requests). Each window is
  asked 1 ms wider than it is, so that it is covered whichever way the server closes it;
  a sample two windows return is kept once.
* The nearest sample before start (after end) that the margin did not hold: one instant
  query per metric name and side finds the last (first) ``PROBE_STEP_MS`` step within
  ``NEIGHBOUR_WINDOW_MS`` whose window holds a sample, e.g. ``max_over_time((timestamp(
  count_over_time(sel[600000ms])) < START)[2592000000ms:600000ms])``;
  ``count_over_time`` over a range, unlike an instant selector, sees samples whatever
  the server's lookback delta and across staleness markers. Then one raw read of that
  step's window per distinct step gives the sample itself. So a side costs at most
  1 + (number of series lacking it) requests, and nothing when the margin held it.
* ``hosts``: the ``host`` label values of ``epochscope_*`` series plus the hosts of the
  runs in SQLite.

Timestamps are the agent's sample times, in whole ms (the exposition carries each
sample's own time, so Prometheus stores the instant the counters were read, not the
scrape's); values are floats.
"""

from __future__ import annotations

import numpy as np

from collector.store.api import SeriesInfo
from collector.store.promql import (
    PromqlStore,
    Samples,
    by_value,
    host_selector,
    merge,
    quote,
    samples_of,
    seconds,
)
from contract import schema
from contract.schema import Kind

MARGIN_MS = 10 * 60 * 1000
FIRST_CHUNK_MS = 60 * 60 * 1000
TARGET_SAMPLES = 250_000  # per request: ~8 MB of JSON
PROBE_STEP_MS = MARGIN_MS  # must not exceed MARGIN_MS (see _neighbours)
NEIGHBOUR_WINDOW_MS = 30 * 86_400_000  # as far as VictoriaMetricsStore looks
SCRAPE_LABELS = frozenset({"instance", "job"})


class PrometheusStore(PromqlStore):
    """``ReadStore`` over Prometheus' HTTP API, fed by scraping the agents' /metrics."""

    backend = "prometheus"
    scrape_labels = SCRAPE_LABELS
    host_match = "{" + f"__name__=~{quote(schema.PROMETHEUS_NAMESPACE + '_.+')}" + "}"

    # class attributes so that a test can shrink them
    margin_ms = MARGIN_MS
    first_chunk_ms = FIRST_CHUNK_MS
    target_samples = TARGET_SAMPLES

    def metric_name(self, measurement: str, field: str) -> str | None:
        spec = schema.field_spec(measurement, field)
        if spec is None or spec.kind is Kind.TEXT:
            return None  # the agent exposes neither unknown nor text fields
        return schema.prometheus_name(measurement, spec)

    def metric_labels(self, measurement: str, field: str) -> dict[str, str]:
        spec = schema.field_spec(measurement, field)
        return schema.prometheus_labels(spec) if spec is not None else {}

    # ------------------------------------------------------------- raw samples

    def _raw(
        self, name: str, infos: list[SeriesInfo], at_ms: int, width_ms: int
    ) -> dict[int, Samples]:
        """Raw samples of those series in [at_ms - width_ms, at_ms] (at least)."""
        selector = host_selector(name, (info.host for info in infos))
        result = self.http.query(f"{selector}[{width_ms + 1}ms]", at_ms)
        items = ((item["metric"], samples_of(item["values"])) for item in result)
        return self.collect(name, items, {info.series_id for info in infos})

    def _fetch(
        self, name: str, infos: list[SeriesInfo], start_ms: int, end_ms: int
    ) -> dict[int, Samples]:
        low, high = max(start_ms - self.margin_ms, 0), end_ms + self.margin_ms
        parts: dict[int, list[Samples]] = {}
        width = self.first_chunk_ms
        chunk_start = low
        while True:
            chunk_end = min(chunk_start + width, high)
            chunk = self._raw(name, infos, chunk_end, chunk_end - chunk_start)
            count = 0
            for key, samples in chunk.items():
                count += samples[0].size
                parts.setdefault(key, []).append(samples)
            if chunk_end >= high:
                break
            span = chunk_end - chunk_start
            if count == 0:
                width = 2 * max(span, 1)
            else:  # aim at TARGET_SAMPLES, growing at most 4x at a time
                width = max(60_000, min(4 * span, span * self.target_samples // count))
            chunk_start = chunk_end + 1
        found: dict[int, Samples] = {}
        for key, pieces in parts.items():
            merge(
                found,
                key,
                np.concatenate([times for times, _ in pieces]),
                np.concatenate([values for _, values in pieces]),
            )
        return found

    # ------------------------------------------------------------- neighbours

    def _neighbours(
        self, name: str, infos: list[SeriesInfo], start_ms: int, end_ms: int, before: bool
    ) -> dict[int, tuple[int, float]]:
        """The last sample before ``start_ms`` (first after ``end_ms``) of series whose
        margin fetch held none there.

        Steps of a subquery are multiples of ``step``; step s "holds a sample" when its
        window [s - step, s] does. Before: the last such step before start bounds the
        sample (later steps up to start - 1 are empty, and what lies past the last step
        is within the margin, which held nothing). After: the first such step past
        end + margin; its window starts past end because step <= margin, and what lies
        between end and it is within the margin or the windows of empty steps. The
        comparison keeps only steps on the right side: VictoriaMetrics' subqueries also
        return steps from before their range.
        """
        step = min(PROBE_STEP_MS, self.margin_ms)
        if before:
            at_ms = start_ms - 1
            if at_ms <= 0:
                return {}
            function, keep = "max_over_time", f"< {seconds(start_ms)}"
        else:
            at_ms = end_ms + self.margin_ms + NEIGHBOUR_WINDOW_MS
            function, keep = "min_over_time", f"> {seconds(end_ms + self.margin_ms)}"
        selector = host_selector(name, (info.host for info in infos))
        probe = (
            f"{function}((timestamp(count_over_time({selector}[{step}ms])) {keep})"
            f"[{NEIGHBOUR_WINDOW_MS}ms:{step}ms])"
        )
        by_id = {info.series_id: info for info in infos}
        steps: list[tuple[int, int]] = []  # (series id, step time in ms)
        for item in self.http.query(probe, at_ms):
            key = self.key(name, item["metric"])
            if key in by_id:
                steps.append((key, round(float(item["value"][1]) * 1000)))
        found: dict[int, tuple[int, float]] = {}
        for step_ms, keys in by_value(steps):
            raw = self._raw(name, [by_id[key] for key in keys], step_ms, step)
            for key in keys:
                times, values = raw.get(key, (None, None))
                if times is None:
                    continue
                if before:
                    index = int(times.searchsorted(start_ms, "left")) - 1
                    if index >= 0:
                        found[key] = (int(times[index]), float(values[index]))
                else:
                    index = int(times.searchsorted(end_ms, "right"))
                    if index < times.size:
                        found[key] = (int(times[index]), float(values[index]))
        return found
