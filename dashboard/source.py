"""The dashboard's only door to the data: ``collector.query`` and the ``ReadStore``.

Nothing here computes a metric or speaks SQL. ``DataSource`` calls the query layer, picks the
down-sampling bucket for a run's charts, and answers two cheap questions the live pages ask
on every poll: is the run still live, and have its epochs changed.

Everything returned is JSON-ready (dicts, lists, numbers, strings), because it ends up in the
browser.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from agent.schema import RunState
from collector import query
from collector.store_api import ReadStore

DEFAULT_MAX_POINTS = 500
BYTES_PER_MB = 1_000_000


@dataclass(frozen=True)
class Timeseries:
    """Down-sampled metrics of a run's hosts, as the charts need them.

    ``hosts[host]`` is ``collector.query.HostSeries.to_dict()``; every host shares
    ``bucket_ns`` when the run is live, so later updates line up with what is drawn.
    """

    bucket_ns: int
    hosts: dict[str, dict[str, Any]]

    @property
    def next_since(self) -> dict[str, int]:
        return {host: series["next_since_ns"] for host, series in self.hosts.items()}

    @property
    def points(self) -> int:
        """Buckets per host (the longest host)."""
        return max((len(s["times_ns"]) for s in self.hosts.values()), default=0)


class DataSource:
    def __init__(self, store: ReadStore, max_points: int = DEFAULT_MAX_POINTS) -> None:
        self.store = store
        self.max_points = max_points

    # -- runs ------------------------------------------------------------------------------
    def runs(self) -> list[dict[str, Any]]:
        """Every run, newest first (``collector.query.RunSummary`` as dicts)."""
        return [summary.to_dict() for summary in query.runs_summary(self.store)]

    def run(self, run_id: str) -> dict[str, Any] | None:
        return next((run for run in self.runs() if run["run_id"] == run_id), None)

    def run_state(self, run_id: str) -> str | None:
        """live | finished | failed, straight from the store (cheap: no throughput)."""
        info = next((r for r in self.store.runs() if r.run_id == run_id), None)
        return info.state if info else None

    # -- one run ---------------------------------------------------------------------------
    def timeseries(self, run_id: str, live: bool) -> Timeseries:
        """The run's charts data, down-sampled on the server to ``max_points`` buckets."""
        hosts = self._series(run_id, max_points=self.max_points)
        buckets = {series["bucket_ns"] for series in hosts.values()}
        if live and len(buckets) > 1:
            # hosts' spans differ a little (clock skew): redo with one bucket for all, so
            # every host's updates arrive on the same grid
            hosts = self._series(run_id, bucket_ns=max(buckets))
            buckets = {max(buckets)}
        return Timeseries(bucket_ns=max(buckets, default=0), hosts=hosts)

    def timeseries_since(self, run_id: str, since: dict[str, int], bucket_ns: int) -> Timeseries:
        """Only the buckets completed after ``since`` (per host), on the same grid."""
        hosts = self._series(run_id, since_ns=since, bucket_ns=bucket_ns)
        return Timeseries(bucket_ns=bucket_ns, hosts=hosts)

    def _series(self, run_id: str, **kwargs: Any) -> dict[str, dict[str, Any]]:
        result = query.run_timeseries(self.store, run_id, **kwargs)
        return {host: series.to_dict() for host, series in sorted(result.items())}

    def boundaries(self, run_id: str) -> dict[str, list[dict[str, Any]]]:
        return query.epoch_boundaries(self.store, run_id)

    def epochs(self, run_id: str) -> list[dict[str, Any]]:
        """The per-epoch report rows (``collector.epochs.COLUMNS``), plus NIC rates."""
        return [with_nic_rates(row) for row in query.epoch_table(self.store, run_id)]

    def findings(self, run_id: str) -> list[dict[str, Any]]:
        return query.findings(self.store, run_id)

    def epochs_digest(self, run_id: str) -> str:
        """Changes whenever an epoch starts or ends on any host: the live pages refresh the
        per-epoch table, bars and findings only then."""
        return digest(self.boundaries(run_id))

    # -- all runs --------------------------------------------------------------------------
    def scaling(self) -> list[dict[str, Any]]:
        return query.scaling_table(self.store)


def with_nic_rates(row: dict[str, Any]) -> dict[str, Any]:
    """``net_rx_mbps``/``net_tx_mbps`` from the row's bytes and seconds, for the fabric chart
    of runs without InfiniBand. A unit change, kept here only until ``query.epoch_table``
    carries these columns itself (as it does ``ib_rcv_mbps``)."""
    out = dict(row)
    seconds = row.get("seconds")
    for rate, amount in (("net_rx_mbps", "net_rx_bytes"), ("net_tx_mbps", "net_tx_bytes")):
        if rate in out:
            continue
        value = row.get(amount)
        usable = value is not None and seconds
        out[rate] = round(value / seconds / BYTES_PER_MB, 2) if usable else None
    return out


def digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:16]


def is_live(state: str | None) -> bool:
    return state == RunState.LIVE
