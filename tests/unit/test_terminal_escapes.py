"""Text a writer sent is shown, never executed (issue 44, item 5): a run's model with a
clear-screen, a window-title change, red text and a bidi override prints in ``collector
runs`` as visible escapes (contract.text.visible), the rest of the row as written."""

from __future__ import annotations

from collector.arguments import build_parser
from collector.views.printers import render
from contract.identifiers import MAX_STRING_FIELD_CHARS
from tests.support.run_builder import RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

HOSTILE_MODEL = "\x1b[2J\x1b]0;owned\x07\x1b[31mred\u202eresnet"


def test_collector_runs_shows_escapes_instead_of_running_them(make_store) -> None:
    run = RunBuilder("hostile", model=HOSTILE_MODEL, write_samples=False)
    run.epoch(10, 640)
    store = make_store(run.points())
    shown = render(build_parser().parse_args(["runs"]), store)
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown
    assert "\\x1b[2J" in shown and "\\u202e" in shown
    assert "hostile" in shown


def test_a_long_model_name_is_cut_in_the_table(make_store) -> None:
    # the longest the collector stores (a 200 KB one is refused at ingest:
    # test_string_field_bound.py)
    run = RunBuilder("long", model="m" * MAX_STRING_FIELD_CHARS, write_samples=False)
    run.epoch(10, 640)
    shown = render(build_parser().parse_args(["runs"]), make_store(run.points()))
    longest_line = max(len(line) for line in shown.splitlines())
    assert "m" * 119 + "…" in shown and longest_line < 400
