"""``collector report RUN --otlp-endpoint URL``: a run's findings as OTLP log records.

A real SQLite store holding the two-host straggler run of the findings tests (rank 1 on n2
slow in compute every epoch), the real command in a subprocess, a loopback receiver that
decodes the OTLP JSON mapping: one record a finding with its rule, severity, title and
host, exactly the findings ``collector report --findings --format json`` prints."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from collector.export.otlp import logs_url
from tests.integration.test_anatomy_findings import straggler_run
from tests.support.analysis_stores import sqlite_store_with
from tests.support.otlp_receiver import OtlpReceiver, attributes

SECRET = "findings-secret-31"


def collector(repo_env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "collector", *args],
        capture_output=True,
        text=True,
        env=repo_env,
        timeout=120,
    )


def test_findings_arrive_as_log_records(tmp_path: Path, repo_env) -> None:
    db = tmp_path / "runs.sqlite"
    sqlite_store_with(straggler_run("slow", [1, 1, 1, 1, 1]).points(), db)
    headers = tmp_path / "headers"
    headers.write_text(f"Authorization: Bearer {SECRET}\n")
    headers.chmod(0o600)
    printed = collector(
        repo_env, "report", "slow", "--db", str(db), "--findings", "--format", "json"
    )
    assert printed.returncode == 0, printed.stderr
    expected = json.loads(printed.stdout)["findings"]
    with OtlpReceiver() as receiver:
        sent = collector(
            repo_env, "report", "slow", "--db", str(db), "--format", "json",
            "--otlp-endpoint", receiver.url(""), "--otlp-headers-file", str(headers),
        )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    assert f"sent {len(expected)} findings to {receiver.url('/v1/logs')}" in sent.stderr
    assert SECRET not in sent.stderr + sent.stdout
    assert "findings" not in json.loads(sent.stdout)  # sending does not print them
    ((path, request_headers, body),) = receiver.requests
    assert path == "/v1/logs" and request_headers["Authorization"] == f"Bearer {SECRET}"
    (resource_logs,) = body["resourceLogs"]
    assert attributes(resource_logs["resource"]["attributes"]) == {
        "service.name": "epochscope-collector"
    }
    records = resource_logs["scopeLogs"][0]["logRecords"]
    got = [
        (attrs["epochscope.finding.rule"], record["severityText"], record["body"]["stringValue"])
        for record in records
        for attrs in [attributes(record["attributes"])]
    ]
    assert got == [(f["rule"], f["severity"].upper(), f["title"]) for f in expected]
    (straggler,) = [r for r in records if "Straggler" in r["body"]["stringValue"]]
    attrs = attributes(straggler["attributes"])
    assert attrs["host.name"] == "n2" and attrs["epochscope.run_id"] == "slow"
    assert attrs["event.name"] == "epochscope.finding"
    by_rule = {f["rule"]: f for f in expected}
    # OTel's INFO 9, WARN 13, ERROR 17 for the finding's severity as the report prints it
    severity = by_rule["straggler"]["severity"]
    assert straggler["severityNumber"] == {"info": 9, "warning": 13, "critical": 17}[severity]
    assert json.loads(attrs["epochscope.finding.evidence"]) == by_rule["straggler"]["evidence"]


def test_an_endpoint_that_refuses_fails_the_command_with_its_answer(tmp_path: Path, repo_env):
    db = tmp_path / "runs.sqlite"
    sqlite_store_with(straggler_run("slow", [1, 1, 1, 1, 1]).points(), db)
    with OtlpReceiver(status=503) as receiver:
        sent = collector(
            repo_env, "report", "slow", "--db", str(db), "--otlp-endpoint",
            receiver.url("/v1/logs"),
        )  # fmt: skip
    assert sent.returncode == 1
    assert "findings to http://127.0.0.1:" in sent.stderr and "failed (HTTP 503" in sent.stderr


def test_otlp_endpoint_with_a_remote_collector_is_refused(repo_env) -> None:
    sent = collector(
        repo_env, "report", "r", "--collector", "http://127.0.0.1:9",
        "--otlp-endpoint", "http://127.0.0.1:4318",
    )  # fmt: skip
    assert sent.returncode == 2 and "give --db" in sent.stderr


def test_a_url_without_a_path_gets_the_logs_path() -> None:
    assert logs_url("http://otel:4318") == "http://otel:4318/v1/logs"
    assert logs_url("http://otel:4318/") == "http://otel:4318/v1/logs"
    assert logs_url("https://otel/custom/logs") == "https://otel/custom/logs"
