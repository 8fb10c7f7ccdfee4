"""`collector report | runs | scaling` output formats (collector.views.reports)."""

from __future__ import annotations

import csv
import http.client
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collector.analysis.epochs import COLUMNS
from collector.arguments import build_parser
from collector.views.printers import render
from collector.views.reports import RUNS_KEYS
from contract.point import encode_lines
from contract.schema import RunState
from tests.conftest import REPO_ROOT
from tests.support.run_builder import NS, T0_NS, RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

MB = 1e6


def two_runs() -> list:
    first = RunBuilder("r-old", hosts=("n1", "n2"), ranks_per_host=2, host_memory_bytes=10**11)
    first.epoch(100, 6400, nfs_server_read=300 * MB, nfs_app_read=300 * MB, cache_growth=1e8)
    first.epoch(50, 6400, nfs_app_read=300 * MB)
    live = RunBuilder("r-live", framework="mxnet", t0_ns=T0_NS + 3600 * NS, state=RunState.LIVE)
    live.epoch(10, 640)
    return first.points() + live.points()


def cli(store, *argv: str) -> str:
    return render(build_parser().parse_args(list(argv)), store)


def test_report_json_rows_have_exactly_the_columns(make_store):
    store = make_store(two_runs())
    rows = json.loads(cli(store, "report", "r-old", "--format", "json"))["rows"]
    assert [(r["host"], r["epoch"]) for r in rows] == [
        ("n1", 1),
        ("n2", 1),
        ("*", 1),
        ("n1", 2),
        ("n2", 2),
        ("*", 2),
    ]
    assert all(list(r) == list(COLUMNS) for r in rows)
    assert rows[2]["nfs_server_read_mbps"] == 600.0  # 2 hosts x 300 MB/s
    assert rows[2]["images_per_second"] == 256.0  # 4 ranks x 6400 / 100 s
    assert rows[0]["gpu_util_percent"] == 0.0 and rows[0]["ib_rcv_bytes"] is None


def test_report_csv_header_and_empty_cells_for_missing_data(make_store):
    text = cli(make_store(two_runs()), "report", "r-old", "--format", "csv")
    lines = text.splitlines()
    assert lines[0] == ",".join(COLUMNS)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 6
    assert rows[0]["ib_rcv_bytes"] == ""  # no InfiniBand: empty, not 0
    assert rows[0]["nfs_server_read_bytes"] == "30000000000"
    assert rows[2]["host"] == "*"


def test_report_table_and_findings(make_store):
    text = cli(make_store(two_runs()), "report", "r-old", "--findings")
    assert "run r-old: per epoch, per host" in text
    assert "img/s" in text and "rx-tx MB/s" in text
    star_rows = [line for line in text.splitlines() if line.startswith("* ")]
    assert len(star_rows) == 2
    assert "30.0 GB" in text  # n1's NFS server bytes in epoch 1
    assert "INFO Storage reads stop after epoch 1" in text


def test_a_long_finding_is_one_line_and_its_words_are_not_markup():
    """A pipe gets each explanation whole (rich cut it at the console's 400 columns before),
    and brackets in a finding's words are printed, not read as rich markup."""
    from collector.findings.base import Finding
    from collector.views.reports import _console, print_findings

    words = "the data set [bold]x[/bold] " + "is read again " * 40
    out = io.StringIO()
    print_findings([Finding("r", "warning", "title [1]", words.strip(), {}, "")], _console(out))
    lines = out.getvalue().splitlines()
    assert lines == ["WARNING title [1]", "  " + words.strip()]


def test_report_json_with_findings_is_an_object(make_store):
    out = json.loads(
        cli(make_store(two_runs()), "report", "r-old", "--format", "json", "--findings")
    )
    assert set(out) == {"run_id", "rows", "findings", "throughput"}
    rules = [f["rule"] for f in out["findings"]]
    assert "cache_warmup" in rules
    finding = out["findings"][rules.index("cache_warmup")]
    assert set(finding) == {"rule", "severity", "title", "explanation", "evidence", "chart"}


def test_runs_json_newest_first(make_store):
    runs = json.loads(cli(make_store(two_runs()), "runs", "--format", "json"))
    assert [list(r) for r in runs] == [list(RUNS_KEYS)] * 2
    live, old = runs
    assert live == {
        "run_id": "r-live",
        "framework": "mxnet",
        "model": "resnet50",
        "hosts": ["node1"],
        "world_size": 1,
        "images_per_second": 64.0,
        "startup_seconds": 0.0,
        "start": "2023-11-14T23:13:20.000Z",
        "end": None,
        "state": "live",
    }
    assert old["hosts"] == ["n1", "n2"] and old["world_size"] == 4
    assert (old["end"], old["state"]) == ("2023-11-14T22:15:50.000Z", "finished")


def test_runs_table(make_store):
    text = cli(make_store(two_runs()), "runs")
    assert text.index("r-live") < text.index("r-old")
    assert "n1, n2" in text


def test_scaling_over_stored_runs_json(make_store):
    rows = json.loads(cli(make_store(two_runs()), "scaling", "--format", "json"))
    by_run = {r["run_id"]: r for r in rows}
    assert by_run["r-live"]["scope"] == "baseline" and by_run["r-live"]["gpus"] == 1
    assert by_run["r-old"]["gpus"] == 4 and by_run["r-old"]["nodes"] == 2


def run_collector(*args: str, env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "collector", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_missing_store_is_a_clear_error(repo_env, tmp_path):
    result = run_collector("report", "r1", "--db", str(tmp_path / "none.sqlite"), env=repo_env)
    assert result.returncode == 1
    assert "no store at" in result.stderr
    assert not (tmp_path / "none.sqlite").exists()  # never created by a read


def test_bad_backend_is_a_usage_error(repo_env):
    result = run_collector("runs", "--backend", "influx=http://x", env=repo_env)
    assert result.returncode == 2
    assert "--backend must be victoriametrics=URL" in result.stderr


# --------------------------------------------------------------------------------------
# end to end: `collector serve` takes the points over HTTP into a real SQLite file, then
# `collector report | runs | scaling` read that file as separate processes
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served_db(tmp_path_factory) -> Path:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    tmp = tmp_path_factory.mktemp("served")
    db, log_path = tmp / "epochscope.sqlite", tmp / "serve.log"
    with open(log_path, "wb") as log_file:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "collector",
                "serve",
                "--db",
                str(db),
                "--listen",
                "127.0.0.1:0",
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        deadline = time.monotonic() + 60
        address = None
        while address is None and time.monotonic() < deadline:
            address = re.search(r"listening on http://([\d.]+):(\d+)", log_path.read_text())
            if server.poll() is not None:
                pytest.fail(f"collector serve exited: {log_path.read_text()}")
            time.sleep(0.05)
        assert address, log_path.read_text()
        lines = encode_lines(two_runs()).split("\n")
        for first in range(0, len(lines), 2000):  # requests of 2000 lines, as agents batch
            body = "\n".join(lines[first : first + 2000]).encode()
            connection = http.client.HTTPConnection(address[1], int(address[2]), timeout=60)
            connection.request("POST", "/api/v2/write?org=o&bucket=b&precision=ns", body)
            response = connection.getresponse()
            assert response.status == 204, response.read()
            connection.close()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    return db


def test_report_from_the_served_store(served_db, repo_env):
    result = run_collector(
        "report", "r-old", "--db", str(served_db), "--format", "json", env=repo_env
    )
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["rows"]
    assert [(r["host"], r["epoch"]) for r in rows][:3] == [("n1", 1), ("n2", 1), ("*", 1)]
    # 2 hosts x 300 MB/s NFS server reads; 4 ranks x 6400 images in 100 s
    assert (rows[2]["nfs_server_read_mbps"], rows[2]["images_per_second"]) == (600.0, 256.0)
    csv_out = run_collector(
        "report", "r-old", "--db", str(served_db), "--format", "csv", env=repo_env
    )
    assert csv_out.stdout.splitlines()[0] == ",".join(COLUMNS)
    table = run_collector("report", "r-old", "--db", str(served_db), "--findings", env=repo_env)
    assert table.returncode == 0 and "Storage reads stop after epoch 1" in table.stdout
    missing = run_collector("report", "nope", "--db", str(served_db), env=repo_env)
    assert missing.returncode == 1 and "no run 'nope'" in missing.stderr


def test_report_json_is_one_object_with_or_without_findings(served_db, repo_env):
    """One shape: {"run_id", "rows", "throughput"}, and "findings" when asked for."""
    args = ("report", "r-old", "--db", str(served_db), "--format", "json")
    plain = run_collector(*args, env=repo_env)
    with_findings = run_collector(*args, "--findings", env=repo_env)
    assert plain.returncode == 0 and with_findings.returncode == 0, plain.stderr
    plain_doc, findings_doc = json.loads(plain.stdout), json.loads(with_findings.stdout)
    assert list(plain_doc) == ["run_id", "rows", "throughput"]
    assert list(findings_doc) == ["run_id", "rows", "throughput", "findings"]
    assert plain_doc["run_id"] == "r-old"
    assert findings_doc["rows"] == plain_doc["rows"]
    assert findings_doc["throughput"] == plain_doc["throughput"]
    assert any(f["title"].startswith("Storage reads stop") for f in findings_doc["findings"])


def test_report_csv_takes_the_columns_asked_for(served_db, repo_env):
    args = ("report", "r-old", "--db", str(served_db), "--format", "csv")
    chosen = run_collector(*args, "--columns", "images_per_second,nfs", env=repo_env)
    assert chosen.returncode == 0, chosen.stderr
    rows = list(csv.DictReader(io.StringIO(chosen.stdout)))
    nfs = [c for c in COLUMNS if c.startswith("nfs_")]
    assert list(rows[0]) == [c for c in COLUMNS if c in {"host", "epoch", "images_per_second",
                                                         *nfs}]  # fmt: skip
    assert rows[2]["host"] == "*" and float(rows[2]["nfs_server_read_mbps"]) == 600.0
    unknown = run_collector(*args, "--columns", "disks", env=repo_env)
    assert unknown.returncode == 2 and "unknown column or group 'disks'" in unknown.stderr


@pytest.mark.parametrize(
    "argv",
    [("report", "r-old"), ("report", "r-old", "--format", "csv", "--findings"),
     ("runs",), ("scaling", "--format", "json")],
    ids=" ".join,
)  # fmt: skip
def test_a_reader_that_goes_away_ends_the_command_quietly(served_db, repo_env, argv):
    """`collector report ... | head`: the pipe's reader is gone before anything is written."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "collector", *argv, "--db", str(served_db)],
            stdout=write_end, stderr=subprocess.PIPE, text=True, env=repo_env, timeout=60,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert result.returncode == 128 + signal.SIGPIPE
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr
    assert "Exception ignored" not in result.stderr


def test_runs_and_scaling_from_the_served_store(served_db, repo_env):
    runs = json.loads(
        run_collector("runs", "--db", str(served_db), "--format", "json", env=repo_env).stdout
    )
    assert [r["run_id"] for r in runs] == ["r-live", "r-old"]
    assert runs[0]["state"] == "live" and runs[0]["end"] is None
    scaling = json.loads(
        run_collector("scaling", "--db", str(served_db), "--format", "json", env=repo_env).stdout
    )
    assert {r["run_id"]: r["gpus"] for r in scaling} == {"r-live": 1, "r-old": 4}
