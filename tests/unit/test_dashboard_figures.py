"""The dashboard's figures and tables, built from a stored run (no browser).

Numbers are those worked out in tests/unit/test_dashboard_runs.py: per host, epoch 1 lasts
120 s with NFS reads at 300 MB/s and InfiniBand 400 MB/s in / 100 MB/s out; epochs 2 and 3
last 80 s with nothing read from the server and 100 MB/s each way.
"""

from __future__ import annotations

import plotly.graph_objects as go
import pytest

from contract.units import format_short_duration, human_bytes
from dashboard import columns, figures, ids, pages
from dashboard.columns import format_value

pytest.importorskip("collector.store", reason="the SQLite store is not in this tree")
from dashboard.source import DataSource
from tests.unit.test_dashboard_runs import (
    BASELINE_RUN,
    HOSTS,
    INTRA_RUN,
    PAPER_RUN,
    build_store,
)

HOST_ORDER = list(HOSTS)


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> DataSource:
    return DataSource(build_store(tmp_path_factory.mktemp("store") / "epochscope.sqlite"))


@pytest.fixture(scope="module")
def paper(source):
    return {
        "ts": source.timeseries(PAPER_RUN, live=False),
        "boundaries": source.boundaries(PAPER_RUN),
        "rows": source.epochs(PAPER_RUN),
    }


def chart(chart_id: str) -> figures.TimeChart:
    return next(c for c in figures.TIME_CHARTS if c.chart_id == chart_id)


def valid(figure: dict) -> dict:
    go.Figure(figure)  # raises on any attribute plotly does not know
    return figure


@pytest.fixture(scope="module")
def over_time(paper) -> dict:
    return valid(
        figures.timeseries_figure(paper["ts"].hosts, paper["boundaries"], HOST_ORDER, paper["rows"])
    )


def traces_of(figure: dict, chart_id: str) -> list[dict]:
    """The traces of one panel of the time-series figure."""
    index = [c.chart_id for c in figures.TIME_CHARTS].index(chart_id)
    start = figures.trace_offsets(HOST_ORDER)[index]
    return figure["data"][start : start + len(chart(chart_id).series) * len(HOST_ORDER)]


def test_panels_are_stacked_on_one_linked_time_axis(over_time):
    layout = over_time["layout"]
    panels = len(figures.TIME_CHARTS)
    assert all(layout[f"xaxis{n}"]["matches"] == "x" for n in range(2, panels + 1))
    names = ["xaxis", *(f"xaxis{n}" for n in range(2, panels + 1))]
    # time labels under the bottom panel only
    assert [layout[name]["showticklabels"] for name in names] == [False] * (panels - 1) + [True]
    titles = [a["text"] for a in layout["annotations"] if a["text"].startswith("<b>")]
    assert (
        titles[0]
        == "<b>Training throughput (thin: per bucket, from step events; thick: epoch mean)</b>"
    )
    assert len(titles) == panels


def test_infiniband_panel_has_receive_and_transmit_per_host(over_time):
    ib = traces_of(over_time, "ib_mbps")
    names = [t["name"] for t in ib]
    assert names == [
        "node1 IB receive",
        "node2 IB receive",
        "node1 IB transmit",
        "node2 IB transmit",
    ]
    receive, transmit = ib[0], ib[2]
    assert receive["yaxis"] == "y4"  # the fourth panel
    # one-second buckets from T0; each point sits at its bucket's centre
    assert receive["x0"] == "2023-11-14 22:13:20.500"
    assert receive["dx"] == 1000.0
    assert "x" not in receive  # equally spaced: no x array is shipped
    assert len(receive["y"]) == 280  # 120 + 80 + 80 s
    assert receive["y"][10] == pytest.approx(400.0)
    assert receive["y"][150] == pytest.approx(100.0)
    assert transmit["y"][10] == pytest.approx(100.0)
    assert transmit["line"]["dash"] == "dot"


def test_throughput_panel_shows_each_epochs_mean_over_its_window(over_time):
    first = figures.epoch_mean_offset(HOST_ORDER)
    assert first == len(over_time["data"]) - 2  # the last traces, one per host
    mean = over_time["data"][first]
    assert mean["name"] == "node1 epoch mean"
    assert mean["yaxis"] == "y"  # the throughput panel
    # 96,000 images per host per epoch: / 120 s = 800, then / 80 s = 1,200
    assert mean["y"] == [800.0, 800.0, None, 1200.0, 1200.0, None, 1200.0, 1200.0, None]
    assert mean["x"][:3] == ["2023-11-14 22:13:20.000", "2023-11-14 22:15:20.000", None]


def test_page_cache_panel_is_in_gigabytes(over_time):
    node1 = traces_of(over_time, "page_cache")[0]["y"]
    # cache grows 300 MB/s from 2 GB for the 120 s of epoch 1, then stays at 38 GB
    assert node1[0] == pytest.approx(2.0 + 0.3 * 0.5, abs=0.01)  # mean over the first second
    assert node1[200] == pytest.approx(38.0)


def test_all_zero_panels_say_so(over_time):
    notes = [a["text"] for a in over_time["layout"]["annotations"] if "throughout" in a["text"]]
    assert notes == ["0 MB/s throughout, on every host"]  # the local disk: data is on NFS


def test_epochs_are_shaded_and_labelled_with_epoch_one_apart(paper):
    shapes, labels = figures.epoch_shading(paper["boundaries"], HOST_ORDER)
    rects = [s for s in shapes if s["type"] == "rect"]
    assert [(r["x0"], r["x1"]) for r in rects] == [
        ("2023-11-14 22:13:20.000", "2023-11-14 22:15:20.000"),  # 120 s
        ("2023-11-14 22:15:20.000", "2023-11-14 22:16:40.000"),  # + 80 s
        ("2023-11-14 22:16:40.000", "2023-11-14 22:18:00.000"),  # + 80 s
    ]
    assert rects[0]["fillcolor"] == figures.FIRST_EPOCH_FILL
    assert figures.FIRST_EPOCH_FILL not in {r["fillcolor"] for r in rects[1:]}
    assert [label["text"] for label in labels] == ["epoch 1", "epoch 2", "epoch 3"]


def test_nfs_bars_per_epoch_and_host(paper):
    figure = valid(
        figures.epoch_bars_figure(paper["rows"], "nfs_server_read_mbps", "NFS", "MB/s", HOST_ORDER)
    )
    assert [t["name"] for t in figure["data"]] == ["node1", "node2"]
    for trace in figure["data"]:
        assert trace["x"] == ["epoch 1", "epoch 2", "epoch 3"]
        assert trace["y"] == pytest.approx([300.0, 0.0, 0.0])


def test_fabric_bars_show_receive_minus_send_as_the_storage_read(paper):
    figure = valid(figures.fabric_bars_figure(paper["rows"], HOST_ORDER))
    receive, send, difference = figure["data"]
    assert figure["layout"]["title"]["text"].startswith("InfiniBand")
    assert receive["x"] == [
        ["node1"] * 3 + ["node2"] * 3,
        ["epoch 1", "epoch 2", "epoch 3"] * 2,
    ]
    assert receive["y"] == pytest.approx([400.0, 100.0, 100.0] * 2)
    assert send["y"] == pytest.approx([100.0] * 6)
    assert difference["y"] == pytest.approx([300.0, 0.0, 0.0] * 2)  # = NFS 300 MB/s in epoch 1


def test_fabric_falls_back_to_nics_without_infiniband():
    rows = [
        {
            "host": "a",
            "epoch": 1,
            "seconds": 10.0,
            "ib_rcv_mbps": None,
            "ib_xmit_mbps": None,
            "net_rx_mbps": 25.0,
            "net_tx_mbps": 5.0,
            "rx_minus_tx_mbps": 20.0,
        }
    ]
    figure = valid(figures.fabric_bars_figure(rows, ["a"]))
    assert figure["layout"]["title"]["text"].startswith("Network interfaces")
    assert figure["data"][0]["y"] == [25.0]
    assert figure["data"][1]["y"] == [5.0]
    assert "annotations" not in figure["layout"]
    # a lone host that sent nothing (make demo's): the empty-looking panel says why
    quiet = [{**rows[0], "net_rx_mbps": 0.0, "net_tx_mbps": 0.0, "rx_minus_tx_mbps": 0.0}]
    figure = valid(figures.fabric_bars_figure(quiet, ["a"]))
    notes = [note["text"] for note in figure["layout"]["annotations"]]
    assert notes == ["0 MB/s in every epoch, on every host"]


def test_missing_columns_give_an_explained_empty_chart():
    rows = [{"host": "a", "epoch": 1, "nfs_server_read_mbps": None}]
    figure = valid(figures.epoch_bars_figure(rows, "nfs_server_read_mbps", "NFS", "MB/s", ["a"]))
    assert figure["data"] == []
    assert figure["layout"]["annotations"][0]["text"] == "no data for this run"


def test_live_extension_targets_each_series_and_host():
    update = {
        "node2": {"series": {"ib_rcv_mbps": [7.0], "ib_xmit_mbps": [3.0]}},
        "node1": {"series": {"ib_rcv_mbps": [1.0, 2.0], "ib_xmit_mbps": []}},
    }
    # panels before InfiniBand: images/s (1 series), disk (1), NFS (2), x 2 hosts = 8
    # traces; then receive node1, receive node2, transmit node1, transmit node2
    assert figures.timeseries_extension(update, HOST_ORDER) == {
        8: [1.0, 2.0],
        9: [7.0],
        11: [3.0],
    }


def test_scaling_figure_has_ideal_line_and_efficiency_labels(source):
    rows = source.scaling()
    figure = valid(figures.scaling_figure(rows))
    ideal = next(t for t in figure["data"] if t["name"].endswith(": ideal"))
    assert ideal["x"] == [1, 4, 8]
    assert ideal["y"] == pytest.approx([300.0, 1200.0, 2400.0])  # 300 images/s x GPUs
    markers = {t["name"]: t for t in figure["data"] if t["mode"] == "markers+text"}
    assert set(markers) == {"baseline", "intra-node", "inter-node"}
    assert markers["intra-node"]["text"] == ["95%"]  # 1,140 / 1,200
    assert markers["baseline"]["text"] == [""]
    assert markers["inter-node"]["marker"]["symbol"] == "diamond"


def test_time_to_target_in_hours_with_epochs(source):
    rows = [r for r in source.scaling() if r["run_id"] in (BASELINE_RUN, INTRA_RUN)]
    figure = valid(figures.time_to_target_figure(rows))
    (trace,) = figure["data"]
    assert trace["x"] == ["1 rank", "4 ranks"]  # ranks: a CPU run's are not GPUs
    assert trace["y"] == pytest.approx([200 / 3600, 200 / 3600])  # 2 epochs of 100 s
    assert trace["text"] == ["2 epochs", "2 epochs"]


def test_epoch_table_marks_all_host_rows_and_tooltips(paper):
    table = pages.epoch_table(paper["rows"])
    assert [c["name"] for c in table.columns][:2] == ["Epoch", "Host"]
    assert set(table.tooltip_header) == {c["id"] for c in table.columns}  # each explains itself
    assert all(table.tooltip_header.values())
    assert len(table.data) == 9  # 3 epochs x (2 hosts + all hosts)
    all_hosts = [row for row in table.data if row["host"] == "all hosts"]
    assert len(all_hosts) == 3
    # numbers stay numbers (sorting is numeric); the browser writes them (test_dashboard_browser)
    first = all_hosts[0]
    assert (first["epoch"], first["seconds"], first["images"]) == (1, 120.0, 192000)
    assert first["images_per_second"] == pytest.approx(1600.0)
    assert table.tooltip_data[0]["epoch"].count("→") == 1  # the epoch's start and end
    styled = {rule["if"]["filter_query"] for rule in table.style_data_conditional}
    assert styled == {"{epoch} = 1", '{host} = "all hosts"'}


def test_epoch_table_columns_write_numbers_as_the_other_tables_do():
    specifiers = {
        c["id"]: c["format"].to_plotly_json()["specifier"] if "format" in c else None
        for c in map(columns.table_column, columns.EPOCH_COLUMNS)
    }
    assert specifiers["host"] is None  # text
    assert specifiers["images"] == ",.0f"  # 192,000
    assert specifiers["images_per_second"] == ",.1f"  # 1,600.0
    assert specifiers["cpu_util_percent"] == ".1f"
    assert specifiers["nfs_cache_hit_ratio"] == ".3f"
    assert specifiers["page_cache_delta_bytes"] == "$.3s"  # 1.23GB


def test_long_epoch_tables_start_with_one_row_per_epoch(paper):
    rows = paper["rows"]
    assert pages.per_host_default(rows) == [pages.PER_HOST]  # 9 rows: every host shown
    assert pages.per_host_default(rows * 14) == []  # 126 rows: too long
    table = pages.epoch_table(rows, per_host=False)
    assert [row["host"] for row in table.data] == ["all hosts"] * 3


def test_findings_link_to_the_chart_that_shows_them(source):
    found = source.findings(PAPER_RUN)
    card = pages.finding_card(
        next(f for f in found if f["rule"] == "cache_warmup"), PAPER_RUN, same_page=False
    )
    link = card.children[-1]
    assert link.href == f"/runs/tf-2node-ib#{ids.EPOCH_STORAGE}"


def test_run_links_quote_the_run_id():
    assert pages.run_href("a b/c") == "/runs/a%20b%2Fc"
    assert pages.findings_href("x&y") == "/findings?run=x%26y"


def test_numbers_are_formatted_for_reading():
    assert format_value(None, "rate") == "–"  # missing, never 0
    assert format_value(0.0, "rate") == "0.0"
    assert format_value(1234.56, "rate") == "1,234.6"
    # bytes as the collector's tables write them (contract.columns.format_cell)
    assert format_value(36_000_000_000, "bytes") == human_bytes(36_000_000_000) == "36.0 GB"
    assert format_short_duration(200) == "3m 20s"
    assert format_short_duration(3 * 3600 + 5 * 60) == "3h 05m"


def scaling_row(run_id: str, group: str, gpus: int, rate: float, scope: str, eff=None) -> dict:
    return {"run_id": run_id, "framework": group, "model": "resnet50", "precision": "fp32",
            "batch_size": 64, "data_format": "tfrecord", "gpus": gpus, "nodes": 1,
            "images_per_second": rate, "ideal": None, "efficiency_percent": eff,
            "scope": scope}  # fmt: skip


def test_scaling_labels_at_one_gpu_count_do_not_overlap_and_the_legend_is_neutral():
    """Two groups at 2 GPUs, 48% and 55% efficient, a few images/s apart: their labels
    must not sit on top of each other; the scope legend entries are grey markers."""
    rows = [
        scaling_row("a1", "tensorflow", 1, 300.0, "baseline"),
        scaling_row("a2", "tensorflow", 2, 330.0, "intra-node", 55),
        scaling_row("b1", "pytorch", 1, 290.0, "baseline"),
        scaling_row("b2", "pytorch", 2, 320.0, "intra-node", 48),
        scaling_row("b4", "pytorch", 4, 900.0, "intra-node", 78),
    ]
    figure = valid(figures.scaling_figure(rows))
    placed = {}
    for trace in figure["data"]:
        if trace["mode"] == "markers+text":
            assert trace["showlegend"] is False
            for (run_id,), position in zip(trace["customdata"], trace["textposition"], strict=True):
                placed[run_id] = position
    assert placed["a2"] == "top center" and placed["b2"] == "bottom center"
    assert placed["b4"] == "top center"  # alone at 4 GPUs
    legend = [t for t in figure["data"] if t["mode"] == "markers"]
    assert {t["name"] for t in legend} == {"baseline", "intra-node"}
    assert {t["marker"]["color"] for t in legend} == {figures.SCOPE_LEGEND_COLOUR}
    lines = [t for t in figure["data"] if t["mode"] == "lines" and t.get("showlegend", True)]
    assert [t["line"]["color"] for t in lines] == [figures.host_colour(0), figures.host_colour(1)]


def test_axes_write_plain_numbers_not_si_suffixes(over_time):
    """0.0008 MB/s was written "800µ" by plotly's SI suffixes: read as a unit."""
    layout = over_time["layout"]
    axes = [key for key in layout if key.startswith("yaxis")]
    assert axes and all(layout[key]["exponentformat"] == "none" for key in axes)
    scaling = figures.scaling_figure([scaling_row("a1", "tf", 1, 300.0, "baseline")])
    assert scaling["layout"]["yaxis"]["exponentformat"] == "none"


def test_the_throughput_panel_with_epoch_means_has_no_no_samples_note(paper):
    """A run whose step events are too sparse for a per-second line still has its epoch
    means drawn: the panel must not say there is nothing."""
    figure = figures.timeseries_figure({}, paper["boundaries"], HOST_ORDER, paper["rows"])
    notes = [a for a in figure["layout"]["annotations"] if "no samples" in a["text"]]
    throughput_domain = figure["layout"]["yaxis"]["domain"]
    middle = (throughput_domain[0] + throughput_domain[1]) / 2
    assert all(note["y"] != pytest.approx(middle) for note in notes)
    assert len(notes) == len(figures.TIME_CHARTS) - 1  # every other panel is empty here


def test_an_unfinished_epoch_is_labelled_with_the_collectors_state():
    """The state comes from collector.analysis.epochs.epoch_state
    (tests/unit/test_interrupted_epoch.py checks the views agree); the label writes it."""
    window = {"epoch": 3, "start_ns": 10**18, "end_ns": 10**18 + 10**9, "complete": False}
    labels = {}
    for state in ("running", "interrupted"):
        _, drawn = figures.epoch_shading({"node1": [{**window, "state": state}]}, ["node1"])
        labels[state] = [label["text"] for label in drawn]
    assert labels == {"running": ["epoch 3 (running)"], "interrupted": ["epoch 3 (interrupted)"]}
