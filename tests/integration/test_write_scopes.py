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
import sqlite3
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


def test_a_run_token_writes_no_host_samples_and_a_node_token_no_other_hosts_events(served):
    collector, tokens, _ = served
    status, error = write(collector, tokens["alice"], f"cpu,host=node01 busy=1.0 {T0}")
    assert status == 403
    assert "run:alice may write its own runs' and jobs' series only" in error["message"]
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


# ------------------------------------------------- per user: runs, jobs, series (items 1, 2)


def job_info_line(job_id: str, user: str, host: str = "node01") -> str:
    """What a node's jobs sampler sends for a job: its user as the agent resolved it."""
    return f"slurm_job,host={host},job_id={job_id},uid=1001,user={user} info=1.0 {T0}"


def run_start_line(run_id: str, job_id: str) -> str:
    return (
        f'workload,run_id={run_id},host=node01,rank=0,framework=pytorch event="run_start",'
        f'slurm_job_id="{job_id}",world_size=1i {T0}'
    )


def owners(db: Path, table: str) -> dict[str, str]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute(f"SELECT * FROM {table}").fetchall())


def test_a_user_cannot_file_a_run_under_another_users_job(served):
    """The jobs sampler of node01 reports job 4101 as alice's; mallory's token can neither
    start a run naming that job nor take the TaskProlog's run id of it (slurm-4101), which
    would have kept alice's own ranks out of their run. Alice's ranks write both."""
    collector, tokens, _ = served
    assert write(collector, tokens["node01"], job_info_line("4101", "alice"))[0] == 204
    for run_id in ("mallory-in-4101", "slurm-4101", "slurm-4101.0"):
        job = "4101" if run_id == "mallory-in-4101" else "9999"
        status, error = write(collector, tokens["mallory"], run_start_line(run_id, job))
        assert status == 403, run_id
        assert (
            f"run {run_id!r}: job '4101' is user alice's, not run:mallory's: its 1 event(s) refused"
        ) in error["message"]
        with SqliteStore(collector.db) as store:
            assert store.run_owner(run_id) is None  # refused before the store claimed it
    assert write(collector, tokens["alice"], run_start_line("slurm-4101", "4101"))[0] == 204
    with SqliteStore(collector.db) as store:
        assert store.run_owner("slurm-4101") == "run:alice"
    assert owners(collector.db, "job_users")["4101"] == "alice"


def test_a_run_token_writes_its_own_runs_and_jobs_series_only(served):
    """A rank's own series: tagged with a run it owns (or creates in the same batch) or a
    job of its user. Mallory can write neither alice's run's nor alice's job's series."""
    collector, tokens, _ = served
    assert write(collector, tokens["node01"], job_info_line("4102", "alice"))[0] == 204
    own = (
        run_start_line("alice-r7", "4102")
        + f"\nrank_stats,host=node01,run_id=alice-r7 loss=0.5 {T0}"
        + f"\nrank_stats,host=node01,job_id=4102 queue_seconds=3.0 {T0}"
    )
    assert write(collector, tokens["alice"], own)[0] == 204
    status, error = write(
        collector,
        tokens["mallory"],
        f"rank_stats,host=node01,run_id=alice-r7 loss=9.0 {T0 + 1}\n"
        f"rank_stats,host=node01,job_id=4102 queue_seconds=0.0 {T0 + 1}\n"
        f"rank_stats,host=node01,run_id=ghost loss=1.0 {T0 + 1}",
    )
    assert status == 403
    assert "run 'alice-r7' belongs to run:alice, not run:mallory" in error["message"]
    assert "job '4102' is user alice's, not run:mallory's" in error["message"]
    assert "run 'ghost' does not exist yet (send its run_start first)" in error["message"]
    assert lines_rejected_in(error["message"]) == 3
    with SqliteStore(collector.db) as store:
        losses = store.list_series("rank_stats", "loss", "node01")
        assert [v for d in store.read_series(losses, 0, 2**62) for v in d.values.tolist()] == [0.5]


def test_each_series_is_stamped_with_its_writer_and_kept_for_it(served):
    """The store records which identity wrote each series (never the token); a series
    alice's token created is refused to node01's token, whose own host it names (a
    node token may write any series of its host, but not one a user owns), while the
    admin may write it and does not take it over."""
    collector, tokens, _ = served
    assert write(collector, tokens["node01"], job_info_line("4103", "alice"))[0] == 204
    line = f"rank_stats,host=node01,job_id=4103 queue_seconds=1.0 {T0}"
    assert write(collector, tokens["alice"], line)[0] == 204
    status, error = write(collector, tokens["node01"], line.replace("1.0", "2.0"))
    assert status == 403
    assert (
        "1 point(s) of rank_stats,host=node01,job_id=4103: the series belongs to run:alice, "
        "not node:node01"
    ) in error["message"]
    assert write(collector, tokens["admin"], line.replace("1.0", "3.0"))[0] == 204
    stamped = owners(collector.db, "series_owners")
    assert stamped['["rank_stats",[["host","node01"],["job_id","4103"]]]'] == "run:alice"
    job_info = '["slurm_job",[["host","node01"],["job_id","4103"],["uid","1001"],["user","alice"]]]'
    assert stamped[job_info] == "node:node01"
    assert not any(token in json.dumps(stamped) for token in tokens.values())
