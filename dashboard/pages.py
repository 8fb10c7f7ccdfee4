"""Page layouts: Dash components built from query-layer data (no data access here).

URLs: ``/`` runs, ``/runs/<run_id>`` one run, ``/scaling``, ``/findings?run=<run_id>``,
``/jobs`` the Slurm jobs, ``/jobs/<job_id>`` one job.
Findings link to the run page's charts by anchor (``/runs/<id>#<chart id>``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from dash import dash_table, dcc, html

from contract.columns import COMPLETE, INTERRUPTED
from contract.markers import ALL_HOSTS, ALL_HOSTS_LABEL
from contract.schema import INFERENCE_FRAMEWORK
from contract.text import shown, visible
from dashboard import figures, ids
from dashboard.columns import (
    EPOCH_COLUMNS,
    JOB_COLUMNS,
    JOB_NODE_COLUMNS,
    RUN_COLUMNS,
    SCALING_COLUMNS,
    Column,
    format_value,
    table_column,
)
from dashboard.source import EvidenceEntry, Timeseries, evidence_tree, rows_to_show

GRAPH_CONFIG = {"displaylogo": False, "responsive": True, "displayModeBar": False}

# a finding's ``chart`` (a report column) -> the run page element that shows it
CHART_ANCHORS = {
    "input_wait_percent": ids.STEP_ANATOMY,
    "compute_percent": ids.STEP_ANATOMY,
    "communication_percent": ids.STEP_ANATOMY,
    "accelerator_util_percent": ids.STEP_ANATOMY,
    "seconds_per_step": ids.STEP_ANATOMY,
    "images_per_second": ids.OVER_TIME,
    "disk_read_mbps": ids.EPOCH_STORAGE,
    "disk_read_bytes": ids.EPOCH_STORAGE,
    "nfs_server_read_mbps": ids.EPOCH_STORAGE,
    "nfs_app_read_bytes": ids.OVER_TIME,
    "nfs_cache_hit_ratio": ids.OVER_TIME,
    "rx_minus_tx_mbps": ids.EPOCH_FABRIC,
    "ib_rcv_mbps": ids.OVER_TIME,
    "ib_xmit_mbps": ids.OVER_TIME,
    "page_cache_delta_bytes": ids.OVER_TIME,
    "major_faults": ids.EPOCH_TABLE,
    "cpu_util_percent": ids.OVER_TIME,
    "iowait_percent": ids.OVER_TIME,
    "gpu_util_percent": ids.OVER_TIME,
}
ACCURACY_KEYS = (
    "final_top1",
    "target_top1",
    "epochs_to_target",
    "seconds_to_target",
    "time_to_target_speedup",
)


def run_href(run_id: str, anchor: str | None = None) -> str:
    href = "/runs/" + quote(run_id, safe="")
    return f"{href}#{anchor}" if anchor else href


def job_href(job_id: str) -> str:
    return "/jobs/" + quote(job_id, safe="")


def findings_href(run_id: str) -> str:
    return "/findings?run=" + quote(run_id, safe="")


def chart_anchor(chart: str) -> str:
    return CHART_ANCHORS.get(chart, ids.EPOCH_TABLE)


def navigation(pathname: str) -> html.Nav:
    links = [
        ("Runs", "/"),
        ("Scaling", "/scaling"),
        ("Findings", "/findings"),
        ("Inference", "/inference"),
        ("Jobs", "/jobs"),
    ]

    def active(href: str) -> bool:
        if href == "/":
            return pathname == "/" or pathname.startswith("/runs")
        return pathname.startswith(href)

    return html.Nav(
        [
            html.Span("epochscope", className="brand"),
            *[
                dcc.Link(
                    label, href=href, className="nav-link active" if active(href) else "nav-link"
                )
                for label, href in links
            ],
        ],
        className="nav",
    )


def waiting_for_run(run_id: str, poll_ms: int) -> html.Div:
    """The page of a run that is not in the store yet (opened before its ``run_start``
    arrived): it keeps asking, and the run's live page replaces it when the run appears."""
    return html.Div(
        [
            html.H2(f"Waiting for run {run_id}"),
            html.P(
                f"No run {run_id!r} in the store yet. This page looks again every "
                f"{poll_ms / 1000:g} s and shows the run as soon as its first event arrives.",
                id=ids.RUN_WAITING,
            ),
            dcc.Link("All runs", href="/"),
            dcc.Store(id=ids.RUN_WAIT_ID, data=run_id),
            dcc.Interval(id=ids.RUN_WAIT_INTERVAL, interval=poll_ms),
        ]
    )


def not_found(message: str) -> html.Div:
    return html.Div([html.H2("Not found"), html.P(message), dcc.Link("All runs", href="/")])


# --------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------


def _header(columns: tuple[Column, ...] | list[Column]) -> html.Thead:
    return html.Thead(
        html.Tr([html.Th(c.label, title=c.help, className=f"col-{c.key}") for c in columns])
    )


def _cell(row: dict[str, Any], column: Column) -> html.Td:
    value = row.get(column.key)
    text = format_value(value, column.kind)
    whole = visible(value) if column.kind == "text" and isinstance(value, str) else text
    title = whole if whole != text else None  # a cut text, whole on hover
    return html.Td(text, title=title, className=f"col-{column.key}")


def state_badge(state: str) -> html.Span:
    return html.Span(state, className=f"badge state-{state}")


def runs_table(runs: list[dict[str, Any]]) -> html.Table | html.P:
    if not runs:
        return html.P(
            "No runs stored yet: start `collector serve` and a workload.", className="empty"
        )
    body = []
    for run in runs:
        cells = []
        for column in RUN_COLUMNS:
            if column.key == "run_id":
                inference = run.get("framework") == INFERENCE_FRAMEWORK
                href = (inference_href if inference else run_href)(run["run_id"])
                link = dcc.Link(shown(run["run_id"]), href=href)
                cells.append(html.Td(link, className="col-run_id"))
            elif column.key == "state":
                cells.append(html.Td(state_badge(run["state"])))
            elif column.key == "hosts":
                hosts = ", ".join(run.get("host_names") or [])
                text = format_value(run.get("hosts"), "int")
                cells.append(html.Td(text, title=hosts, className="col-hosts"))
            else:
                cells.append(_cell(run, column))
        body.append(html.Tr(cells, className=f"run-row state-{run['state']}"))
    return html.Table([_header(RUN_COLUMNS), html.Tbody(body)], className="table", id=ids.RUNS_LIST)


EPOCH_TABLE_MAX_ROWS = 120  # more rows than this: one row per epoch until asked for hosts
PER_HOST = "per-host"


def per_host_default(rows: list[dict[str, Any]]) -> list[str]:
    """The "one row per host" switch: on unless the table would be long."""
    return [PER_HOST] if len(rows) <= EPOCH_TABLE_MAX_ROWS else []


FIRST_EPOCH_BACKGROUND = "#fff6ec"  # epoch 1 reads the data set from storage: it stands out
TABLE_FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', Arial, sans-serif"


def epoch_table(rows: list[dict[str, Any]], per_host: bool = True) -> dash_table.DataTable | html.P:
    """Host rows and the all-hosts row of each epoch (only the latter unless ``per_host``),
    sortable by any column; each header explains its column and each epoch cell gives the
    epoch's start and end on hover.

    One DataTable rather than a table of html components: a Dash component per cell (a
    few hundred of them) made the run page's every update several hundred ms slower in
    the browser (docs/performance.md, "Dashboard")."""
    if not rows:
        return html.P("No epoch has started yet.", className="empty")
    rows = rows_to_show(rows)  # one host: its rows alone (an all-hosts row would repeat them)
    one_host = not any(row["host"] == ALL_HOSTS for row in rows)
    shown = [row for row in rows if per_host or one_host or row["host"] == ALL_HOSTS]
    columns = epoch_table_columns(shown)
    data = [
        {
            **{column.key: row.get(column.key) for column in columns},
            "host": ALL_HOSTS_LABEL if row["host"] == ALL_HOSTS else row["host"],
        }
        for row in shown
    ]
    return dash_table.DataTable(
        columns=[table_column(column) for column in columns],
        data=data,
        tooltip_header={column.key: column.help for column in columns},
        tooltip_data=[{"epoch": f"{row.get('start', '')} → {row.get('end', '')}"} for row in shown],
        tooltip_delay=300,
        tooltip_duration=None,
        sort_action="native",
        page_action="none",
        cell_selectable=False,
        style_as_list_view=True,
        style_cell={
            "fontFamily": TABLE_FONT,
            "fontSize": "13px",
            "padding": "4px 9px",
            "textAlign": "right",
            "borderBottom": "1px solid #e6e6e6",
        },
        style_header={"backgroundColor": "#f0f2f5", "fontWeight": 600, "whiteSpace": "nowrap"},
        style_cell_conditional=[{"if": {"column_id": "host"}, "textAlign": "left"}],
        style_data_conditional=[
            {"if": {"filter_query": "{epoch} = 1"}, "backgroundColor": FIRST_EPOCH_BACKGROUND},
            {
                "if": {"filter_query": f'{{host}} = "{ALL_HOSTS_LABEL}"'},
                "fontWeight": 700,
                "borderBottom": "2px solid #ccc",
            },
            *(
                [
                    {
                        "if": {"filter_query": f'{{state}} = "{INTERRUPTED}"'},
                        "color": INTERRUPTED_COLOUR,
                        "fontStyle": "italic",
                    }
                ]
                if any(column.key == "state" for column in columns)
                else []
            ),
        ],
    )


INTERRUPTED_COLOUR = "#9a3412"  # an epoch the run was stopped in: its numbers are partial


ALWAYS_SHOWN = ("epoch", "host")


def epoch_table_columns(rows: list[dict[str, Any]]) -> list[Column]:
    """The per-epoch table's columns: those with a value in some row (a host without NFS,
    InfiniBand or GPUs gets no column of "–" for them); the epoch state only when some
    epoch did not end (a column of "complete" would say nothing)."""
    unfinished = any(row.get("state", COMPLETE) != COMPLETE for row in rows)

    def shown(column: Column) -> bool:
        if column.key == "state":
            return unfinished
        return column.key in ALWAYS_SHOWN or any(row.get(column.key) is not None for row in rows)

    return [column for column in EPOCH_COLUMNS if shown(column)]


def one_host(rows: list[dict[str, Any]]) -> bool:
    return len({row["host"] for row in rows if row["host"] != ALL_HOSTS}) <= 1


def scaling_columns(rows: list[dict[str, Any]]) -> list[Column]:
    """Accuracy columns only when some run reported them."""
    known = {key for row in rows for key in ACCURACY_KEYS if row.get(key) is not None}
    return [c for c in SCALING_COLUMNS if c.key not in ACCURACY_KEYS or c.key in known]


# measured against the group's 1-process run: none without one
BASELINE_KEYS = ("ideal", "efficiency_percent", "speedup")
NO_BASELINE = (
    "No 1-process (1-GPU) run in this group to compare with: efficiency is this run's "
    "images/s over N x that run's."
)


def has_baseline(members: list[dict[str, Any]]) -> bool:
    return any(row.get("efficiency_percent") is not None for row in members)


def scaling_table(rows: list[dict[str, Any]]) -> html.Div:
    if not rows:
        return html.Div(html.P("No runs selected.", className="empty"))
    columns = scaling_columns(rows)
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(figures.group_label(row), []).append(row)
    body = []
    for label, members in groups.items():
        body.append(html.Tr(html.Td(label, colSpan=len(columns)), className="group-row"))
        for row in members:
            cells = []
            for column in columns:
                if column.key == "run_id":
                    link = dcc.Link(row["run_id"], href=run_href(row["run_id"]))
                    cells.append(html.Td(link, className="col-run_id"))
                elif column.key in BASELINE_KEYS and row.get(column.key) is None:
                    cell = _cell(row, column)
                    cell.title = NO_BASELINE
                    cells.append(cell)
                else:
                    cells.append(_cell(row, column))
            body.append(html.Tr(cells, className=f"scope-{row.get('scope') or 'none'}"))
    children: list[Any] = [
        html.Table([_header(columns), html.Tbody(body)], className="table", id=ids.SCALING_LIST)
    ]
    orphans = [label for label, members in groups.items() if not has_baseline(members)]
    if orphans:
        children.append(
            html.P(
                f"Efficiency, ideal and speed-up are – for {_either(orphans)}: "
                f"{NO_BASELINE[0].lower()}{NO_BASELINE[1:]}",
                className="note",
                id=ids.SCALING_NOTE,
            )
        )
    if not any(c.key in ACCURACY_KEYS for c in columns):
        children.append(
            html.P("No selected run reported top-1 accuracy: no time to target.", className="note")
        )
    return html.Div(children)


# --------------------------------------------------------------------------------------
# findings
# --------------------------------------------------------------------------------------


def finding_card(
    finding: dict[str, Any], run_id: str, same_page: bool, anchor: str | None = None
) -> html.Div:
    """``anchor``: the element on this page that shows the finding (default: its chart's)."""
    anchor = anchor or chart_anchor(finding.get("chart") or "")
    href = f"#{anchor}" if same_page else run_href(run_id, anchor)
    evidence = finding.get("evidence") or {}
    entries = evidence_tree(evidence)
    link_text = "show the chart" if same_page else "show on the run page"
    link = (
        html.A(link_text, href=href, className="chart-link")
        if same_page
        else dcc.Link(link_text, href=href, className="chart-link")
    )
    return html.Div(
        [
            html.Div(
                [
                    html.Span(
                        finding["severity"], className=f"badge severity-{finding['severity']}"
                    ),
                    html.Span(finding["title"], className="finding-title"),
                ],
                className="finding-head",
            ),
            html.P(finding.get("explanation", ""), className="finding-text"),
            comparison(finding, run_id),
            html.Details([html.Summary("evidence"), evidence_list(entries)]) if entries else None,
            link,
        ],
        className=f"finding severity-{finding['severity']}",
        id=ids.finding(finding["rule"]),
    )


def evidence_list(entries: list[EvidenceEntry]) -> html.Dl:
    """A finding's evidence as a labelled list; a mapping (the scaling loss's attribution)
    as a list of its own under its label."""
    items: list[Any] = []
    for label, value in entries:
        items.append(html.Dt(label))
        items.append(html.Dd(value if isinstance(value, str) else evidence_list(value)))
    return html.Dl(items, className="evidence")


def comparison(finding: dict[str, Any], run_id: str) -> html.Div | None:
    """A finding that compares this run with another (the scaling loss: with its reference
    run) shows both: a chart of the two when the evidence has their step anatomy, and a
    link to the other run."""
    evidence = finding.get("evidence") or {}
    reference = evidence.get("reference_run")
    if not reference:
        return None
    figure = figures.reference_comparison_figure(evidence, run_id)
    return html.Div(
        [
            graph(ids.finding(finding["rule"]) + "-comparison", figure) if figure else None,
            html.P(
                ["Compared with ", dcc.Link(reference, href=run_href(reference)), "."],
                className="note",
            ),
        ],
        className="comparison",
    )


def findings_list(
    findings: list[dict[str, Any]], run_id: str, same_page: bool, anchor: str | None = None
) -> html.Div:
    if not findings:
        return html.Div(html.P("No findings for this run.", className="empty"))
    return html.Div(
        [finding_card(f, run_id, same_page, anchor) for f in findings], className="findings"
    )


# --------------------------------------------------------------------------------------
# pages
# --------------------------------------------------------------------------------------


def runs_page(runs: list[dict[str, Any]], poll_ms: int, runs_digest: str) -> html.Div:
    return html.Div(
        [
            html.H1("Runs"),
            html.P(
                "Every training run the collector has seen, newest first. Open a run for its "
                "per-epoch, per-host view.",
                className="lead",
            ),
            html.Div(runs_table(runs), id=ids.RUNS_TABLE),
            dcc.Interval(id=ids.RUNS_INTERVAL, interval=poll_ms),
            dcc.Store(id=ids.RUNS_DIGEST, data=runs_digest),
        ]
    )


def ranks_label(rows: list[dict[str, Any]]) -> str:
    """What the run's ranks are: GPUs when its hosts' GPUs were busy in its epochs (a rank a
    GPU), else processes (a CPU run's ranks are not GPUs)."""
    on_gpus = any((row.get("gpu_util_percent") or 0) > 0 for row in rows)
    return "GPUs" if on_gpus else "ranks (processes)"


def run_header(
    run: dict[str, Any], live: bool, poll_ms: int, rows: list[dict[str, Any]] | None = None
) -> html.Div:
    facts = [
        ("framework", shown(run["framework"])),
        ("model", shown(run["model"])),
        (ranks_label(rows or []), format_value(run["gpus"], "int")),
        ("hosts", shown(", ".join(run.get("host_names") or []))),
        ("images/s", format_value(run.get("images_per_second"), "rate")),
        ("start-up s", format_value(run.get("startup_seconds"), "seconds")),
        ("start", run["start"]),
    ]
    status = (
        f"live: updating every {poll_ms / 1000:g} s" if live else f"{run['state']}: not updating"
    )
    return html.Div(
        [
            html.H1([f"Run {shown(run['run_id'])} ", state_badge(run["state"])]),
            html.Dl(
                [item for key, value in facts for item in (html.Dt(key), html.Dd(value))],
                className="facts",
            ),
            html.P(status, id=ids.RUN_STATUS, className="status"),
        ]
    )


def host_legend(host_order: list[str]) -> html.Div:
    """One colour per host, the same on every chart of the page."""
    return html.Div(
        [
            html.Span(
                [html.Span(className="swatch", style={"background": figures.host_colour(i)}), host],
                className="legend-item",
            )
            for i, host in enumerate(host_order)
        ],
        className="host-legend",
    )


HIDDEN = {"display": "none"}


def quiet_network(rows: list[dict[str, Any]]) -> bool:
    """The fabric chart would be 0 MB/s in every epoch on every host: no InfiniBand, and
    the network interfaces (measured) moved nothing."""
    label, receive, send = figures.fabric_columns(rows)
    values = [row.get(c) for row in rows if row["host"] != ALL_HOSTS for c in (receive, send)]
    measured = [value for value in values if value is not None]
    return label != "InfiniBand" and bool(measured) and not any(measured)


def epoch_chart_styles(
    rows: list[dict[str, Any]], absent: list[figures.Measurement]
) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """The styles of the disk, NFS and fabric bar panels: hidden when no host has what they
    show (the fabric when it has neither InfiniBand nor a NIC, or moved nothing)."""
    gone = {m.chart_id for m in absent}
    no_fabric = {"ib_mbps", "net_mbps"} <= gone or quiet_network(rows)
    return (
        HIDDEN if "disk_read_mbps" in gone else {},
        HIDDEN if "nfs_read_mbps" in gone else {},
        HIDDEN if no_fabric else {},
    )


def _either(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def absent_note(rows: list[dict[str, Any]], absent: list[figures.Measurement]) -> str:
    """One line: what the hosts do not have, so that its charts are left out, and which
    epoch edges are interpolated ("" when they have everything, every edge a reading)."""
    return " ".join(filter(None, (_absent_text(rows, absent), interpolated_note(rows))))


def interpolated_note(rows: list[dict[str, Any]]) -> str:
    """Which host epochs have an edge with no real node reading (``interpolated_edges``):
    a Prometheus backend scrapes at its own interval and never holds the agents' edge
    samples, so there every edge is interpolated; "" when none is."""
    silent = set(figures.hosts_without_samples(rows))  # (no edge to interpolate there)
    hosts = [row for row in rows if row.get("host") not in (ALL_HOSTS, *silent)]
    flagged = [row for row in hosts if row.get("interpolated_edges")]
    if not flagged:
        return ""
    return (
        f"Interpolated epoch edges in {len(flagged)} of {len(hosts)} host epochs: no agent "
        "edge sample there (a Prometheus backend never has them), so the node amounts near "
        "those edges are spread evenly over the tick and a burst at an edge is misplaced."
    )


def _absent_text(rows: list[dict[str, Any]], absent: list[figures.Measurement]) -> str:
    silent = figures.hosts_without_samples(rows)
    sampled = [row for row in rows if row["host"] not in silent]
    silent_text = (
        f"No agent samples from {_either(silent)} in this run's window (no agent ran there, "
        "or it pushed to another collector): no node metrics for "
        f"{'it' if len(silent) == 1 else 'them'}."
        if silent
        else ""
    )
    if silent and not any(row["host"] != ALL_HOSTS for row in sampled):
        return silent_text  # nothing is known of what the hosts have
    return " ".join(filter(None, (silent_text, _absent_from_sampled(sampled, absent))))


def _absent_from_sampled(rows: list[dict[str, Any]], absent: list[figures.Measurement]) -> str:
    where = "this host" if one_host(rows) else "these hosts"
    quiet = quiet_network(rows) and "net_mbps" not in {m.chart_id for m in absent}
    if not absent and not quiet:
        return ""
    if not absent:
        return f"No network traffic in any epoch on {where}: its per-epoch chart is left out."
    text = f"No {_either([m.what for m in absent])} on {where}"
    if quiet:
        text += ", and no network traffic in any epoch"
    return text + ": their charts are left out."


def anatomy_note(live: bool, rows: list[dict[str, Any]]) -> str:
    """Why a finished run has no step anatomy ("" while live: its parts come with its
    epochs, or when it has them); its two charts are then left out."""
    if live or not rows or figures.has_step_anatomy(rows):
        return ""
    return (
        "This run's ranks did not time the parts of their steps (run with --no-anatomy, or "
        "a training loop that workloads profile does not hook): only whole steps were "
        "timed, so throughput is above and the node's metrics below."
    )


def graph(element_id: str, figure: dict[str, Any]) -> dcc.Graph:
    return dcc.Graph(id=element_id, figure=figure, config=GRAPH_CONFIG)


def timeseries_figure(
    ts: Timeseries, boundaries: dict[str, Any], rows: list[dict[str, Any]]
) -> dict[str, Any]:
    return figures.timeseries_figure(
        ts.hosts, boundaries, list(ts.hosts), rows, figures.shown_charts(rows, ts.hosts)
    )


def epoch_figures(
    rows: list[dict[str, Any]],
    host_order: list[str],
    rank_parts: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The per-epoch bar charts, in ``EPOCH_CHARTS`` order."""
    return [
        figures.epoch_bars_figure(
            rows, "disk_read_mbps", "Local disk read per epoch and host", "MB/s", host_order
        ),
        figures.epoch_bars_figure(
            rows,
            "nfs_server_read_mbps",
            "NFS server read per epoch and host",
            "MB/s",
            host_order,
        ),
        figures.fabric_bars_figure(rows, host_order),
        figures.step_anatomy_figure(rows, host_order, rank_parts),
    ]


def last_step_ns(step_shares: dict[str, list[dict[str, Any]]] | None) -> int | None:
    """The latest step among the shares shown (a live page asks for steps after it)."""
    points = (p["time_ns"] for host in (step_shares or {}).values() for p in host)
    return max(points, default=None)


EPOCH_CHARTS = (
    ids.EPOCH_DISK_GRAPH,
    ids.EPOCH_NFS_GRAPH,
    ids.EPOCH_FABRIC_GRAPH,
    ids.EPOCH_STEP_ANATOMY_GRAPH,
)


def bucket_note(ts: Timeseries, boundaries: dict[str, Any]) -> str:
    hosts = list(ts.hosts)
    reference = next((h for h in hosts if boundaries.get(h)), None)
    clock = f" on {reference}'s clock" if reference and len(hosts) > 1 else ""
    return (
        f"Each host's metrics averaged over {ts.bucket_ns / 1e9:g}-second buckets, times in "
        f"UTC; epochs shaded{clock} (epoch 1 in orange)."
    )


def run_page(
    run: dict[str, Any],
    ts: Timeseries | None,
    boundaries: dict[str, Any],
    rows: list[dict[str, Any]],
    live: bool,
    poll_ms: int,
    live_state: dict[str, Any],
    rank_parts: list[dict[str, Any]] | None = None,
    step_shares: dict[str, list[dict[str, Any]]] | None = None,
    findings: list[dict[str, Any]] | None = None,
) -> html.Div:
    """The run page. Without ``findings`` (a live run's page) they arrive by a callback
    of their own once the page is up, and again whenever ``ids.RUN_EPOCHS`` says an epoch
    started or ended. Without ``ts`` (a finished run's page) the time series and the
    step shares come by a callback of their own (``ids.RUN_PENDING``)."""
    order = list(ts.hosts) if ts is not None else sorted(run["host_names"])
    no_anatomy = anatomy_note(live, rows)
    disk, nfs, fabric, anatomy = epoch_figures(rows, order, rank_parts)
    absent = figures.absent_measurements(rows, ts.hosts if ts is not None else None)
    disk_style, nfs_style, fabric_style = epoch_chart_styles(rows, absent)

    def chart(element_id: str, figure: dict[str, Any], style: dict[str, str]) -> Any:
        # a finished run's hidden panel stays hidden (only a live page's polls show one):
        # its chart is not drawn at all
        return None if not live and style == HIDDEN else graph(element_id, figure)

    anatomy_style = HIDDEN if no_anatomy else {}
    if step_shares is None:  # read with the time series (``ids.RUN_PENDING``)
        shares: Any = pending_slot("Loading the run's steps…", figures.STEP_SHARES_HEIGHT)
    else:
        shares = chart(
            ids.STEP_SHARES_GRAPH, figures.step_shares_figure(step_shares, order), anatomy_style
        )
    if ts is not None:
        time_chart: Any = graph(ids.TIMESERIES_GRAPH, timeseries_figure(ts, boundaries, rows))
        note = bucket_note(ts, boundaries)
    else:
        # as high as the panels the epoch rows say the run has (what the figure will draw,
        # unless a measurement has samples outside every epoch only)
        panels = len(figures.shown_charts(rows))
        time_chart = pending_slot(
            "Loading each host's metrics over the run…", figures.timeseries_height(panels)
        )
        note = "Loading each host's metrics over the run…"
    pending = {"run_id": run["run_id"], "step_shares": not no_anatomy} if ts is None else None
    return html.Div(
        [
            html.Div(run_header(run, live, poll_ms, rows), id=ids.RUN_HEADER),
            html.H2("Findings"),
            html.Div(
                html.P("Looking for findings…", className="empty")
                if findings is None
                else findings_list(findings, run["run_id"], same_page=True),
                id=ids.RUN_FINDINGS,
            ),
            html.P(absent_note(rows, absent), id=ids.ABSENT_NOTE, className="note"),
            html.H2("Per epoch"),
            html.P(
                "Epoch 1 reads the data set from storage; once it sits in the page cache, later "
                "epochs read little or nothing. Receive minus send on the fabric is the storage "
                "read rate when storage is on the fabric.",
                className="lead",
            ),
            host_legend(order),
            html.Div(
                [
                    html.Div(
                        chart(EPOCH_CHARTS[0], disk, disk_style),
                        id=ids.EPOCH_DISK_PANEL,
                        style=disk_style,
                    ),
                    html.Div(
                        chart(EPOCH_CHARTS[1], nfs, nfs_style),
                        id=ids.EPOCH_NFS_PANEL,
                        style=nfs_style,
                    ),
                ],
                className="grid",
                id=ids.EPOCH_STORAGE,
            ),
            html.Div(
                chart(EPOCH_CHARTS[2], fabric, fabric_style),
                id=ids.EPOCH_FABRIC,
                className="panel",
                style=fabric_style,
            ),
            html.H2("Where step time goes", id=ids.STEP_ANATOMY),
            html.P(
                "Each rank times every step: waiting for the next batch (input wait), "
                "forward and backward (compute), waiting for the gradient all-reduce once "
                "the gradients are ready, and the rest. Scaling loss shows up as a growing "
                "all-reduce part; an input-bound run as a growing input wait.",
                className="lead",
            ),
            html.P(no_anatomy, id=ids.STEP_ANATOMY_NOTE, className="note"),
            html.Div(
                [
                    html.Div(chart(EPOCH_CHARTS[3], anatomy, anatomy_style), className="panel"),
                    html.Div(shares, id=ids.STEP_SHARES_SLOT, className="panel"),
                ],
                id=ids.STEP_ANATOMY_PANELS,
                style=anatomy_style,
            ),
            html.H2("Over time", id=ids.OVER_TIME),
            html.P(note, className="lead", id=ids.BUCKET_NOTE),
            host_legend(order),
            html.Div(time_chart, id=ids.TIMESERIES_SLOT, className="panel"),
            html.H2("Per-epoch table", id=ids.EPOCH_TABLE),
            html.P(
                "Hover a column header for its meaning; – means not measured (never zero).",
                className="lead",
            ),
            dcc.Checklist(
                id=ids.EPOCH_TABLE_HOSTS,
                options=[{"label": " one row per host", "value": PER_HOST}],
                value=per_host_default(rows),
                className="table-switch",
                # (one host: its rows, always)
                style=HIDDEN if len(run.get("host_names") or []) <= 1 else {},
            ),
            html.Div(
                epoch_table(rows, per_host=bool(per_host_default(rows))),
                id=ids.EPOCH_TABLE_CONTAINER,
                className="table-scroll",
            ),
            dcc.Interval(id=ids.RUN_INTERVAL, interval=poll_ms, disabled=not live),
            dcc.Store(id=ids.RUN_LIVE, data=live_state),
            dcc.Store(
                id=ids.RUN_EPOCHS,
                data={**epochs_key(live_state), "in_page": findings is not None},
            ),
            dcc.Store(id=ids.RUN_PENDING, data=pending),
        ]
    )


def pending_slot(message: str, height: int) -> html.Div:
    """What holds a chart's place until its data comes (as high as the chart: the page does
    not jump). Not a placeholder figure: the browser would draw the chart twice."""
    return html.P(message, className="empty", style={"height": f"{height}px", "margin": 0})


def epochs_key(live_state: dict[str, Any]) -> dict[str, str]:
    """What the findings callback listens to: the run and the state of its epochs."""
    return {"run_id": live_state["run_id"], "epochs": live_state["epochs"]}


def accuracy_style(rows: list[dict[str, Any]]) -> dict[str, str]:
    """The time-to-accuracy chart only shows when some run reached its target."""
    if any(row.get("seconds_to_target") is not None for row in rows):
        return {}
    return {"display": "none"}


def forecast_run_default(rows: list[dict[str, Any]]) -> str | None:
    """The run the scaling page forecasts from unless asked (``/scaling?forecast=RUN``): the
    one on the most nodes (its own all-reduce calibrates the link), the first of those."""
    if not rows:
        return None
    return max(rows, key=lambda row: row.get("nodes") or 0)["run_id"]


def scaling_option_label(row: dict[str, Any]) -> str:
    """A run in the scaling page's chooser: its group and its ranks (not GPUs: a CPU run's
    ranks are processes)."""
    return f"{row['run_id']}  ({figures.group_label(row)}, {figures.ranks_text(row['gpus'])})"


def scaling_page(rows: list[dict[str, Any]], forecast_run: str | None = None) -> html.Div:
    options = [{"label": scaling_option_label(row), "value": row["run_id"]} for row in rows]
    return html.Div(
        [
            html.H1("Scaling"),
            html.P(
                "Runs that differ only in GPU count form a group; each is compared with N x the "
                "group's 1-GPU run. Labels give the scaling efficiency; marker shapes tell "
                "runs on one node (intra-node) from runs across nodes (inter-node).",
                className="lead",
            ),
            dcc.Checklist(
                id=ids.SCALING_RUNS,
                options=options,
                value=[row["run_id"] for row in rows],
                className="run-picker",
                inputClassName="run-picker-box",
            ),
            graph(ids.SCALING_GRAPH, figures.scaling_figure(rows)),
            html.Div(
                graph(ids.ACCURACY_GRAPH, figures.time_to_target_figure(rows)),
                id=ids.ACCURACY_CHART,
                style=accuracy_style(rows),
            ),
            html.Div(scaling_table(rows), id=ids.SCALING_TABLE),
            forecast_section([row["run_id"] for row in rows], forecast_run),
        ]
    )


def findings_page(
    runs: list[dict[str, Any]], run_id: str | None, findings: list[dict[str, Any]]
) -> html.Div:
    options = [{"label": f"{r['run_id']} ({r['state']})", "value": r["run_id"]} for r in runs]
    return html.Div(
        [
            html.H1("Findings"),
            html.P(
                "What the collector found in a run, with the numbers behind it and a link to "
                "the chart that shows it.",
                className="lead",
            ),
            dcc.Dropdown(
                id=ids.FINDINGS_RUN, options=options, value=run_id, clearable=False, searchable=True
            ),
            html.Div(findings_body(runs, run_id, findings), id=ids.FINDINGS_BODY),
        ]
    )


def findings_body(
    runs: list[dict[str, Any]], run_id: str | None, findings: list[dict[str, Any]]
) -> html.Div | None:
    """The findings of ``run_id``; a run the store does not have is said to be missing, not
    to have no findings."""
    if not runs:
        return html.P(
            ["No runs in this store yet: ", dcc.Link("the runs page", href="/runs"), "."],
            className="empty",
        )
    if run_id is None:
        return None
    if not any(run["run_id"] == run_id for run in runs):
        return html.P(
            [
                f"No run {run_id!r} in this store: pick one above or see ",
                dcc.Link("the runs", href="/runs"),
                ".",
            ],
            className="empty",
        )
    return findings_list(findings, run_id, same_page=False)


def inference_href(run_id: str) -> str:
    return "/inference?run=" + quote(run_id, safe="")


def inference_table(report: dict[str, Any]) -> html.Table:
    """Per batch size: FP32 and INT8 images/s, the INT8 speed-up and the latencies, in the
    formats of ``collector inference``'s table (the same functions)."""
    from dashboard.source import format_milliseconds, format_rate, format_speedup

    latency = {(m["batch_size"], m["precision"]): m for m in report["measurements"]}

    def p50(batch_size: int, precision: str) -> str:
        measured = latency.get((batch_size, precision))
        return format_milliseconds(measured["latency_p50_seconds"] if measured else None)

    def p99(batch_size: int, precision: str) -> str:
        measured = latency.get((batch_size, precision))
        return format_milliseconds(measured["latency_p99_seconds"] if measured else None)

    headings = [
        "batch",
        "FP32 images/s",
        "INT8 images/s",
        "INT8 speed-up",
        "FP32 p50 / p99 ms",
        "INT8 p50 / p99 ms",
    ]
    body = [
        html.Tr(
            [
                html.Td(str(row["batch_size"])),
                html.Td(format_rate(row["fp32_images_per_second"])),
                html.Td(format_rate(row["int8_images_per_second"])),
                html.Td(format_speedup(row["int8_speedup"]), className="speedup"),
                html.Td(f"{p50(row['batch_size'], 'fp32')} / {p99(row['batch_size'], 'fp32')}"),
                html.Td(f"{p50(row['batch_size'], 'int8')} / {p99(row['batch_size'], 'int8')}"),
            ]
        )
        for row in report["comparisons"]
    ]
    return html.Table(
        [html.Thead(html.Tr([html.Th(h) for h in headings])), html.Tbody(body)],
        id=ids.INFERENCE_TABLE,
        className="table",
    )


def inference_accuracy(report: dict[str, Any]) -> html.P:
    from dashboard.source import format_points, format_top1

    top1 = report["top1"]
    return html.P(
        [
            f"Top-1 on {report['validation_images'] or '?'} validation images: FP32 ",
            html.B(format_top1(top1.get("fp32"))),
            ", INT8 ",
            html.B(format_top1(top1.get("int8"))),
            "; INT8 − FP32 ",
            html.B(format_points(report["top1_difference"]), id=ids.INFERENCE_TOP1_DIFFERENCE),
            ".",
        ],
        id=ids.INFERENCE_ACCURACY,
    )


def inference_body(report: dict[str, Any] | None) -> html.Div:
    if report is None:
        return html.Div(html.P("No such inference run.", className="empty"))
    setup = (
        f"{shown(report['model'])} at {report['image_size'] or '?'} px on "
        f"{shown(report['execution_provider'] or 'an unknown provider')}; INT8 by static "
        f"quantisation ({shown(report['int8_format'] or '-')}) calibrated on "
        f"{report['calibration_images'] or 0} training images; weights: "
        f"{shown(report['weights'])}"
    )
    return html.Div(
        [
            html.P(setup, className="run-meta", id=ids.INFERENCE_SETUP),
            graph(ids.INFERENCE_GRAPH, figures.inference_figure(report)),
            inference_table(report),
            inference_accuracy(report),
            html.H2("Findings"),
            findings_list(
                list(report["findings"]),
                report["run_id"],
                same_page=True,
                anchor=ids.INFERENCE_GRAPH,
            ),
        ]
    )


def inference_page(
    runs: list[dict[str, Any]], run_id: str | None, report: dict[str, Any] | None
) -> html.Div:
    """`workloads infer` runs: FP32 against INT8 per batch size, as the study's Fig. 9."""
    options = [{"label": f"{r['run_id']} ({r['state']})", "value": r["run_id"]} for r in runs]
    return html.Div(
        [
            html.H1("Inference"),
            html.P(
                "Images/s per batch size in FP32 and INT8 (ONNX Runtime, static quantisation) "
                "and the top-1 each keeps on the validation images: the speed-up bought with "
                "reduced precision, and what it costs in accuracy.",
                className="lead",
            ),
            dcc.Dropdown(
                id=ids.INFERENCE_RUN,
                options=options,
                value=run_id,
                clearable=False,
                searchable=True,
            )
            if runs
            else html.P(
                "No inference runs yet: make one with `workloads infer`.", className="empty"
            ),
            html.Div(inference_body(report) if run_id else None, id=ids.INFERENCE_BODY),
        ]
    )


# --------------------------------------------------------------------------------------
# Slurm jobs
# --------------------------------------------------------------------------------------


def _run_links(run_ids: list[str]) -> list[Any]:
    links: list[Any] = []
    for run_id in run_ids:
        if links:
            links.append(", ")
        links.append(dcc.Link(run_id, href=run_href(run_id)))
    return links or [MISSING_TEXT]


MISSING_TEXT = "–"


def jobs_table(jobs: list[dict[str, Any]]) -> html.Table | html.P:
    if not jobs:
        return html.P(
            "No Slurm job seen yet: the agents' jobs sampler reports the jobs on their nodes.",
            className="empty",
        )
    body = []
    for job in jobs:
        cells = []
        for column in JOB_COLUMNS:
            if column.key == "job_id":
                link = dcc.Link(job["job_id"], href=job_href(job["job_id"]))
                cells.append(html.Td(link, className="col-job_id"))
            elif column.key == "nodes":
                cells.append(html.Td(", ".join(job["nodes"]), className="col-nodes"))
            elif column.key == "runs":
                cells.append(html.Td(_run_links(job["runs"]), className="col-runs"))
            else:
                cells.append(_cell(job, column))
        body.append(html.Tr(cells, className="job-row"))
    return html.Table([_header(JOB_COLUMNS), html.Tbody(body)], className="table", id=ids.JOBS_LIST)


def jobs_page(jobs: list[dict[str, Any]]) -> html.Div:
    return html.Div(
        [
            html.H1("Jobs"),
            html.P(
                "Every Slurm job the agents saw on their nodes, newest first: what it was "
                "given and what it used. Open a job for its nodes, findings and runs.",
                className="lead",
            ),
            html.Div(jobs_table(jobs), className="table-scroll"),
        ]
    )


def job_page(view: dict[str, Any]) -> html.Div:
    """One job: its facts, its nodes, the jobs beside it, its findings and its runs."""
    job = view["job"]
    facts = [
        ("user", job.get("user") or MISSING_TEXT),
        ("account", job.get("account") or MISSING_TEXT),
        ("partition", job.get("partition") or MISSING_TEXT),
        ("nodes", ", ".join(job["nodes"])),
        ("start", job["start"]),
        ("end", job["end"]),
    ]
    nodes = [*view["nodes"]]
    rows = [
        html.Tr([_cell(node, column) for column in JOB_NODE_COLUMNS], className="node-row")
        for node in nodes
    ]
    if len(nodes) > 1:
        total = {**job, "host": "all nodes", "end": job["end"]}
        rows.append(
            html.Tr([_cell(total, column) for column in JOB_NODE_COLUMNS], className="total-row")
        )
    neighbours = [
        html.Li(
            [
                "job ",
                dcc.Link(near["job_id"], href=job_href(near["job_id"])),
                f" ({near['user'] or 'user unknown'}) on {near['host']} for "
                f"{format_value(near['overlap_seconds'], 'duration')}: "
                f"{format_value(near['cpu_seconds'], 'seconds')} CPU seconds meanwhile",
            ]
        )
        for near in view["neighbours"]
    ]
    runs = [html.Li(dcc.Link(run["run_id"], href=run_href(run["run_id"]))) for run in view["runs"]]
    findings = (
        html.Div(
            [finding_card(f, "", same_page=True, anchor=ids.JOB_NODES) for f in view["findings"]],
            className="findings",
        )
        if view["findings"]
        else html.P("No findings for this job.", className="empty")
    )
    return html.Div(
        [
            html.Div(
                [
                    html.H1(f"Job {job['job_id']}"),
                    html.Dl(
                        [item for key, value in facts for item in (html.Dt(key), html.Dd(value))],
                        className="facts",
                    ),
                ],
                id=ids.JOB_HEADER,
            ),
            html.H2("Findings"),
            html.Div(findings, id=ids.JOB_FINDINGS),
            html.H2("Per node", id=ids.JOB_NODES),
            html.P(
                "Elapsed is the first to the last sample plus one sampling interval; CPU "
                "efficiency is CPU seconds used over allocated CPUs × elapsed.",
                className="lead",
            ),
            html.Div(
                html.Table([_header(JOB_NODE_COLUMNS), html.Tbody(rows)], className="table"),
                className="table-scroll",
            ),
            html.H2("Beside it"),
            html.Ul(neighbours, id=ids.JOB_NEIGHBOURS)
            if neighbours
            else html.P(
                "No other job on its nodes while it ran.", className="empty", id=ids.JOB_NEIGHBOURS
            ),
            html.H2("Runs", id=ids.JOB_RUNS),
            html.Ul(runs) if runs else html.P("No training run named this job.", className="empty"),
        ]
    )


# --------------------------------------------------------------------------------------
# the scaling page's forecast section (collector.queries.forecast; docs/forecast.md)
# --------------------------------------------------------------------------------------

FORECAST_TABLE_COLUMNS = (
    ("nodes", "Nodes"),
    ("gpus", "Ranks"),
    ("images_per_second", "Forecast images/s"),
    ("efficiency", "Forecast efficiency"),
    ("bound", "Bound by (forecast)"),
    ("step_seconds", "Forecast step ms"),
    ("allreduce", "Forecast exposed all-reduce ms"),
    ("epoch1_images_per_second", "Forecast epoch-1 images/s"),
    ("storage_need_bytes_per_second", "Reads needed in epoch 1, MB/s"),
    ("fabric_gradient_bytes_per_second", "Gradients per node, MB/s each way"),
    ("fabric_epoch1_receive_bytes_per_second", "Received per node in epoch 1, MB/s"),
)


def _forecast_cell(row: dict[str, Any], key: str) -> str:
    value = row.get(key)
    if value is None:
        return "–"
    if isinstance(value, str):
        return value
    if key == "efficiency":
        return f"{value:.0%}"
    if key in ("step_seconds", "allreduce"):
        return f"{value * 1000:,.0f}"
    if key.endswith("bytes_per_second"):
        return f"{value / 1e6:,.1f}"
    if key.endswith("images_per_second"):
        return f"{value:,.1f}"
    return str(value)


def forecast_body(view: dict[str, Any] | None) -> html.Div:
    """One run's forecast at 2-16 nodes: the label with its validated error, the chart, the
    table (every figure headed as a forecast), what bounds each size and the storage,
    fabric and memory requirements; why not, where the run cannot be forecast."""
    if view is None:
        return html.Div(html.P("No run chosen to forecast from.", className="empty"))
    label = html.P(view["label"], className="forecast-label", id=ids.FORECAST_LABEL)
    if view.get("error"):
        return html.Div(
            [
                label,
                html.P(
                    f"No forecast from {visible(view['run_id'])}: {view['error']}. "
                    "`collector forecast RUN --nodes 2,4,8,16 --gradient-mb G --link-gbps X` "
                    "takes them.",
                    className="note",
                    id=ids.FORECAST_NOTE,
                ),
            ]
        )
    measured = view["measured"]
    head = html.Thead(html.Tr([html.Th(title) for _, title in FORECAST_TABLE_COLUMNS]))
    body = html.Tbody(
        [
            html.Tr([html.Td(_forecast_cell(row, key)) for key, _ in FORECAST_TABLE_COLUMNS])
            for row in view["forecast"]
        ]
    )
    link = measured.get("link_bytes_per_second")
    sources = (
        f"From {visible(view['run_id'])} as measured: {measured['images_per_second']:,.1f} "
        f"images/s on {measured['nodes']} node(s) x {measured['gpus_per_node']} rank(s); "
        "gradients "
        + (
            f"{measured['gradient_bytes'] / 1e6:,.1f} MB a step ({measured['gradient_source']})"
            if measured.get("gradient_bytes")
            else "not known"
        )
        + "; link "
        + (f"{link / 1e6:,.1f} MB/s ({measured['link_source']})" if link else "not known")
        + "."
    )
    return html.Div(
        [
            label,
            html.P(sources, className="note"),
            graph(ids.FORECAST_GRAPH, figures.forecast_figure(view)),
            html.Table([head, body], className="table forecast-table", id=ids.FORECAST_TABLE),
            html.Ul(
                [html.Li(sentence) for sentence in view["requirements"]],
                id=ids.FORECAST_REQUIREMENTS,
            ),
        ]
    )


def forecast_section(runs: list[str], run_id: str | None) -> html.Div:
    """The section; its body comes by the run choice's callback (``forecast_body``)."""
    pending = (
        pending_slot(f"Forecasting from {visible(run_id)}…", 360)
        if run_id
        else html.P("No run to forecast from.", className="empty")
    )
    return html.Div(
        [
            html.H2("Forecast: what this run would do at 2, 4, 8 and 16 nodes"),
            html.P(
                "Modelled from the chosen run's measured step (compute, input wait, the "
                "all-reduce over its link) with a ring all-reduce at each size; forecasts, "
                "not measurements, each with the error the model had on real runs.",
                className="lead",
            ),
            dcc.Dropdown(
                id=ids.FORECAST_RUN,
                options=[{"label": r, "value": r} for r in runs],
                value=run_id,
                clearable=False,
            ),
            html.Div(pending, id=ids.FORECAST_BODY),
        ],
        id=ids.FORECAST_SECTION,
    )
