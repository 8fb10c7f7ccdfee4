"""How fast the run page of a big run opens: 8 hosts x 3 h of 1 Hz samples.

    python bench/dashboard/bench_run_page.py [--db PATH] [--repeat 3] [--json OUT]
        [--variants downsampled every_sample]

Builds the store with make_store.py when ``--db`` does not exist yet (a few minutes; kept
for the next run). Then, side by side in one process, for the dashboard as shipped
(``--max-points 500``: down-sampled on the server) and for a dashboard that ships every
1-second sample (``max_points`` = the run's length in seconds):

- server: the run page callback (``/runs/<id>``: run summary, time series, epoch table,
  layout), with the query layer's cache of finished runs cleared first (cold: then the
  time series come by a callback of their own, timed with it; ``cold_route`` alone) and
  then warm; the findings callback that follows a cold page; and what the computed page
  sends (JSON bytes, points per chart trace);
- browser: headless Chromium opening ``/runs/<id>`` until all 4 plots (time series, three
  per-epoch bar charts) are drawn with their data (a run the server has not computed yet
  gets its time series by a callback of their own) and the epoch table is there, timed
  by the page itself (``performance.now()`` since navigation start), with the server
  cache cold and warm; for a click on the run in the runs table, also until the findings
  are shown.

Each number is the median of ``--repeat`` runs. The machine's load average is printed with
them: on a shared machine the browser numbers move with it.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_store  # noqa: E402
import psutil  # noqa: E402
from dash import html, no_update  # noqa: E402
from dash._utils import to_json  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402
from werkzeug.serving import make_server  # noqa: E402

from collector.store import SqliteStore  # noqa: E402
from dashboard import ids  # noqa: E402
from dashboard.app import Callbacks, create_app  # noqa: E402
from dashboard.source import DataSource  # noqa: E402
from tests.support.browser import chrome_driver  # noqa: E402
from tests.support.layout import find as find_component  # noqa: E402

DEFAULT_DB = Path(os.environ.get("TMPDIR", "/tmp")) / "epochscope-bench-dashboard.sqlite"
GRAPHS = 4  # the time series and three per-epoch bar charts
FINDINGS_SHOWN = f"""(() => {{
const box = document.querySelector('#{ids.RUN_FINDINGS}');
return Boolean(box && !box.innerText.startsWith('Looking'));
}})()"""
PAGE_DRAWN = f"""(() => {{
const graphs = Array.from(document.querySelectorAll('.js-plotly-plot'))
    .filter(g => g._fullLayout && g.querySelector('.main-svg'));
const series = document.querySelector('#{ids.TIMESERIES_GRAPH} .js-plotly-plot');
const table = document.querySelector('#{ids.EPOCH_TABLE_CONTAINER} table');
return graphs.length >= {GRAPHS} && Boolean(series && series.data && series.data.length && table);
}})()"""
# polled through WebDriver: the time of the first poll that finds it so
FINDINGS_READY = f"return {FINDINGS_SHOWN} ? performance.now() : null;"
PAGE_READY = f"return {PAGE_DRAWN} ? performance.now() : null;"
# checked by the page itself at every animation frame (just before the browser paints it):
# a poll waits for the page's script to be idle and may answer a long task late
WATCH_FRAMES = f"""
window.__drawnAt = null; window.__findingsAt = null;
const watch = () => {{
    const now = performance.now();
    if (window.__drawnAt === null && {PAGE_DRAWN}) {{ window.__drawnAt = now; }}
    if (window.__findingsAt === null && {FINDINGS_SHOWN}) {{ window.__findingsAt = now; }}
    if (window.__drawnAt === null || window.__findingsAt === null) {{
        requestAnimationFrame(watch);
    }}
}};
requestAnimationFrame(watch);
"""
# polled after WATCH_FRAMES: the frames at which the page was drawn and its findings shown
FRAMES_SEEN = (
    "return window.__drawnAt === null || window.__findingsAt === null ? null"
    " : [window.__drawnAt, window.__findingsAt];"
)
# Count the charts plotly.js draws (``Plotly.react``, which dcc.Graph calls for each figure
# it is given) from now on: a chart drawn as a placeholder, then with its data, counts twice.
# Needs ``window.Plotly`` loaded with the page (the basic bundle in ``dashboard/assets``);
# -1 without it.
COUNT_DRAWS = """
window.__draws = window.Plotly ? 0 : -1;
if (window.Plotly && !window.Plotly.react.__counted) {
    const react = window.Plotly.react;
    window.Plotly.react = function (...args) {
        window.__draws += 1;
        return react.apply(this, args);
    };
    window.Plotly.react.__counted = true;
}
"""
# Where the time from ``arguments[0]`` to ``arguments[1]`` (ms, performance.now()) went, from
# the page's Resource Timing entries (the document's too, for a page load): "server", the
# time some request had been sent and not yet begun to be answered (the server computing,
# or a request queued behind another); "transfer", some answer still arriving and none
# waiting; "browser", no request in flight (the page's script, style, layout and paint).
# The three add up to the whole.
TIME_SPLIT = """
const [from, to] = [arguments[0], arguments[1]];
const entries = performance.getEntriesByType('navigation')
    .concat(performance.getEntriesByType('resource'))
    .filter(e => e.startTime >= from - 1 && e.startTime < to);
const covered = intervals => {
    let total = 0, end = -Infinity;
    for (const [a, b] of intervals.map(([a, b]) => [Math.max(a, from), Math.min(b, to)])
            .filter(([a, b]) => b > a).sort((x, y) => x[0] - y[0])) {
        if (b <= end) continue;
        total += b - Math.max(a, end);
        end = b;
    }
    return total;
};
const waiting = covered(entries.map(e => [e.startTime, e.responseStart]));
const inFlight = covered(entries.map(e => [e.startTime, e.responseEnd]));
const callbacks = entries.filter(e => e.name.includes('_dash-update-component'));
return {
    server_s: waiting / 1000,
    transfer_s: (inFlight - waiting) / 1000,
    browser_s: (to - from - inFlight) / 1000,
    requests: entries.length,
    callbacks: callbacks.length,
    body_bytes: entries.reduce((sum, e) => sum + e.encodedBodySize, 0),
    wire_bytes: entries.reduce((sum, e) => sum + e.transferSize, 0),
    callback_bytes: callbacks.reduce((sum, e) => sum + e.encodedBodySize, 0),
};
"""
SPLIT_KEYS = (
    "server_s",
    "transfer_s",
    "browser_s",
    "requests",
    "callbacks",
    "body_bytes",
    "wire_bytes",
    "callback_bytes",
)


def median_of(repeat: int, measure) -> float:
    return statistics.median(measure() for _ in range(repeat))


def server_side(store: SqliteStore, max_points: int, repeat: int) -> dict[str, Any]:
    # each callback on its own: nothing computed ahead in a background thread, whose CPU
    # would count in this process's (a dashboard without that option has none)
    ahead = "complete_ahead" in inspect.signature(DataSource).parameters
    options = {"complete_ahead": False} if ahead else {}
    source = DataSource(store, max_points=max_points, **options)
    callbacks = Callbacks(source, poll_ms=2000)
    path = f"/runs/{make_store.RUN_ID}"

    def page(clock=time.perf_counter) -> tuple[float, float]:
        """Seconds for the route, and for the route and the time-series callback that a
        page of a run not computed yet makes (0 when the page has its time series)."""
        started = clock()
        layout, _nav, _scroll = callbacks.route(path, "")
        route = clock() - started
        pending = find_component(layout, ids.RUN_PENDING)  # (older dashboards have none)
        if pending is not None and pending.data is not None:
            callbacks.load_pending_timeseries(pending.data)
        return route, clock() - started

    def cold(clock) -> tuple[float, float]:
        source.forget()
        return page(clock)

    def findings_after_cold_page(clock) -> float:
        """The run's findings (their own callback, once the page is up), after a cold page."""
        cold(clock)
        started = clock()
        callbacks.load_run_findings({"run_id": make_store.RUN_ID})
        return clock() - started

    colds = [cold(time.perf_counter) for _ in range(repeat)]
    # CPU time of this process: what the page costs without the other processes' load
    colds_cpu = [cold(time.process_time) for _ in range(repeat)]
    findings = median_of(repeat, lambda: findings_after_cold_page(time.perf_counter))
    findings_cpu = median_of(repeat, lambda: findings_after_cold_page(time.process_time))
    warm = median_of(repeat, lambda: page()[1])  # computed now: answered from the cache
    layout, _nav, _scroll = callbacks.route(path, "")
    pending = find_component(layout, ids.RUN_PENDING)
    if pending is not None and pending.data is not None:  # what the page's callback adds
        time_chart, _note, shares = callbacks.load_pending_timeseries(pending.data)
        layout = html.Div([layout, time_chart, *([shares] if shares is not no_update else [])])
    body = to_json(layout)
    points = sum(
        len(trace.get("y") or [])
        for graph in _graphs(layout)
        if graph.id == ids.TIMESERIES_GRAPH
        for trace in graph.figure["data"]
    )
    return {
        "cold_route_s": statistics.median(r for r, _ in colds),
        "cold_route_cpu_s": statistics.median(r for r, _ in colds_cpu),
        "cold_s": statistics.median(t for _, t in colds),
        "cold_cpu_s": statistics.median(t for _, t in colds_cpu),
        "cold_findings_s": findings,
        "cold_findings_cpu_s": findings_cpu,
        "warm_s": warm,
        "json_bytes": len(body.encode()),
        "figure_json_bytes": {
            graph.id: len(to_json(graph.figure).encode()) for graph in _graphs(layout)
        },
        "points": points,
    }


def _graphs(component) -> list:
    found = []
    if getattr(component, "figure", None) is not None:
        found.append(component)
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list | tuple) else [children]:
        if hasattr(child, "to_plotly_json"):  # a component, not text
            found += _graphs(child)
    return found


class CallbackClock:
    """Wall and CPU seconds of the serving thread for each Dash callback request, from the
    request's start until its response is built (the callback and its JSON)."""

    def __init__(self, flask_app: Any) -> None:
        self.records: list[dict[str, Any]] = []
        self._local = threading.local()
        flask_app.before_request(self._start)
        flask_app.teardown_request(self._stop)

    def _start(self) -> None:
        self._local.started = (time.perf_counter(), time.thread_time())

    def _stop(self, _error: BaseException | None) -> None:
        from flask import request

        started = getattr(self._local, "started", None)
        if started is None or not request.path.endswith("_dash-update-component"):
            return
        body = request.get_json(silent=True) or {}
        self.records.append(
            {
                "callback": callback_label(body.get("output", "?")),
                "wall_s": time.perf_counter() - started[0],
                "cpu_s": time.thread_time() - started[1],
            }
        )


def callback_label(output: str) -> str:
    """A callback's outputs (Dash's ``output`` string), shortened to their first."""
    first = output.strip(".").split("...")[0]
    return first if len(output) <= len(first) + 4 else f"{first} (+more)"


def median_split(splits: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(s[key] for s in splits) for key in SPLIT_KEYS}


def per_callback(clicks: list[list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """Each callback's median wall and CPU seconds over the clicks (a callback asked for
    several times in one click counts once, summed)."""
    totals: dict[str, list[tuple[float, float]]] = {}
    for records in clicks:
        summed: dict[str, tuple[float, float]] = {}
        for record in records:
            wall, cpu = summed.get(record["callback"], (0.0, 0.0))
            summed[record["callback"]] = (wall + record["wall_s"], cpu + record["cpu_s"])
        for name, value in summed.items():
            totals.setdefault(name, []).append(value)
    return {
        name: {
            "wall_s": statistics.median(w for w, _ in values),
            "cpu_s": statistics.median(c for _, c in values),
            "clicks": len(values),
        }
        for name, values in totals.items()
    }


def first_answer(driver: Any, script: str, timeout_s: float = 300) -> Any:
    """The script's first answer that is not null, polled every 20 ms."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value is not None:
            return value
        time.sleep(0.02)
    raise TimeoutError(f"the run page did not finish drawing in {timeout_s:.0f} s")


def browser_side(store: SqliteStore, max_points: int, repeat: int) -> dict[str, Any]:
    """Two ways to open the run page: loading its URL (the browser evaluates plotly.js and
    Dash's bundles again, from its cache), and clicking the run in the runs table of an open
    dashboard (how one usually gets there: the scripts are already running)."""
    source = DataSource(store, max_points=max_points)
    app = create_app(source)
    clock = CallbackClock(app.server)
    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    run_path = f"/runs/{make_store.RUN_ID}"
    driver = chrome_driver()

    driver.set_script_timeout(300)  # a page busy drawing a million points answers late

    def answer(script: str) -> Any:
        return first_answer(driver, script)

    def until(script: str, started_ms: float) -> float:
        return (answer(script) - started_ms) / 1000

    def load(cold: bool) -> tuple[float, dict[str, float]]:
        """Seconds from navigation start until drawn, and where they went (TIME_SPLIT)."""
        if cold:
            source.forget()
        driver.get("about:blank")
        driver.get(base + run_path)
        drawn_ms = answer(PAGE_READY)  # performance.now() counts from navigation start
        return drawn_ms / 1000, driver.execute_script(TIME_SPLIT, 0.0, drawn_ms)

    def loads(cold: bool) -> tuple[float, dict[str, float]]:
        times = [load(cold) for _ in range(repeat)]
        return statistics.median(t for t, _ in times), median_split([s for _, s in times])

    browser = psutil.Process(driver.service.process.pid)

    def browser_cpu() -> float:
        """CPU seconds used so far by Chromium's processes (browser, renderer, GPU...)."""
        total = 0.0
        for process in browser.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                total += times.user + times.system
        return total

    def click(cold: bool) -> tuple[float, ...]:
        """Seconds after the click until the charts and table are drawn and until the
        findings are shown (at the first animation frame, and at the first poll, that
        finds them so); CPU seconds the browser and this process (the server) spent
        meanwhile."""
        driver.find_element(By.CSS_SELECTOR, "nav a[href='/']").click()
        WebDriverWait(driver, 60).until(
            ec.presence_of_element_located((By.CSS_SELECTOR, f"#{ids.RUNS_LIST}"))
        )
        if cold:
            source.forget()
        time.sleep(0.5)  # let the runs page settle before counting CPU
        browser_before, server_before = browser_cpu(), time.process_time()
        answered_before = len(clock.records)
        started = driver.execute_script(
            WATCH_FRAMES + COUNT_DRAWS + "performance.clearResourceTimings();"
            "const link = document.querySelector(`a[href='${arguments[0]}']`);"
            "const now = performance.now(); link.click(); return now;",
            run_path,
        )
        drawn_polled = until(PAGE_READY, started)
        findings_polled = until(FINDINGS_READY, started)
        frames = answer(FRAMES_SEEN)
        times = (
            (frames[0] - started) / 1000,
            (frames[1] - started) / 1000,
            browser_cpu() - browser_before,
            time.process_time() - server_before,
            drawn_polled,
            findings_polled,
            driver.execute_script("return window.__draws;"),  # by the time findings are in
        )
        split = driver.execute_script(TIME_SPLIT, started, frames[0])
        return times, split, clock.records[answered_before:]

    def clicks(cold: bool) -> tuple[tuple[float, ...], dict[str, float], dict[str, Any]]:
        done = [click(cold) for _ in range(repeat)]
        times = tuple(statistics.median(t[0][i] for t in done) for i in range(7))
        return times, median_split([t[1] for t in done]), per_callback([t[2] for t in done])

    try:
        driver.get(base + "/")
        driver.execute_script("performance.setResourceTimingBufferSize(100000);")
        first, first_split = load(True)  # the browser fetches plotly.js and Dash's bundles once
        load_cold, load_cold_split = loads(True)
        load_warm, load_warm_split = loads(False)
        cold, cold_split, cold_callbacks = clicks(True)
        warm, warm_split, warm_callbacks = clicks(False)
        results = {
            "first_visit_s": first,
            "first_visit_split": first_split,
            "load_cold_s": load_cold,
            "load_cold_split": load_cold_split,
            "load_warm_s": load_warm,
            "load_warm_split": load_warm_split,
            "click_cold_split": cold_split,
            "click_warm_split": warm_split,
            "click_cold_callbacks": cold_callbacks,
            "click_warm_callbacks": warm_callbacks,
            "click_cold_s": cold[0],
            "click_warm_s": warm[0],
            "click_cold_findings_s": cold[1],
            "click_warm_findings_s": warm[1],
            "click_cold_browser_cpu_s": cold[2],
            "click_warm_browser_cpu_s": warm[2],
            "click_cold_server_cpu_s": cold[3],
            "click_warm_server_cpu_s": warm[3],
            "click_cold_polled_s": cold[4],
            "click_warm_polled_s": warm[4],
            "click_cold_findings_polled_s": cold[5],
            "click_warm_findings_polled_s": warm[5],
            "click_cold_charts_drawn": cold[6],
            "click_warm_charts_drawn": warm[6],
        }
        errors = driver.get_log("browser")
        if errors:
            raise RuntimeError(f"browser console errors: {errors}")
        return results
    finally:
        driver.quit()
        server.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=DEFAULT_DB)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=("downsampled", "every_sample"),
        default=["downsampled", "every_sample"],
        help="which dashboards to measure (default: both, side by side)",
    )
    args = parser.parse_args()
    if not args.db.exists():
        print(f"building {args.db} (8 hosts x 3 h) ...")
        make_store.build(args.db)

    store = SqliteStore(args.db)
    run = store.run(make_store.RUN_ID)
    seconds = round((run.end_ns - run.start_ns) / 1e9)
    every_sample = seconds + 1
    results: dict[str, Any] = {
        "hosts": len(run.hosts),
        "run_seconds": seconds,
        "series_per_host": len(
            {
                (s.measurement, s.field, tuple(sorted(s.tags.items())))
                for s in _all_series(store, run.hosts[0])
            }
        ),
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
    }
    variants = {"downsampled": 500, "every_sample": every_sample}
    for label, max_points in ((v, variants[v]) for v in args.variants):
        print(f"measuring {label} (max_points={max_points}) ...", flush=True)
        results[label] = {
            "max_points": max_points,
            "server": server_side(store, max_points, args.repeat),
            "browser": browser_side(store, max_points, args.repeat),
        }
        print(json.dumps(results[label]), flush=True)
        print(summary(results[label]), flush=True)
    store.close()

    results["load_average_after"] = os.getloadavg()
    print(json.dumps(results, indent=2))
    if "downsampled" in results and "every_sample" in results:
        down, full = results["downsampled"], results["every_sample"]
        print(
            "ratios every_sample / downsampled: "
            f"JSON {full['server']['json_bytes'] / down['server']['json_bytes']:.1f}x, "
            f"server cold {full['server']['cold_s'] / down['server']['cold_s']:.2f}x, "
            "browser click cold "
            f"{full['browser']['click_cold_s'] / down['browser']['click_cold_s']:.2f}x"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def summary(variant: dict[str, Any]) -> str:
    """Each way of opening the page: wall seconds, and server / transfer / browser."""
    browser, server = variant["browser"], variant["server"]
    lines = ["                    total   server  transfer  browser   bytes (callbacks)"]
    for label, key in (
        ("first visit", "first_visit"),
        ("page load cold", "load_cold"),
        ("page load warm", "load_warm"),
        ("click cold", "click_cold"),
        ("click warm", "click_warm"),
    ):
        split = browser[f"{key}_split"]
        lines.append(
            f"{label:18} {browser[f'{key}_s']:6.2f} s {split['server_s']:6.2f}  "
            f"{split['transfer_s']:7.2f}  {split['browser_s']:7.2f}   "
            f"{split['body_bytes']:>9,} ({split['callback_bytes']:,})"
        )
    lines.append(
        f"click cold: server CPU {browser['click_cold_server_cpu_s']:.2f} s, Chromium CPU "
        f"{browser['click_cold_browser_cpu_s']:.2f} s; charts drawn (Plotly.react calls): "
        f"cold {browser.get('click_cold_charts_drawn')}, "
        f"warm {browser.get('click_warm_charts_drawn')}; per callback (wall / CPU s):"
    )
    for name, spent in browser["click_cold_callbacks"].items():
        lines.append(f"    {spent['wall_s']:5.2f} / {spent['cpu_s']:5.2f}  {name}")
    lines.append(
        "server alone: cold route "
        f"{server['cold_route_cpu_s']:.2f} s CPU, with time series {server['cold_cpu_s']:.2f} s;"
        f" findings {server['cold_findings_cpu_s']:.2f} s; figures' JSON: "
        + ", ".join(f"{k} {v:,} B" for k, v in server["figure_json_bytes"].items())
    )
    return "\n".join(lines)


def _all_series(store: SqliteStore, host: str) -> list:
    """Every stored series of the host (through the ReadStore API)."""
    from contract import schema

    out = []
    for measurement in schema.SAMPLE_MEASUREMENTS:
        for name in measurement.fields():
            out += store.list_series(measurement.NAME, name, host)
    return out


if __name__ == "__main__":
    sys.exit(main())
