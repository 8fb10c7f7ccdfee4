"""The scaling page's forecast section in real headless Chromium (issue 43, item 3).

The store is a real SQLite file with two runs built by tests/support/run_builder.py: ``net``,
2 hosts whose ranks all-reduce 50 MB a step over their NIC and read their data set over
it in epoch 1 (tests/unit/test_forecast.py's ``storage_over_network_run``), and ``one``, a
1-host run with nothing sent over a fabric, which cannot be forecast without the gradient
bytes and a link. The figures asserted are the query layer's (``dashboard_forecast``),
computed here in-process: the page must show them, headed as forecasts, with the error
measured on real runs, and never in the measured scaling table.
"""

from __future__ import annotations

import pytest

from tests.support.browser import chromium_available, dash_browser, figure_data

if not chromium_available():
    pytest.skip("needs Debian's chromium and chromium-driver", allow_module_level=True)

from collector.analysis.forecast import VALIDATION_FROM_NODES
from collector.queries.forecast import dashboard_forecast
from dashboard import ids
from dashboard.app import create_app
from dashboard.source import DataSource
from tests.support.analysis_stores import sqlite_store_with
from tests.support.run_builder import RunBuilder
from tests.unit.test_forecast import storage_over_network_run


def one_host_run() -> RunBuilder:
    builder = RunBuilder("one", hosts=("node9",), steps_per_epoch=4, nfs=False)
    for _ in range(2):
        builder.epoch(10.0, 640, shares=(0.0, 0.9, 0.0))
    return builder


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("store") / "epochscope.sqlite"
    points = storage_over_network_run("net").points() + one_host_run().points()
    store = sqlite_store_with(points, path)
    yield store
    store.close()


@pytest.fixture(scope="module")
def dash_duo(store, tmp_path_factory):
    app = create_app(DataSource(store), poll_seconds=5)
    with dash_browser(app, str(tmp_path_factory.mktemp("downloads"))) as duo:
        yield duo


def cells(duo, selector: str) -> list[list[str]]:
    return duo.driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0] + ' tbody tr'))"
        ".map(tr => Array.from(tr.querySelectorAll('td')).map(td => td.innerText.trim()));",
        selector,
    )


def test_the_scaling_page_forecasts_the_multi_node_run_labelled_with_its_error(dash_duo, store):
    expected = dashboard_forecast(store, "net")
    dash_duo.driver.get(dash_duo.server_url + "/scaling")
    dash_duo.wait_for_element(f"#{ids.FORECAST_GRAPH} .main-svg", timeout=60)
    label = dash_duo.find_element(f"#{ids.FORECAST_LABEL}").text
    assert label.startswith("FORECAST (modelled, not measured")
    # forecast from 2 nodes: the error measured forecasting from 2-host runs
    assert VALIDATION_FROM_NODES.text() in label
    assert f"worst {VALIDATION_FROM_NODES.worst_percent:.1f}%" in label
    headings = [
        th.text for th in dash_duo.find_elements(f"#{ids.FORECAST_TABLE} thead th")
    ]  # every figure's heading says forecast, or is a size or a requirement
    assert "Forecast images/s" in headings and "Forecast efficiency" in headings
    assert "Bound by (forecast)" in headings
    rows = cells(dash_duo, f"#{ids.FORECAST_TABLE}")
    assert [row[0] for row in rows] == ["2", "4", "8", "16"]
    for row, wanted in zip(rows, expected["forecast"], strict=True):
        assert row[2] == f"{wanted['images_per_second']:,.1f}"
        assert row[3] == f"{wanted['efficiency']:.0%}"
        assert row[4] == wanted["bound"]
        # the fabric: gradients each way, and epoch 1's receive with the storage reads
        assert row[9] == f"{wanted['fabric_gradient_bytes_per_second'] / 1e6:,.1f}"
        assert row[10] == f"{wanted['fabric_epoch1_receive_bytes_per_second'] / 1e6:,.1f}"
    requirements = dash_duo.find_element(f"#{ids.FORECAST_REQUIREMENTS}").text
    assert "cross the same fabric" in requirements
    assert "does not fit in the run's memory limit (500.0 MB)" in requirements
    traces = {t["name"]: t for t in figure_data(dash_duo.driver, ids.FORECAST_GRAPH)}
    forecast = traces["FORECAST (modelled, not measured)"]
    assert forecast["x"] == [2, 4, 8, 16]
    assert forecast["y"] == pytest.approx([r["images_per_second"] for r in expected["forecast"]])
    # the measured point is its own trace, the run's measured images/s at its 2 nodes
    (measured,) = [t for name, t in traces.items() if name.startswith("measured")]
    assert measured["x"] == [2]
    assert measured["y"] == pytest.approx([expected["measured"]["images_per_second"]])
    # nothing forecast in the measured scaling table
    assert "FORECAST" not in dash_duo.find_element(f"#{ids.SCALING_TABLE}").text
    assert dash_duo.get_logs() == []


def test_a_run_that_cannot_be_forecast_says_what_it_needs(dash_duo):
    dash_duo.driver.get(dash_duo.server_url + "/scaling?forecast=net")
    dash_duo.wait_for_element(f"#{ids.FORECAST_TABLE}", timeout=60)
    dash_duo.select_dcc_dropdown(f"#{ids.FORECAST_RUN}", value="one")
    dash_duo.wait_for_element(f"#{ids.FORECAST_NOTE}", timeout=60)
    note = dash_duo.find_element(f"#{ids.FORECAST_NOTE}").text
    assert note.startswith("No forecast from one: no gradient bytes or link rate")
    assert "--gradient-mb G --link-gbps X" in note
    assert dash_duo.find_element(f"#{ids.FORECAST_LABEL}").text.startswith("FORECAST")
    assert not dash_duo.find_elements(f"#{ids.FORECAST_TABLE}")
    assert dash_duo.get_logs() == []
