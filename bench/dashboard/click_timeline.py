"""What a cold click on a run does in the browser: each Dash callback request, in order.

    python bench/dashboard/click_timeline.py [--db PATH] [--repeat 3] [--json OUT]

Serves the dashboard of this checkout (``--max-points 500``) over the benchmark's store
(``bench_run_page.py`` builds it), opens the runs list in headless Chromium with
Chrome's performance log on, and clicks the run ``--repeat`` times with the query layer's
cache cleared first. For each click it prints, from the DevTools network events, every
``_dash-update-component`` request: which outputs it asks for, when it was sent and when
its answer finished arriving (ms after the click), and the moment the page was drawn
(all charts and the epoch table, ``bench_run_page.PAGE_DRAWN``) and the findings shown.
Copy it, with ``bench_run_page.py`` and ``make_store.py``, into an older checkout to
compare two versions side by side (the checkout needs ``dashboard/ids.py`` and
``tests/support/run_builder.py`` with its ``sampler``: copy those too where it lacks them).
"""

from __future__ import annotations

import argparse
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

import bench_run_page  # noqa: E402
import make_store  # noqa: E402
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402
from werkzeug.serving import make_server  # noqa: E402

from collector.store import SqliteStore  # noqa: E402
from dashboard.app import create_app  # noqa: E402
from dashboard.source import DataSource  # noqa: E402
from tests.support import browser  # noqa: E402

# the page's tasks of 50 ms or more (script, style, layout, paint) after the click
LONG_TASKS = """
window.__longTasks = [];
new PerformanceObserver(list => window.__longTasks.push(...list.getEntries()))
    .observe({entryTypes: ['longtask']});
"""


def callback_name(post: str | None) -> str:
    """The outputs a ``_dash-update-component`` request asks for, shortened."""
    if not post:
        return "?"
    body = json.loads(post)
    output = body.get("output", "")
    inputs = ",".join(f"{i['id']}.{i['property']}" for i in body.get("inputs", []))
    return f"{output[:60]} <- {inputs}"


def requests_after(entries: list[dict[str, Any]], origin_wall_s: float) -> list[dict[str, Any]]:
    """The Dash callback requests in a performance log, ms after ``origin_wall_s``."""
    sent: dict[str, dict[str, Any]] = {}
    offset = None  # DevTools' monotonic timestamp -> wall clock, from requestWillBeSent
    for entry in entries:
        message = json.loads(entry["message"])["message"]
        method, params = message["method"], message.get("params", {})
        if method == "Network.requestWillBeSent":
            if offset is None:
                offset = params["wallTime"] - params["timestamp"]
            if "_dash-update-component" in params["request"]["url"]:
                sent[params["requestId"]] = {
                    "callback": callback_name(params["request"].get("postData")),
                    "sent_ms": (params["timestamp"] + offset - origin_wall_s) * 1000,
                }
        elif method == "Network.responseReceived" and params["requestId"] in sent:
            timing = params["response"].get("timing") or {}
            waited = timing.get("receiveHeadersEnd", 0) - timing.get("sendEnd", 0)
            sent[params["requestId"]]["server_ms"] = waited
            sent[params["requestId"]]["status"] = params["response"]["status"]
        elif method == "Network.loadingFinished" and params["requestId"] in sent:
            sent[params["requestId"]]["done_ms"] = (
                params["timestamp"] + (offset or 0) - origin_wall_s
            ) * 1000
            sent[params["requestId"]]["bytes"] = params.get("encodedDataLength", 0)
    return sorted(sent.values(), key=lambda r: r["sent_ms"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=bench_run_page.DEFAULT_DB)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--no-complete-ahead",
        action="store_true",
        help="no background thread computing a cold run's charts and findings",
    )
    args = parser.parse_args()
    if not args.db.exists():
        make_store.build(args.db)
    store = SqliteStore(args.db)
    options = {"complete_ahead": False} if args.no_complete_ahead else {}
    source = DataSource(store, max_points=500, **options)
    app = create_app(source)
    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    run_path = f"/runs/{make_store.RUN_ID}"
    chrome = browser.chrome_options()
    chrome.set_capability("goog:loggingPrefs", {"browser": "SEVERE", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(browser.CHROMEDRIVER), options=chrome)
    clicks = []
    try:
        driver.get(base + "/")
        for _ in range(args.repeat):
            driver.get(base + "/")
            WebDriverWait(driver, 60).until(
                ec.presence_of_element_located((By.CSS_SELECTOR, f"a[href='{run_path}']"))
            )
            source.forget()
            time.sleep(0.5)
            driver.get_log("performance")  # drop what came before the click
            started_wall = driver.execute_script(
                bench_run_page.WATCH_FRAMES
                + LONG_TASKS
                + "const link = document.querySelector(`a[href='${arguments[0]}']`);"
                "window.__clickAt = performance.now(); link.click();"
                "return performance.timeOrigin + window.__clickAt;",
                run_path,
            )
            frames = None
            deadline = time.monotonic() + 120
            while frames is None and time.monotonic() < deadline:
                frames = driver.execute_script(
                    "return window.__findingsAt === null || window.__drawnAt === null ? null"
                    " : [window.__drawnAt - window.__clickAt,"
                    " window.__findingsAt - window.__clickAt];"
                )
                time.sleep(0.05)
            time.sleep(0.3)
            tasks = driver.execute_script(
                "return window.__longTasks.map(t => [t.startTime - window.__clickAt, t.duration]);"
            )
            requests = requests_after(driver.get_log("performance"), started_wall / 1000)
            busy = sum(duration for start, duration in tasks if start < frames[0])
            click = {
                "drawn_ms": frames[0],
                "findings_ms": frames[1],
                "long_tasks_before_drawn_ms": busy,
                "long_tasks": tasks,
                "requests": requests,
            }
            clicks.append(click)
            print(
                f"drawn {frames[0]:.0f} ms, findings {frames[1]:.0f} ms; long tasks before drawn"
                f" {busy:.0f} ms: " + ", ".join(f"{s:.0f}+{d:.0f}" for s, d in tasks)
            )
            for r in requests:
                print(
                    f"  {r['sent_ms']:7.0f} -> {r.get('done_ms', float('nan')):7.0f} ms"
                    f"  server {r.get('server_ms', 0):6.0f} ms  {r.get('bytes', 0):8d} B"
                    f"  {r['callback']}"
                )
    finally:
        driver.quit()
        server.shutdown()
    summary = {
        "root": str(ROOT),
        "load_average": os.getloadavg(),
        "drawn_median_ms": statistics.median(c["drawn_ms"] for c in clicks),
        "findings_median_ms": statistics.median(c["findings_ms"] for c in clicks),
        "long_tasks_median_ms": statistics.median(c["long_tasks_before_drawn_ms"] for c in clicks),
        "clicks": clicks,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "clicks"}))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
