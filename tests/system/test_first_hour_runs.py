"""A new user's runs against a real token-protected ``collector serve`` (issue #14).

- A missing, wrong or unreachable collector/token is refused before training, with the fix,
  and the collector logs the refused write.
- A run whose events could not all be delivered ends with status 3, says where they wait,
  and the printed ``workloads resend`` command delivers them when copied as printed.
- A delivered run leaves no spool directory behind.
- ``workloads run --collector URL`` prints the per-epoch table and findings after training.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from bench.reliability import harness
from collector.store import SqliteStore
from contract.schema import RunState
from workloads.launch.preflight import UNDELIVERED_EXIT
from workloads.record.spec import RunSpec
from workloads.train import worker

pytestmark = pytest.mark.timeout(300)
TOKEN = "first-hour-TOKEN-91c2"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("first-hour")
    _, token_file = harness.write_token_file(workdir, TOKEN)
    collector = harness.Collector(
        db=workdir / "c.sqlite", token_file=token_file, log=workdir / "collector.log"
    )
    collector.start()
    yield collector, token_file
    collector.stop()


def workloads(*argv: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workloads", *argv],
        capture_output=True, text=True, env=harness.repo_env(), timeout=timeout,
    )  # fmt: skip


RUN = ("run", "--framework", "pytorch", "--synthetic", "--batch-size", "2",
       "--steps-per-epoch", "2", "--image-size", "32", "--num-classes", "4")  # fmt: skip


def test_no_token_a_wrong_token_and_no_collector_are_refused_before_training(served, tmp_path):
    collector, _ = served
    missing = workloads(*RUN, "--collector", collector.url, "--runs-dir", str(tmp_path))
    assert missing.returncode == 2, missing.stderr
    assert "wants a token and the run has none" in missing.stderr
    assert "--token-file FILE" in missing.stderr
    assert "run pytorch-" not in missing.stdout  # nothing started
    wrong = tmp_path / "wrong-token"
    wrong.write_text("not-it\n")
    refused = workloads(*RUN, "--collector", collector.url, "--token-file", str(wrong))
    assert refused.returncode == 2
    assert f"refused the token from --token-file {wrong}" in refused.stderr
    down = workloads(*RUN, "--collector", f"http://127.0.0.1:{harness.free_port()}")
    assert down.returncode == 2 and "cannot reach the collector" in down.stderr
    log = collector.log.read_text()
    assert "refused /api/v2/write from 127.0.0.1: 401 Unauthorized" in log
    assert TOKEN not in log and "not-it" not in log


def fake_training(spec: RunSpec, start_recorder) -> None:
    """One epoch of two steps, as a trainer drives its recorder."""
    recorder = start_recorder(worker.Placement(0, 1, 0, 1))
    recorder.epoch_start(1)
    recorder.step_done(1.0)
    recorder.step_done(1.0)
    recorder.epoch_end(loss=1.0, top1=0.5, top5=1.0)


def spec_for(run_id: str, url: str, spool_root: Path, token_file: Path | None) -> RunSpec:
    return RunSpec(
        run_id=run_id, framework="pytorch", batch_size=2, warmup_steps=0, step_every=1,
        collector_url=url, spool_root=str(spool_root),
        resend_token_file=str(token_file) if token_file else None,
    )  # fmt: skip


def test_undelivered_events_end_the_run_non_zero_and_the_printed_resend_works(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(worker, "train", fake_training)
    monkeypatch.setattr(worker, "DELIVERY_TIMEOUT_SECONDS", 2.0)
    monkeypatch.setenv("EPOCHSCOPE_WORKLOAD_TOKEN", TOKEN)
    _, token_file = harness.write_token_file(tmp_path, TOKEN)
    port = harness.free_port()  # the collector went away during training: nothing listens
    url = f"http://127.0.0.1:{port}"
    spec = spec_for("late-run", url, tmp_path / "spool", token_file)

    assert worker.run_rank(spec) == UNDELIVERED_EXIT
    err = capsys.readouterr().err
    spool = spec.spool_dir(0)
    assert f"events not delivered to {url}; they wait in {spool}" in err
    printed = err.split("deliver them with:\n", 1)[1].splitlines()[0].strip()
    assert printed == (
        f"workloads resend --spool {spool} --collector {url} --token-file {token_file}"
    )

    collector = harness.Collector(db=tmp_path / "c.sqlite", token_file=token_file,
                                  log=tmp_path / "collector.log", port=port)  # fmt: skip
    collector.start()
    try:
        argv = shlex.split(printed)
        assert argv[0] == "workloads"
        wrong = tmp_path / "wrong"
        wrong.write_text("not-it\n")
        refused = workloads(*argv[1:-1], str(wrong))  # the same, with a wrong token file
        assert refused.returncode == 2 and "refused the token" in refused.stderr
        assert "the events stay where they are" in refused.stderr and spool.exists()
        resent = workloads(*argv[1:])
        assert resent.returncode == 0, resent.stderr
        assert "delivered" in resent.stdout
    finally:
        collector.stop()
    with SqliteStore(collector.db) as store:
        events = [event.event for event in store.events("late-run")]
    assert events == ["run_start", "epoch_start", "step", "step", "epoch_end", "run_end"]
    assert not spool.exists()  # delivered: nothing left in the spool root
    assert not (tmp_path / "spool").exists() or not any((tmp_path / "spool").iterdir())


def test_a_runs_spool_is_in_its_runs_dir_and_every_message_points_there(
    tmp_path, monkeypatch, capsys
):
    """`workloads run --runs-dir D` spools a rank's undelivered events under D/<run_id>,
    beside the run's other files (not under ~/.cache), and the printed resend names it."""
    from workloads.cli import build_parser
    from workloads.launch.launcher import plan_run

    monkeypatch.setattr(worker, "train", fake_training)
    monkeypatch.setattr(worker, "DELIVERY_TIMEOUT_SECONDS", 2.0)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # nothing may land there
    url = f"http://127.0.0.1:{harness.free_port()}"  # went away during training
    runs = tmp_path / "runs"
    args = build_parser().parse_args(
        [*RUN, "--collector", url, "--runs-dir", str(runs), "--run-id", "here-run"]
    )
    spec = plan_run(args).spec
    assert worker.run_rank(RunSpec.decode(spec.encode())) == UNDELIVERED_EXIT  # as a rank
    spool = runs / "here-run" / "spool" / "rank0"
    assert spec.spool_dir(0) == spool.resolve() and any(spool.rglob("*.lp"))
    err = capsys.readouterr().err
    assert f"they wait in {spool.resolve()}" in err
    assert f"workloads resend --spool {spool.resolve()} --collector {url}" in err
    assert ".cache" not in err and not (tmp_path / "home").exists()
    from workloads.launch.launcher import undelivered_line

    line = undelivered_line(plan_run(args), UNDELIVERED_EXIT)
    assert f"wait in {(runs / 'here-run' / 'spool').resolve()}/rank<N> on their host" in line


def test_a_delivered_run_leaves_no_spool_directory(served, tmp_path, monkeypatch):
    collector, token_file = served
    monkeypatch.setattr(worker, "train", fake_training)
    monkeypatch.setenv("EPOCHSCOPE_WORKLOAD_TOKEN", TOKEN)
    spool_root = tmp_path / "spool"
    spec = spec_for("tidy-run", collector.url, spool_root, token_file)
    assert worker.run_rank(spec) == 0
    assert not spool_root.exists() or not any(spool_root.iterdir())
    with SqliteStore(collector.db) as store:
        run = store.run("tidy-run")
    assert run is not None and run.state == RunState.FINISHED


def wrapped_stop(spec: RunSpec, start_recorder) -> None:
    """A step stopped by the user's SIGTERM inside TensorFlow's C++: the signal handler's
    Interrupted comes back as pybind11's RuntimeError (seen in a real run here)."""
    recorder = start_recorder(worker.Placement(0, 1, 0, 1))
    recorder.epoch_start(1)
    recorder.step_done(1.0)
    raise RuntimeError(
        "pybind11::error_already_set: MISMATCH of original and normalized active exception "
        "types: ORIGINAL UnknownError REPLACED BY Interrupted: SIGTERM"
    )


@pytest.mark.parametrize("stopped", [True, False])
def test_an_error_while_the_run_is_stopped_is_the_stop(
    served, tmp_path, monkeypatch, capsys, stopped
):
    collector, token_file = served
    monkeypatch.setattr(worker, "train", wrapped_stop)
    monkeypatch.setenv("EPOCHSCOPE_WORKLOAD_TOKEN", TOKEN)
    run_id = f"wrapped-stop-{stopped}"
    spec = spec_for(run_id, collector.url, tmp_path / "spool", token_file)
    spec.stop_file = str(tmp_path / "stop")
    if stopped:  # the launcher wrote it before signalling the ranks
        Path(spec.stop_file).write_text("SIGINT\n")
    status = worker.run_rank(spec)
    with SqliteStore(collector.db) as store:
        run = store.run(run_id)
    err = capsys.readouterr().err
    assert run is not None
    if stopped:
        # interrupted as the user asked, and the tool told all is well
        assert (status, run.state) == (0, RunState.INTERRUPTED)
        assert "rank stopped by RuntimeError while the run was stopped: pybind11" in err
        assert "Traceback" not in err
    else:  # the same error with no stop asked is a failure, with its traceback
        assert (status, run.state) == (1, RunState.FAILED)
        assert "Traceback" in err


def test_a_failed_delivery_with_the_token_from_the_environment_says_so(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(worker, "train", fake_training)
    monkeypatch.setattr(worker, "DELIVERY_TIMEOUT_SECONDS", 1.0)
    monkeypatch.setenv("EPOCHSCOPE_WORKLOAD_TOKEN", TOKEN)
    url = f"http://127.0.0.1:{harness.free_port()}"
    spec = spec_for("env-run", url, tmp_path / "spool", None)
    assert worker.run_rank(spec) == UNDELIVERED_EXIT
    err = capsys.readouterr().err
    assert "deliver them with (with the token in EPOCHSCOPE_WORKLOAD_TOKEN" in err
    assert TOKEN not in err


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.timeout(600)
def test_a_run_with_an_external_collector_prints_its_per_epoch_table(served, tmp_path):
    collector, token_file = served
    result = workloads(*RUN, "--collector", collector.url, "--token-file", str(token_file),
                       "--warmup-steps", "0", "--step-every", "1", "--run-id", "ext-1",
                       "--runs-dir", str(tmp_path), timeout=540)  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "run ext-1: per epoch" in out
    table = out.split("run ext-1: per epoch", 1)[1].splitlines()
    assert table[1].split()[:2] == ["epoch", "host"]
    assert table[2].split()[0] == "1"  # epoch 1's row
    assert "No findings." in out or "WARNING" in out or "INFO" in out
    again = f"collector report ext-1 --collector {collector.url} --token-file {token_file}"
    assert f"every column: {again}" in out
    report = subprocess.run(
        [sys.executable, "-m", "collector", *shlex.split(again)[1:]],
        capture_output=True, text=True, env=harness.repo_env(), timeout=120,
    )  # fmt: skip
    assert report.returncode == 0 and "ext-1" in report.stdout


def test_profile_with_a_collector_warns_when_the_nodes_agent_pushes_elsewhere(served, tmp_path):
    """`--profile --collector URL`: the agent already on the node must push to URL, or the
    run's report has no node metrics. A real agent process, found by its listening port."""
    from workloads.launch.agent_target import find_agent, push_warning

    collector, _ = served
    elsewhere = f"http://127.0.0.1:{harness.free_port()}"
    agent = harness.Agent("n1", tmp_path / "agent", push_url=elsewhere, token=None)
    agent.start()
    try:
        assert harness.wait_until(lambda: agent.scrape(), 60), agent.log.read_text()
        found = find_agent(agent.metrics_port)
        assert found is not None and found.pid == agent.process.pid
        assert found.config == agent.config and found.push_url == elsewhere
        warning = push_warning(agent.metrics_port, collector.url)
        assert warning is not None
        assert f"pushes to {elsewhere}, not to {collector.url}" in warning
        assert f'set [push] url = "{collector.url}" in {agent.config}' in warning
        assert push_warning(agent.metrics_port, elsewhere) is None  # the right collector
        assert push_warning(harness.free_port(), collector.url) is None  # no agent there
    finally:
        agent.stop()
