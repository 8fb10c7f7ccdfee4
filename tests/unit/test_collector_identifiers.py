"""Identifiers a writer may not plant, refused at ingest by a real ``collector serve``: a
host that passes for the all-hosts row, run ids and hosts too long to show, control and
bidirectional formatting characters. Each is a 400 naming the line; the request's other
lines are stored; nothing of a refused line is."""

from __future__ import annotations

import json
import os

import pytest

from collector.lineprotocol import parse_body
from collector.store import SqliteStore
from contract.identifiers import MAX_RUN_ID_CHARS, tag_problem
from tests.integration.test_collector_ingest_server import REPO_ROOT, S, start_server, stored


@pytest.mark.parametrize(
    ("tags", "problem"),
    [
        ((("host", "*"),), "reserved"),
        ((("host", "All  Hosts"),), "reserved"),
        ((("host", "(all)"),), "reserved"),
        ((("host", "n" * 254),), "254 characters long (at most 253)"),
        ((("run_id", "r" * (MAX_RUN_ID_CHARS + 1)),), "at most 128"),
        ((("device", "x" * 1025),), "at most 1,024"),
        ((("host", "evil\u202etxt.exe"),), "U+202E"),
        ((("framework", "tf\x1b[31m"),), "U+001B"),
    ],
)
def test_a_tag_that_cannot_be_shown_as_written_is_refused(tags, problem):
    assert problem in (tag_problem(tags) or "")


def test_ordinary_names_pass():
    ordinary = (
        ("host", "node01.cluster"),
        ("run_id", "tensorflow-20261123-115034-74e0"),
        ("gpu_name", "NVIDIA H100 80GB HBM3"),
        ("mount", "ifs-nas.test.edu:/ifs"),
        ("host", "knoten-ü"),
    )
    assert tag_problem(ordinary) is None


def test_the_parser_refuses_the_line_and_keeps_the_others():
    body = "\n".join(
        [
            "cpu,host=n1 user=1 1",
            "cpu,host=* user=2 1",  # the template path (a plain sample line)
            'workload,host=n1,run_id=r,rank=0,framework=tf event="run_start" 2',
            'workload,host=all\\ hosts,run_id=r,rank=1,framework=tf event="run_start" 2',
        ]
    )
    parsed = parse_body(body)
    assert [error.line for error in parsed.errors] == [2, 4]
    assert all("reserved" in str(error) for error in parsed.errors)
    assert [dict(group.tag_items)["host"] for group in parsed.groups] == ["n1"]
    assert [event.tags["host"] for event in parsed.events] == ["n1"]
    assert parsed.points == 2


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    server = start_server(tmp_path_factory.mktemp("identifiers"), env)
    yield server
    server.stop()


def test_the_write_api_answers_400_with_the_line_and_stores_the_rest(served):
    long_run = "r" * 60_000
    body = "\n".join(
        [
            f"disk,host=good,device=sda reads=1i {S}",
            f"disk,host=*,device=sda reads=2i {S}",
            f'workload,host=good,run_id={long_run},rank=0,framework=tf event="run_start" {S}',
            f"disk,host=bidi\u202eevil,device=sda reads=3i {S}",
        ]
    )
    status, _, reply = served.request("POST", "/api/v2/write?bucket=b", body.encode("utf-8"))
    assert status == 400
    message = json.loads(reply)["message"]
    assert "line 2" in message and "reserved" in message
    assert "line 3" in message and "60,000 characters long" in message
    assert "line 4" in message and "U+202E" in message
    assert long_run not in message  # the excerpt is cut, the value is not echoed whole
    series = stored(served.db, "disk", "reads")
    assert {host for host, _ in series} == {"good"}
    with SqliteStore(served.db) as store:
        assert store.runs() == []
