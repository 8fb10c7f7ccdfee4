"""Stored fixture runs for the dashboard tests, and checks of the numbers the pages show.

The runs are written through the real SQLite store's write path (``SqliteStore.write_points``)
from ``tests.support.run_builder`` (rates constant within each epoch, so every number below is
worked out by hand). No GPU, InfiniBand HCA or NFS client exists on the test machine: the
builder's samples stand in for what the agent would send.

``paper_run``: Horovod+TensorFlow on two nodes x 4 GPUs with the data set on NFS over
InfiniBand, like the seed studies' Fig. 7/8 setup. Per host:

=========  =======  ================  ==============  ============  =====  ======  ====
epoch      seconds  images (4 ranks)  NFS server MB/s  IB rcv/xmit  CPU %  iowait  GPU %
=========  =======  ================  ==============  ============  =====  ======  ====
1          120      4 x 24,000        300              400 / 100     30     20      55
2, 3       80       4 x 24,000        0 (cached)       100 / 100     55     1       92
=========  =======  ================  ==============  ============  =====  ======  ====

so images/s per host is 96,000 / 120 = 800 in epoch 1 and 96,000 / 80 = 1,200 after, and
receive minus send is 400 - 100 = 300 MB/s = the NFS read rate in epoch 1, 0 after.

``scaling_runs``: the same group on 1 GPU (300 images/s: 30,000 images per 100 s epoch) and
4 GPUs on one node (4 x 28,500 / 100 = 1,140 images/s, 1,140 / (4 x 300) = 95%), both
reaching top-1 0.749 in their second epoch (200 s after run_start).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from dash import no_update
from dash.exceptions import PreventUpdate
from plotly.utils import PlotlyJSONEncoder

from contract.point import Point
from contract.schema import Event, RunState, Workload

pytest.importorskip(
    "collector.queries.query", reason="the collector's query layer is not in this tree"
)
SqliteStore = pytest.importorskip(
    "collector.store", reason="the SQLite store is not in this tree"
).SqliteStore
from collector.analysis.run import EPOCH_KINDS  # noqa: E402
from dashboard import ids  # noqa: E402
from dashboard.source import DataSource  # noqa: E402
from tests.support.layout import find  # noqa: E402
from tests.support.run_builder import NS, T0_NS, RunBuilder  # noqa: E402

PAPER_RUN = "tf-2node-ib"
BASELINE_RUN = "tf-1gpu"
INTRA_RUN = "tf-4gpu"
LIVE_RUN = "tf-live"
HOSTS = ("node1", "node2")
HOSTS_L = list(HOSTS)
DAY_NS = 86_400 * NS


def paper_run() -> RunBuilder:
    builder = RunBuilder(
        PAPER_RUN,
        hosts=HOSTS,
        ranks_per_host=4,
        steps_per_epoch=8,
        dataset_bytes=72_000_000_000,
        target_top1=0.749,
    )
    builder.epoch(
        120,
        24_000,
        step_pattern=(1.0, 1.8, 0.6, 1.4),
        top1=0.41,
        nfs_server_read=300e6,
        nfs_app_read=300e6,
        ib_rcv=400e6,
        ib_xmit=100e6,
        net_rx=1e6,
        net_tx=1e6,
        cache_growth=300e6,
        cpu_busy=0.30,
        cpu_iowait=0.20,
        gpu_util=55.0,
    )
    for top1 in (0.62, 0.71):
        builder.epoch(
            80,
            24_000,
            top1=top1,
            nfs_app_read=450e6,
            ib_rcv=100e6,
            ib_xmit=100e6,
            net_rx=1e6,
            net_tx=1e6,
            cpu_busy=0.55,
            cpu_iowait=0.01,
            gpu_util=92.0,
        )
    return builder


def scaling_runs() -> list[RunBuilder]:
    baseline = RunBuilder(
        BASELINE_RUN, hosts=("node1",), t0_ns=T0_NS - 2 * DAY_NS, target_top1=0.749
    )
    baseline.epoch(100, 30_000, top1=0.52).epoch(100, 30_000, top1=0.76)
    intra = RunBuilder(
        INTRA_RUN, hosts=("node1",), ranks_per_host=4, t0_ns=T0_NS - DAY_NS, target_top1=0.749
    )
    intra.epoch(100, 28_500, top1=0.55).epoch(100, 28_500, top1=0.75)
    for builder in (baseline, intra):
        builder.write_samples = False
    return [baseline, intra]


def live_run(epochs: int) -> RunBuilder:
    """Two hosts, one rank each, 30-second epochs; no samples beyond the last epoch (pad 0),
    so a longer build only adds points after the shorter one's."""
    builder = RunBuilder(
        LIVE_RUN, hosts=HOSTS, t0_ns=T0_NS + DAY_NS, pad_s=0.0, state=RunState.LIVE
    )
    for _ in range(epochs):
        builder.epoch(30, 3_000, disk_read=50e6, gpu_util=80.0, cpu_busy=0.4)
    return builder


def points_after(builder: RunBuilder, after_ns: int) -> list[Point]:
    return [p for p in builder.points() if p.time_ns > after_ns]


def run_end_points(builder: RunBuilder) -> list[Point]:
    """What the ranks write when the live run finishes."""
    builder.state = RunState.FINISHED
    return [p for p in builder.event_points() if p.fields.get(Workload.EVENT) == Event.RUN_END]


def build_store(path: Path, with_live: bool = False) -> SqliteStore:
    store = SqliteStore(path)
    store.write_points(paper_run().points())
    for builder in scaling_runs():
        store.write_points(builder.points())
    if with_live:
        store.write_points(live_run(2).points())
    return store


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> DataSource:
    store = build_store(tmp_path_factory.mktemp("store") / "epochscope.sqlite")
    return DataSource(store)


# --------------------------------------------------------------------------------------
# the numbers the pages are built from
# --------------------------------------------------------------------------------------


def test_runs_newest_first_with_their_shape(source):
    runs = source.runs()
    assert [r["run_id"] for r in runs] == [PAPER_RUN, INTRA_RUN, BASELINE_RUN]
    paper = runs[0]
    assert (paper["gpus"], paper["hosts"], paper["host_names"]) == (8, 2, ["node1", "node2"])
    assert paper["state"] == RunState.FINISHED
    assert paper["start"] == "2023-11-14T22:13:20.000Z"  # T0 = 1,700,000,000 s


def test_epoch_rows_match_the_hand_computed_rates(source):
    rows = {(r["host"], r["epoch"]): r for r in source.epochs(PAPER_RUN)}
    first, later = rows[("node1", 1)], rows[("node2", 2)]
    assert first["images_per_second"] == pytest.approx(800.0)  # 96,000 / 120
    assert later["images_per_second"] == pytest.approx(1200.0)  # 96,000 / 80
    assert first["nfs_server_read_mbps"] == pytest.approx(300.0)
    assert later["nfs_server_read_mbps"] == pytest.approx(0.0)
    assert (first["ib_rcv_mbps"], first["ib_xmit_mbps"]) == pytest.approx((400.0, 100.0))
    assert first["rx_minus_tx_mbps"] == pytest.approx(300.0)  # = the NFS read rate
    assert later["rx_minus_tx_mbps"] == pytest.approx(0.0)
    assert rows[("*", 1)]["images_per_second"] == pytest.approx(1600.0)  # 2 x 96,000 / 120


def test_timeseries_buckets_are_one_second_for_a_short_run(source):
    ts = source.timeseries(PAPER_RUN, live=False)
    assert list(ts.hosts) == ["node1", "node2"]
    # the run lasts 120 + 80 + 80 = 280 s: 280 one-second buckets fit in 500 points
    assert ts.bucket_ns == NS
    assert ts.points == 280
    node1 = ts.hosts["node1"]["series"]
    assert node1["ib_rcv_mbps"][10] == pytest.approx(400.0)  # inside epoch 1
    assert node1["ib_rcv_mbps"][200] == pytest.approx(100.0)  # inside epoch 3


def test_scaling_rows_give_the_baseline_and_efficiency(source):
    rows = {r["run_id"]: r for r in source.scaling()}
    assert rows[BASELINE_RUN]["images_per_second"] == pytest.approx(300.0)
    assert rows[INTRA_RUN]["images_per_second"] == pytest.approx(1140.0)
    assert rows[INTRA_RUN]["efficiency_percent"] == 95  # 1,140 / (4 x 300)
    assert rows[INTRA_RUN]["scope"] == "intra-node"
    assert rows[PAPER_RUN]["scope"] == "inter-node"
    assert rows[BASELINE_RUN]["epochs_to_target"] == 2
    assert rows[BASELINE_RUN]["seconds_to_target"] == pytest.approx(200.0)


def test_findings_name_the_chart_that_shows_them(source):
    found = {f["rule"]: f for f in source.findings(PAPER_RUN)}
    assert "cache_warmup" in found
    assert found["cache_warmup"]["chart"] == "disk_read_mbps"
    assert "fabric_carries_storage" in found


class CountingStore:
    """The real store, counting how often each run's events and steps are read, and how
    many events those reads decoded."""

    def __init__(self, store) -> None:
        self.store = store
        self.event_reads: dict[str, int] = {}
        self.decoded: dict[str, int] = {}
        self.step_reads: dict[str, int] = {}

    def events(self, run_id, since_ns=None, kinds=None):
        found = self.store.events(run_id, since_ns, kinds)
        self.event_reads[run_id] = self.event_reads.get(run_id, 0) + 1
        self.decoded[run_id] = self.decoded.get(run_id, 0) + len(found)
        return found

    def steps(self, run_id, since_ns=None):
        self.step_reads[run_id] = self.step_reads.get(run_id, 0) + 1
        return self.store.steps(run_id, since_ns)

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_a_run_page_decodes_the_runs_events_once_and_a_finished_run_only_once(source):
    from collector.queries import query
    from dashboard.app import Callbacks

    counting = CountingStore(source.store.store)
    callbacks = Callbacks(DataSource(counting, complete_ahead=False), poll_ms=2000)
    query.clear_cache()
    page, _nav, _scroll = callbacks.route(f"/runs/{PAPER_RUN}", "")
    # summary, epoch table and boundaries ask only for the run, epoch and end events:
    # read by kind (a small indexed read), once
    direct = source.store.store
    epoch_events = len(direct.events(PAPER_RUN, kinds=EPOCH_KINDS))
    assert epoch_events == 2 * 4 * (1 + 3 + 3 + 1)  # 8 ranks: run, 3 epochs, run end
    assert counting.event_reads == {PAPER_RUN: 1}  # no other run is summarised
    assert counting.decoded[PAPER_RUN] == epoch_events
    # the time series (images/s need the steps) come by their own callback: the steps,
    # read once as columns (no event decoded); the findings (not computed yet: their own
    # callback too) share them and the report
    pending = find(page, ids.RUN_PENDING).data
    # (its ranks timed whole steps only: the step-shares panel is hidden, not drawn)
    assert pending == {"run_id": PAPER_RUN, "step_shares": False}
    findings_key = find(page, ids.RUN_EPOCHS).data
    assert not findings_key["in_page"]
    assert PAPER_RUN not in counting.step_reads
    callbacks.load_pending_timeseries(pending)
    found = callbacks.load_run_findings(findings_key)
    assert counting.event_reads[PAPER_RUN] == 1
    assert counting.step_reads[PAPER_RUN] == 1
    assert counting.decoded[PAPER_RUN] == epoch_events
    reads = dict(counting.event_reads)  # (the findings compare with the other runs)
    step_reads = dict(counting.step_reads)
    page, _nav, _scroll = callbacks.route(f"/runs/{PAPER_RUN}", "")
    # finished: the query layer keeps its tables, its findings (in the page now: their
    # callback sends nothing) and its charts (still by their callback, after the first
    # screen)
    assert as_json(find(page, ids.RUN_FINDINGS).children) == as_json(found)
    findings_key = find(page, ids.RUN_EPOCHS).data
    assert findings_key["in_page"]
    with pytest.raises(PreventUpdate):
        callbacks.load_run_findings(findings_key)
    assert find(page, ids.RUN_PENDING).data == pending
    callbacks.load_pending_timeseries(pending)
    assert counting.event_reads == reads
    assert counting.step_reads == step_reads


def test_what_a_first_look_leaves_out_is_computed_while_the_browser_draws(source):
    from collector.queries import query
    from dashboard.app import Callbacks

    counting = CountingStore(source.store.store)
    callbacks = Callbacks(DataSource(counting), poll_ms=2000)
    query.clear_cache()
    page, _nav, _scroll = callbacks.route(f"/runs/{PAPER_RUN}", "")
    # a background thread computes the charts and the findings, which compare the run
    # with the others of its group (and so read their events)
    wait_for(lambda: {BASELINE_RUN, INTRA_RUN} <= set(counting.event_reads), "findings")
    time.sleep(0.2)
    reads = dict(counting.event_reads)
    step_reads = dict(counting.step_reads)
    assert reads[PAPER_RUN] == 1  # epoch events, once
    assert step_reads[PAPER_RUN] == 1  # steps, once
    callbacks.load_pending_timeseries(find(page, ids.RUN_PENDING).data)
    callbacks.load_run_findings({"run_id": PAPER_RUN})
    assert counting.event_reads == reads  # both were ready
    assert counting.step_reads == step_reads


def wait_for(condition, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_a_run_page_drawn_without_time_series_gets_them_by_their_own_callback(source):
    from dashboard.app import Callbacks

    fresh = DataSource(source.store.store, complete_ahead=False)
    fresh.forget()
    callbacks = Callbacks(fresh, poll_ms=2000)
    page, _nav, _scroll = callbacks.route(f"/runs/{PAPER_RUN}", "")
    # no chart stands in for them (the browser would draw each twice): a note as high as
    # the chart (the page does not jump); the step shares come with them
    assert find(page, ids.TIMESERIES_GRAPH) is None
    assert find(page, ids.STEP_SHARES_GRAPH) is None
    slot = find(page, ids.TIMESERIES_SLOT).children
    time_chart, note, shares_chart = callbacks.load_pending_timeseries(
        find(page, ids.RUN_PENDING).data
    )
    assert time_chart.id == ids.TIMESERIES_GRAPH
    figure = time_chart.figure
    assert slot.style["height"] == f"{figure['layout']['height']}px"
    # its ranks timed whole steps only: the step-shares panel stays hidden, no chart drawn
    assert shares_chart is no_update
    # once computed, the run's page still comes without them, and they are the same
    page, _nav, _scroll = callbacks.route(f"/runs/{PAPER_RUN}", "")
    assert find(page, ids.TIMESERIES_GRAPH) is None
    again, again_note, _shares = callbacks.load_pending_timeseries(find(page, ids.RUN_PENDING).data)
    assert (again.figure, again_note) == (figure, note)
    assert find(page, ids.STEP_SHARES_GRAPH) is None
    assert find(page, ids.EPOCH_STEP_ANATOMY_GRAPH) is None
    assert note.startswith("Each host's metrics averaged over 1-second buckets")
    # 8 steps per epoch and rank of 3,000 images, 4 ranks per host: 12,000 images a step,
    # spread over the step's own seconds. Epoch 1's steps follow the pattern 1 : 1.8 : 0.6 :
    # 1.4 (twice, 9.6 in all) over 120 s: 12.5, 22.5, 7.5, 17.5 s -> 960, 533.3, 1,600 and
    # 685.7 images/s; the later epochs' 10-s steps give 1,200 images/s
    node1 = next(t for t in figure["data"] if t["name"] == "node1 images/s")["y"]
    assert node1[0:12] == [960.0] * 12  # 0..12 s: step 1 (0..12.5 s)
    assert node1[12] == round(0.5 * 960 + 0.5 * 12_000 / 22.5, 4)  # half of each, 12..13 s
    assert node1[13:35] == [533.3333] * 22  # 13..35 s: step 2 (12.5..35 s)
    assert node1[35:42] == [1600.0] * 7  # step 3 (35..42.5 s)
    assert (node1[130], node1[270]) == (1200.0, 1200.0)
    # every image of the run: 3 epochs x 96,000 in 1-s buckets
    assert sum(node1) == pytest.approx(3 * 96_000, abs=0.01)


def as_json(component) -> str:
    """A layout tree as the browser gets it."""
    return json.dumps(component, cls=PlotlyJSONEncoder)


def test_events_kept_for_a_request_answer_like_the_store(source):
    store = source.store
    direct = store.store
    kinds = (Event.EPOCH_START, Event.EPOCH_END)
    since = T0_NS + 100 * NS
    with source.request():
        assert store.events(PAPER_RUN) == direct.events(PAPER_RUN)
        assert store.events(PAPER_RUN, kinds=kinds) == direct.events(PAPER_RUN, kinds=kinds)
        assert store.events(PAPER_RUN, since, kinds) == direct.events(PAPER_RUN, since, kinds)
    assert store._memo() is None  # nothing is kept after the request


def test_prepared_runs_open_without_reading_the_store_again(source):
    from collector.queries import query
    from dashboard.app import Callbacks

    counting = CountingStore(source.store.store)
    prepared = DataSource(counting)
    query.clear_cache()
    stop = prepared.start_preparing(newest=2, every_s=60)
    try:
        deadline = time.monotonic() + 60
        while prepared.prepared != {PAPER_RUN, INTRA_RUN} and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
    assert prepared.prepared == {PAPER_RUN, INTRA_RUN}  # the two newest finished runs
    reads = dict(counting.event_reads)
    callbacks = Callbacks(prepared, poll_ms=2000)
    page, _nav, _scroll = callbacks.route(f"/runs/{PAPER_RUN}", "")
    callbacks.load_pending_timeseries(find(page, ids.RUN_PENDING).data)
    assert counting.event_reads == reads  # the page came from what was prepared
    assert find(page, ids.RUN_EPOCHS).data["in_page"]  # its findings with it
    assert not prepared.prepare("no-such-run")


def test_a_finished_runs_hidden_panels_draw_no_chart_a_live_runs_keep_theirs(tmp_path):
    """A chart in a hidden panel is still drawn by the browser (about as dearly as a shown
    one); a finished run's page never shows its hidden panels again, a live one's polls
    may (a host's first disk or GPU sample)."""
    from dashboard.app import Callbacks

    callbacks = Callbacks(DataSource(build_store(tmp_path / "s.sqlite", with_live=True)), 2000)
    finished, _nav, _scroll = callbacks.route(f"/runs/{PAPER_RUN}", "")
    # its ranks timed whole steps only: the step-anatomy panels are hidden, no chart in them
    assert find(finished, ids.STEP_ANATOMY_PANELS).style == {"display": "none"}
    assert find(finished, ids.EPOCH_STEP_ANATOMY_GRAPH) is None
    assert find(finished, ids.STEP_SHARES_GRAPH) is None
    # the per-epoch storage and fabric panels: a chart exactly where the panel is shown
    panels = {
        ids.EPOCH_DISK_PANEL: ids.EPOCH_DISK_GRAPH,
        ids.EPOCH_NFS_PANEL: ids.EPOCH_NFS_GRAPH,
        ids.EPOCH_FABRIC: ids.EPOCH_FABRIC_GRAPH,
    }
    shown = {panel for panel in panels if find(finished, panel).style != {"display": "none"}}
    assert ids.EPOCH_NFS_PANEL in shown and ids.EPOCH_FABRIC in shown  # NFS over InfiniBand
    for panel, graph in panels.items():
        assert (find(finished, graph) is not None) == (panel in shown), panel

    live, _nav, _scroll = callbacks.route(f"/runs/{LIVE_RUN}", "")
    # (its fabric moved nothing yet: that panel is hidden, its chart kept for the polls)
    assert find(live, ids.EPOCH_FABRIC).style == {"display": "none"}
    for element_id in (
        ids.EPOCH_DISK_GRAPH,
        ids.EPOCH_NFS_GRAPH,
        ids.EPOCH_FABRIC_GRAPH,
        ids.EPOCH_STEP_ANATOMY_GRAPH,
        ids.STEP_SHARES_GRAPH,
        ids.TIMESERIES_GRAPH,
    ):
        assert find(live, element_id) is not None, element_id
