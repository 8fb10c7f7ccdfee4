"""The dashboard on an ordinary host (no NFS mount, InfiniBand port or GPU), and with
writer-controlled names that plotly would read as HTML (tests/support/plain_hosts.py):
figures and pages in Python, then the pages in real headless Chromium, and the security
headers over HTTP.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from contextlib import suppress

import plotly.graph_objects as go
import pytest

pytest.importorskip("collector.store", reason="the SQLite store is not in this tree")

from collector.views.evidence import evidence_tree
from contract.markers import ALL_HOSTS
from dashboard import figures, ids, pages
from dashboard.app import Callbacks, create_app
from dashboard.server import make_dashboard_server
from dashboard.source import DataSource
from tests.support.browser import (
    chromium_available,
    dash_browser,
    figure_data,
)
from tests.support.layout import find
from tests.support.plain_hosts import (
    EPOCH_SECONDS,
    HOSTILE,
    HOSTILE_HREF,
    HOSTILE_RUN,
    ORPHAN_RUN,
    PLAIN_HOST,
    PLAIN_RUN,
    STEPS_PER_EPOCH,
    WARMUP_STEPS,
    build_plain_store,
    plain_run,
)

SCREENSHOTS = "/tmp/dashhost"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    store = build_plain_store(tmp_path_factory.mktemp("store") / "epochscope.sqlite")
    yield store
    store.close()


@pytest.fixture(scope="module")
def source(store) -> DataSource:
    return DataSource(store)


@pytest.fixture(scope="module")
def plain(source):
    return {
        "ts": source.timeseries(PLAIN_RUN, live=False),
        "boundaries": source.boundaries(PLAIN_RUN),
        "rows": source.epochs(PLAIN_RUN),
    }


# -- what the hosts have ----------------------------------------------------------------


def test_only_the_panels_of_what_the_host_has_are_drawn(plain):
    figure = figures.timeseries_figure(
        plain["ts"].hosts, plain["boundaries"], [PLAIN_HOST], plain["rows"]
    )
    go.Figure(figure)
    titles = [a["text"] for a in figure["layout"]["annotations"] if a["text"].startswith("<b>")]
    assert len(titles) == 5
    assert not any(word in " ".join(titles) for word in ("NFS", "InfiniBand", "GPU"))
    assert not [a for a in figure["layout"]["annotations"] if "no samples" in a["text"]]
    assert figure["layout"]["height"] == figures.timeseries_height(5)
    absent = figures.absent_measurements(plain["rows"], plain["ts"].hosts)
    assert pages.absent_note(plain["rows"], absent) == (
        "No NFS mounts, InfiniBand ports or GPUs on this host, and no network traffic in "
        "any epoch: their charts are left out."
    )
    # the NFS and fabric bars go; the local disk's stay
    assert pages.epoch_chart_styles(plain["rows"], absent) == (
        {},
        pages.HIDDEN,
        pages.HIDDEN,
    )


def test_a_host_with_everything_gets_no_note():
    rows = [{"host": "a", "epoch": 1, **{c: 1.0 for m in figures.MEASUREMENTS for c in m.columns}}]
    assert figures.absent_measurements(rows) == []
    assert pages.absent_note(rows, []) == ""
    assert figures.absent_measurements([]) == []  # nothing to go by yet: nothing is absent


def test_one_host_table_has_no_all_hosts_row_and_no_empty_columns(plain):
    table = pages.epoch_table(plain["rows"], per_host=False)
    assert [row["host"] for row in table.data] == [PLAIN_HOST] * 3
    shown = [column["id"] for column in table.columns]
    for gone in ("nfs_server_read_mbps", "ib_rcv_mbps", "gpu_util_percent", "seconds_per_step"):
        assert gone not in shown
    assert {"epoch", "host", "images_per_second", "disk_read_mbps"} <= set(shown)
    assert any(row["host"] == ALL_HOSTS for row in plain["rows"])  # the view drops it


def test_epoch_mean_starts_at_the_first_timed_step(plain):
    figure = figures.timeseries_figure(
        plain["ts"].hosts, plain["boundaries"], [PLAIN_HOST], plain["rows"]
    )
    charts = figures.shown_charts(plain["rows"], plain["ts"].hosts)
    mean = figure["data"][figures.epoch_mean_offset([PLAIN_HOST], charts)]
    assert mean["name"] == f"{PLAIN_HOST} epoch mean"
    start = plain["boundaries"][PLAIN_HOST][0]["start_ns"]
    warmup_ns = round(EPOCH_SECONDS * WARMUP_STEPS / STEPS_PER_EPOCH * 1e9)
    assert mean["x"][0] == figures.iso_ms(start + warmup_ns)  # 30 s in: step 11 of 20
    assert mean["x"][3] == figures.iso_ms(plain["boundaries"][PLAIN_HOST][1]["start_ns"])


def test_page_cache_unit_follows_the_range(plain):
    charts = figures.shown_charts(plain["rows"], plain["ts"].hosts)
    unit, factor = figures.chart_scales(charts, plain["ts"].hosts)["page_cache"]
    assert (unit, factor) == ("MB", 1e-6)  # 30 MB of growth on a 2 GB level
    figure = figures.timeseries_figure(
        plain["ts"].hosts, plain["boundaries"], [PLAIN_HOST], plain["rows"]
    )
    index = [c.chart_id for c in charts].index("page_cache")
    axis = figure["layout"][f"yaxis{index + 1}"]
    assert axis["title"]["text"] == "MB" and axis["rangemode"] == "normal"


def test_every_one_of_three_epochs_is_shaded(plain):
    shapes, labels = figures.epoch_shading(plain["boundaries"], [PLAIN_HOST])
    fills = [s["fillcolor"] for s in shapes if s["type"] == "rect"]
    assert len(fills) == 3 and [label["text"] for label in labels] == [
        "epoch 1",
        "epoch 2",
        "epoch 3",
    ]
    alphas = [float(fill.rsplit(",", 1)[1].rstrip(") ")) for fill in fills]
    assert all(alpha > 0 for alpha in alphas)  # the third too
    assert fills[0] == figures.FIRST_EPOCH_FILL and fills[1] != fills[2]


# -- the scaling page and findings ------------------------------------------------------


def test_missing_efficiency_says_why(source):
    rows = [row for row in source.scaling() if row["run_id"] == ORPHAN_RUN]
    table = pages.scaling_table(rows)
    text = str(table)
    assert pages.NO_BASELINE in text  # the cells' tooltip and the note
    note = next(c for c in table.children if getattr(c, "id", None) == ids.SCALING_NOTE)
    assert "jax resnet50" in note.children


def test_evidence_is_a_labelled_list_with_nested_items():
    evidence = {
        "images_per_second": 1500.0,
        "attribution": {"reference_run": "r1", "lost_images_per_second": 200.0},
        "changed": [],
    }
    tree = evidence_tree(evidence)
    assert tree == [
        ("images per second", "1,500 images/s"),
        ("attribution", [("reference run", "r1"), ("lost images per second", "200 images/s")]),
    ]
    rendered = pages.evidence_list(tree)
    assert rendered.className == "evidence"
    assert [type(c).__name__ for c in rendered.children] == ["Dt", "Dd", "Dt", "Dd"]
    assert type(rendered.children[3].children).__name__ == "Dl"


def test_scaling_finding_shows_the_reference_run_too():
    evidence = {
        "reference_run": "one-gpu",
        "attribution": {
            "reference_run": "one-gpu",
            "reference_ranks": 1,
            "ranks": 8,
            "parts": [
                {"part": "communication", "reference_seconds": 0.0, "run_seconds": 0.15},
                {"part": "compute", "reference_seconds": 0.8, "run_seconds": 0.8},
            ],
        },
    }
    figure = figures.reference_comparison_figure(evidence, "eight-gpu")
    go.Figure(figure)
    assert figure["data"][0]["x"] == ["one-gpu (1 ranks)", "eight-gpu (8 ranks)"]
    assert figure["data"][0]["y"] == pytest.approx([0.0, 150.0])
    card = pages.finding_card(
        {"rule": "scaling_loss", "severity": "warning", "title": "t", "evidence": evidence},
        "eight-gpu",
        same_page=True,
    )
    assert "'/runs/one-gpu'" in str(card) and "comparison" in str(card)


# -- writer-controlled text -------------------------------------------------------------


def test_plotly_text_shows_markup_as_text():
    assert figures.plotly_text(HOSTILE) == (
        '&lt;a href="https://evil.example/" target="_top"&gt;x&lt;/a&gt;'
    )
    assert figures.plotly_text("%{y}") == "%&#123;y&#125;"


def test_no_store_value_reaches_plotly_as_markup(source):
    rows = source.scaling()
    run = source.epochs(HOSTILE_RUN)
    ts = source.timeseries(HOSTILE_RUN, live=False)
    boundaries = source.boundaries(HOSTILE_RUN)
    order = list(ts.hosts)
    drawn = [
        figures.scaling_figure(rows),
        figures.time_to_target_figure(rows),
        figures.timeseries_figure(ts.hosts, boundaries, order, run),
        *pages.epoch_figures(run, order, source.rank_parts(HOSTILE_RUN)),
        figures.step_shares_figure(source.step_shares(HOSTILE_RUN), order),
    ]
    assert HOSTILE in str(order)
    for figure in drawn:
        text = str(figure)
        assert "<a " not in text, text[max(0, text.find("<a ") - 200) : text.find("<a ") + 50]


# -- in Chromium --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def duo(store, tmp_path_factory):
    if not chromium_available():
        pytest.skip("needs Debian's chromium and chromium-driver")
    app = create_app(DataSource(store), poll_seconds=0.5)
    with dash_browser(app, str(tmp_path_factory.mktemp("downloads"))) as composite:
        yield composite


def wait_for(condition, timeout: float = 60, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with suppress(Exception):
            if condition():
                return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def screenshot(duo, name: str) -> None:
    import os

    os.makedirs(SCREENSHOTS, exist_ok=True)
    height = duo.driver.execute_script("return document.body.scrollHeight")
    duo.driver.set_window_size(1400, min(max(height, 1000), 6000))
    time.sleep(1.0)
    duo.driver.save_screenshot(f"{SCREENSHOTS}/{name}.png")
    duo.driver.set_window_size(1400, 1000)


def visible(duo, element_id: str) -> bool:
    return duo.driver.execute_script(
        "const e = document.getElementById(arguments[0]); return !!e && e.offsetParent !== null;",
        element_id,
    )


def test_plain_host_run_page_in_chromium(duo):
    duo.driver.get(f"{duo.server_url}/runs/{PLAIN_RUN}")
    duo.wait_for_element(f"#{ids.TIMESERIES_GRAPH} .main-svg", timeout=60)
    wait_for(lambda: figure_data(duo.driver, ids.TIMESERIES_GRAPH), what="the time series")
    wait_for(lambda: duo.find_elements(f"#{ids.RUN_FINDINGS} .finding"), what="findings")
    note = duo.find_element(f"#{ids.ABSENT_NOTE}").text
    assert note.startswith("No NFS mounts, InfiniBand ports or GPUs on this host")
    assert visible(duo, ids.EPOCH_DISK_PANEL)
    assert not visible(duo, ids.EPOCH_NFS_PANEL) and not visible(duo, ids.EPOCH_FABRIC)
    assert not visible(duo, ids.EPOCH_TABLE_HOSTS)  # one host: no switch
    # its ranks timed whole steps only: a line says so instead of two empty charts
    assert not visible(duo, ids.STEP_ANATOMY_PANELS)
    assert (
        "did not time the parts of their steps"
        in duo.find_element(f"#{ids.STEP_ANATOMY_NOTE}").text
    )
    names = {t["name"] for t in figure_data(duo.driver, ids.TIMESERIES_GRAPH)}
    assert not any("NFS" in n or "IB" in n or "GPU" in n for n in names)
    hosts = duo.driver.execute_script(
        f"return Array.from(document.querySelectorAll('#{ids.EPOCH_TABLE_CONTAINER} tbody tr'))"
        ".map(tr => tr.querySelectorAll('td')[1]).filter(td => td).map(td => td.innerText);"
    )
    assert hosts == [PLAIN_HOST] * 3
    screenshot(duo, "plain-run")
    assert duo.get_logs() == []  # no console error: none from the CSP either


def hostile_links(duo) -> int:
    return duo.driver.execute_script(
        "return document.querySelectorAll('svg a[href=\"' + arguments[0] + '\"]').length"
        " + document.querySelectorAll('a[href=\"' + arguments[0] + '\"]').length;",
        HOSTILE_HREF,
    )


def test_hostile_names_are_text_not_links_in_chromium(duo):
    duo.driver.get(f"{duo.server_url}/runs/{HOSTILE_RUN}")
    duo.wait_for_element(f"#{ids.TIMESERIES_GRAPH} .main-svg", timeout=60)
    wait_for(lambda: figure_data(duo.driver, ids.TIMESERIES_GRAPH), what="the time series")

    def svg_text() -> str:
        return duo.driver.execute_script(
            "return Array.from(document.querySelectorAll('svg')).map(s => s.textContent).join(' ');"
        )

    # the fabric bars' host labels: shown, as text
    wait_for(lambda: HOSTILE in svg_text(), what="the host's name")
    assert hostile_links(duo) == 0
    screenshot(duo, "hostile-run")

    duo.driver.get(f"{duo.server_url}/scaling")
    duo.wait_for_element(f"#{ids.SCALING_GRAPH} .main-svg", timeout=60)
    wait_for(lambda: duo.find_elements(f"#{ids.SCALING_GRAPH} .legendtext"), what="legend")
    legend = " ".join(e.text for e in duo.find_elements(f"#{ids.SCALING_GRAPH} .legendtext"))
    assert HOSTILE in legend
    assert hostile_links(duo) == 0
    assert duo.find_element(f"#{ids.SCALING_NOTE}").text.startswith("Efficiency, ideal")
    screenshot(duo, "hostile-scaling")
    assert duo.get_logs() == []


# -- security headers over HTTP -----------------------------------------------------------


def test_every_response_carries_the_security_headers(store):
    from dashboard.auth import parse_credentials

    app = create_app(DataSource(store), credentials=parse_credentials("alice:s3cret"))
    server = make_dashboard_server("127.0.0.1", 0, app.server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    import base64

    auth = "Basic " + base64.b64encode(b"alice:s3cret").decode()
    try:
        for path, with_auth, status in (
            ("/", True, 200),
            ("/_dash-layout", True, 200),
            ("/assets/style.css", True, 200),
            ("/runs/x", True, 200),
            ("/", False, 401),
            ("/no-such-file.js", True, 200),  # Dash's catch-all page
        ):
            request = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}")
            if with_auth:
                request.add_header("Authorization", auth)
            try:
                response = urllib.request.urlopen(request, timeout=30)
            except urllib.error.HTTPError as error:
                response = error
            assert response.status == status, path
            headers = response.headers
            csp = headers["Content-Security-Policy"]
            assert "frame-ancestors 'none'" in csp and "object-src 'none'" in csp, path
            assert "script-src 'self' 'sha256-" in csp  # Dash's inline scripts, by hash
            assert "unsafe-eval" not in csp
            assert headers["X-Frame-Options"] == "DENY", path
            assert headers["X-Content-Type-Options"] == "nosniff", path
            assert headers["Referrer-Policy"] == "no-referrer", path
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    assert plain_run().run_id == PLAIN_RUN


def _component(tree, element_id: str):
    """The component of ``element_id`` in a Dash layout tree (depth first)."""
    if getattr(tree, "id", None) == element_id:
        return tree
    children = getattr(tree, "children", None)
    for child in children if isinstance(children, list) else [children]:
        if child is not None and not isinstance(child, str | int | float):
            found = _component(child, element_id)
            if found is not None:
                return found
    return None


def test_a_run_without_step_anatomy_says_why_instead_of_two_empty_charts(source, plain):
    run = source.run(PLAIN_RUN)
    # the plain run's ranks timed whole steps only (as a loop nothing hooks would)
    bare = plain["rows"]
    parts = [column for column, _, _ in figures.STEP_PARTS]
    timed = [{**row, **dict.fromkeys(parts, 30.0)} for row in bare]
    assert not figures.has_step_anatomy(bare) and figures.has_step_anatomy(timed)

    def section(rows, live):
        state = {"run_id": PLAIN_RUN, "epochs": []}
        page = pages.run_page(run, plain["ts"], plain["boundaries"], rows, live, 5000, state)
        note = _component(page, ids.STEP_ANATOMY_NOTE).children
        return note, _component(page, ids.STEP_ANATOMY_PANELS).style

    note, style = section(bare, live=False)
    assert style == pages.HIDDEN
    assert note.startswith("This run's ranks did not time the parts of their steps")
    assert section(timed, live=False) == ("", {})
    assert section(bare, live=True) == ("", {})  # live: its parts come with its epochs


def test_the_slot_of_the_time_series_is_as_high_as_their_chart(source, plain):
    """A finished run's page holds their place at their chart's height: nothing jumps when
    they come (5 panels here, not the 8 of a GPU node)."""
    page, _nav, _scroll = Callbacks(source, poll_ms=2000).route(f"/runs/{PLAIN_RUN}", "")
    figure = pages.timeseries_figure(plain["ts"], plain["boundaries"], plain["rows"])
    assert figure["layout"]["height"] == figures.timeseries_height(5)
    slot = find(page, ids.TIMESERIES_SLOT).children
    assert slot.style["height"] == f"{figure['layout']['height']}px"
