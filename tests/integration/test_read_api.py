"""The collector's read API against a real ``collector serve`` with a token.

``collector report|runs|scaling --collector URL`` must print exactly what the same command
prints with ``--db`` on the collector's host (JSON byte for byte, and the tables), refuse
without the token, and the collector must log refused requests (rate-limited, never the
token).
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from bench.reliability import harness
from collector.api.client import query_of
from collector.api.server import command_argv
from collector.store import SqliteStore
from netserve.refusals import RefusalLog
from workloads.record.events import EventWriter, ShipperSink
from workloads.record.timing import Recorder

pytestmark = pytest.mark.timeout(300)
TOKEN = "read-TOKEN-5b1e2f"


class StepClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def train(url: str, token: str, spool, run_id: str, host: str, world: int) -> None:
    """Two epochs of 4 steps of one rank, through the shipper with the token."""
    writer = EventWriter(ShipperSink(url, token, spool), run_id, 0, "pytorch", host=host)
    clock = StepClock()
    recorder = Recorder(writer, batch_size=8, warmup_steps=1, step_every=2, clock=clock)
    recorder.run_start({"batch_size": 8, "world_size": world, "model": "resnet50",
                        "precision": "fp32", "data_format": "synthetic"})  # fmt: skip
    for epoch in (1, 2):
        recorder.epoch_start(epoch)
        for _ in range(4):
            clock.now += 0.25 / world
            recorder.step_done(1.0)
        recorder.epoch_end(loss=1.0 / epoch, top1=0.4 * epoch, top5=1.0)
    recorder.run_end()
    assert writer.close(60.0)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("read-api")
    _, token_file = harness.write_token_file(workdir, TOKEN)
    collector = harness.Collector(
        db=workdir / "c.sqlite", token_file=token_file, log=workdir / "collector.log"
    )
    collector.start()
    train(collector.url, TOKEN, workdir / "spool-a", "run-a", "node01", 1)
    train(collector.url, TOKEN, workdir / "spool-b", "run-b", "node01", 1)
    yield collector, token_file
    collector.stop()


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "collector", *args],
        capture_output=True, text=True, env=harness.repo_env(), timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(
    "view",
    [
        ("runs", "--format", "json"),
        ("runs",),
        ("report", "run-a", "--format", "json", "--findings"),
        ("report", "run-a", "--format", "json"),
        ("report", "run-a", "--findings"),
        ("report", "run-a", "--format", "csv"),
        ("scaling", "--format", "json"),
        ("jobs", "--format", "json"),
        ("hosts", "--format", "json"),
        ("hosts",),
    ],
    ids=lambda view: " ".join(view),
)
def test_a_view_from_the_collector_is_the_view_made_locally(served, view):
    collector, token_file = served
    local = cli(*view, "--db", str(collector.db))
    remote = cli(*view, "--collector", collector.url, "--token-file", str(token_file))
    assert local.returncode == 0, local.stderr
    assert remote.returncode == 0, remote.stderr
    assert remote.stdout == local.stdout
    shown = {
        "runs": "run-a",
        "report": "node01",
        "scaling": "run-",
        "jobs": "[",
        "hosts": "node01",
    }[view[0]]
    assert shown in remote.stdout


def test_a_missing_run_and_a_refused_token_say_so(served, tmp_path):
    collector, token_file = served
    missing = cli("report", "no-such-run", "--collector", collector.url,
                  "--token-file", str(token_file))  # fmt: skip
    assert missing.returncode == 1
    assert "no run 'no-such-run'" in missing.stderr
    without = cli("runs", "--collector", collector.url)
    assert without.returncode == 1
    assert "refused the token" in without.stderr and "--token-file" in without.stderr
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token\n")
    refused = cli("runs", "--collector", collector.url, "--token-file", str(wrong))
    assert refused.returncode == 1 and "refused the token" in refused.stderr
    down = cli("runs", "--collector", f"http://127.0.0.1:{harness.free_port()}")
    assert down.returncode == 1 and "cannot reach the collector" in down.stderr


def test_the_read_api_answers_401_without_the_token_and_the_log_says_so(served):
    collector, _ = served
    for _ in range(5):  # a client retrying: one log line, not five
        request = urllib.request.Request(f"{collector.url}/api/v1/runs?format=json")
        request.add_header("Authorization", "Token wrong-token-123")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 401
    log = collector.log.read_text()
    lines = [line for line in log.splitlines() if "refused /api/v1/runs" in line]
    assert len(lines) == 1, log
    assert "401" in lines[0] and "127.0.0.1" in lines[0]
    assert TOKEN not in log and "wrong-token-123" not in log


def test_a_write_with_a_wrong_token_is_logged_once_a_minute(caplog):
    now = [0.0]
    refusals = RefusalLog(logging.getLogger("test.refusals"), clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, "test.refusals"):
        assert refusals.refused(401, "10.0.0.7", "/api/v2/write", "unauthorized access")
        now[0] = 30.0
        assert not refusals.refused(401, "10.0.0.7", "/api/v2/write", "unauthorized access")
        assert refusals.refused(413, "10.0.0.7", "/api/v2/write", "too large")  # another kind
        now[0] = 61.0
        assert refusals.refused(401, "10.0.0.7", "/api/v2/write", "unauthorized access")
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [
        "refused /api/v2/write from 10.0.0.7: 401 unauthorized access",
        "refused /api/v2/write from 10.0.0.7: 413 too large",
        "refused /api/v2/write from 10.0.0.7: 401 unauthorized access "
        "(and 1 more like it in the last 60 s)",
    ]


def test_query_and_argv_round_trip_only_the_view_options():
    from collector.arguments import build_parser

    args = build_parser().parse_args(
        ["report", "r1", "--findings", "--format", "json", "--collector", "http://x",
         "--token-file", "/t", "--db", "/secret.sqlite"]
    )  # fmt: skip
    query = query_of(args)
    assert "db" not in query and "collector" not in query and "token_file" not in query
    assert query["run_id"] == "r1" and query["findings"] == "true"
    argv = command_argv("report", {name: [value] for name, value in query.items()})
    assert argv[:2] == ["report", "r1"] and "--findings" in argv
    with pytest.raises(ValueError, match="db"):
        command_argv("runs", {"db": ["/etc/passwd"]})


def test_a_csv_report_with_findings_from_the_collector_is_the_local_one_and_not_in_its_log(
    served,
):
    """The findings a CSV report prints on stderr once went into the collector's log (the
    read API rendered them on the server's stderr): now they come back to the client."""
    collector, token_file = served
    view = ("report", "run-a", "--format", "csv", "--findings")
    local = cli(*view, "--db", str(collector.db))
    remote = cli(*view, "--collector", collector.url, "--token-file", str(token_file))
    assert local.returncode == 0 and remote.returncode == 0, remote.stderr
    assert remote.stdout == local.stdout and remote.stderr == local.stderr
    assert local.stderr.strip()  # findings, or "No findings."
    log = collector.log.read_text()
    assert local.stderr.splitlines()[0] not in log


def read(collector, token: str, query: str) -> tuple[int, str]:
    request = urllib.request.Request(f"{collector.url}/api/v1/{query}")
    request.add_header("Authorization", f"Token {token}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())["message"]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("report?run_id=run-a&help=true", "'help' is not an option of `collector report`"),
        ("runs?help=true", "'help' is not an option of `collector runs`"),
        ("report?run_id=--db=/etc/passwd", "run_id='--db=/etc/passwd': a value may not start"),
        ("report?run_id=run-a&format=--db=/etc/passwd", "format='--db=/etc/passwd': a value"),
        ("report?run_id=run-a&findings=--help", "findings='--help': a flag is true or false"),
        ("report?run_id=run-a&columns=-h", "columns='-h': a value may not start with '-'"),
        ("report?run_id=run-a&format=xml", "invalid choice: 'xml'"),
        ("scaling?gpus_per_node=many", "invalid int value: 'many'"),
    ],
)
def test_no_query_value_becomes_an_option_and_nothing_is_printed_into_the_log(
    served, query, message
):
    collector, _ = served
    before = collector.log.read_text()
    status, answer = read(collector, TOKEN, query)
    assert status == 400 and message in answer, answer
    time.sleep(0.2)
    written = collector.log.read_text()[len(before) :]
    assert "usage:" not in written and "--help" not in written and "passwd" not in written
    assert written.strip() == "", written  # argparse printed nothing, neither help nor errors


def test_flags_and_values_of_a_query_still_work(served):
    collector, _ = served
    status, answer = read(collector, TOKEN, "report?run_id=run-a&findings=false&format=csv"
                          "&columns=images_per_second")  # fmt: skip
    assert status == 200, answer
    assert answer.splitlines()[0] == "host,epoch,images_per_second"
    status, answer = read(collector, TOKEN, "report?run_id=run-a&findings=true")
    assert status == 200 and list(json.loads(answer)) == [
        "run_id", "rows", "throughput", "findings"
    ]  # fmt: skip


def test_a_collector_stopped_by_sigterm_logs_one_line_of_what_it_took(tmp_path):
    _, token_file = harness.write_token_file(tmp_path, TOKEN)
    collector = harness.Collector(
        db=tmp_path / "c.sqlite", token_file=token_file, log=tmp_path / "collector.log"
    )
    collector.start()
    try:
        train(collector.url, TOKEN, tmp_path / "spool", "run-stop", "node01", 1)
    finally:
        collector.stop()  # SIGTERM
    lines = [line for line in collector.log.read_text().splitlines() if "stopped by" in line]
    assert len(lines) == 1, collector.log.read_text()
    [line] = lines
    with SqliteStore(collector.db) as store:
        points = len(store.events("run-stop"))
    assert re.search(
        rf"stopped by SIGTERM: [1-9]\d* writes \({points} points\) taken since start, every "
        rf"one answered is committed to the db {re.escape(str(collector.db))}; 0 requests in "
        r"hand finished; store closed$",
        line,
    ), line
    assert TOKEN not in collector.log.read_text()
