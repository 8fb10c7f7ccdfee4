"""The dashboard's Inference page in real headless Chromium, as the other pages are tested
(tests/system/test_dashboard_browser.py's helpers and its way of starting dash[testing]).

The store is a real SQLite file holding two `workloads infer` runs written as the workload
writes them (tests/unit/test_inference_views.py) and one training run; the numbers on the page
must be ``collector.analysis.inference``'s.
"""

from __future__ import annotations

import pytest

from tests.support.browser import (
    chromium_available,
    dash_browser,
    figure_data,
)

if not chromium_available():
    pytest.skip("needs Debian's chromium and chromium-driver", allow_module_level=True)


from collector.store import SqliteStore
from collector.views.inference import format_points, format_rate, format_speedup, inference_report
from dashboard import ids
from dashboard.app import create_app
from dashboard.source import DataSource
from tests.system.test_dashboard_browser import open_page, table_rows, text_of, wait_for
from tests.unit.test_inference_views import RATES, TOP1, inference_points

pytestmark = pytest.mark.timeout(300)
# a second run whose INT8 loses 5 points and whose FP32 stops growing after batch 8
LOSSY_RATES = RATES | {("fp32", 32): 115.0}
LOSSY_TOP1 = {"fp32": 0.80, "int8": 0.75}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    store = SqliteStore(tmp_path_factory.mktemp("store") / "epochscope.sqlite")
    store.write_points(inference_points("infer-good", RATES, TOP1))
    store.write_points(inference_points("infer-lossy", LOSSY_RATES, LOSSY_TOP1, 2 * 10**18))
    yield store
    store.close()


@pytest.fixture(scope="module")
def dash_duo(store, tmp_path_factory):
    app = create_app(DataSource(store), poll_seconds=0.4)
    with dash_browser(app, str(tmp_path_factory.mktemp("downloads"))) as duo:
        yield duo


def test_inference_page_shows_fp32_and_int8_side_by_side(dash_duo, store):
    open_page(dash_duo, "/inference?run=infer-good", f"#{ids.INFERENCE_GRAPH} .main-svg")
    report = inference_report(store, "infer-good")
    bars = {trace["name"]: trace for trace in figure_data(dash_duo.driver, ids.INFERENCE_GRAPH)}
    assert set(bars) == {"FP32", "INT8"}
    assert bars["FP32"]["x"] == ["batch 1", "batch 8", "batch 32"]
    assert bars["FP32"]["y"] == pytest.approx(
        [c.fp32_images_per_second for c in report.comparisons]
    )
    assert bars["INT8"]["y"] == pytest.approx(
        [c.int8_images_per_second for c in report.comparisons]
    )
    assert bars["INT8"]["text"] == ["1.66x", "1.44x", "1.48x"]  # drawn above the INT8 bars
    labels = dash_duo.driver.execute_script(
        f"return Array.from(document.querySelectorAll('#{ids.INFERENCE_GRAPH} .bartext'))"
        ".map(t => t.textContent).filter(t => t);"
    )
    assert labels == ["1.66x", "1.44x", "1.48x"]
    rows = table_rows(dash_duo, f"#{ids.INFERENCE_TABLE}")
    assert [row[:4] for row in rows] == [
        [str(c.batch_size), format_rate(c.fp32_images_per_second),
         format_rate(c.int8_images_per_second), format_speedup(c.int8_speedup)]
        for c in report.comparisons
    ]  # fmt: skip
    assert text_of(dash_duo, f"#{ids.INFERENCE_TOP1_DIFFERENCE}") == format_points(
        report.top1_difference
    )
    assert "CPUExecutionProvider" in text_of(dash_duo, f"#{ids.INFERENCE_SETUP}")
    assert text_of(dash_duo, f"#{ids.INFERENCE_BODY} .empty") == "No findings for this run."
    assert dash_duo.get_logs() == []


def test_picking_another_run_shows_its_findings(dash_duo):
    open_page(dash_duo, "/inference?run=infer-good", f"#{ids.INFERENCE_GRAPH} .main-svg")
    dash_duo.select_dcc_dropdown(f"#{ids.INFERENCE_RUN}", value="infer-lossy (finished)")
    wait_for(
        lambda: len(dash_duo.find_elements(f"#{ids.INFERENCE_BODY} .finding")) == 2,
        what="the lossy run's two findings",
    )
    assert "INT8 loses 5.00 points of top-1" in text_of(
        dash_duo, f"#{ids.finding('int8_accuracy_loss')}"
    )
    assert "FP32 throughput stops growing at batch size 8" in text_of(
        dash_duo, f"#{ids.finding('throughput_saturated')}"
    )
    link = dash_duo.find_element(f"#{ids.finding('throughput_saturated')} .chart-link")
    assert link.get_attribute("href").endswith(f"#{ids.INFERENCE_GRAPH}")  # the bars above
    assert dash_duo.get_logs() == []


def test_runs_list_links_an_inference_run_to_its_page(dash_duo):
    open_page(dash_duo, "/", f"#{ids.RUNS_LIST}")
    dash_duo.find_element("a[href='/inference?run=infer-lossy']").click()
    dash_duo.wait_for_element(f"#{ids.INFERENCE_GRAPH} .main-svg", timeout=60)
    assert "5.00 points" in text_of(dash_duo, f"#{ids.INFERENCE_TOP1_DIFFERENCE}")
    # the run's own URL shows the same page
    open_page(dash_duo, "/runs/infer-good", f"#{ids.INFERENCE_GRAPH} .main-svg")
    assert dash_duo.get_logs() == []
