"""Screenshots of every dashboard page, from headless Chromium, for the docs.

    python bench/dashboard/screenshots.py [--out docs/screenshots]

Builds the dashboard tests' fixture runs (tests/test_dashboard_runs.py: a two-node
InfiniBand/NFS run like the seed studies', plus a 1- and a 4-GPU run of the same group) in a
temporary SQLite store, serves the dashboard on 127.0.0.1 and saves runs.png, run.png,
scaling.png and findings.png.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from werkzeug.serving import make_server  # noqa: E402

from dashboard.app import create_app  # noqa: E402
from dashboard.browser import chrome_driver  # noqa: E402
from dashboard.source import DataSource  # noqa: E402
from tests.test_dashboard_runs import PAPER_RUN, build_store  # noqa: E402

PAGES = {
    "runs": ("/", "#runs-list"),
    "run": (f"/runs/{PAPER_RUN}", "#ts-gpu_util_percent .main-svg"),
    "scaling": ("/scaling", "#scaling-graph .main-svg"),
    "findings": (f"/findings?run={PAPER_RUN}", ".finding"),
}


def full_page(driver, path: Path) -> None:
    height = driver.execute_script(
        "const page = document.getElementById('page').getBoundingClientRect();"
        "return Math.ceil(Math.max(document.documentElement.scrollHeight,"
        " page.bottom + window.scrollY + 24));"
    )
    driver.set_window_size(1400, min(max(height, 800), 6000))
    time.sleep(0.8)  # plotly relayout after the resize
    driver.save_screenshot(str(path))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        store = build_store(Path(tmp) / "epochscope.sqlite")
        app = create_app(DataSource(store))
        server = make_server("127.0.0.1", 0, app.server, threaded=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_port}"
        driver = chrome_driver()
        try:
            from selenium.webdriver.common.by import By
            from selenium.webdriver.support import expected_conditions as ec
            from selenium.webdriver.support.ui import WebDriverWait

            for name, (url, ready) in PAGES.items():
                driver.set_window_size(1400, 1000)
                driver.get(base + url)
                WebDriverWait(driver, 30).until(
                    ec.presence_of_element_located((By.CSS_SELECTOR, ready))
                )
                time.sleep(1.0)
                full_page(driver, args.out / f"{name}.png")
                print(f"saved {args.out / f'{name}.png'}")
            errors = driver.get_log("browser")
            if errors:
                print("browser console errors:", errors, file=sys.stderr)
                return 1
        finally:
            driver.quit()
            server.shutdown()
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
