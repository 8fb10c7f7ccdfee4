"""A writer's long or hostile text on the dashboard (issue 44, item 5 and low): a
1,024-character model name (the longest ingest stores) is cut to 120 characters in the
page text with the whole of it in the cell's title, a bidi override shows as its escape,
and the stylesheet keeps text cells to one line with an ellipsis. (A 200 KB name made the
Runs page 2,244,243 px wide; ingest now refuses it: test_string_field_bound.py.)"""

from __future__ import annotations

from pathlib import Path

from dash import dcc, html

from contract.identifiers import MAX_STRING_FIELD_CHARS
from contract.text import MAX_SHOWN_CHARS
from dashboard import pages
from dashboard.columns import RUN_COLUMNS

LONG_MODEL = "m" * MAX_STRING_FIELD_CHARS
STYLE = Path(pages.__file__).parent / "assets" / "style.css"


def find(component, matches) -> list:
    """Every component under ``component`` (itself included) that ``matches``."""
    found = [component] if matches(component) else []
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list | tuple) else [children]:
        if hasattr(child, "to_plotly_json"):
            found += find(child, matches)
    return found


def a_run(**values) -> dict:
    run = {column.key: None for column in RUN_COLUMNS}
    run |= {"run_id": "r1", "framework": "pytorch", "state": "finished", "gpus": 1}
    run |= {"start": "2026-11-29 01:00:00", "host_names": ["n1"], "hosts": 1}
    return run | values


def model_cell(table: html.Table) -> html.Td:
    (cell,) = find(table, lambda node: isinstance(node, html.Td) and "col-model" in str(
        getattr(node, "className", "")))  # fmt: skip
    return cell


def test_a_long_model_name_is_cut_in_the_runs_table_whole_in_its_title():
    cell = model_cell(pages.runs_table([a_run(model=LONG_MODEL)]))
    assert cell.children == "m" * (MAX_SHOWN_CHARS - 1) + "…"
    assert cell.title == LONG_MODEL


def test_a_bidi_override_shows_as_its_escape():
    cell = model_cell(pages.runs_table([a_run(model="resnet\u202e05", run_id="r\u202e2")]))
    assert cell.children == "resnet\\u202e05" and cell.title is None
    (link,) = find(pages.runs_table([a_run(run_id="r\u202e2")]), lambda n: isinstance(n, dcc.Link))
    assert link.children == "r\\u202e2"


def test_the_run_header_cuts_the_model_too():
    header = pages.run_header(a_run(model=LONG_MODEL, images_per_second=1.0), live=False, poll_ms=1)
    shown = [node.children for node in find(header, lambda n: isinstance(n, html.Dd))]
    assert "m" * (MAX_SHOWN_CHARS - 1) + "…" in shown


def test_text_cells_stay_one_line_with_an_ellipsis():
    css = STYLE.read_text()
    rule = css[css.index(".table td.col-run_id, .table td.col-model") :].split("}")[0]
    assert "text-overflow: ellipsis" in rule and "white-space: nowrap" in rule
    assert "max-width: 28em" in rule
