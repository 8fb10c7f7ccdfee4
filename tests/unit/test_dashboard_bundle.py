"""The dashboard's pages load plotly.js's basic bundle (scatter and bar) from its assets,
not the full bundle that dcc.Graph would otherwise fetch: a quarter of the script to
evaluate on every page load. dcc.Graph takes ``window.Plotly`` when the page already has it
(the browser tests draw every chart through it)."""

from __future__ import annotations

import re
from pathlib import Path

from plotly.offline import get_plotlyjs_version

from collector.store import SqliteStore
from dashboard import figures
from dashboard.app import ASSETS, create_app
from dashboard.source import DataSource

BUNDLE = ASSETS / "plotly-basic.min.js"
BASIC_TRACE_TYPES = {"scatter", "bar", "pie"}


def test_the_page_loads_the_basic_bundle_of_plotly_pythons_plotly_js_version(
    tmp_path: Path,
) -> None:
    header = BUNDLE.read_text()[:200]
    version = re.search(r"plotly\.js \(basic - minified\) v(\S+)", header)
    assert version is not None
    # the figures are written for plotly.py's plotly.js: the bundle must be that version
    assert version.group(1) == get_plotlyjs_version()
    store = SqliteStore(tmp_path / "epochscope.sqlite")
    page = create_app(DataSource(store)).server.test_client().get("/").get_data(as_text=True)
    store.close()
    assert "/assets/plotly-basic.min.js" in page
    assert "package_data/plotly.min.js" not in page


def test_every_trace_type_the_dashboard_draws_is_in_the_basic_bundle() -> None:
    source = Path(figures.__file__).read_text()
    drawn = set(re.findall(r'"type": "(\w+)",\s*\n\s*"mode"', source))
    drawn |= set(re.findall(r'"type": "(bar|scatter\w*|pie|heatmap|box|histogram\w*)"', source))
    assert drawn and drawn <= BASIC_TRACE_TYPES
