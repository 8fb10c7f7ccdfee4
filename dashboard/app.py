"""The Dash app: routing, and the callbacks that keep live pages current.

``create_app(source)`` builds the app over a ``DataSource``. The page for a URL is built by
the router callback; a live run's page then polls (``dcc.Interval``, every ``poll_seconds``)
and fetches only the buckets completed since its last answer (``since_ns``), appending them
to the charts with ``dash.Patch``; the charts, per-epoch table, bars and findings are
rebuilt only when an epoch starts or ends (or a host shows something it had not: its first
GPU sample). When the run ends the page redraws once and stops polling.
A live chart that has grown past twice ``max_points`` is redrawn with coarser buckets, so
the browser never holds more than that.
Every response carries security headers (``dashboard.headers``: CSP, no framing).

Everything is served from this process (``serve_locally``): no CDN, no web fonts. The app
has no route that writes: the store is only read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

from dash import Dash, Input, Output, Patch, State, dcc, html, no_update
from dash.exceptions import PreventUpdate

from contract.schema import INFERENCE_FRAMEWORK
from dashboard import figures, ids, pages
from dashboard.auth import Credentials, require_basic_auth
from dashboard.headers import add_security_headers
from dashboard.source import DataSource, Timeseries, digest, is_live

ASSETS = Path(__file__).parent / "assets"
DEFAULT_POLL_SECONDS = 2.0

# Scroll to the URL's #anchor once per visit, after the page is built and, on a run page,
# after its findings (which arrive last and push the charts down) are in.
SCROLL_TO_ANCHOR = """
function(_children, hash, path, done) {
    const key = path + hash;
    if (!hash || done === key) { return window.dash_clientside.no_update; }
    const findings = document.getElementById('__RUN_FINDINGS__');
    if (findings && findings.innerText.startsWith('Looking')) {
        return window.dash_clientside.no_update;
    }
    setTimeout(function () {
        var target = document.getElementById(decodeURIComponent(hash.slice(1)));
        if (target) { target.scrollIntoView(); }
    }, 150);
    return key;
}
""".replace("__RUN_FINDINGS__", ids.RUN_FINDINGS)


def create_app(
    source: DataSource,
    poll_seconds: float = DEFAULT_POLL_SECONDS,
    credentials: Credentials | None = None,
) -> Dash:
    app = Dash(
        __name__,
        title="epochscope",
        assets_folder=str(ASSETS),
        serve_locally=True,
        suppress_callback_exceptions=True,  # pages come and go with the URL
        update_title=None,
    )
    app.layout = html.Div(
        [
            dcc.Location(id=ids.URL),
            html.Div(id=ids.NAV),
            html.Main(id=ids.PAGE, className="page"),
            dcc.Store(id=ids.SCROLL_DONE),
        ]
    )
    if credentials is not None:
        require_basic_auth(app.server, credentials)
    poll_ms = max(100, round(poll_seconds * 1000))
    Callbacks(source, poll_ms).register(app)
    # (after the callbacks: the hashes cover the clientside ones, inline scripts)
    add_security_headers(app.server, app.csp_hashes())
    return app


class Callbacks:
    """Each callback is a small method over the ``DataSource``; no data is kept between
    requests except what the browser sends back in its ``dcc.Store``."""

    def __init__(self, source: DataSource, poll_ms: int) -> None:
        self.source = source
        self.poll_ms = poll_ms

    def register(self, app: Dash) -> None:
        app.callback(
            Output(ids.PAGE, "children"),
            Output(ids.NAV, "children"),
            Output(ids.SCROLL_DONE, "data"),
            Input(ids.URL, "pathname"),
            Input(ids.URL, "search"),
        )(self.route)
        for trigger in (ids.PAGE, ids.RUN_FINDINGS):
            app.clientside_callback(
                SCROLL_TO_ANCHOR,
                Output(ids.SCROLL_DONE, "data", allow_duplicate=True),
                Input(trigger, "children"),
                State(ids.URL, "hash"),
                State(ids.URL, "pathname"),
                State(ids.SCROLL_DONE, "data"),
                prevent_initial_call=True,
            )
        app.callback(
            Output(ids.PAGE, "children", allow_duplicate=True),
            Input(ids.RUN_WAIT_INTERVAL, "n_intervals"),
            State(ids.RUN_WAIT_ID, "data"),
            prevent_initial_call=True,
        )(self.look_for_run)
        app.callback(
            Output(ids.RUNS_TABLE, "children"),
            Output(ids.RUNS_DIGEST, "data"),
            Input(ids.RUNS_INTERVAL, "n_intervals"),
            State(ids.RUNS_DIGEST, "data"),
            prevent_initial_call=True,
        )(self.refresh_runs)
        app.callback(
            Output(ids.TIMESERIES_GRAPH, "figure"),
            *[Output(chart_id, "figure") for chart_id in pages.EPOCH_CHARTS],
            Output(ids.STEP_SHARES_GRAPH, "figure"),
            Output(ids.EPOCH_TABLE_CONTAINER, "children"),
            Output(ids.RUN_EPOCHS, "data"),
            Output(ids.RUN_HEADER, "children"),
            Output(ids.BUCKET_NOTE, "children"),
            Output(ids.ABSENT_NOTE, "children"),
            Output(ids.EPOCH_DISK_PANEL, "style"),
            Output(ids.EPOCH_NFS_PANEL, "style"),
            Output(ids.EPOCH_FABRIC, "style"),
            Output(ids.RUN_INTERVAL, "disabled"),
            Output(ids.RUN_LIVE, "data"),
            Input(ids.RUN_INTERVAL, "n_intervals"),
            State(ids.RUN_LIVE, "data"),
            State(ids.EPOCH_TABLE_HOSTS, "value"),
            prevent_initial_call=True,
        )(self.refresh_run)
        app.callback(
            Output(ids.EPOCH_TABLE_CONTAINER, "children", allow_duplicate=True),
            Input(ids.EPOCH_TABLE_HOSTS, "value"),
            State(ids.RUN_LIVE, "data"),
            prevent_initial_call=True,
        )(self.switch_epoch_table)
        app.callback(
            Output(ids.RUN_FINDINGS, "children"),
            Input(ids.RUN_EPOCHS, "data"),
        )(self.load_run_findings)
        app.callback(
            Output(ids.TIMESERIES_SLOT, "children"),
            Output(ids.BUCKET_NOTE, "children", allow_duplicate=True),
            Output(ids.STEP_SHARES_SLOT, "children"),
            Input(ids.RUN_PENDING, "data"),
            prevent_initial_call="initial_duplicate",  # called when the page comes
        )(self.load_pending_timeseries)
        app.callback(
            Output(ids.SCALING_GRAPH, "figure"),
            Output(ids.ACCURACY_GRAPH, "figure"),
            Output(ids.ACCURACY_CHART, "style"),
            Output(ids.SCALING_TABLE, "children"),
            Input(ids.SCALING_RUNS, "value"),
            prevent_initial_call=True,
        )(self.select_scaling_runs)
        app.callback(
            Output(ids.FORECAST_BODY, "children"),
            Input(ids.FORECAST_RUN, "value"),
        )(self.select_forecast_run)
        app.callback(
            Output(ids.FINDINGS_BODY, "children"),
            Input(ids.FINDINGS_RUN, "value"),
            prevent_initial_call=True,
        )(self.select_findings_run)
        app.callback(
            Output(ids.INFERENCE_BODY, "children"),
            Input(ids.INFERENCE_RUN, "value"),
            prevent_initial_call=True,
        )(self.select_inference_run)

    # -- routing ---------------------------------------------------------------------------
    def route(self, pathname: str | None, search: str | None) -> tuple[Any, Any, None]:
        with self.source.request():
            page, nav = self._route(pathname or "/", search)
        return page, nav, None  # a new page: its #anchor is still to scroll to

    def _route(self, pathname: str, search: str | None) -> tuple[Any, Any]:
        nav = pages.navigation(pathname)
        if pathname in ("/", "/runs", "/runs/"):
            runs = self.source.runs()
            return pages.runs_page(runs, self.poll_ms, digest(runs)), nav
        if pathname.startswith("/runs/"):
            return self.run_page(unquote(pathname.removeprefix("/runs/"))), nav
        if pathname.rstrip("/") == "/scaling":
            rows = self.source.scaling()
            wanted = parse_qs((search or "").lstrip("?")).get("forecast", [None])[0]
            # the forecast comes by its own callback (select_forecast_run, called when the
            # page comes): building the run's report must not hold the page back
            run_id = wanted or pages.forecast_run_default(rows)
            return pages.scaling_page(rows, run_id), nav
        if pathname.rstrip("/") == "/findings":
            runs = self.source.runs()
            wanted = parse_qs((search or "").lstrip("?")).get("run", [None])[0]
            run_id = wanted or (runs[0]["run_id"] if runs else None)
            found = self.source.findings(run_id) if run_id else []
            return pages.findings_page(runs, run_id, found), nav
        if pathname.rstrip("/") == "/inference":
            runs = self.source.inference_runs()
            wanted = parse_qs((search or "").lstrip("?")).get("run", [None])[0]
            run_id = wanted or (runs[0]["run_id"] if runs else None)
            report = self.source.inference(run_id) if run_id else None
            return pages.inference_page(runs, run_id, report), nav
        if pathname.rstrip("/") == "/jobs":
            return pages.jobs_page(self.source.jobs()), nav
        if pathname.startswith("/jobs/"):
            job_id = unquote(pathname.removeprefix("/jobs/"))
            view = self.source.job(job_id)
            if view is None:
                return pages.not_found(f"No job {job_id!r} seen by the agents."), nav
            return pages.job_page(view), nav
        return pages.not_found(f"No page at {pathname}."), nav

    def run_page(self, run_id: str) -> html.Div:
        run = self.source.run(run_id)
        if run is None:
            return pages.waiting_for_run(run_id, self.poll_ms)
        if run.get("framework") == INFERENCE_FRAMEWORK:  # no epochs: its own page
            runs = self.source.inference_runs()
            return pages.inference_page(runs, run_id, self.source.inference(run_id))
        live = is_live(run["state"])
        # A finished run's page comes without its time series and step shares, the
        # largest charts and the furthest down: they come by their own callback
        # (load_pending_timeseries) once the page is up, so that the first screen (the
        # header and the findings) is drawn without waiting for them. Its findings come
        # with the page when they are computed already (a prepared run, or one opened
        # before), else by their own callback (load_run_findings), as a live page's do:
        # they follow its epochs.
        ts = self.source.timeseries(run_id, live) if live else None
        boundaries = self.source.boundaries(run_id)
        rows = self.source.epochs(run_id)
        # the steps' shares come with the time series (both read the steps)
        shares = self.source.step_shares(run_id) if ts is not None else None
        found = None if live else self.source.kept_findings(run_id)
        live_state = self._live_state(run_id, ts, boundaries, rows)
        live_state["last_step_ns"] = pages.last_step_ns(shares)
        page = pages.run_page(
            run,
            ts,
            boundaries,
            rows,
            live,
            self.poll_ms,
            live_state,
            self.source.rank_parts(run_id),
            shares,
            found,
        )
        if ts is None:
            self.source.complete_in_background(run_id)
        return page

    def look_for_run(self, _tick: int, run_id: str | None) -> Any:
        """A waiting run page: the run's page once the run is in the store."""
        if not run_id:
            raise PreventUpdate
        with self.source.request():
            if self.source.run(run_id) is None:
                raise PreventUpdate
            return self.run_page(run_id)

    @staticmethod
    def _live_state(
        run_id: str, ts: Timeseries | None, boundaries: dict[str, Any], rows: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """What the browser sends back on each poll (only a live run's page polls): with
        the time-series panels drawn and their scales, which the appended values follow."""
        charts = figures.shown_charts(rows, ts.hosts) if ts else ()
        scales = figures.chart_scales(charts, ts.hosts) if ts else {}
        return {
            "charts": [chart.chart_id for chart in charts],
            "scales": {chart_id: factor for chart_id, (_unit, factor) in scales.items()},
            "run_id": run_id,
            "bucket_ns": ts.bucket_ns if ts else 0,
            "since": ts.next_since if ts else {},
            "hosts": list(ts.hosts) if ts else [],
            "points": ts.points if ts else 0,
            "epochs": digest(boundaries),
        }

    def load_pending_timeseries(self, pending: dict[str, Any] | None) -> tuple[Any, str, Any]:
        """The time-series and step-shares charts of a run page drawn without them
        (``ids.RUN_PENDING``), into their slots: each chart is drawn once, with its data.
        The step shares only where the page shows them (``pending["step_shares"]``)."""
        if not pending:
            raise PreventUpdate
        run_id = pending["run_id"]
        with self.source.request():
            ts = self.source.timeseries(run_id, live=False)
            boundaries = self.source.boundaries(run_id)
            rows = self.source.epochs(run_id)
            shares = self.source.step_shares(run_id) if pending.get("step_shares", True) else None
        time_chart = pages.graph(
            ids.TIMESERIES_GRAPH, pages.timeseries_figure(ts, boundaries, rows)
        )
        shares_chart: Any = no_update
        if shares is not None:
            shares_figure = figures.step_shares_figure(shares, list(ts.hosts))
            shares_chart = pages.graph(ids.STEP_SHARES_GRAPH, shares_figure)
        return time_chart, pages.bucket_note(ts, boundaries), shares_chart

    # -- runs page -------------------------------------------------------------------------
    def refresh_runs(self, _tick: int, known: str | None) -> tuple[Any, str]:
        with self.source.request():
            runs = self.source.runs()
        now = digest(runs)
        if now == known:
            raise PreventUpdate
        return pages.runs_table(runs), now

    # -- run page --------------------------------------------------------------------------
    def refresh_run(
        self, _tick: int, state: dict[str, Any] | None, per_host: list[str] | None
    ) -> tuple:
        if not state:
            raise PreventUpdate
        with self.source.request():
            return self._refresh_run(state, bool(per_host))

    def switch_epoch_table(self, per_host: list[str] | None, state: dict[str, Any] | None) -> Any:
        if not state:
            raise PreventUpdate
        with self.source.request():
            rows = self.source.epochs(state["run_id"])
        return pages.epoch_table(rows, per_host=bool(per_host))

    def _refresh_run(self, state: dict[str, Any], per_host: bool) -> tuple:
        run_id = state["run_id"]
        live = is_live(self.source.run_state(run_id))
        boundaries = self.source.boundaries(run_id)
        epochs_changed = digest(boundaries) != state["epochs"]
        update = self.source.timeseries_since(run_id, state["since"], state["bucket_ns"])
        hosts = state["hosts"]
        grown = state["points"] + update.points > 2 * self.source.max_points
        charts = figures.charts_of(state.get("charts", []))
        # a panel left out (no host had it) that now has samples: draw it
        appeared = any(
            figures.chart_has_samples(chart, update.hosts)
            for chart in figures.TIME_CHARTS
            if chart not in charts
        )
        # an epoch started or ended: its shading and mean, and perhaps other panels, change
        redraw = not live or grown or list(update.hosts) != hosts or epochs_changed or appeared

        rows = self.source.epochs(run_id) if redraw else None
        bucket_note: Any = no_update
        drawn: dict[str, Any] | None = None  # the hosts' series drawn anew
        if redraw:
            ts = self.source.timeseries(run_id, live)
            drawn = ts.hosts
            time_figure: Any = pages.timeseries_figure(ts, boundaries, rows or [])
            new_state = self._live_state(run_id, ts, boundaries, rows or [])
            bucket_note = pages.bucket_note(ts, boundaries)
        else:
            time_figure = self._extend(update, hosts, charts, state.get("scales", {}))
            new_state = {
                **state,
                "since": {**state["since"], **update.next_since},
                "points": state["points"] + update.points,
                "epochs": digest(boundaries),
            }

        # the shares of each sampled step: redrawn with the epochs, and whenever a live
        # run's ranks sent steps since the last poll
        shares_figure: Any = no_update
        last_step_ns = state.get("last_step_ns")
        if rows is not None or self.source.steps_after(run_id, last_step_ns):
            shares = self.source.step_shares(run_id)
            shares_figure = figures.step_shares_figure(shares, new_state["hosts"])
            last_step_ns = pages.last_step_ns(shares)
        new_state = {**new_state, "last_step_ns": last_step_ns}

        if rows is not None:
            epoch_figures: list[Any] = pages.epoch_figures(
                rows, new_state["hosts"], self.source.rank_parts(run_id)
            )
            table: Any = pages.epoch_table(rows, per_host)
            epochs_key: Any = pages.epochs_key(new_state)
            run = self.source.run(run_id)
            header: Any = pages.run_header(run, live, self.poll_ms, rows) if run else no_update
            absent = figures.absent_measurements(rows, drawn)
            absent_note: Any = pages.absent_note(rows, absent)
            styles: list[Any] = list(pages.epoch_chart_styles(rows, absent))
        else:
            epoch_figures = [no_update] * len(pages.EPOCH_CHARTS)
            table = epochs_key = header = absent_note = no_update
            styles = [no_update] * 3
        return (
            time_figure,
            *epoch_figures,
            shares_figure,
            table,
            epochs_key,
            header,
            bucket_note,
            absent_note,
            *styles,
            not live,
            new_state,
        )

    @staticmethod
    def _extend(
        update: Timeseries,
        hosts: list[str],
        charts: tuple[figures.TimeChart, ...],
        scales: dict[str, float],
    ) -> Any:
        """A ``Patch`` of the time-series figure (its panels ``charts``, drawn at
        ``scales``): append the new buckets' values to each trace."""
        extension = figures.timeseries_extension(update.hosts, hosts, charts, scales)
        if not extension:
            return no_update
        patch = Patch()
        for index, values in extension.items():
            patch["data"][index]["y"].extend(values)
        return patch

    def load_run_findings(self, key: dict[str, Any] | None) -> Any:
        if not key or key.get("in_page"):  # (a finished run's page came with them)
            raise PreventUpdate
        with self.source.request():
            found = self.source.findings(key["run_id"])
        return pages.findings_list(found, key["run_id"], same_page=True)

    # -- scaling and findings --------------------------------------------------------------
    def select_scaling_runs(self, selected: list[str] | None) -> tuple:
        chosen = set(selected or [])
        with self.source.request():
            rows = [row for row in self.source.scaling() if row["run_id"] in chosen]
        accuracy = figures.time_to_target_figure(rows)
        style = pages.accuracy_style(rows)
        return figures.scaling_figure(rows), accuracy, style, pages.scaling_table(rows)

    def select_forecast_run(self, run_id: str | None) -> Any:
        if not run_id:
            raise PreventUpdate
        with self.source.request():
            view = self.source.forecast(run_id)
        return pages.forecast_body(view)

    def select_findings_run(self, run_id: str | None) -> Any:
        if not run_id:
            raise PreventUpdate
        with self.source.request():
            found = self.source.findings(run_id)
        return pages.findings_list(found, run_id, same_page=False)

    def select_inference_run(self, run_id: str | None) -> Any:
        if not run_id:
            raise PreventUpdate
        with self.source.request():
            report = self.source.inference(run_id)
        return pages.inference_body(report)
