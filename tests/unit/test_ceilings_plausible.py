"""A ceiling no hardware has (1e-300 or 1e300 bytes/s: a damaged or forged ceilings file,
or an old agent that did not check it) is no measurement for the collector either: the
report shows no share of it instead of "inf%", and every view still renders (issue 44,
item 7; the bounds are contract/ceilings.py's, which the agent keeps to as well)."""

from __future__ import annotations

import json

import pytest

from collector.analysis.epochs import build_report
from collector.arguments import build_parser
from collector.findings.engine import run_findings
from collector.views.printers import render
from contract.ceilings import ceiling_problem
from contract.point import Point
from contract.schema import Ceiling, Tag
from tests.support.run_builder import NS, T0_NS, RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture


def disk_ceiling(hosts, bytes_per_second: float) -> list[Point]:
    return [
        Point(
            Ceiling.NAME,
            {Tag.HOST: host, Tag.DEVICE: "sda", Tag.KIND: "disk", Tag.METHOD: "o_direct"},
            {str(Ceiling.DISK_SEQUENTIAL_READ): bytes_per_second, str(Ceiling.MEASURED_AT): 1.0},
            T0_NS + second * NS,
        )
        for host in hosts
        for second in range(-5, 200, 5)
    ]


@pytest.mark.parametrize("forged", [1e-300, 1e300])
def test_a_ceiling_no_hardware_has_gives_no_share_and_every_view_renders(make_store, forged):
    run = RunBuilder("forged", steps_per_epoch=6)
    run.epoch(100, 6_000, step_pattern=(1, 3), disk_read=180e6, cpu_busy=0.3, cpu_iowait=0.2)
    run.epoch(60, 6_000, cpu_busy=0.6)
    store = make_store([*run.points(), *disk_ceiling(run.hosts, forged)])
    rows = build_report(store, "forged").rows
    assert [r.disk_read_ceiling_percent for r in rows] == [None] * len(rows)
    assert all("inf" not in f.explanation for f in run_findings(store, "forged"))
    args = build_parser().parse_args(["report", "forged", "--format", "json", "--findings"])
    document = json.loads(render(args, store))
    assert {row["disk_read_ceiling_percent"] for row in document["rows"]} == {None}


def test_a_ceiling_within_the_bounds_is_kept(make_store):
    run = RunBuilder("real", warmup_steps=2)
    run.epoch(20, 400, disk_read=40e6)
    store = make_store([*run.points(), *disk_ceiling(run.hosts, 160e6)])
    (row, *_) = build_report(store, "real").rows
    assert row.disk_read_ceiling_percent == pytest.approx(25.0, rel=0.02)


def test_the_bounds_are_one_rule():
    field = str(Ceiling.DISK_SEQUENTIAL_READ)
    assert ceiling_problem(field, 1e-300, 1.0) == "value 1e-300 is not within [1, 1e+12]"
    assert ceiling_problem(field, float("inf"), 1.0) == "value inf is not finite"
    assert ceiling_problem(field, 160e6, "yesterday") == "measured_at 'yesterday' is not a number"
    assert ceiling_problem(field, 160e6, 1.0) is None
