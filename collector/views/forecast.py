"""``collector forecast RUN`` and ``collector compare RUN_A RUN_B``: the views. Each builds
one JSON-ready dict (``forecast_view``, ``compare_view``); the table and the CSV format
those values, so every format shows the same numbers."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from collector.analysis.compare import PARTS, compare
from collector.analysis.run import read_run
from collector.queries.forecast import NoSuchRun, forecast_answer
from collector.store.api import ReadStore
from collector.views.errors import CliError
from collector.views.output import write_csv, write_json
from collector.views.reports import open_store

FORECAST_COLUMNS = (
    "nodes",
    "gpus",
    "images_per_second",
    "efficiency",
    "efficiency_vs_baseline",
    "step_seconds",
    "input_wait",
    "compute",
    "allreduce",
    "other",
    "bound",
    "epoch1_images_per_second",
    "epoch1_bound",
    "storage_need_bytes_per_second",
    "fabric_gradient_bytes_per_second",
    "fabric_epoch1_receive_bytes_per_second",
)


def parse_nodes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CliError(f"--nodes {text!r}: give whole numbers, e.g. 2,4,8,16", 2) from None
    if not sizes or min(sizes) < 1:
        raise CliError(f"--nodes {text!r}: give sizes of at least 1 node", 2)
    return sizes


def forecast_view(store: ReadStore, args: argparse.Namespace) -> dict[str, Any]:
    try:
        return forecast_answer(
            store,
            args.run_id,
            parse_nodes(args.nodes),
            gradient_bytes=args.gradient_mb * 1e6 if args.gradient_mb else None,
            link_bytes_per_second=args.link_gbps * 1e9 / 8 if args.link_gbps else None,
            link_from_ceilings=args.link_from_ceilings,
            storage_bytes_per_second=args.storage_mbps * 1e6 if args.storage_mbps else None,
            storage_from_ceilings=args.storage_from_ceilings,
            gpus_per_node=args.gpus_per_node,
        )
    except NoSuchRun as error:
        raise CliError(str(error), 1) from None
    except ValueError as error:
        raise CliError(str(error), 2) from None


def _cell(value: Any, key: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if key.startswith("efficiency"):
        return f"{value:.0%}"
    if key in ("input_wait", "compute", "allreduce", "other", "step_seconds"):
        return f"{value * 1000:.1f}"
    if key.endswith("bytes_per_second"):
        return f"{value / 1e6:.1f}"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


CSV_ERROR_COLUMNS = ("forecast_error_median_percent", "forecast_error_worst_percent")
TABLE_HEADS = {
    "images_per_second": "img/s",
    "efficiency": "eff",
    "efficiency_vs_baseline": "eff 1-GPU",
    "step_seconds": "step ms",
    "input_wait": "input ms",
    "compute": "compute ms",
    "allreduce": "allreduce ms",
    "other": "rest ms",
    "epoch1_images_per_second": "epoch1 img/s",
    "epoch1_bound": "epoch1 bound",
    "storage_need_bytes_per_second": "reads MB/s",
    "fabric_gradient_bytes_per_second": "grad MB/s/node",
    "fabric_epoch1_receive_bytes_per_second": "epoch1 rx MB/s/node",
}


def print_forecast(view: dict[str, Any], out) -> None:
    measured = view["measured"]
    out.write(
        f"run {view['run_id']}: measured {measured['images_per_second']:.1f} images/s on "
        f"{measured['nodes']} node(s) x {measured['gpus_per_node']} rank(s)\n"
    )
    out.write(f"{view['label']}\n")
    heads = [TABLE_HEADS.get(key, key) for key in FORECAST_COLUMNS]
    cells = [[_cell(row[key], key) for key in FORECAST_COLUMNS] for row in view["forecast"]]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    out.write("  ".join(h.rjust(w) for h, w in zip(heads, widths, strict=True)) + "\n")
    for line in cells:
        out.write("  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) + "\n")
    sources = (
        f"gradients {_cell(measured['gradient_bytes'], 'bytes_per_second')} MB/step "
        f"({measured['gradient_source'] or 'unknown'}); link "
        f"{_cell(measured['link_bytes_per_second'], 'bytes_per_second')} MB/s "
        f"({measured['link_source'] or 'unknown'}); overlap "
        + (
            f"{measured['overlap_share']:.0%} measured"
            if measured["overlap_share"] is not None
            else "not measured: assumed none"
        )
    )
    out.write(sources + "\n")
    for sentence in view["requirements"]:
        out.write(f"- {sentence}\n")
    out.write("what-if on the measured run (gain ceilings):\n")
    for fix in view["what_if"]:
        out.write(f"  {fix['fix']}: {fix['images_per_second']:.1f} images/s ({fix['gain']:.2f}x)\n")


def compare_view(store: ReadStore, args: argparse.Namespace) -> dict[str, Any]:
    store_b = store
    if getattr(args, "db_b", None):  # B in another file (each demo run has its own)
        store_b = open_store(argparse.Namespace(**(vars(args) | {"db": args.db_b})))
    models = [read_run(store, args.run_a), read_run(store_b, args.run_b)]
    for model in models:
        if not model.records:
            raise CliError(f"no run {model.run_id} in the store", 1)
    return compare(*models).to_dict()


def print_compare(view: dict[str, Any], out) -> None:
    a, b = view["a"], view["b"]
    out.write(view["sentence"] + "\n")
    out.write(f"A {a['run_id']}\nB {b['run_id']}\n")

    def rate(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    out.write(f"{'':16}{'A':>10}{'B':>10}\n")
    out.write(
        f"{'images/s':16}{rate(a['images_per_second']):>10}{rate(b['images_per_second']):>10}\n"
    )
    for epoch in sorted(set(a["epoch_images_per_second"]) | set(b["epoch_images_per_second"])):
        row = f"epoch {epoch} img/s"
        out.write(
            f"{row:16}{rate(a['epoch_images_per_second'].get(epoch)):>10}"
            f"{rate(b['epoch_images_per_second'].get(epoch)):>10}\n"
        )
    for part, label in PARTS:
        if part in a["shares"] and part in b["shares"]:
            before, after = a["shares"][part] * 100, b["shares"][part] * 100
            out.write(f"{label + ' %':16}{before:>10.1f}{after:>10.1f}\n")
    for key, (before, after) in view["config_changes"].items():
        out.write(f"changed: {key} {before} -> {after}\n")


def write_forecast(store: ReadStore, args: argparse.Namespace, out) -> None:
    """``collector forecast`` in its ``--format`` (the read API's ``forecast`` too)."""
    view = forecast_view(store, args)
    if args.format == "json":
        write_json(view, out)
    elif args.format == "csv":
        error = view["forecast_error"]
        rows = [
            row
            | {
                "forecast_error_median_percent": error["median_percent"],
                "forecast_error_worst_percent": error["worst_percent"],
            }
            for row in view["forecast"]
        ]
        write_csv(rows, ("forecast", *FORECAST_COLUMNS, *CSV_ERROR_COLUMNS), out)
    else:
        print_forecast(view, out)


def write_compare(store: ReadStore, args: argparse.Namespace, out) -> dict[str, Any]:
    """``collector compare`` in its ``--format`` (the read API's ``compare`` too); the view."""
    view = compare_view(store, args)
    if args.format == "json":
        write_json(view, out)
    else:
        print_compare(view, out)
    return view


def _remote_forecast(args: argparse.Namespace, out) -> int:
    """The forecast made by the collector at ``--collector`` (its read API)."""
    from collector.api.client import RemoteError, run_remote

    try:
        return run_remote(args, out)
    except RemoteError as error:
        raise CliError(str(error), error.status) from None


def _remote_view(args: argparse.Namespace) -> dict[str, Any]:
    """The comparison as JSON from the collector at ``--collector``: the gate is judged here
    on the same values the local command judges."""
    from collector.api.client import RemoteError, fetch_view, query_of, tls_of, token_of

    query = query_of(args) | {"format": "json"}
    tls = tls_of(args.ca_file) if args.collector.startswith("https://") else None
    try:
        text = fetch_view(args.collector, "compare", query, token_of(args.token_file), tls)
    except RemoteError as error:
        raise CliError(str(error), error.status) from None
    return json.loads(text)


def run(args: argparse.Namespace) -> int:
    out = sys.stdout
    try:
        if args.command == "forecast":
            if args.collector:
                return _remote_forecast(args, out)
            write_forecast(open_store(args), args, out)
            return 0
        if args.collector:
            view = _remote_view(args)
            if args.format == "json":
                write_json(view, out)
            else:
                print_compare(view, out)
        else:
            view = write_compare(open_store(args), args, out)
        slower = view["slower_percent"]
        if args.fail_if_slower is not None and slower is not None and slower > args.fail_if_slower:
            print(
                f"collector compare: B is {slower:.1f}% slower than A, more than "
                f"--fail-if-slower {args.fail_if_slower:g}%",
                file=sys.stderr,
            )
            return 1
        return 0
    except CliError as error:
        print(f"collector {args.command}: {error}", file=sys.stderr)
        return error.status
