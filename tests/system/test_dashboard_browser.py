"""Every dashboard page in real headless Chromium (dash[testing]'s ``DashComposite``, the
object behind the ``dash_duo`` fixture, shared by the module's tests so Chromium starts once).

The store is a real SQLite file written through ``SqliteStore.write_points`` with the runs of
tests/unit/test_dashboard_runs.py; the numbers asserted are worked out there. Each page must load
without browser console errors.
"""

from __future__ import annotations

import time

import pytest

from tests.support.browser import (
    chromium_available,
    dash_browser,
    figure_data,
)

pytest.importorskip("collector.store", reason="the SQLite store is not in this tree")
if not chromium_available():
    pytest.skip("needs Debian's chromium and chromium-driver", allow_module_level=True)

from selenium.webdriver.common.action_chains import ActionChains

from collector.queries.query import COLUMN_HELP
from contract.schema import RunState
from dashboard import ids
from dashboard.app import create_app
from dashboard.source import DataSource
from tests.unit.test_dashboard_runs import (
    BASELINE_RUN,
    DAY_NS,
    HOSTS,
    LIVE_RUN,
    PAPER_RUN,
    T0_NS,
    build_store,
    live_run,
    points_after,
    run_end_points,
)

POLL_SECONDS = 0.4
LIVE_EPOCH_SECONDS = 30


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    store = build_store(tmp_path_factory.mktemp("store") / "epochscope.sqlite", with_live=True)
    yield store
    store.close()


@pytest.fixture(scope="module")
def dash_duo(store, tmp_path_factory):
    app = create_app(DataSource(store), poll_seconds=POLL_SECONDS)
    with dash_browser(app, str(tmp_path_factory.mktemp("downloads"))) as duo:
        yield duo


def open_page(duo, path: str, ready: str, timeout: float = 60) -> None:
    duo.driver.get(duo.server_url + path)
    duo.wait_for_element(ready, timeout=timeout)


def table_rows(duo, selector: str) -> list[list[str]]:
    """The cells' text, read in one go (live pages re-render tables under our feet)."""
    return duo.driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0] + ' tbody tr'))"
        ".map(tr => Array.from(tr.querySelectorAll('td')).map(td => td.innerText.trim()))"
        ".filter(cells => cells.length);",  # (a DataTable's header row is in its tbody)
        selector,
    )


def trace(duo, name: str) -> dict:
    """One trace of the run page's time-series figure, by name."""
    return next(t for t in figure_data(duo.driver, ids.TIMESERIES_GRAPH) if t["name"] == name)


def text_of(duo, selector: str) -> str | None:
    """An element's text, read in one go (None when it is not there)."""
    return duo.driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.innerText.trim() : null;",
        selector,
    )


def wait_for(condition, timeout: float = 60, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_runs_page_lists_every_run_and_links_to_it(dash_duo):
    open_page(dash_duo, "/", f"#{ids.RUNS_LIST}")
    rows = {row[0]: row for row in table_rows(dash_duo, f"#{ids.RUNS_LIST}")}
    assert set(rows) == {LIVE_RUN, PAPER_RUN, "tf-4gpu", BASELINE_RUN}
    # run, framework, model, GPUs, hosts, images/s, state, start
    # run, framework, model, GPUs, hosts, precision, batch/rank, data set, images/s, state,
    # start: runs of one model told apart by their set-up
    assert rows[PAPER_RUN][:8] == [PAPER_RUN, "tensorflow", "resnet50", "8", "2", "fp32", "64",
                                   "tfrecord, 1,281,167 images"]  # fmt: skip
    assert rows[PAPER_RUN][9] == "finished"
    assert rows[PAPER_RUN][10] == "2023-11-14T22:13:20.000Z"
    assert rows[BASELINE_RUN][8] == "300.0"  # 30,000 images per 100 s epoch
    assert dash_duo.get_logs() == []

    dash_duo.find_element(f"a[href='/runs/{PAPER_RUN}']").click()
    dash_duo.wait_for_element(f"#{ids.TIMESERIES_GRAPH} .main-svg", timeout=60)
    assert dash_duo.driver.current_url.endswith(f"/runs/{PAPER_RUN}")
    assert dash_duo.get_logs() == []


def test_pages_use_the_browsers_own_trim_and_parse_functions(dash_duo):
    """Dash's babel-polyfill replaces String.prototype.trim, parseInt and parseFloat with slow
    ones that also skip U+180E (no longer white space since Unicode 6.3);
    assets/native-builtins.js puts the browser's back, so U+180E is kept, and the rest works
    as the engine does."""
    open_page(dash_duo, f"/runs/{PAPER_RUN}", f"#{ids.TIMESERIES_GRAPH} .main-svg")
    results = dash_duo.driver.execute_script(
        "const s = '\\u180e08';"
        " return [s.trim().length, s.trimStart().length, s.trimEnd().length,"
        " ' \\t\\n x \\u00a0\\ufeff'.trim(), parseInt(s), parseFloat(s),"
        " Number.parseInt === parseInt, Number.parseFloat === parseFloat,"
        " parseInt(' 0x1f'), parseFloat(' -2.5e3px')];"
    )
    # (WebDriver answers NaN as None)
    assert results == [3, 3, 3, "x", None, None, True, True, 31, -2500]
    assert dash_duo.driver.find_elements("css selector", "iframe") == []  # the realm it came from
    assert dash_duo.get_logs() == []


def test_run_page_charts_carry_each_host_and_epoch(dash_duo, store):
    open_page(dash_duo, f"/runs/{PAPER_RUN}", f"#{ids.TIMESERIES_GRAPH} .main-svg")
    # (a run the server has not computed yet gets its time series by a callback of their own)
    wait_for(lambda: figure_data(dash_duo.driver, ids.TIMESERIES_GRAPH), what="the time series")
    traces = figure_data(dash_duo.driver, ids.TIMESERIES_GRAPH)
    ib = [t for t in traces if " IB " in t["name"]]
    assert [t["name"] for t in ib] == [
        "node1 IB receive",
        "node2 IB receive",
        "node1 IB transmit",
        "node2 IB transmit",
    ]
    assert len(ib[0]["y"]) == 280  # one-second buckets over 120 + 80 + 80 s
    assert ib[0]["y"][10] == pytest.approx(400.0)  # epoch 1: data set read over the fabric
    assert ib[0]["y"][150] == pytest.approx(100.0)  # epoch 2: gradients only
    # each step's images spread over its seconds: 4 ranks x 3,000 images in epoch 1's
    # first 12.5-s step (see tests/unit/test_dashboard_runs.py)
    assert trace(dash_duo, "node1 images/s")["y"][10] == 960.0

    nfs = figure_data(dash_duo.driver, ids.EPOCH_NFS_GRAPH)
    assert [t["name"] for t in nfs] == ["node1", "node2"]
    assert nfs[0]["y"] == pytest.approx([300.0, 0.0, 0.0])
    fabric = figure_data(dash_duo.driver, ids.EPOCH_FABRIC_GRAPH)
    assert [t["name"] for t in fabric] == ["receive", "send", "receive − send"]
    assert fabric[2]["y"] == pytest.approx([300.0, 0.0, 0.0, 300.0, 0.0, 0.0])

    # epoch shading: three bands, labelled
    labels = dash_duo.driver.execute_script(
        f"return document.querySelector('#{ids.TIMESERIES_GRAPH} .js-plotly-plot')"
        ".layout.annotations.map(a => a.text).filter(t => t.startsWith('epoch'))"
    )
    assert labels == ["epoch 1", "epoch 2", "epoch 3"]

    rows = table_rows(dash_duo, f"#{ids.EPOCH_TABLE_CONTAINER}")
    assert len(rows) == 9  # 3 epochs x (2 hosts + all hosts)
    assert rows[2][:5] == ["1", "all hosts", "120.0", "192,000", "1,600.0"]
    # each header explains its column on hover
    header = dash_duo.find_element(f"#{ids.EPOCH_TABLE_CONTAINER} th.column-4")
    ActionChains(dash_duo.driver).move_to_element(header).perform()
    wait_for(
        lambda: COLUMN_HELP["images_per_second"] in text_of(dash_duo, ".dash-tooltip"),
        what="the images/s header's tooltip",
    )
    assert text_of(dash_duo, f"#{ids.RUN_STATUS}") == "finished: not updating"
    # the findings come once the page is up
    found = DataSource(store).findings(PAPER_RUN)
    wait_for(
        lambda: len(dash_duo.find_elements(f"#{ids.RUN_FINDINGS} .finding")) == len(found),
        what="the run's findings",
    )
    assert (
        dash_duo.find_element(f"#{ids.finding('cache_warmup')} .chart-link")
        .get_attribute("href")
        .endswith(f"/runs/{PAPER_RUN}#{ids.EPOCH_STORAGE}")
    )
    assert dash_duo.get_logs() == []

    dash_duo.find_element(f"#{ids.EPOCH_TABLE_HOSTS} input").click()  # one row per epoch
    wait_for(
        lambda: len(table_rows(dash_duo, f"#{ids.EPOCH_TABLE_CONTAINER}")) == 3,
        what="the table to keep only the all-hosts rows",
    )
    assert dash_duo.get_logs() == []


COUNT_DRAWS = """
window.__drawn = [];
if (!window.Plotly.react.__counted) {
    const react = window.Plotly.react;
    window.Plotly.react = function (gd, ...rest) {
        window.__drawn.push(gd.parentElement.id);
        return react.call(this, gd, ...rest);
    };
    window.Plotly.react.__counted = true;
}
"""


def test_a_click_on_a_run_not_computed_yet_draws_each_chart_once(dash_duo):
    """Its time series come by their own callback: as a new chart with its data, not a
    placeholder figure drawn again (each draw of the 8-panel chart is Chromium's largest
    task); its hidden step-anatomy panel draws nothing."""
    from collector.queries import query

    open_page(dash_duo, f"/runs/{BASELINE_RUN}", f"#{ids.TIMESERIES_GRAPH} .main-svg")
    dash_duo.find_element("nav a[href='/']").click()  # (plotly.js is loaded now)
    dash_duo.wait_for_element(f"#{ids.RUNS_LIST}")
    query.clear_cache()  # the run as the server first sees it
    dash_duo.driver.execute_script(COUNT_DRAWS)
    dash_duo.find_element(f"a[href='/runs/{PAPER_RUN}']").click()
    wait_for(lambda: figure_data(dash_duo.driver, ids.TIMESERIES_GRAPH), what="the time series")
    wait_for(lambda: dash_duo.find_elements(f"#{ids.RUN_FINDINGS} .finding"), what="the findings")
    time.sleep(0.5)  # (anything drawn late would count)
    drawn = dash_duo.driver.execute_script("return window.__drawn;")
    assert sorted(drawn) == sorted(
        [ids.EPOCH_DISK_GRAPH, ids.EPOCH_NFS_GRAPH, ids.EPOCH_FABRIC_GRAPH, ids.TIMESERIES_GRAPH]
    )
    assert dash_duo.get_logs() == []


def test_findings_link_to_the_chart_on_the_run_page(dash_duo, store):
    open_page(dash_duo, f"/findings?run={PAPER_RUN}", ".finding")
    found = DataSource(store).findings(PAPER_RUN)
    cards = dash_duo.find_elements(".finding")
    assert len(cards) == len(found)
    assert (
        "Storage reads stop after epoch 1"
        in dash_duo.find_element(f"#{ids.finding('cache_warmup')}").text
    )
    assert dash_duo.get_logs() == []

    dash_duo.find_element(f"#{ids.finding('cache_warmup')} .chart-link").click()
    dash_duo.wait_for_element(f"#{ids.EPOCH_STORAGE} .main-svg", timeout=60)
    assert dash_duo.driver.current_url.endswith(f"/runs/{PAPER_RUN}#{ids.EPOCH_STORAGE}")
    wait_for(
        lambda: dash_duo.driver.execute_script("return window.scrollY") > 200,
        what="the page to scroll to the storage chart",
    )
    assert dash_duo.get_logs() == []


def test_scaling_page_draws_ideal_and_efficiency_and_follows_the_selection(dash_duo):
    open_page(dash_duo, "/scaling", f"#{ids.SCALING_GRAPH} .main-svg")
    # (each scope also has a grey legend-only trace, y [None]: not the points)
    points = figure_data(dash_duo.driver, ids.SCALING_GRAPH)
    traces = {t["name"]: t for t in points if t["y"] != [None]}
    ideal = next(t for name, t in traces.items() if name.endswith(": ideal"))
    # 1-GPU 300 images/s x GPUs, for the live run's 2 GPUs, the 4- and the 8-GPU run
    assert ideal["x"] == [1, 2, 4, 8]
    assert ideal["y"] == pytest.approx([300.0, 600.0, 1200.0, 2400.0])
    assert traces["intra-node"]["text"] == ["95%"]
    assert set(traces) >= {"baseline", "intra-node", "inter-node"}
    rows = table_rows(dash_duo, f"#{ids.SCALING_LIST}")
    assert any(row[:2] == [BASELINE_RUN, "1"] for row in rows)
    # GPUs, nodes, scope, then what tells the group's runs from others': precision,
    # batch per rank, data set
    baseline = next(row for row in rows if row[0] == BASELINE_RUN)
    assert baseline[4:7] == ["fp32", "64", "tfrecord"]
    assert dash_duo.get_logs() == []

    # leave out the 1-GPU run: its point goes; the others keep their efficiency against it
    box = dash_duo.find_elements(f"#{ids.SCALING_RUNS} input")[0]
    box.click()

    def baseline_gone() -> bool:
        names = [t["name"] for t in figure_data(dash_duo.driver, ids.SCALING_GRAPH) or []]
        return bool(names) and "baseline" not in names

    wait_for(baseline_gone, what="the scaling chart to drop the 1-GPU run")
    # (each scope also has a grey legend-only trace, y [None]: not the points)
    points = figure_data(dash_duo.driver, ids.SCALING_GRAPH)
    traces = {t["name"]: t for t in points if t["y"] != [None]}
    assert traces["intra-node"]["text"] == ["95%"]
    assert not any(row[0] == BASELINE_RUN for row in table_rows(dash_duo, f"#{ids.SCALING_LIST}"))
    assert dash_duo.get_logs() == []


def test_unknown_run_says_so(dash_duo):
    open_page(dash_duo, "/runs/no-such-run", "h2")
    assert "No run 'no-such-run'" in dash_duo.find_element(f"#{ids.PAGE}").text
    assert dash_duo.get_logs() == []


def test_live_run_gets_new_epochs_and_stops_polling_when_it_ends(dash_duo, store):
    open_page(dash_duo, f"/runs/{LIVE_RUN}", f"#{ids.TIMESERIES_GRAPH} .main-svg")
    assert text_of(dash_duo, f"#{ids.RUN_STATUS}").startswith("live: updating every 0.4 s")
    epochs = {row[0] for row in table_rows(dash_duo, f"#{ids.EPOCH_TABLE_CONTAINER}")}
    assert epochs == {"1", "2"}
    assert len(trace(dash_duo, "node1 disk read")["y"]) == 2 * LIVE_EPOCH_SECONDS  # complete only

    two_epochs = live_run(2)
    store.write_points(points_after(live_run(3), two_epochs.end_true_ns()))

    def third_epoch_shown() -> bool:
        rows = table_rows(dash_duo, f"#{ids.EPOCH_TABLE_CONTAINER}")
        return any(row[:2] == ["3", "all hosts"] for row in rows)

    wait_for(third_epoch_shown, what="epoch 3 to appear in the table")
    wait_for(
        lambda: len(trace(dash_duo, "node1 disk read")["y"]) == 90,
        what="the charts to grow by the third epoch's 30 buckets",
    )
    disk = trace(dash_duo, "node1 disk read")["y"]
    assert disk[75] == pytest.approx(50.0)  # 50 MB/s in every epoch of the live run
    mean = trace(dash_duo, "node1 epoch mean")
    assert mean["y"][-3:] == [100.0, 100.0, None]  # 3,000 images / 30 s

    store.write_points(run_end_points(live_run(3)))
    wait_for(
        lambda: text_of(dash_duo, f"#{ids.RUN_STATUS}") == "finished: not updating",
        what="the page to notice the run ended",
    )
    assert dash_duo.get_logs() == []


def test_a_run_page_opened_before_the_run_exists_switches_to_it_when_it_arrives(dash_duo, store):
    """The user opens the run's URL as the launcher prints it, before any rank's run_start
    reached the collector: the page keeps looking and becomes the live run page."""
    from tests.support.run_builder import RunBuilder

    open_page(dash_duo, "/runs/late-run", f"#{ids.RUN_WAITING}")
    assert "No run 'late-run' in the store yet" in text_of(dash_duo, f"#{ids.RUN_WAITING}")
    time.sleep(3 * POLL_SECONDS)  # a few polls with nothing there: still waiting
    assert text_of(dash_duo, f"#{ids.RUN_WAITING}") is not None
    late = RunBuilder("late-run", hosts=("node1",), t0_ns=T0_NS + 3 * DAY_NS, pad_s=0.0,
                      state=RunState.LIVE)  # fmt: skip
    late.epoch(30, 3_000, disk_read=50e6, gpu_util=80.0, cpu_busy=0.4)
    store.write_points(late.points())
    wait_for(lambda: text_of(dash_duo, f"#{ids.RUN_WAITING}") is None, what="the run page")
    dash_duo.wait_for_element(f"#{ids.TIMESERIES_GRAPH} .main-svg", timeout=60)
    assert text_of(dash_duo, f"#{ids.RUN_STATUS}").startswith("live: updating every 0.4 s")
    assert dash_duo.get_logs() == []


def test_shares_of_each_step_over_time_with_each_rank_on_hover(dash_duo, store):
    """A live run whose ranks split their steps (two hosts, two ranks each): one point per
    sampled step and host, pooled over its ranks; hovering a point lists each rank's
    shares; steps that arrive mid-epoch are drawn at the next poll."""
    from contract.schema import Event, Workload
    from tests.support.run_builder import RunBuilder

    waits = {0: 0.40, 1: 0.20, 2: 0.10, 3: 0.10}  # input wait share of each rank's steps

    def anatomy_run(epochs: int) -> RunBuilder:
        run = RunBuilder("anatomy-live", hosts=HOSTS, ranks_per_host=2, pad_s=0.0,
                         t0_ns=T0_NS + 4 * DAY_NS, state=RunState.LIVE)  # fmt: skip
        run.epoch(40, 3_000, shares=lambda host, rank: (waits[rank], 0.50, 0.25), cpu_busy=0.4)
        if epochs > 1:
            run.epoch(40, 3_000, shares=(0.0, 0.55, 0.40), cpu_busy=0.4)
        return run

    one = anatomy_run(1)
    store.write_points(one.points())
    open_page(dash_duo, "/runs/anatomy-live", f"#{ids.STEP_SHARES_GRAPH} .main-svg")

    def shares() -> dict[str, dict]:
        return {t["name"]: t for t in figure_data(dash_duo.driver, ids.STEP_SHARES_GRAPH) or []}

    wait_for(lambda: "node1 input wait" in shares(), what="the step shares chart")
    traces = shares()
    assert list(traces) == [f"{host} {part}" for host in HOSTS
                            for part in ("input wait", "compute", "all-reduce")]  # fmt: skip
    # node1's ranks wait 40% and 20%: 30% pooled, at each of the epoch's 4 steps
    assert traces["node1 input wait"]["y"] == [30.0] * 4
    assert traces["node2 input wait"]["y"] == [10.0] * 4
    assert traces["node1 all-reduce"]["y"] == [25.0] * 4

    # hover node1's first input-wait point: each of its ranks' shares of that step
    def hover_text() -> str:  # (SVG: the lines are <tspan>s, the host the box's name)
        return dash_duo.driver.execute_script(
            "return Array.from(document.querySelectorAll("
            f"'#{ids.STEP_SHARES_GRAPH} .hovertext tspan, "
            f"#{ids.STEP_SHARES_GRAPH} .hovertext text.name'))"
            ".map(t => t.textContent).join('\\n');"
        )

    point = dash_duo.find_elements(
        f"#{ids.STEP_SHARES_GRAPH} .scatterlayer .trace:first-child .point"
    )[0]
    ActionChains(dash_duo.driver).move_to_element(point).perform()
    wait_for(lambda: "rank 0: 40.0 / 50.0 / 25.0" in hover_text(), what="each rank on hover")
    hover = hover_text()
    assert "input wait 30.0%" in hover and "epoch 1 · step 1" in hover
    assert "rank 1: 20.0 / 50.0 / 25.0" in hover and "node1" in hover

    # the next epoch's steps arrive (no epoch edge yet): the chart grows at the next poll
    later = [p for p in anatomy_run(2).points() if p.time_ns > one.end_true_ns()]
    steps = [p for p in later if p.fields.get(Workload.EVENT) == Event.STEP]
    store.write_points(steps)
    wait_for(
        lambda: len(shares().get("node1 all-reduce", {}).get("y", [])) == 8,
        what="the new steps on the shares chart",
    )
    assert shares()["node1 all-reduce"]["y"][4:] == [40.0] * 4
    store.write_points(run_end_points(anatomy_run(2)))
    wait_for(
        lambda: text_of(dash_duo, f"#{ids.RUN_STATUS}") == "finished: not updating",
        what="the page to notice the run ended",
    )
    assert dash_duo.get_logs() == []
