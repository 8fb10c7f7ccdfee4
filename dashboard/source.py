"""The dashboard's only door to the data: ``collector.queries.query`` and the ``ReadStore``.

Nothing here computes a metric or speaks SQL. ``DataSource`` calls the query layer, picks the
down-sampling bucket for a run's charts, and answers two cheap questions the live pages ask
on every poll: is the run still live, and have its epochs changed.

Everything returned is JSON-ready (dicts, lists, numbers, strings), because it ends up in the
browser.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from collector.queries import query
from collector.queries.timeseries import TooManyBuckets
from collector.store.api import (
    ReadStore,
    RunInfo,
    SeriesData,
    SeriesInfo,
    StepTable,
    WorkloadEvent,
)

# re-exported: how the pages and figures format what the collector's views format (they
# reach the collector only through this module, tests/unit/test_layering.py)
from collector.views.epoch_table import rows_to_show as rows_to_show
from collector.views.evidence import EvidenceEntry as EvidenceEntry
from collector.views.evidence import evidence_tree as evidence_tree
from collector.views.inference import format_milliseconds as format_milliseconds
from collector.views.inference import format_points as format_points
from collector.views.inference import format_rate as format_rate
from collector.views.inference import format_speedup as format_speedup
from collector.views.inference import format_top1 as format_top1
from contract.schema import RunState

log = logging.getLogger(__name__)

DEFAULT_MAX_POINTS = 500


@dataclass(frozen=True)
class Timeseries:
    """Down-sampled metrics of a run's hosts, as the charts need them.

    ``hosts[host]`` is ``collector.queries.query.HostSeries.to_dict()``; every host shares
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


class RequestScopedStore:
    """A ``ReadStore`` in front of the real one that remembers ``runs()``, ``events()`` and
    ``steps()`` answers for the length of one request.

    Building a live run's page, or a poll of it, asks the query layer about the same run
    several times over (summary, series, epoch table, boundaries), and each of those reads
    the run's epoch events. Inside ``DataSource.request()`` each distinct question (run,
    ``since_ns``, ``kinds``) goes to the store once; outside it, or in another thread, every
    call goes to the store. Samples are never kept. (The query layer keeps the epoch
    events and steps of finished runs itself.)
    """

    def __init__(self, store: ReadStore) -> None:
        self.store = store
        self._local = threading.local()

    @contextmanager
    def request(self) -> Iterator[None]:
        outer = getattr(self._local, "memo", None)
        if outer is not None:  # nested: the outer request keeps its memo
            yield
            return
        self._local.memo = {}
        try:
            yield
        finally:
            self._local.memo = None

    def _memo(self) -> dict[Any, Any] | None:
        return getattr(self._local, "memo", None)

    def runs(self) -> list[RunInfo]:
        memo = self._memo()
        if memo is None:
            found = self.store.runs()
        else:
            if "runs" not in memo:
                memo["runs"] = self.store.runs()
            found = list(memo["runs"])
        only = getattr(self._local, "only", None)
        return [r for r in found if r.run_id == only] if only is not None else found

    def run(self, run_id: str) -> RunInfo | None:
        memo = self._memo()
        if memo is None:
            return self.store.run(run_id)
        key = ("run", run_id)
        if key not in memo:
            memo[key] = self.store.run(run_id)
        return memo[key]

    @contextmanager
    def only_run(self, run_id: str) -> Iterator[None]:
        """Inside, ``runs()`` lists that run alone: ``query.runs_summary`` then summarises
        one run rather than every run in the store."""
        self._local.only = run_id
        try:
            yield
        finally:
            self._local.only = None

    def events(
        self, run_id: str, since_ns: int | None = None, kinds: tuple[str, ...] | None = None
    ) -> list[WorkloadEvent]:
        memo = self._memo()
        if memo is None:
            return self.store.events(run_id, since_ns, kinds)
        key = ("events", run_id, since_ns, kinds)
        if key not in memo:  # the same question is asked several times; ask the store once
            memo[key] = self.store.events(run_id, since_ns, kinds)
        return list(memo[key])

    def steps(self, run_id: str, since_ns: int | None = None) -> StepTable:
        memo = self._memo()
        if memo is None:
            return self.store.steps(run_id, since_ns)
        key = ("steps", run_id, since_ns)
        if key not in memo:
            memo[key] = self.store.steps(run_id, since_ns)
        return memo[key]  # read-only columns: shared as is

    def list_series(
        self, measurement: str, field: str, host: str | None = None
    ) -> list[SeriesInfo]:
        return self.store.list_series(measurement, field, host)

    def read_series(self, series: list[SeriesInfo], start_ns: int, end_ns: int) -> list[SeriesData]:
        return self.store.read_series(series, start_ns, end_ns)

    def hosts(self) -> list[str]:
        return self.store.hosts()


class DataSource:
    """``complete_ahead``: a finished run's page is made without its time series and step
    shares, and without its findings when they are not computed yet;
    ``complete_in_background`` computes them in a background thread while the browser
    draws the rest of the page, so that the callbacks asking for them find them ready or
    nearly."""

    def __init__(
        self, store: ReadStore, max_points: int = DEFAULT_MAX_POINTS, complete_ahead: bool = True
    ) -> None:
        self.store = RequestScopedStore(store)
        self.max_points = max_points
        self.complete_ahead = complete_ahead
        # (what is kept about finished runs, their charts included, is the query layer's
        # cache of this store: collector.queries.query.RunCache; nothing is kept here)
        self._background: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self.prepared: frozenset[str] = frozenset()  # run ids the preparing thread has done

    def request(self) -> AbstractContextManager[None]:
        """One page build or poll: store answers are shared inside it (see
        ``RequestScopedStore``)."""
        return self.store.request()

    # -- runs ------------------------------------------------------------------------------
    def runs(self) -> list[dict[str, Any]]:
        """Every run, newest first (``collector.queries.query.RunSummary`` as dicts)."""
        return [summary.to_dict() for summary in query.runs_summary(self.store)]

    def run(self, run_id: str) -> dict[str, Any] | None:
        """One run's summary (computing no other run's)."""
        with self.store.only_run(run_id):
            found = self.runs()
        return found[0] if found else None

    # -- finished runs, prepared ahead --------------------------------------------------------
    def prepare(self, run_id: str) -> bool:
        """Compute what a finished run's page shows (summary, charts, epoch table, findings),
        so that opening it later only lays the page out. False for live or unknown runs."""
        with self.request():
            info = self.run_info(run_id)
            if info is None or is_live(info.state):
                return False
            self.run(run_id)
            self.timeseries(run_id, live=False)
            self.step_shares(run_id)
            self.boundaries(run_id)
            self.epochs(run_id)
            self.findings(run_id)
        return True

    def start_preparing(self, newest: int, every_s: float = 30.0) -> threading.Event:
        """Keep the ``newest`` finished runs prepared, in a background thread: at once, and
        again as runs finish. Returns the event that stops it."""
        stop = threading.Event()
        thread = threading.Thread(
            target=self._prepare_loop, args=(newest, every_s, stop), name="prepare-runs"
        )
        thread.daemon = True
        thread.start()
        return stop

    def _prepare_loop(self, newest: int, every_s: float, stop: threading.Event) -> None:
        from collector.store.promql import BackendError

        done: set[tuple[str, int | None]] = set()
        outage: str | None = None  # the sample backend's last complaint, logged once
        while not stop.is_set():
            try:
                finished = [r for r in self.store.runs() if not is_live(r.state)][:newest]
                for info in finished:
                    if stop.is_set():
                        return
                    if (info.run_id, info.end_ns) not in done and self.prepare(info.run_id):
                        done.add((info.run_id, info.end_ns))
                        log.info("prepared run %s", info.run_id)
                self.prepared = frozenset(run_id for run_id, _end in done)
                outage = None
            except BackendError as error:  # --backend down: one line, not a traceback a round
                if str(error) != outage:
                    log.warning("preparing runs: %s; trying again every %g s", error, every_s)
                outage = str(error)
            except Exception:  # a bad run must not stop the others from being prepared
                log.exception("preparing runs failed; trying again in %g s", every_s)
            stop.wait(every_s)

    def forget(self, timeout: float = 60.0) -> None:
        """Drop what the query layer keeps about this store's finished runs, once any
        background completion has ended: the benchmark's cold opens."""
        with self._lock:
            background = list(self._background)
        for thread in background:
            thread.join(timeout)
        query.clear_cache(self.store)

    def run_info(self, run_id: str) -> RunInfo | None:
        """The store's record of the run (cheap: no events, no throughput)."""
        return self.store.run(run_id)

    def run_state(self, run_id: str) -> str | None:
        """live | finished | failed | interrupted."""
        info = self.run_info(run_id)
        return info.state if info else None

    # -- one run ---------------------------------------------------------------------------
    def timeseries(self, run_id: str, live: bool) -> Timeseries:
        """The run's charts data, down-sampled on the server to ``max_points`` buckets.
        A finished run's are kept by the query layer; two threads asking for them at once
        compute them once."""
        info = self.run_info(run_id)
        return self._timeseries(run_id, live or info is None or is_live(info.state))

    def complete_in_background(self, run_id: str) -> None:
        """With ``complete_ahead``: compute a finished run's time series and step shares,
        then its findings, in a background thread, for the callbacks that will ask for
        them. Called once the page is made rather than before: the page's own queries would
        otherwise share the interpreter with this thread and come later."""
        if not self.complete_ahead:
            return

        def compute() -> None:
            try:
                with self.request():
                    self.findings(run_id)
                    self.timeseries(run_id, live=False)
                    self.step_shares(run_id)
            except Exception:  # the callbacks will compute (and report) it themselves
                log.exception("computing run %s in the background failed", run_id)

        name = f"compute-{run_id}"
        thread = threading.Thread(target=compute, name=name, daemon=True)
        with self._lock:
            self._background = {t for t in self._background if t.is_alive()}
            if any(t.name == name for t in self._background):
                return  # (the page asked for again meanwhile)
            self._background.add(thread)
        thread.start()

    def _timeseries(self, run_id: str, live: bool) -> Timeseries:
        charts = _charts(query.run_timeseries(self.store, run_id, max_points=self.max_points))
        buckets = {series["bucket_ns"] for series in charts.hosts.values()}
        if live and len(buckets) > 1:
            # hosts' spans differ a little (clock skew): redo with one bucket for all, so
            # every host's updates arrive on the same grid
            bucket = max(buckets)
            charts = _charts(query.run_timeseries(self.store, run_id, bucket_ns=bucket), bucket)
        return charts

    def timeseries_since(self, run_id: str, since: dict[str, int], bucket_ns: int) -> Timeseries:
        """Only the buckets completed after ``since`` (per host), on the same grid; no host
        at all for a grid too fine for its span (a page's state sent back altered), which
        makes the page draw the run afresh."""
        try:
            result = query.run_timeseries(self.store, run_id, since_ns=since, bucket_ns=bucket_ns)
        except TooManyBuckets as problem:
            log.warning("run %s: not updated as asked: %s", run_id, problem)
            return Timeseries(bucket_ns=bucket_ns, hosts={})
        return _charts(result, bucket_ns)

    def boundaries(self, run_id: str) -> dict[str, list[dict[str, Any]]]:
        return query.epoch_boundaries(self.store, run_id)

    def epochs(self, run_id: str) -> list[dict[str, Any]]:
        """The per-epoch report rows (``collector.queries.query.TABLE_COLUMNS``)."""
        return query.epoch_table(self.store, run_id)

    def rank_parts(self, run_id: str) -> list[dict[str, Any]]:
        """Each rank's milliseconds per step by part, per epoch."""
        return query.rank_step_parts(self.store, run_id)

    def steps_after(self, run_id: str, since_ns: int | None) -> int:
        """How many of the run's step events came after ``since_ns`` (all for None)."""
        return len(self.store.steps(run_id, since_ns))

    def step_shares(self, run_id: str) -> dict[str, list[dict[str, Any]]]:
        """Each host's sampled steps: input wait, compute and all-reduce %, and each rank's."""
        return query.step_shares(self.store, run_id, self.max_points)

    def findings(self, run_id: str) -> list[dict[str, Any]]:
        return query.findings(self.store, run_id)

    def kept_findings(self, run_id: str) -> list[dict[str, Any]] | None:
        """A finished run's findings if they are computed already (prepared, or opened
        before), else None: computing them would hold the page back."""
        return query.kept_findings(self.store, run_id)

    # -- all runs --------------------------------------------------------------------------
    def scaling(self) -> list[dict[str, Any]]:
        return query.scaling_table(self.store)

    def forecast(self, run_id: str) -> dict[str, Any] | None:
        """The scaling page's forecast of a run at 2-16 nodes
        (``collector.queries.forecast.dashboard_forecast``), None for an unknown run."""
        from collector.queries.forecast import dashboard_forecast

        return dashboard_forecast(self.store, run_id)

    # -- Slurm jobs -------------------------------------------------------------------------
    def jobs(self) -> list[dict[str, Any]]:
        """Every job the agents saw, newest first (``collector.views.jobs.jobs_rows``)."""
        from collector.views.jobs import jobs_rows

        return jobs_rows(self.store)

    def job(self, job_id: str) -> dict[str, Any] | None:
        """One job per node, its neighbours, findings and runs (``job_view``); None when no
        agent saw it."""
        from collector.views.jobs import job_view

        return job_view(self.store, job_id)

    # -- inference runs (`workloads infer`) -------------------------------------------------
    def inference_runs(self) -> list[dict[str, Any]]:
        """Inference runs, newest first."""
        from collector.analysis.inference import inference_runs

        return [{"run_id": run.run_id, "state": run.state} for run in inference_runs(self.store)]

    def inference(self, run_id: str) -> dict[str, Any] | None:
        """``collector.analysis.inference``'s report of the run (its JSON), None for no such run."""
        from collector.queries.inference import inference_report

        report = inference_report(self.store, run_id)
        return None if report is None else report.to_json()


def _charts(series: dict[str, query.HostSeries], bucket_ns: int | None = None) -> Timeseries:
    """The query layer's series as the charts take them (the lists shared, not copied)."""
    hosts = {host: s.to_dict() for host, s in sorted(series.items())}
    if bucket_ns is None:
        bucket_ns = max((s["bucket_ns"] for s in hosts.values()), default=0)
    return Timeseries(bucket_ns=bucket_ns, hosts=hosts)


def digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:16]


def is_live(state: str | None) -> bool:
    return state == RunState.LIVE
