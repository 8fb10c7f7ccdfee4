"""One number, every view: a report column's value as the CLI's table, its JSON (what the
read API serves) and the dashboard's epoch table each print it."""

from __future__ import annotations

import json

from collector.analysis.epochs import build_report
from collector.arguments import build_parser
from collector.store.api import ReadStore
from collector.views.printers import render
from contract import columns
from dashboard.columns import EPOCH_COLUMNS, format_value


def assert_views_agree(store: ReadStore, run_id: str, names: list[str]) -> dict[str, float]:
    """Each column of ``names`` in the report's last row (the ``*`` row) is known and
    printed alike by the three views; returns the values."""
    row = build_report(store, run_id).rows[-1]
    parser = build_parser()
    table = render(parser.parse_args(["report", run_id, "--columns", "all"]), store)
    as_json = json.loads(render(parser.parse_args(["report", run_id, "--format", "json"]), store))
    dashboard_kinds = {column.key: column.kind for column in EPOCH_COLUMNS}
    values = {}
    for name in names:
        value = getattr(row, name)
        assert value is not None and value > 0, name
        spec = columns.BY_NAME[name]
        shown = columns.format_cell(spec, value)
        assert shown in table, name
        assert as_json["rows"][-1][name] == round(value, spec.digits), name
        assert format_value(value, dashboard_kinds[name]) == shown, name
        values[name] = value
    return values


def whole_percent_texts(json_value: float, json_digits: int = 1) -> set[str]:
    """How a finding's wording may print, with no decimals, a share its evidence JSON holds
    rounded to ``json_digits``: the wording formats the unrounded value, so 179.46 reads
    "179" beside the JSON's 179.5 (whose own ``:.0f`` is "180"). Both are the one value."""
    half = 0.5 * 10**-json_digits
    return {f"{json_value + offset:.0f}" for offset in (-half, 0.0, half)}
