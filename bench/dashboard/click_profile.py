"""Where a click's browser time goes: Chromium's JavaScript CPU profile of clicks on a run.

    python bench/dashboard/click_profile.py [--db PATH] [--clicks 3] [--cold] [--top 20]
                                            [--json OUT]

Serves the dashboard of this checkout (``--max-points 500``) over the benchmark's store
(``bench_run_page.py`` builds it), opens the runs list in headless Chromium and clicks the
run ``--clicks`` times (``--cold``: the query layer's cache cleared before each), with
V8's sampling profiler on (every 200 µs) from the click until the page is drawn and its
findings are shown. Prints the main thread's sampled milliseconds per click: by script
(``(program)`` is the renderer's own work: style, layout, paint; ``(idle)`` is waiting),
then by function, and the wall time to drawn of each click. The profiler slows the page:
compare versions with it, not with ``bench_run_page.py``'s figures. Copy it, with
``bench_run_page.py`` and ``make_store.py``, into another checkout to compare two versions.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
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
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402
from werkzeug.serving import make_server  # noqa: E402

from collector.store import SqliteStore  # noqa: E402
from dashboard.app import create_app  # noqa: E402
from dashboard.source import DataSource  # noqa: E402
from tests.support.browser import chrome_driver  # noqa: E402

SAMPLING_US = 200
NOT_SCRIPTS = ("(idle)", "(program)", "(garbage collector)", "(root)")


def script_of(call_frame: dict[str, Any]) -> str:
    """A profile node's script file (no path, no query), or its native name."""
    name = call_frame["functionName"]
    if name in NOT_SCRIPTS or not call_frame["url"]:
        return name or "(native)"
    return call_frame["url"].rsplit("/", 1)[-1].split("?")[0]


def self_times(profile: dict[str, Any]) -> dict[tuple[str, str], float]:
    """Sampled milliseconds of each (script, function) in a CPU profile, itself only."""
    nodes = {node["id"]: node["callFrame"] for node in profile["nodes"]}
    spent: collections.Counter[tuple[str, str]] = collections.Counter()
    for node_id, delta_us in zip(profile["samples"], profile["timeDeltas"], strict=True):
        frame = nodes[node_id]
        spent[(script_of(frame), frame["functionName"] or "(anonymous)")] += delta_us / 1000
    return dict(spent)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=bench_run_page.DEFAULT_DB)
    parser.add_argument("--clicks", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="clear the server's cache first")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    load_at_start = list(os.getloadavg())
    if not args.db.exists():
        make_store.build(args.db)
    store = SqliteStore(args.db)
    source = DataSource(store, max_points=500)
    server = make_server("127.0.0.1", 0, create_app(source).server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    run_path = f"/runs/{make_store.RUN_ID}"
    driver = chrome_driver()

    def answer(script: str) -> Any:
        return bench_run_page.first_answer(driver, script, timeout_s=120)

    spent: collections.Counter[tuple[str, str]] = collections.Counter()
    drawn_ms = []
    try:
        driver.get(base + run_path)
        answer(bench_run_page.PAGE_READY)  # scripts fetched and evaluated once
        driver.execute_cdp_cmd("Profiler.enable", {})
        driver.execute_cdp_cmd("Profiler.setSamplingInterval", {"interval": SAMPLING_US})
        for _ in range(args.clicks):
            driver.find_element(By.CSS_SELECTOR, "nav a[href='/']").click()
            WebDriverWait(driver, 60).until(
                ec.presence_of_element_located((By.CSS_SELECTOR, f"a[href='{run_path}']"))
            )
            if args.cold:
                source.forget()
            time.sleep(0.5)
            driver.execute_cdp_cmd("Profiler.start", {})
            started = driver.execute_script(
                bench_run_page.WATCH_FRAMES
                + "const link = document.querySelector(`a[href='${arguments[0]}']`);"
                "const now = performance.now(); link.click(); return now;",
                run_path,
            )
            frames = answer(bench_run_page.FRAMES_SEEN)
            profile = driver.execute_cdp_cmd("Profiler.stop", {})["profile"]
            spent.update(self_times(profile))
            drawn_ms.append(round(frames[0] - started))
    finally:
        driver.quit()
        server.shutdown()
        store.close()

    per_click = {key: ms / args.clicks for key, ms in spent.items()}
    by_script: collections.Counter[str] = collections.Counter()
    for (script, _function), ms in per_click.items():
        by_script[script] += ms
    busy = sum(ms for script, ms in by_script.items() if script != "(idle)")
    print(
        f"{'cold' if args.cold else 'warm'} clicks: {args.clicks}, drawn (ms): {drawn_ms},"
        f" load at start {load_at_start[0]:.2f}"
    )
    print(f"main thread busy per click: {busy:.0f} ms (profiler on)\n\nby script, ms per click:")
    for script, ms in by_script.most_common(args.top):
        print(f"{ms:8.1f}  {script}")
    print("\nby function, ms per click (itself only):")
    for (script, function), ms in collections.Counter(per_click).most_common(args.top):
        print(f"{ms:8.1f}  {function}  ({script})")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "cold": args.cold,
                    "clicks": args.clicks,
                    "drawn_ms": drawn_ms,
                    "busy_ms_per_click": busy,
                    "by_script_ms_per_click": dict(by_script.most_common()),
                    "load_average": load_at_start,
                    "load_average_after": list(os.getloadavg()),
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
