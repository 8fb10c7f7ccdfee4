"""Plotly figures, as plain dicts, from what ``collector.queries.query`` returns.

Every function here is pure: query-layer output in, a ``{"data": [...], "layout": {...}}``
dict out (plotly.js takes it as is; ``plotly.graph_objects.Figure(d)`` validates it, which
the tests do). Plain dicts rather than ``go.Figure`` because a run page carries thousands of
points and validating them on every request costs more than drawing them.

Time-series traces carry no x array: the query layer's buckets are equally spaced, so each
trace has ``x0`` (its first bucket's centre) and ``dx`` (the bucket length in ms) and only
``y``. Live updates then extend ``y`` and nothing else.

Plotly writes a subset of HTML in trace names, legends, category labels, annotations and
hover text (``<a href>`` becomes a link). Every value from the store that ends up in such
text (host, framework, model, run id, ...) goes through ``plotly_text`` first.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from contract.columns import COMPLETE
from contract.markers import ALL_HOSTS
from contract.units import FRACTION_DIGITS, byte_unit, format_efficiency

NS_PER_MS = 1_000_000

# plotly's default qualitative palette (D3 category10): one colour per host, on every chart
HOST_COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
DASHES = ("solid", "dot", "dash")
FIRST_EPOCH_FILL = "rgba(255, 159, 64, 0.16)"  # epoch 1 stands out: it reads from storage
# the later epochs alternate between two greys, each visible (the last epoch too)
EPOCH_FILLS = ("rgba(120, 120, 120, 0.10)", "rgba(120, 120, 120, 0.04)")
RECEIVE_COLOUR, SEND_COLOUR, DIFFERENCE_COLOUR = "#1f77b4", "#ff7f0e", "#222222"
MAX_EPOCH_LABELS = 24
GRID_COLOUR = "#eceff3"
SCOPE_SYMBOLS = {
    "baseline": "square",
    "intra-node": "circle",
    "inter-node": "diamond",
    "single-gpu": "square-open",
}


@dataclass(frozen=True)
class TimeChart:
    """One time-series chart of the run page: some series of every host."""

    chart_id: str  # also the page anchor (findings link to it)
    title: str
    unit: str
    series: tuple[tuple[str, str], ...]  # (HostSeries name, label); drawn solid, dotted, ...
    scale: float = 1.0  # multiply values
    in_bytes: bool = False  # values are bytes: the unit (kB, MB, GB) follows the data's range


TIME_CHARTS: tuple[TimeChart, ...] = (
    TimeChart(
        "images_per_second",
        "Training throughput (thin: per bucket, from step events; thick: epoch mean)",
        "images/s",
        (("images_per_second", "images/s"),),
    ),
    TimeChart("disk_read_mbps", "Local disk read", "MB/s", (("disk_read_mbps", "disk read"),)),
    TimeChart(
        "nfs_read_mbps",
        "NFS read: fetched from the server (solid) vs read by applications (dotted)",
        "MB/s",
        (("nfs_server_read_mbps", "NFS from server"), ("nfs_app_read_mbps", "NFS app read")),
    ),
    TimeChart(
        "ib_mbps",
        "InfiniBand: receive (solid) vs transmit (dotted)",
        "MB/s",
        (("ib_rcv_mbps", "IB receive"), ("ib_xmit_mbps", "IB transmit")),
    ),
    TimeChart(
        "net_mbps",
        "Network interfaces: receive (solid) vs transmit (dotted)",
        "MB/s",
        (("net_rx_mbps", "NIC receive"), ("net_tx_mbps", "NIC transmit")),
    ),
    TimeChart(
        "page_cache", "Page cache", "B", (("page_cache_bytes", "page cache"),), in_bytes=True
    ),
    TimeChart(
        "cpu_percent",
        "CPU: busy (solid) and iowait (dotted)",
        "% CPU",
        (("cpu_util_percent", "CPU busy"), ("iowait_percent", "iowait")),
    ),
    TimeChart("gpu_util_percent", "GPU utilisation", "%", (("gpu_util_percent", "GPU"),)),
)
THROUGHPUT_CHART = "images_per_second"  # always shown, first


@dataclass(frozen=True)
class Measurement:
    """Something a host may not have at all (no NFS mount, no GPU): its report columns and
    its time-series panel, left out of a run none of whose hosts has it."""

    what: str  # as the page names it: "NFS mounts"
    columns: tuple[str, ...]  # the report columns that hold it
    chart_id: str  # its ``TIME_CHARTS`` panel


MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement("local disks", ("disk_read_mbps",), "disk_read_mbps"),
    Measurement("NFS mounts", ("nfs_server_read_mbps", "nfs_cache_hit_ratio"), "nfs_read_mbps"),
    Measurement("InfiniBand ports", ("ib_rcv_mbps", "ib_xmit_mbps"), "ib_mbps"),
    Measurement(
        "network interfaces", ("net_rx_mbps", "net_tx_mbps", "rx_minus_tx_mbps"), "net_mbps"
    ),
    Measurement("GPUs", ("gpu_util_percent", "gpu_energy_joules"), "gpu_util_percent"),
)


def _chart(chart_id: str) -> TimeChart:
    return next(chart for chart in TIME_CHARTS if chart.chart_id == chart_id)


def chart_has_samples(chart: TimeChart, hosts: dict[str, dict[str, Any]]) -> bool:
    """Some host has a value in one of the chart's series."""
    return any(
        value is not None
        for series in hosts.values()
        for name, _label in chart.series
        for value in series["series"].get(name, ())
    )


def absent_measurements(
    rows: list[dict[str, Any]], hosts: dict[str, dict[str, Any]] | None = None
) -> list[Measurement]:
    """What no host of the run has: no value in any epoch row nor in the time series.
    Nothing is called absent before there is anything to go by (no epoch row, no sample)."""
    host_rows = _host_rows(rows)
    sampled = hosts is not None and any(chart_has_samples(c, hosts) for c in TIME_CHARTS)
    if not host_rows and not sampled:
        return []
    return [
        m
        for m in MEASUREMENTS
        if not any(row.get(c) is not None for row in host_rows for c in m.columns)
        and not (hosts is not None and chart_has_samples(_chart(m.chart_id), hosts))
    ]


# every agent samples its CPUs: a host none of whose epochs has these had no agent pushing
NODE_COLUMNS: tuple[str, ...] = (
    "cpu_util_percent",
    "iowait_percent",
    "page_cache_delta_bytes",
    *(column for m in MEASUREMENTS for column in m.columns),
)


def hosts_without_samples(
    rows: list[dict[str, Any]], hosts: dict[str, dict[str, Any]] | None = None
) -> list[str]:
    """The run's hosts from which no agent sample came in the run's window: no node value
    in any of their epoch rows nor in the time series (no agent ran there, or it pushed to
    another collector). Not the same as a host without disks or GPUs."""
    by_host: dict[str, bool] = {}
    for row in _host_rows(rows):
        has = any(row.get(column) is not None for column in NODE_COLUMNS)
        by_host[row["host"]] = by_host.get(row["host"], False) or has
    node_charts = [chart for chart in TIME_CHARTS if chart.chart_id != THROUGHPUT_CHART]
    for host, series in (hosts or {}).items():
        if any(chart_has_samples(chart, {host: series}) for chart in node_charts):
            by_host[host] = True
        else:
            by_host.setdefault(host, False)
    return sorted(host for host, has in by_host.items() if not has)


def shown_charts(
    rows: list[dict[str, Any]], hosts: dict[str, dict[str, Any]] | None = None
) -> tuple[TimeChart, ...]:
    """The time-series panels of a run: those of what some host has."""
    left_out = {m.chart_id for m in absent_measurements(rows, hosts)}
    return tuple(chart for chart in TIME_CHARTS if chart.chart_id not in left_out)


def chart_scales(
    charts: tuple[TimeChart, ...], hosts: dict[str, dict[str, Any]]
) -> dict[str, tuple[str, float]]:
    """Each chart's (unit, scale): a chart in bytes is written in the unit of its values'
    range (the page cache moving by tens of MB on a level of 40 GB: MB, not GB)."""
    out = {}
    for chart in charts:
        if not chart.in_bytes:
            out[chart.chart_id] = (chart.unit, chart.scale)
            continue
        values = [
            v
            for series in hosts.values()
            for name, _label in chart.series
            for v in series["series"].get(name, ())
            if v is not None
        ]
        unit, size = byte_unit(max(values) - min(values) if values else 0.0)
        if size == 1.0 and values:  # a flat line: the level's unit
            unit, size = byte_unit(max(abs(v) for v in values))
        out[chart.chart_id] = (unit, 1.0 / size)
    return out


# what plotly would read as markup (tags, entities) or, in a hovertemplate, as a
# %{variable}: written as entities, which plotly shows as the characters themselves (it
# knows these; quotes need none once no tag can open)
_PLOTLY_ESCAPES = str.maketrans(
    {
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
        "{": "&#123;",
        "}": "&#125;",
    }
)


def plotly_text(value: Any) -> str:
    """A value from the store (a host, framework, run id ...) as plotly text that shows it
    as it is: never markup, never a hovertemplate variable."""
    return str(value).translate(_PLOTLY_ESCAPES)


def host_colour(index: int) -> str:
    return HOST_COLOURS[index % len(HOST_COLOURS)]


def iso_ms(time_ns: int) -> str:
    """A plotly date string (UTC, millisecond precision)."""
    moment = datetime.fromtimestamp(time_ns // NS_PER_MS / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


# Tick labels as plain numbers (0.0008, 1,200): plotly's default SI suffixes wrote "800µ"
# on an MB/s axis, which reads as a unit.
PLAIN_TICKS = {"exponentformat": "none", "separatethousands": True}


def _base_layout(title: str, y_title: str, height: int = 280) -> dict[str, Any]:
    return {
        "title": {"text": title, "x": 0.01, "xanchor": "left", "font": {"size": 14}},
        "height": height,
        "autosize": True,
        "margin": {"l": 60, "r": 12, "t": 48, "b": 36},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "font": {"family": "system-ui, 'DejaVu Sans', Arial, sans-serif", "size": 12},
        "yaxis": {
            "title": {"text": y_title},
            "rangemode": "tozero",
            "gridcolor": GRID_COLOUR,
            "zerolinecolor": "#c8ccd2",
            **PLAIN_TICKS,
        },
        "legend": {
            "orientation": "h",
            "x": 0,
            "y": -0.2,
            "yanchor": "top",
            "font": {"size": 11},
        },
        "hovermode": "x unified",
        "uirevision": "keep",  # zoom survives live updates
    }


def empty_figure(title: str, message: str) -> dict[str, Any]:
    layout = _base_layout(title, "")
    layout["xaxis"] = {"visible": False}
    layout["yaxis"] = {"visible": False}
    layout["annotations"] = [
        {
            "text": message,
            "xref": "paper",
            "yref": "paper",
            "x": 0.5,
            "y": 0.5,
            "showarrow": False,
            "font": {"size": 13, "color": "#777"},
        }
    ]
    return {"data": [], "layout": layout}


# --------------------------------------------------------------------------------------
# time series with epochs shaded
# --------------------------------------------------------------------------------------


def _scaled(values: list[float | None], scale: float) -> list[float | None]:
    if scale == 1.0:
        return list(values)
    return [None if v is None else v * scale for v in values]


def _grid_start(series: dict[str, Any]) -> int:
    """Start of the host's first bucket (even when no bucket is complete yet)."""
    return series["next_since_ns"] - series["bucket_ns"] * len(series["times_ns"])


def time_chart_traces(
    chart: TimeChart,
    hosts: dict[str, dict[str, Any]],
    host_order: list[str],
    scale: tuple[str, float] | None = None,
) -> list[dict[str, Any]]:
    """One trace per (series, host), series-major: trace index = series_index * hosts + host
    index (the live updates extend them in that order). A host without data gets an empty
    trace so the indices hold. ``scale``: (unit, factor), default the chart's."""
    unit, factor = scale or (chart.unit, chart.scale)
    traces = []
    for series_index, (name, label) in enumerate(chart.series):
        for host_index, host in enumerate(host_order):
            series = hosts.get(host)
            shown = plotly_text(host)
            trace: dict[str, Any] = {"y": []}
            if series is not None:
                bucket = series["bucket_ns"]
                trace = {
                    "x0": iso_ms(_grid_start(series) + bucket // 2),
                    "dx": bucket / NS_PER_MS,
                    "y": _scaled(series["series"].get(name, []), factor),
                }
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": f"{shown} {label}",
                    "legendgroup": plotly_text(host),
                    **trace,
                    "line": {
                        "color": host_colour(host_index),
                        "width": 1.6,
                        "dash": DASHES[series_index % len(DASHES)],
                    },
                    "connectgaps": False,
                    "hovertemplate": f"%{{y:,.1f}} {unit}<extra>{shown} {label}</extra>",
                }
            )
    return traces


def epoch_shading(
    boundaries: dict[str, list[dict[str, Any]]], host_order: list[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Shapes and labels for the epochs of the first host that has any. An epoch that
    did not end is labelled with its state as the collector defines it
    (``collector.analysis.epochs.epoch_state``: "running" while the run is live, "interrupted" when
    the run was stopped in it: its time and images are only what was done before the stop).

    Every host runs the same epochs in lock step (ranks synchronise each step), so one host's
    windows mark them for all; the charts say which host's clock they are on.
    Epoch 1 gets its own colour: it is the pass that reads the data set from storage.
    """
    reference = next((h for h in host_order if boundaries.get(h)), None)
    if reference is None:
        return [], []
    windows = boundaries[reference]
    label_every = max(1, -(-len(windows) // MAX_EPOCH_LABELS))
    shapes, labels = [], []
    for position, window in enumerate(windows):
        epoch = window["epoch"]
        fill = FIRST_EPOCH_FILL if epoch == 1 else EPOCH_FILLS[position % 2]
        start, end = iso_ms(window["start_ns"]), iso_ms(window["end_ns"])
        shapes.append(
            {
                "type": "rect",
                "xref": "x",
                "yref": "paper",
                "x0": start,
                "x1": end,
                "y0": 0,
                "y1": 1,
                "fillcolor": fill,
                "line": {"width": 0},
                "layer": "below",
            }
        )
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": start,
                "x1": start,
                "y0": 0,
                "y1": 1,
                "line": {"width": 1, "color": "rgba(90, 90, 90, 0.45)", "dash": "dot"},
                "layer": "below",
            }
        )
        if position % label_every == 0:
            state = window["state"]
            text = f"epoch {epoch}" if state == COMPLETE else f"epoch {epoch} ({state})"
            labels.append(
                {
                    "text": text,
                    "xref": "x",
                    "yref": "paper",
                    "x": iso_ms((window["start_ns"] + window["end_ns"]) // 2),
                    "y": 1.0,
                    "yanchor": "bottom",
                    "yshift": 16,  # above the top panel's title
                    "showarrow": False,
                    "font": {"size": 10, "color": "#555"},
                }
            )
    return shapes, labels


def first_timed_ns(series: dict[str, Any] | None, start_ns: int, end_ns: int) -> int:
    """Where a host's timed steps in an epoch window begin: the start of the first bucket in
    the window with images/s above 0 (drawn from the timed steps: warm-up steps send none),
    else the window's start."""
    if series is None:
        return start_ns
    bucket = series["bucket_ns"]
    values = series["series"].get(THROUGHPUT_CHART, [])
    first = _grid_start(series)
    for index, value in enumerate(values):
        begins = first + index * bucket
        if begins + bucket <= start_ns or not value:
            continue
        if begins >= end_ns:
            break
        return max(start_ns, begins)
    return start_ns


def epoch_mean_traces(
    rows: list[dict[str, Any]],
    boundaries: dict[str, list[dict[str, Any]]],
    host_order: list[str],
    hosts: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Each host's per-epoch images/s (the report's rows) as a level across its epoch window
    from its first timed step (``first_timed_ns``, with the host's time series ``hosts``):
    step events arrive every few seconds, so per-bucket throughput is jagged by nature; the
    epoch means show the trend (epoch 1 against the rest) at a glance. One trace per host,
    in ``host_order``."""
    rate = {(r["host"], r["epoch"]): r.get("images_per_second") for r in _host_rows(rows)}
    traces = []
    for host_index, host in enumerate(host_order):
        x: list[str | None] = []
        y: list[float | None] = []
        series = (hosts or {}).get(host)
        for window in boundaries.get(host, []):
            value = rate.get((host, window["epoch"]))
            if value is None:
                continue
            start = first_timed_ns(series, window["start_ns"], window["end_ns"])
            x += [iso_ms(start), iso_ms(window["end_ns"]), None]
            y += [value, value, None]
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{plotly_text(host)} epoch mean",
                "legendgroup": plotly_text(host),
                "showlegend": False,
                "x": x,
                "y": y,
                "line": {"color": host_colour(host_index), "width": 3.5},
                "hovertemplate": "epoch mean %{y:,.0f} images/s"
                f"<extra>{plotly_text(host)}</extra>",
            }
        )
    return traces


def _note(text: str, y: float = 0.5) -> dict[str, Any]:
    """A grey remark in the middle of a chart (or of a panel, at height ``y``)."""
    return {
        "text": text,
        "xref": "paper",
        "yref": "paper",
        "x": 0.5,
        "y": y,
        "showarrow": False,
        "font": {"size": 12, "color": "#888"},
    }


PANEL_HEIGHT = 175  # px per time-series panel
PANEL_GAP = 0.034  # share of the figure height between panels
PANEL_MARGINS = {"l": 64, "r": 16, "t": 44, "b": 36}


def panel_domains(count: int) -> list[tuple[float, float]]:
    """Vertical extents, top panel first, of ``count`` stacked panels."""
    step = 1.0 / count
    return [
        (round(1.0 - (i + 1) * step + PANEL_GAP / 2, 4), round(1.0 - i * step - PANEL_GAP / 2, 4))
        for i in range(count)
    ]


def trace_offsets(host_order: list[str], charts: tuple[TimeChart, ...] = TIME_CHARTS) -> list[int]:
    """Index of each chart's first trace in ``timeseries_figure``'s data."""
    offsets, index = [], 0
    for chart in charts:
        offsets.append(index)
        index += len(chart.series) * len(host_order)
    return offsets


def timeseries_figure(
    hosts: dict[str, dict[str, Any]],
    boundaries: dict[str, list[dict[str, Any]]],
    host_order: list[str],
    epoch_rows: list[dict[str, Any]] | None = None,
    charts: tuple[TimeChart, ...] | None = None,
) -> dict[str, Any]:
    """The ``TIME_CHARTS`` panels of what the hosts have (``shown_charts``) stacked in one
    figure on one shared (zoom-linked) time axis, the epochs shaded across all of them,
    like the profiling figures of the seed studies. One figure rather than eight: the
    browser lays out and draws one plot.

    Traces are chart-major, then series, then host (``trace_offsets``); the throughput
    panel's epoch means come last, so live extensions of the others keep their indices.
    """
    if charts is None:
        charts = shown_charts(epoch_rows or [], hosts)
    scales = chart_scales(charts, hosts)
    domains = panel_domains(len(charts))
    layout: dict[str, Any] = {
        "height": timeseries_height(len(charts)),
        "autosize": True,
        "margin": PANEL_MARGINS,
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "font": {"family": "system-ui, 'DejaVu Sans', Arial, sans-serif", "size": 12},
        "showlegend": False,  # the page shows one host legend for all charts
        "hovermode": "x unified",
        "uirevision": "keep",  # zoom survives live updates
    }
    traces: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    means = (
        epoch_mean_traces(epoch_rows, boundaries, host_order, hosts)
        if epoch_rows is not None
        else []
    )
    for number, (chart, (low, high)) in enumerate(zip(charts, domains, strict=True), 1):
        suffix = "" if number == 1 else str(number)
        unit = scales[chart.chart_id][0]
        chart_traces = time_chart_traces(chart, hosts, host_order, scales[chart.chart_id])
        for trace in chart_traces:
            trace["xaxis"], trace["yaxis"] = f"x{suffix}", f"y{suffix}"
            if chart.chart_id == THROUGHPUT_CHART and epoch_rows is not None:
                trace["line"]["width"] = 1.0
                trace["opacity"] = 0.55
        traces += chart_traces
        layout[f"xaxis{suffix}"] = {
            "type": "date",
            "anchor": f"y{suffix}",
            "gridcolor": GRID_COLOUR,
            "showticklabels": number == len(charts),
            **({"matches": "x"} if number > 1 else {}),
        }
        layout[f"yaxis{suffix}"] = {
            "domain": [low, high],
            "anchor": f"x{suffix}",
            "title": {"text": unit, "font": {"size": 11}},
            # a level in bytes (the page cache): its changes, not its distance from zero
            "rangemode": "normal" if chart.in_bytes else "tozero",
            "gridcolor": GRID_COLOUR,
            "zerolinecolor": "#c8ccd2",
            **PLAIN_TICKS,
        }
        drawn = chart_traces + (means if chart.chart_id == THROUGHPUT_CHART else [])
        values = [v for trace in drawn for v in trace["y"] if v is not None]
        middle = (low + high) / 2
        if not values:
            annotations.append(_note("no samples of this kind from these hosts", middle))
        elif not any(values):
            annotations.append(_note(f"0 {unit} throughout, on every host", middle))
    for trace in means:
        trace["xaxis"], trace["yaxis"] = throughput_axes()
        traces.append(trace)
    shapes, labels = epoch_shading(boundaries, host_order)
    layout["shapes"] = shapes
    layout["annotations"] = [*panel_titles(charts), *annotations, *labels]
    return {"data": traces, "layout": layout}


def timeseries_height(panels: int = len(TIME_CHARTS)) -> int:
    return PANEL_HEIGHT * panels + PANEL_MARGINS["t"] + PANEL_MARGINS["b"]


def panel_titles(charts: tuple[TimeChart, ...] = TIME_CHARTS) -> list[dict[str, Any]]:
    """Each panel's title, just above it."""
    return [
        {
            "text": f"<b>{chart.title}</b>",
            "xref": "paper",
            "yref": "paper",
            "x": 0,
            "y": high,
            "xanchor": "left",
            "yanchor": "bottom",
            "yshift": 3,
            "showarrow": False,
            "font": {"size": 12, "color": "#333"},
        }
        for chart, (_low, high) in zip(charts, panel_domains(len(charts)), strict=True)
    ]


def throughput_axes() -> tuple[str, str]:
    """The (x, y) axes of the throughput panel (the first)."""
    assert TIME_CHARTS[0].chart_id == THROUGHPUT_CHART
    return "x", "y"


def timeseries_extension(
    new_hosts: dict[str, dict[str, Any]],
    host_order: list[str],
    charts: tuple[TimeChart, ...] = TIME_CHARTS,
    scales: dict[str, float] | None = None,
) -> dict[int, list[float | None]]:
    """For a live update: the y values to append to each trace index of a figure drawn by
    ``timeseries_figure`` with the same ``host_order``, ``charts`` and scales (chart id ->
    factor; default each chart's own)."""
    out: dict[int, list[float | None]] = {}
    for chart, offset in zip(charts, trace_offsets(host_order, charts), strict=True):
        factor = (scales or {}).get(chart.chart_id, chart.scale)
        for series_index, (name, _label) in enumerate(chart.series):
            for host_index, host in enumerate(host_order):
                series = new_hosts.get(host)
                if series is None:
                    continue
                values = _scaled(series["series"].get(name, []), factor)
                if values:
                    out[offset + series_index * len(host_order) + host_index] = values
    return out


def epoch_mean_offset(host_order: list[str], charts: tuple[TimeChart, ...] = TIME_CHARTS) -> int:
    """Index of the first epoch-mean trace in ``timeseries_figure``'s data."""
    return sum(len(chart.series) for chart in charts) * len(host_order)


def charts_of(chart_ids: list[str]) -> tuple[TimeChart, ...]:
    """The charts named (a live page's, kept in the browser), in ``TIME_CHARTS`` order."""
    return tuple(chart for chart in TIME_CHARTS if chart.chart_id in chart_ids)


# --------------------------------------------------------------------------------------
# per-epoch bars (the seed papers' per-epoch, per-host figures)
# --------------------------------------------------------------------------------------


def _host_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [row for row in rows if row["host"] != ALL_HOSTS]


def epoch_bars_figure(
    rows: list[dict[str, Any]], column: str, title: str, unit: str, host_order: list[str]
) -> dict[str, Any]:
    """Bars of one report column: epochs along x, one bar per host in each epoch."""
    host_rows = _host_rows(rows)
    if not any(row.get(column) is not None for row in host_rows):
        return empty_figure(title, "no data for this run")
    traces = []
    for host_index, host in enumerate(host_order):
        mine = [row for row in host_rows if row["host"] == host]
        if not mine:
            continue
        traces.append(
            {
                "type": "bar",
                "name": plotly_text(host),
                "x": [f"epoch {row['epoch']}" for row in mine],
                "y": [row.get(column) for row in mine],
                "marker": {"color": host_colour(host_index)},
                "hovertemplate": f"%{{x}}: %{{y:,.1f}} {unit}<extra>{plotly_text(host)}</extra>",
            }
        )
    layout = _base_layout(title, unit, height=280)
    layout["showlegend"] = False  # the page shows one host legend for all charts
    layout["barmode"] = "group"
    layout["hovermode"] = "closest"
    layout["xaxis"] = {"type": "category"}
    if not any(row.get(column) for row in host_rows):
        layout["annotations"] = [_note(f"0 {unit} in every epoch, on every host")]
    return {"data": traces, "layout": layout}


def fabric_columns(rows: list[dict[str, Any]]) -> tuple[str, str, str]:
    """(label, receive column, send column): InfiniBand when any host has it, else NICs."""
    if any(row.get("ib_rcv_mbps") is not None for row in _host_rows(rows)):
        return "InfiniBand", "ib_rcv_mbps", "ib_xmit_mbps"
    return "Network interfaces", "net_rx_mbps", "net_tx_mbps"


def fabric_bars_figure(rows: list[dict[str, Any]], host_order: list[str]) -> dict[str, Any]:
    """Receive vs send per epoch for each host, with receive minus send marked: with storage
    on the fabric that difference is the storage read rate (the seed studies' Fig. 8)."""
    label, receive, send = fabric_columns(rows)
    title = f"{label}: receive vs send per epoch and host"
    order = {host: index for index, host in enumerate(host_order)}
    host_rows = sorted(_host_rows(rows), key=lambda r: (order.get(r["host"], 1 << 30), r["epoch"]))
    if not any(row.get(receive) is not None for row in host_rows):
        return empty_figure(title, "no fabric data for this run")
    x = [
        [plotly_text(row["host"]) for row in host_rows],
        [f"epoch {row['epoch']}" for row in host_rows],
    ]
    traces = [
        {
            "type": "bar",
            "name": "receive",
            "x": x,
            "y": [row.get(receive) for row in host_rows],
            "marker": {"color": RECEIVE_COLOUR},
            "hovertemplate": "receive %{y:,.1f} MB/s<extra></extra>",
        },
        {
            "type": "bar",
            "name": "send",
            "x": x,
            "y": [row.get(send) for row in host_rows],
            "marker": {"color": SEND_COLOUR},
            "hovertemplate": "send %{y:,.1f} MB/s<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "markers",
            "name": "receive − send",
            "x": x,
            "y": [row.get("rx_minus_tx_mbps") for row in host_rows],
            "marker": {"color": DIFFERENCE_COLOUR, "symbol": "diamond", "size": 9},
            "hovertemplate": "receive − send %{y:,.1f} MB/s<extra></extra>",
        },
    ]
    layout = _base_layout(title, "MB/s", height=320)
    layout["barmode"] = "group"
    layout["hovermode"] = "closest"
    if not any(row.get(receive) or row.get(send) for row in host_rows):
        layout["annotations"] = [_note("0 MB/s in every epoch, on every host")]
    return {"data": traces, "layout": layout}


# --------------------------------------------------------------------------------------
# the step anatomy: where each host's step time went, per epoch
# --------------------------------------------------------------------------------------

# (report column, label, colour); "other" is what the three shares leave of the step
STEP_PARTS = (
    ("input_wait_percent", "input wait", "#d62728"),
    ("compute_percent", "compute", "#2ca02c"),
    ("communication_percent", "all-reduce", "#1f77b4"),
)
OTHER_PART_COLOUR = "#b0b0b0"


def has_step_anatomy(rows: list[dict[str, Any]]) -> bool:
    """Whether any epoch row has a part of its step time (the ranks timed their steps'
    parts: not with ``--no-anatomy``, nor in a loop ``workloads profile`` cannot hook)."""
    return any(row.get(column) is not None for row in rows for column, _, _ in STEP_PARTS)


PART_DASHES = ("solid", "dot", "dash")


def rank_hover(rank_parts: list[dict[str, Any]], host: str, epoch: int) -> str:
    """Each rank of a host in an epoch: ms per step of input wait / compute / all-reduce /
    rest (the hover of the host's bar)."""
    lines = [
        f"rank {r['rank']}: {r['input_wait_ms']:,.0f} / {r['compute_ms']:,.0f} / "
        f"{r['communication_ms']:,.0f} / {r['other_ms']:,.0f}"
        for r in sorted(rank_parts, key=lambda r: r["rank"])
        if r["host"] == host and r["epoch"] == epoch
    ]
    if not lines:
        return ""
    return "<br>ms/step input / compute / all-reduce / rest:<br>" + "<br>".join(lines)


def step_anatomy_figure(
    rows: list[dict[str, Any]],
    host_order: list[str],
    rank_parts: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Stacked bars of the mean step time per host and epoch: input wait, compute,
    all-reduce and the rest (each part = the host's share x its seconds per step); the
    rest's hover lists each rank's parts."""
    title = "Step time per epoch and host: input wait, compute, all-reduce, rest"
    order = {host: index for index, host in enumerate(host_order)}
    host_rows = sorted(
        (r for r in _host_rows(rows) if r.get("seconds_per_step") is not None),
        key=lambda r: (order.get(r["host"], 1 << 30), r["epoch"]),
    )
    if not host_rows:
        return empty_figure(title, "no step anatomy for this run")
    x = [
        [plotly_text(row["host"]) for row in host_rows],
        [f"epoch {row['epoch']}" for row in host_rows],
    ]

    def part_ms(row: dict[str, Any], column: str) -> float:
        return row["seconds_per_step"] * 1000 * (row.get(column) or 0.0) / 100

    traces = []
    for column, label, colour in STEP_PARTS:
        traces.append(
            {
                "type": "bar",
                "name": label,
                "x": x,
                "y": [part_ms(row, column) for row in host_rows],
                "customdata": [row.get(column) for row in host_rows],
                "marker": {"color": colour},
                "hovertemplate": f"{label} %{{y:,.0f}} ms/step (%{{customdata:.1f}}%)"
                "<extra></extra>",
            }
        )
    rest = [
        row["seconds_per_step"] * 1000 - sum(part_ms(row, c) for c, _, _ in STEP_PARTS)
        for row in host_rows
    ]
    traces.append(
        {
            "type": "bar",
            "name": "rest (update, callbacks, graph building)",
            "x": x,
            "y": [max(0.0, value) for value in rest],
            "text": [rank_hover(rank_parts or [], r["host"], r["epoch"]) for r in host_rows],
            "textposition": "none",
            "marker": {"color": OTHER_PART_COLOUR},
            "hovertemplate": "rest %{y:,.0f} ms/step%{text}<extra></extra>",
        }
    )
    layout = _base_layout(title, "ms per step", height=320)
    layout["barmode"] = "stack"
    layout["hovermode"] = "x"
    return {"data": traces, "layout": layout}


def step_share_hover(point: dict[str, Any]) -> str:
    """A step's ranks: input wait / compute / all-reduce % of each (the hover of every
    part's point)."""

    def percent(value: float | None) -> str:
        return "–" if value is None else f"{value:.1f}"

    lines = [
        f"rank {r['rank']}: " + " / ".join(percent(r.get(column)) for column, _, _ in STEP_PARTS)
        for r in point["ranks"]
    ]
    where = " · ".join(
        text
        for text in (
            f"epoch {point['epoch']}" if point.get("epoch") is not None else "",
            f"{point.get('steps', 1)} steps to step {point['step']}"
            if point.get("steps", 1) > 1 and point.get("step") is not None
            else f"step {point['step']}"
            if point.get("step") is not None
            else "",
        )
        if text
    )
    return f"{where}<br>% input / compute / all-reduce:<br>" + "<br>".join(lines)


STEP_SHARES_TITLE = "Shares of step time over the run (per sampled step)"
STEP_SHARES_HEIGHT = 280


def step_shares_figure(
    shares: dict[str, list[dict[str, Any]]], host_order: list[str]
) -> dict[str, Any]:
    """The three shares of step time over the run, one point per sampled step and host
    (``collector.analysis.anatomy.step_shares``: pooled over the host's ranks): line style by part,
    colour by host; the hover lists each rank's shares of that step."""
    title = STEP_SHARES_TITLE
    if not any(shares.values()):
        return empty_figure(title, "no step anatomy for this run")
    order = [*host_order, *sorted(set(shares) - set(host_order))]
    traces = []
    for host_index, host in enumerate(order):
        points = shares.get(host) or []
        if not points:
            continue
        x = [iso_ms(point["time_ns"]) for point in points]
        hover = [step_share_hover(point) for point in points]
        for (column, label, _), dash in zip(STEP_PARTS, PART_DASHES, strict=True):
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": f"{plotly_text(host)} {label}",
                    "x": x,
                    "y": [point.get(column) for point in points],
                    "text": hover,
                    "marker": {"size": 4},
                    "line": {"color": host_colour(host_index), "dash": dash, "width": 1.5},
                    "hovertemplate": f"{label} %{{y:.1f}}% · %{{text}}"
                    f"<extra>{plotly_text(host)}</extra>",
                }
            )
    layout = _base_layout(title, "% of step time", height=STEP_SHARES_HEIGHT)
    layout["yaxis"]["range"] = [0, 100]
    layout["xaxis"] = {**layout.get("xaxis", {}), "type": "date"}
    layout["hovermode"] = "closest"
    layout["annotations"] = [
        _note("solid: input wait · dotted: compute · dashed: all-reduce", y=1.08)
    ]
    return {"data": traces, "layout": layout}


# --------------------------------------------------------------------------------------
# scaling
# --------------------------------------------------------------------------------------


def group_label(row: dict[str, Any]) -> str:
    """The scaling group of a row (collector.analysis.scaling groups runs by these fields)."""
    batch, size = row.get("batch_size"), row.get("image_size")
    parts = [
        row.get("framework"),
        row.get("model"),
        row.get("precision"),
        f"batch {batch}/rank" if batch is not None else None,
        row.get("data_format"),
        f"{size} px" if size else None,
    ]
    return " ".join(str(p) for p in parts if p)


SCOPE_LEGEND_COLOUR = "#6b7280"
LABEL_CLASH = 0.08  # labels at one GPU count closer than this share of the y range clash


def label_positions(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Where each run's efficiency label goes: above its marker, unless another run at the
    same GPU count sits close below or above it (two groups at 2 GPUs, 48% and 55%): then
    the lower of the two takes its label below its marker, and a third one to the right."""
    values = [r["images_per_second"] for r in rows]
    span = (max(values) - min(0.0, min(values))) or 1.0
    positions: dict[str, str] = {}
    by_gpus: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_gpus.setdefault(row["gpus"], []).append(row)
    for members in by_gpus.values():
        members = sorted(members, key=lambda r: r["images_per_second"], reverse=True)
        previous: dict[str, Any] | None = None
        for row in members:
            position = "top center"
            if previous is not None:
                gap = (previous["images_per_second"] - row["images_per_second"]) / span
                if gap < LABEL_CLASH:
                    above = positions[previous["run_id"]]
                    position = "bottom center" if above == "top center" else "middle right"
            positions[row["run_id"]] = position
            previous = row
    return positions


RANKS_AXIS = "ranks (GPUs or processes)"  # what the runs and scaling tables head "Ranks"


def ranks_text(ranks: int) -> str:
    """A run's world size as the scaling page says it: ranks, which are GPUs only where
    the run trained on GPUs."""
    return f"{ranks} rank" if ranks == 1 else f"{ranks} ranks"


def scaling_figure(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Images/s against ranks per group (a GPU each, or a CPU process: a CPU run's ranks are
    not GPUs), with the ideal (N x the 1-rank baseline) dashed, efficiency labels, and
    marker shapes for baseline, intra-node and inter-node runs."""
    title = "Throughput vs ranks (dashed: ideal linear scaling from the 1-rank run)"
    measured = [r for r in rows if r.get("images_per_second") is not None]
    if not measured:
        return empty_figure(title, "no runs with a measured throughput selected")
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(measured, key=lambda r: (group_label(r), r["gpus"])):
        groups.setdefault(group_label(row), []).append(row)

    traces: list[dict[str, Any]] = []
    positions = label_positions(measured)
    for index, (group, members) in enumerate(groups.items()):
        colour = host_colour(index)
        label = plotly_text(group)
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": label,
                "legendgroup": label,
                "x": [r["gpus"] for r in members],
                "y": [r["images_per_second"] for r in members],
                "line": {"color": colour, "width": 2},
                "hoverinfo": "skip",
            }
        )
        ideal = [r for r in members if r.get("ideal") is not None]
        if ideal:
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": f"{label}: ideal",
                    "legendgroup": label,
                    "showlegend": False,
                    "x": [r["gpus"] for r in ideal],
                    "y": [r["ideal"] for r in ideal],
                    "line": {"color": colour, "width": 1.5, "dash": "dash"},
                    "hovertemplate": "ideal %{y:,.0f} images/s<extra></extra>",
                }
            )
        for scope in sorted({r.get("scope") or "" for r in members}):
            points = [r for r in members if (r.get("scope") or "") == scope]
            traces.append(
                {
                    "type": "scatter",
                    "mode": "markers+text",
                    "name": plotly_text(scope or "unknown scope"),
                    "legendgroup": plotly_text(f"scope {scope}"),
                    "showlegend": False,  # the scope's legend entry is grey: see below
                    "x": [r["gpus"] for r in points],
                    "y": [r["images_per_second"] for r in points],
                    "text": [
                        format_efficiency(r["efficiency_percent"])
                        if r.get("efficiency_percent") is not None and r["gpus"] > 1
                        else ""
                        for r in points
                    ],
                    "textposition": [positions[r["run_id"]] for r in points],
                    "customdata": [[plotly_text(r["run_id"])] for r in points],
                    "marker": {
                        "color": colour,
                        "size": 11,
                        "symbol": SCOPE_SYMBOLS.get(scope, "x"),
                        "line": {"color": "white", "width": 1},
                    },
                    "hovertemplate": (
                        "%{customdata[0]}<br>%{x} ranks: %{y:,.0f} images/s"
                        f"<extra>{plotly_text(scope)}</extra>"
                    ),
                }
            )
    # the legend names each group by its line colour and each scope by its marker shape
    # alone, in grey: a scope marker coloured like one group read as that group's
    for scope in sorted({r.get("scope") or "" for r in measured}):
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": plotly_text(scope or "unknown scope"),
                "legendgroup": plotly_text(f"scope {scope}"),
                "x": [None],
                "y": [None],
                "marker": {"color": SCOPE_LEGEND_COLOUR, "size": 11,
                           "symbol": SCOPE_SYMBOLS.get(scope, "x")},
                "hoverinfo": "skip",
            }
        )  # fmt: skip
    layout = _base_layout(title, "images/s", height=440)
    layout["hovermode"] = "closest"
    gpus = sorted({r["gpus"] for r in measured})
    layout["xaxis"] = {
        "title": {"text": RANKS_AXIS},
        "tickmode": "array",
        "tickvals": gpus,
        "gridcolor": GRID_COLOUR,
    }
    layout["legend"] = {"orientation": "v", "x": 1.02, "y": 1, "font": {"size": 11}}
    layout["margin"] = {"l": 60, "r": 12, "t": 48, "b": 50}
    return {"data": traces, "layout": layout}


REFERENCE_COLOUR = "#9aa5b1"
PART_COLOURS = {
    "input_wait": "#d62728",
    "compute": "#2ca02c",
    "communication": "#1f77b4",
    "other": OTHER_PART_COLOUR,
}
PART_NAMES = {
    "input_wait": "input wait",
    "compute": "compute",
    "communication": "all-reduce",
    "other": "rest",
}


def reference_comparison_figure(evidence: dict[str, Any], run_id: str) -> dict[str, Any] | None:
    """A scaling finding's two runs side by side: the reference run's and this run's mean
    ms per step in each part (the evidence's ``attribution``); None without one."""
    attribution = evidence.get("attribution")
    parts = (attribution or {}).get("parts") or []
    if not parts:
        return None
    reference = str(attribution["reference_run"])
    x = [
        plotly_text(f"{reference} ({attribution['reference_ranks']} ranks)"),
        plotly_text(f"{run_id} ({attribution['ranks']} ranks)"),
    ]
    traces = []
    for part in parts:
        name = PART_NAMES.get(part["part"], plotly_text(part["part"]))
        traces.append(
            {
                "type": "bar",
                "name": name,
                "x": x,
                "y": [1000 * part["reference_seconds"], 1000 * part["run_seconds"]],
                "marker": {"color": PART_COLOURS.get(part["part"], OTHER_PART_COLOUR)},
                "hovertemplate": f"{name} %{{y:,.0f}} ms/step<extra></extra>",
            }
        )
    title = "Step time per part: the reference run and this run"
    layout = _base_layout(title, "ms per step", height=260)
    layout["barmode"] = "stack"
    layout["hovermode"] = "closest"
    layout["xaxis"] = {"type": "category"}
    layout["legend"] = {"orientation": "v", "x": 1.02, "y": 1, "font": {"size": 11}}
    return {"data": traces, "layout": layout}


def time_to_target_figure(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Hours to the target top-1 accuracy per run, labelled with the epochs it took."""
    title = "Time to target accuracy"
    reached = [r for r in rows if r.get("seconds_to_target") is not None]
    if not reached:
        return empty_figure(title, "no selected run reached a target top-1 accuracy")
    reached.sort(key=lambda r: (group_label(r), r["gpus"]))
    groups = sorted({group_label(r) for r in reached})
    traces = []
    for index, label in enumerate(groups):
        members = [r for r in reached if group_label(r) == label]
        traces.append(
            {
                "type": "bar",
                "name": plotly_text(label),
                "x": [ranks_text(r["gpus"]) for r in members],
                "y": [r["seconds_to_target"] / 3600 for r in members],
                "text": [
                    f"{r['epochs_to_target']} epochs" if r.get("epochs_to_target") else ""
                    for r in members
                ],
                "textposition": "outside",
                "customdata": [[plotly_text(r["run_id"]), r.get("target_top1")] for r in members],
                "marker": {"color": host_colour(index)},
                "hovertemplate": (
                    "%{customdata[0]}: %{y:.2f} h to top-1 "
                    f"%{{customdata[1]:.{FRACTION_DIGITS}~%}}<extra></extra>"
                ),
            }
        )
    layout = _base_layout(title, "hours", height=320)
    layout["barmode"] = "group"
    layout["hovermode"] = "closest"
    layout["xaxis"] = {"type": "category", "title": {"text": RANKS_AXIS}}
    return {"data": traces, "layout": layout}


# --------------------------------------------------------------------------------------
# inference: FP32 against INT8 per batch size (the study's Fig. 9)
# --------------------------------------------------------------------------------------

PRECISION_COLOURS = {"fp32": "#1f77b4", "int8": "#ff7f0e"}


def inference_figure(report: dict[str, Any]) -> dict[str, Any]:
    """Grouped bars: batch sizes along x, FP32 and INT8 images/s side by side, each INT8 bar
    labelled with its speed-up over FP32 (``collector.analysis.inference``'s values and formats)."""
    from dashboard.source import format_speedup

    title = "Inference throughput, FP32 vs INT8 (label: INT8 speed-up)"
    rows = report["comparisons"]
    if not rows:
        return empty_figure(title, "no inference measurements in this run")
    x = [f"batch {row['batch_size']}" for row in rows]
    traces = []
    for precision in ("fp32", "int8"):
        values = [row[f"{precision}_images_per_second"] for row in rows]
        if all(value is None for value in values):
            continue
        trace: dict[str, Any] = {
            "type": "bar",
            "name": precision.upper(),
            "x": x,
            "y": values,
            "marker": {"color": PRECISION_COLOURS[precision]},
            "hovertemplate": f"%{{x}}: %{{y:,.1f}} images/s<extra>{precision.upper()}</extra>",
        }
        if precision == "int8":
            trace["text"] = [
                "" if row["int8_speedup"] is None else format_speedup(row["int8_speedup"])
                for row in rows
            ]
            trace["textposition"] = "outside"
            trace["cliponaxis"] = False
        traces.append(trace)
    layout = _base_layout(title, "images/s", height=360)
    layout["barmode"] = "group"
    layout["hovermode"] = "closest"
    layout["xaxis"] = {"type": "category"}
    layout["legend"] = {"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom"}
    return {"data": traces, "layout": layout}


# --------------------------------------------------------------------------------------
# forecast (the scaling page's forecast section; never drawn as a measurement)
# --------------------------------------------------------------------------------------

FORECAST_COLOUR = "#7c3aed"


def forecast_figure(view: dict[str, Any]) -> dict[str, Any]:
    """The run's measured images/s (a filled marker) and the forecast at each size (open
    markers on a dotted line, named FORECAST with the error measured on real runs), beside
    the ideal: N x the measured per-node rate."""
    error = view["forecast_error"]
    title = (
        f"FORECAST images/s vs nodes (error on real runs: median {error['median_percent']:.1f}%,"
        f" worst {error['worst_percent']:.1f}%)"
    )
    rows = view.get("forecast") or []
    if not rows:
        return empty_figure(title, "no forecast for this run")
    measured = view["measured"]
    per_node = measured["images_per_second"] / measured["nodes"]
    sizes = sorted({measured["nodes"], *(r["nodes"] for r in rows)})
    traces = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": "ideal: N x the measured rate per node",
            "x": sizes,
            "y": [per_node * n for n in sizes],
            "line": {"color": "#9ca3af", "width": 1.5, "dash": "dash"},
            "hovertemplate": "ideal %{y:,.1f} images/s<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "lines+markers+text",
            "name": "FORECAST (modelled, not measured)",
            "x": [r["nodes"] for r in rows],
            "y": [r["images_per_second"] for r in rows],
            "text": [format_efficiency(100 * r["efficiency"]) for r in rows],
            "textposition": "top center",
            "line": {"color": FORECAST_COLOUR, "width": 2, "dash": "dot"},
            "marker": {
                "color": "white",
                "size": 10,
                "symbol": "circle-open",
                "line": {"color": FORECAST_COLOUR, "width": 2},
            },
            "customdata": [[plotly_text(r["bound"])] for r in rows],
            "hovertemplate": (
                "FORECAST %{x} nodes: %{y:,.1f} images/s, bound: %{customdata[0]}<extra></extra>"
            ),
        },
        {
            "type": "scatter",
            "mode": "markers",
            "name": f"measured ({measured['nodes']} node{'s' if measured['nodes'] > 1 else ''})",
            "x": [measured["nodes"]],
            "y": [measured["images_per_second"]],
            "marker": {"color": "#111827", "size": 11, "symbol": "circle"},
            "hovertemplate": "measured %{x} nodes: %{y:,.1f} images/s<extra></extra>",
        },
    ]
    layout = _base_layout(title, "images/s", height=360)
    layout["hovermode"] = "closest"
    layout["xaxis"] = {
        "title": {"text": "nodes"},
        "tickmode": "array",
        "tickvals": sizes,
        "gridcolor": GRID_COLOUR,
    }
    return {"data": traces, "layout": layout}
