"""Findings where people already look (issue 45): the collector's ``GET /metrics`` gives
one gauge per finding of a live run or a running Slurm job, and ansible/files/
epochscope-alerts.yml pages on them. A real ``collector serve`` with a token file over a
real SQLite store written by ``tests.support.run_builder``; the rules checked by Debian's
``promtool check rules`` and unit-tested by ``promtool test rules`` against the series
the collector actually serves."""

from __future__ import annotations

import http.client
import re
import secrets
import shutil
import subprocess
import sys
import time

import pytest

from collector.export.findings_metrics import current_findings, exposition, label_value
from collector.store import SqliteStore
from contract.schema import RunState
from tests.conftest import REPO_ROOT
from tests.support.run_builder import NS, RunBuilder

RULES = REPO_ROOT / "ansible" / "files" / "epochscope-alerts.yml"
LIVE, DONE = "live-input-bound", "done-input-bound"


def input_bound(run_id: str, state: str) -> RunBuilder:
    """CPUs saturated, GPUs 40% busy: the input_bound finding (tests/unit/test_findings)."""
    run = RunBuilder(run_id, ranks_per_host=4, state=state)
    run.epoch(100, 10_000, cpu_busy=0.95, gpu_util=40)
    return run


def gpus_idle_job() -> RunBuilder:
    """Job 101 was given GPUs 0 and 1 of each node; processes ran on GPU 0 only."""
    run = RunBuilder("run-a", hosts=("n1", "n2"), ranks_per_host=2)
    run.epoch(10, 640, gpu_util=80.0).epoch(10, 640, gpu_util=80.0)
    run.job("101", seconds=20, cpus=8, cpus_busy=2.0, memory_limit_bytes=16e9,
            memory_peak_bytes=2e9, gpus=("0", "1"), gpu_processes=("0",), of_run=True)  # fmt: skip
    return run


def test_label_values_are_escaped_and_series_sorted():
    assert label_value('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    page = exposition([("r2", "straggler", "warning"), ("r1", "input_bound", "critical")], [])
    lines = [line for line in page.splitlines() if not line.startswith("#")]
    assert lines == [
        'epochscope_finding{run="r1",rule="input_bound",severity="critical"} 1',
        'epochscope_finding{run="r2",rule="straggler",severity="warning"} 1',
    ]


def test_a_running_jobs_idle_gpus_are_a_gauge_and_an_ended_jobs_are_not(tmp_path):
    store = SqliteStore(tmp_path / "jobs.sqlite")
    builder = gpus_idle_job()
    store.write_points(builder.points())
    last_ns = max(p.time_ns for p in builder.job_points())
    running = current_findings(store, last_ns + 10 * NS)
    assert 'epochscope_job_finding{job="101",user="alice",rule="job_gpus_idle",' in running
    assert "epochscope_job_finding" not in "".join(
        line for line in current_findings(store, last_ns + 600 * NS).splitlines(True)
        if not line.startswith("#")
    )  # fmt: skip


@pytest.fixture()
def served(tmp_path, repo_env):
    db = tmp_path / "epochscope.sqlite"
    store = SqliteStore(db)
    store.write_points(input_bound(LIVE, RunState.LIVE).points())
    store.write_points(input_bound(DONE, RunState.FINISHED).points())
    store.close()
    token = secrets.token_hex(16)
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "collector", "serve", "--db", str(db), "--listen",
             "127.0.0.1:0", "--token-file", str(token_file)],
            stdout=out, stderr=subprocess.STDOUT, env=repo_env,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        found = None
        while found is None and time.monotonic() < deadline and server.poll() is None:
            found = re.search(r"listening on http://([\d.]+):(\d+)", log.read_text())
            time.sleep(0.1)
        assert found, log.read_text()
        yield found[1], int(found[2]), token
    finally:
        server.terminate()
        server.wait(timeout=30)


def get(host: str, port: int, token: str | None) -> tuple[int, str, str]:
    connection = http.client.HTTPConnection(host, port, timeout=60)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    connection.request("GET", "/metrics", headers=headers)
    response = connection.getresponse()
    body = response.read().decode()
    connection.close()
    return response.status, response.getheader("Content-Type") or "", body


def test_metrics_serve_the_live_runs_findings_and_the_rules_fire_on_them(served, tmp_path):
    host, port, token = served
    assert get(host, port, None)[0] == 401  # behind a token, as the read API
    status, content_type, body = get(host, port, token)
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    findings = [line for line in body.splitlines() if line.startswith("epochscope_finding{")]
    assert f'epochscope_finding{{run="{LIVE}",rule="input_bound",severity="warning"}} 1' in (
        findings
    )
    assert all(f'run="{LIVE}"' in line for line in findings)  # the finished run: none

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    checked = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True,
                             text=True, timeout=60)  # fmt: skip
    assert checked.returncode == 0 and "SUCCESS: 4 rules found" in checked.stdout, checked
    # the series exactly as served, fed to the rules for 3 minutes: the alert fires at 2m
    served_series = next(line for line in findings if "input_bound" in line).removesuffix(" 1")
    job = 'epochscope_job_finding{job="101",user="alice",rule="job_gpus_idle",severity="warning"}'
    tests = tmp_path / "alerts_test.yml"
    tests.write_text(
        f"rule_files: [{RULES}]\nevaluation_interval: 1m\ntests:\n"
        "  - interval: 1m\n    input_series:\n"
        f"      - series: '{served_series}'\n        values: '1 1 1 1'\n"
        f"      - series: '{job}'\n        values: '1x12'\n"
        "    alert_rule_test:\n"
        "      - eval_time: 1m\n        alertname: EpochscopeInputBound\n        exp_alerts: []\n"
        "      - eval_time: 3m\n        alertname: EpochscopeInputBound\n        exp_alerts:\n"
        f"          - exp_labels: {{run: {LIVE}, severity: warning}}\n"
        "            exp_annotations:\n"
        f"              summary: 'Run {LIVE} waits for its input pipeline'\n"
        "              description: >-\n"
        f"                The ranks of {LIVE} wait for their next batch for much of each step\n"
        "                (finding input_bound or input_wait): the GPUs are fed slower than\n"
        "                they compute. `collector report "
        f"{LIVE} --findings` gives the numbers and the cause.\n"
        "      - eval_time: 11m\n        alertname: EpochscopeJobGpusIdle\n        exp_alerts:\n"
        "          - exp_labels: {job: '101', user: alice, severity: warning}\n"
        "            exp_annotations:\n"
        "              summary: 'Slurm job 101 (alice) holds GPUs it does not use'\n"
        "              description: >-\n"
        "                Job 101 was given GPUs that no process of it uses (finding\n"
        "                job_gpus_idle). `collector job 101` lists them per node.\n"
        "      - eval_time: 3m\n        alertname: EpochscopeStraggler\n        exp_alerts: []\n"
    )
    tested = subprocess.run([promtool, "test", "rules", str(tests)], capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert tested.returncode == 0, tested.stdout + tested.stderr
