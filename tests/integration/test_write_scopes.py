"""Writes scoped to their owner (issue 44, item 1), on a real ``collector serve`` on
loopback with a ``--tokens-file`` minted by ``collector token add``.

The attacks the adversarial pass made with the one shared token are replayed with scoped
ones: node A rewriting node B's job CPU counter (5.0 -> 99999.0) and one user rewriting
another's run (16 -> 5,330,269 images/s). Both are refused with 403 and a reason; what the
token may write in the same batch is stored; an admin token may write everything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agent.shipper import lines_rejected_in
from bench.reliability import harness
from collector.store import SqliteStore
from netserve.tokens import read_tokens_file

T0 = 1_700_000_000_000_000_000


def mint(tokens_file: Path, scope: str, subject: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "collector", "token", "add", "--scope", scope,
         "--subject", subject, "--tokens-file", str(tokens_file)],
        capture_output=True, text=True, check=True, env=harness.repo_env(),
    )  # fmt: skip
    token = done.stdout.strip()
    assert len(token) >= 40 and token not in done.stderr
    return token


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("scopes")
    tokens_file = workdir / "tokens.json"
    tokens = {
        "node01": mint(tokens_file, "node", "node01"),
        "node02": mint(tokens_file, "node", "node02"),
        "alice": mint(tokens_file, "run", "alice"),
        "mallory": mint(tokens_file, "run", "mallory"),
        "admin": mint(tokens_file, "admin", "ops"),
    }
    collector = harness.Collector(
        db=workdir / "scopes.sqlite",
        token_file=None,
        log=workdir / "collector.log",
        extra_args=("--tokens-file", str(tokens_file)),
        log_level="DEBUG",
    )
    collector.start()
    yield collector, tokens, tokens_file
    collector.stop()


def write(collector, token: str, lines: str) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{collector.url}/api/v2/write?bucket=b&org=o&precision=ns",
        data=lines.encode(),
        headers={"Authorization": f"Token {token}"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, {}
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def job_cpu(db: Path, host: str) -> list[float]:
    with SqliteStore(db) as store:
        series = store.list_series("job", "cpu_seconds", host)
        return [v for data in store.read_series(series, 0, 2**62) for v in data.values.tolist()]


def step_images(db: Path, run_id: str) -> list[float]:
    with SqliteStore(db) as store:
        return [e.fields["images"] for e in store.events(run_id, kinds=("step",))]


def step_line(run_id: str, host: str, images: int) -> str:
    return (
        f'workload,run_id={run_id},host={host},rank=0,framework=pytorch event="step",'
        f"images={images}i,seconds=1.0,epoch=0i,step=1i {T0}"
    )


def test_the_tokens_file_holds_hashes_only_mode_0600(served):
    _, tokens, tokens_file = served
    text = tokens_file.read_text()
    assert not any(token in text for token in tokens.values())
    assert os.stat(tokens_file).st_mode & 0o777 == 0o600
    entries = read_tokens_file(tokens_file)
    assert [(e.scope, e.subject) for e in entries] == [
        ("node", "node01"), ("node", "node02"), ("run", "alice"), ("run", "mallory"),
        ("admin", "ops"),
    ]  # fmt: skip


def test_a_node_cannot_rewrite_another_nodes_job_counter(served):
    collector, tokens, _ = served
    assert (
        write(collector, tokens["node02"], f"job,host=node02,job_id=77 cpu_seconds=5.0 {T0}")[0]
        == 204
    )
    status, error = write(
        collector,
        tokens["node01"],
        f"job,host=node02,job_id=77 cpu_seconds=99999.0 {T0}\n"
        f"job,host=node01,job_id=78 cpu_seconds=3.0 {T0}",
    )
    assert status == 403
    assert error["code"] == "forbidden"
    # the partial write's shape, which the agent's shipper counts its dropped lines from
    assert error["message"] == (
        "partial write: 1 points written, 1 line(s) rejected: 1 point(s) of job "
        "host='node02': node:node01 may write host='node01' only"
    )
    assert lines_rejected_in(error["message"]) == 1
    assert job_cpu(collector.db, "node02") == [5.0]  # the attack left no trace
    assert job_cpu(collector.db, "node01") == [3.0]  # its own line of the batch is stored


def test_a_user_cannot_rewrite_another_users_run(served):
    collector, tokens, _ = served
    assert write(collector, tokens["alice"], step_line("alice-r1", "node01", 16))[0] == 204
    status, error = write(collector, tokens["mallory"], step_line("alice-r1", "node01", 5330269))
    assert status == 403
    assert "run 'alice-r1' belongs to run:alice, not run:mallory" in error["message"]
    assert step_images(collector.db, "alice-r1") == [16]
    # the owner may write its run again; mallory's own run is hers
    assert write(collector, tokens["alice"], step_line("alice-r1", "node01", 17))[0] == 204
    assert write(collector, tokens["mallory"], step_line("mallory-r1", "node02", 8))[0] == 204
    assert step_images(collector.db, "alice-r1") == [17]
    with SqliteStore(collector.db) as store:
        assert store.run_owner("alice-r1") == "run:alice"
        assert store.run_owner("mallory-r1") == "run:mallory"


def test_a_run_token_writes_no_samples_and_a_node_token_no_other_hosts_events(served):
    collector, tokens, _ = served
    status, error = write(collector, tokens["alice"], f"cpu,host=node01 busy=1.0 {T0}")
    assert status == 403 and "may write workload events only" in error["message"]
    status, error = write(collector, tokens["node01"], step_line("node-run", "node02", 4))
    assert status == 403 and "workload event(s) of other hosts" in error["message"]
    assert step_images(collector.db, "node-run") == []


def test_the_admin_writes_everything(served):
    collector, tokens, _ = served
    assert (
        write(collector, tokens["admin"], f"job,host=node02,job_id=77 cpu_seconds=6.0 {T0}")[0]
        == 204
    )
    assert write(collector, tokens["admin"], step_line("alice-r1", "node01", 18))[0] == 204
    assert job_cpu(collector.db, "node02") == [6.0]
    assert step_images(collector.db, "alice-r1") == [18]


def eventually(collector, token: str, line: str, status: int) -> None:
    """The write answers ``status`` within 10 s (the collector looks at the tokens file
    at most once a second)."""
    deadline = time.monotonic() + 10
    while write(collector, token, line)[0] != status:
        assert time.monotonic() < deadline, f"the write never answered {status}"
        time.sleep(0.2)


def test_tokens_added_and_revoked_take_effect_without_a_restart(served):
    collector, _, tokens_file = served
    token = mint(tokens_file, "node", "node09")
    line = f"cpu,host=node09 busy=1.0 {T0}"
    eventually(collector, token, line, 204)
    revoked = subprocess.run(
        [sys.executable, "-m", "collector", "token", "revoke", "--subject", "node09",
         "--tokens-file", str(tokens_file)],
        env=harness.repo_env(), capture_output=True, text=True,
    )  # fmt: skip
    assert revoked.returncode == 0 and "1 token(s) of node09 revoked" in revoked.stderr
    eventually(collector, token, line, 401)


def read(collector, token: str, path: str) -> int:
    request = urllib.request.Request(
        f"{collector.url}{path}", headers={"Authorization": f"Token {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_the_read_api_takes_run_and_admin_tokens_not_node_tokens(served):
    collector, tokens, _ = served
    assert read(collector, tokens["node01"], "/api/v1/runs") == 403
    assert read(collector, tokens["alice"], "/api/v1/runs") == 200
    assert read(collector, tokens["admin"], "/api/v1/runs") == 200
    assert read(collector, "not-a-token", "/api/v1/runs") == 401


def test_no_token_appears_in_the_log(served):
    collector, tokens, _ = served
    log = collector.log.read_text()
    assert not any(token in log for token in tokens.values())
