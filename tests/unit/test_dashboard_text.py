"""What the dashboard says when something is missing, rendered as a user opens the page
(``Callbacks.route``, the callback behind every URL) over a real SQLite store written by
``tests.support.run_builder`` (issue 45, item 7): no agent is not "no disks", a run that
does not exist is not a run without findings, CPU ranks are not GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest
from dash import dcc, html

pytest.importorskip("collector.store", reason="the SQLite store is not in this tree")
from collector.store import SqliteStore
from dashboard import ids, pages
from dashboard.app import Callbacks
from dashboard.source import DataSource
from tests.support.layout import find
from tests.support.run_builder import T0_NS, RunBuilder

NO_AGENT_RUN = "cpu-no-agent"
CPU_RUN = "cpu-with-agent"
HALF_RUN = "one-agent-of-two"


def no_agent_run() -> RunBuilder:
    """A run whose ranks reported, but no agent pushed its host's samples."""
    builder = RunBuilder(NO_AGENT_RUN, hosts=("node1",), t0_ns=T0_NS)
    builder.epoch(60, 6_000).epoch(60, 6_000)
    builder.write_samples = False
    return builder


def cpu_run() -> RunBuilder:
    """An agent on a host with a local disk whose GPU stays idle; two CPU ranks."""
    builder = RunBuilder(CPU_RUN, hosts=("node1",), ranks_per_host=2, t0_ns=T0_NS + 10**12)
    builder.epoch(60, 3_000, disk_read=50e6, cpu_busy=0.9).epoch(60, 3_000, cpu_busy=0.9)
    return builder


def half_run() -> RunBuilder:
    """Two hosts whose agents both pushed; node2's samples are taken out below."""
    builder = RunBuilder(HALF_RUN, hosts=("node1", "node2"), t0_ns=T0_NS + 2 * 10**12)
    builder.epoch(60, 3_000, disk_read=50e6, gpu_util=80.0, cpu_busy=0.4)
    return builder


@pytest.fixture(scope="module")
def callbacks(tmp_path_factory) -> Callbacks:
    store = SqliteStore(Path(tmp_path_factory.mktemp("text")) / "epochscope.sqlite")
    store.write_points(no_agent_run().points())
    store.write_points(cpu_run().points())
    half = half_run()
    # node2's agent never pushed: its ranks' events are there, its samples are not
    store.write_points(half.event_points() + half.host_points("node1"))
    return Callbacks(DataSource(store), 2000)


def text(component) -> str:
    """The text a user reads in a component (children joined, links included)."""
    if component is None:
        return ""
    if isinstance(component, str):
        return component
    children = getattr(component, "children", None)
    if isinstance(children, (list, tuple)):
        return "".join(text(child) for child in children)
    return text(children)


def test_a_host_without_an_agent_is_not_called_a_host_without_disks(callbacks):
    page, _nav, _scroll = callbacks.route(f"/runs/{NO_AGENT_RUN}", "")
    note = find(page, ids.ABSENT_NOTE).children
    assert note == (
        "No agent samples from node1 in this run's window (no agent ran there, or it pushed "
        "to another collector): no node metrics for it."
    )
    # and no empty per-epoch storage or fabric panel is drawn for it
    for graph in (ids.EPOCH_DISK_GRAPH, ids.EPOCH_NFS_GRAPH, ids.EPOCH_FABRIC_GRAPH):
        assert find(page, graph) is None, graph


def test_a_host_with_an_agent_and_no_gpu_is_still_told_what_it_lacks(callbacks):
    page, _nav, _scroll = callbacks.route(f"/runs/{CPU_RUN}", "")
    note = find(page, ids.ABSENT_NOTE).children
    assert note == (
        "No InfiniBand ports on this host, and no network traffic in any epoch: their "
        "charts are left out."
    )
    assert find(page, ids.EPOCH_DISK_GRAPH) is not None  # it has a disk: its chart is drawn


def test_one_silent_host_of_two_is_named_and_the_other_is_described(callbacks):
    page, _nav, _scroll = callbacks.route(f"/runs/{HALF_RUN}", "")
    note = find(page, ids.ABSENT_NOTE).children
    assert note.startswith("No agent samples from node2 in this run's window")
    assert "on these hosts" in note or "on this host" in note  # node1's lacks follow


def test_cpu_ranks_are_labelled_ranks_and_gpu_ranks_gpus(callbacks):
    cpu_page, _nav, _scroll = callbacks.route(f"/runs/{CPU_RUN}", "")
    facts = find(cpu_page, ids.RUN_HEADER).children.children[1].children
    labels = [item.children for item in facts if isinstance(item, html.Dt)]
    assert "ranks (processes)" in labels and "GPUs" not in labels
    gpu_page, _nav, _scroll = callbacks.route(f"/runs/{HALF_RUN}", "")
    facts = find(gpu_page, ids.RUN_HEADER).children.children[1].children
    assert "GPUs" in [item.children for item in facts if isinstance(item, html.Dt)]


def test_findings_of_a_run_that_does_not_exist_say_so_with_the_runs_link(callbacks):
    page, _nav, _scroll = callbacks.route("/findings", "?run=no-such-run")
    body = find(page, ids.FINDINGS_BODY).children
    assert text(body) == "No run 'no-such-run' in this store: pick one above or see the runs."
    link = body.children[1]
    assert isinstance(link, dcc.Link) and link.href == "/runs"
    # an existing run without findings keeps its own line
    page, _nav, _scroll = callbacks.route("/findings", f"?run={CPU_RUN}")
    assert "No run" not in text(find(page, ids.FINDINGS_BODY))


def test_a_store_without_runs_says_so_on_the_findings_page():
    body = pages.findings_body([], None, [])
    assert text(body) == "No runs in this store yet: the runs page."


def test_the_scaling_page_counts_ranks_not_gpus(callbacks):
    """The scaling page's chooser and chart over CPU runs: ranks, as the tables head them."""
    from dashboard import figures

    page, _nav, _scroll = callbacks.route("/scaling", "")
    labels = [str(option["label"]) for option in find(page, ids.SCALING_RUNS).options]
    assert labels and all("GPU" not in label for label in labels), labels
    assert any(label.endswith(", 2 ranks)") for label in labels), labels
    rows = callbacks.source.scaling()
    figure = figures.scaling_figure(rows)
    assert figure["layout"]["xaxis"]["title"]["text"] == "ranks (GPUs or processes)"
    assert "GPU" not in figure["layout"]["title"]["text"]
