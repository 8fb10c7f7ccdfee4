"""Headless Chromium for the dashboard's browser tests, benchmark and screenshots.

Not used by the dashboard itself. Debian's ``chromium`` and ``chromium-driver`` packages
(``/usr/bin/chromium``, ``/usr/bin/chromedriver``); override with ``$EPOCHSCOPE_CHROMIUM``
and ``$EPOCHSCOPE_CHROMEDRIVER``. The flags keep Chromium off the network (no component
updates, no background fetches) and working as root in a container.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from typing import Any

CHROMIUM = os.environ.get("EPOCHSCOPE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("EPOCHSCOPE_CHROMEDRIVER", "/usr/bin/chromedriver")
CHROME_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--hide-scrollbars",
)


def chromium_available() -> bool:
    return bool(shutil.which(CHROMIUM)) and bool(shutil.which(CHROMEDRIVER))


def chrome_options(width: int = 1400, height: int = 1000) -> Any:
    from selenium.webdriver.chrome.options import Options

    options = Options()
    options.binary_location = CHROMIUM
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--window-size={width},{height}")
    options.set_capability("goog:loggingPrefs", {"browser": "SEVERE"})
    return options


def chrome_driver(width: int = 1400, height: int = 1000) -> Any:
    """A headless Chromium WebDriver (quit it when done)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=chrome_options(width, height))


def figure_data(driver: Any, graph_id: str) -> list[dict[str, Any]]:
    """The traces plotly.js is drawing in a ``dcc.Graph`` (name, x, y, x0, dx)."""
    return driver.execute_script(
        """
        const graph = document.querySelector('#' + CSS.escape(arguments[0]) + ' .js-plotly-plot');
        if (!graph || !graph.data) { return null; }
        return graph.data.map(t => ({name: t.name, type: t.type, x: t.x, y: t.y,
                                     x0: t.x0, dx: t.dx, text: t.text}));
        """,
        graph_id,
    )


def server_runner(limits: Any = None) -> Any:
    """A dash[testing] runner (for ``DashComposite(server=...)``) that serves the app as
    ``dashboard serve`` does: ``dashboard.server``'s guarded werkzeug server (``limits``:
    its ``ConnectionLimits``, default the command's), on a free loopback port, in a thread."""
    import threading

    from dash.testing.application_runners import BaseDashRunner

    from dashboard.server import LIMITS, make_dashboard_server

    class ServerRunner(BaseDashRunner):
        def __init__(self) -> None:
            super().__init__(keep_open=False, stop_timeout=3, host="127.0.0.1")
            self.server: Any = None
            self.thread: threading.Thread | None = None

        def start(self, app: Any, start_timeout: float = 3, **_kwargs: Any) -> None:
            self.server = make_dashboard_server("127.0.0.1", 0, app.server, limits or LIMITS)
            self.port = self.server.port
            self.thread = threading.Thread(
                target=self.server.serve_forever, name="dashboard-http", daemon=True
            )
            self.thread.start()
            self.started = True

        def stop(self) -> None:
            if self.server is not None:
                self.server.shutdown()
                self.server.server_close()
            if self.thread is not None:
                self.thread.join(timeout=10)

    return ServerRunner()


@contextlib.contextmanager
def dash_browser(app: Any, download_path: str) -> Iterator[Any]:
    """A ``dash.testing`` composite (``dash_duo``) driving headless Chromium against
    ``app`` served as ``dashboard serve`` serves it (``server_runner``)."""
    from dash.testing.composite import DashComposite

    with (
        server_runner() as runner,
        DashComposite(
            server=runner,
            browser="Chrome",
            headless=False,  # chrome_options() already carries --headless
            options=[chrome_options()],
            download_path=download_path,
        ) as duo,
    ):
        duo.start_server(app, start_timeout=60)
        yield duo
