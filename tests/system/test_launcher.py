"""The launcher's token file and its stopping of a run.

- The collector token reaches ranks started by horovodrun/torchrun as a 0600 file at one
  absolute path (``<runs dir>/<run_id>/collector.token``), never on a command line or in
  the ranks' environment (horovodrun writes the environment out on each rank's command
  line), and is removed after the run.
- SIGINT/SIGTERM to ``workloads run`` stop every process it started, ranks first, and
  the run is marked interrupted (not failed): with a stand-in tool (fast, real processes
  and signals) and with real two-rank Horovod + TensorFlow and torchrun + PyTorch runs
  stopped by SIGINT (``frameworks``, ``slow``), whose run and epoch are then said to be
  interrupted in every view, with no torchrun traceback in the output.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collector.store import SqliteStore
from contract.schema import Event, RunState, Workload
from tests.support.real_runs import ctrl_c_once_logged
from workloads.cli import build_parser
from workloads.launch import frameworks
from workloads.launch.hosts import remove_private, write_private
from workloads.launch.launcher import (
    UsageError,
    close_unended_ranks,
    horovodrun_command,
    launch_env,
    plan_run,
    torchrun_command,
    unended_ranks,
)
from workloads.launch.summary import read_events_dir
from workloads.record.events import EventWriter, FileSink
from workloads.train.datasets import make_dataset

TOKEN = "tok-s3cret-77"


def _plan(tmp_path: Path, *argv: str):
    args = build_parser().parse_args(["run", *argv, "--runs-dir", str(tmp_path / "runs")])
    return plan_run(args)


@pytest.fixture
def no_framework_checks(monkeypatch):
    monkeypatch.setattr(frameworks, "check", lambda framework, processes: None)


def test_ranks_started_by_a_tool_get_an_absolute_token_file_path(
    tmp_path, monkeypatch, no_framework_checks
):
    monkeypatch.chdir(tmp_path)
    plan = plan_run(build_parser().parse_args([
        "run", "--framework", "tensorflow", "--synthetic", "--np", "2",
        "--collector", "http://127.0.0.1:9", "--token", TOKEN, "--run-id", "r1",
    ]))  # fmt: skip
    # ./runs made absolute once, by the launcher: the same path on every host
    assert plan.token_file == tmp_path / "runs" / "r1" / "collector.token"
    assert plan.token_file.is_absolute()
    monkeypatch.setenv("EPOCHSCOPE_WORKLOAD_TOKEN", TOKEN)  # the launcher's own, not passed on
    env = launch_env(plan)
    assert env["EPOCHSCOPE_WORKLOAD_TOKEN_FILE"] == str(plan.token_file)
    assert "EPOCHSCOPE_WORKLOAD_TOKEN" not in env
    assert all(TOKEN not in value for value in env.values())
    assert all(TOKEN not in part for part in horovodrun_command(plan, 22))
    assert all(TOKEN not in part for part in torchrun_command(plan, 1, 2, 0, "127.0.0.1", 0))


def test_a_one_process_run_needs_no_token_file(tmp_path, no_framework_checks):
    plan = _plan(tmp_path, "--framework", "tensorflow", "--synthetic",
                 "--collector", "http://127.0.0.1:9", "--token", TOKEN)  # fmt: skip
    assert plan.in_process and plan.token == TOKEN and plan.token_file is None
    plan = _plan(tmp_path, "--framework", "tensorflow", "--synthetic", "--np", "2")
    assert plan.token is None and plan.token_file is None  # no collector, no token


def test_token_file_is_0600_even_over_an_older_file_and_never_through_a_symlink(tmp_path):
    path = tmp_path / "runs" / "r1" / "collector.token"
    path.parent.mkdir(parents=True)
    path.write_text("old")
    path.chmod(0o644)
    write_private(path, TOKEN)
    assert path.read_text() == TOKEN and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) != 0  # made before, left as it was
    path.unlink()
    (tmp_path / "elsewhere").write_text("x")
    path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        write_private(path, TOKEN)
    assert (tmp_path / "elsewhere").read_text() == "x"
    path.unlink()
    write_private(path, TOKEN)
    (path.parent / "events").mkdir()  # the run directory holds more: it stays
    remove_private(path)
    assert not path.exists() and path.parent.is_dir()
    (path.parent / "events").rmdir()
    write_private(path, TOKEN)
    remove_private(path)  # the token alone: its directory goes with it
    assert not path.parent.exists()
    remove_private(path)  # twice is fine


def test_unended_ranks_are_the_started_ones_without_run_end():
    marks = [
        (Event.RUN_START, "h1", "0", "tensorflow"),
        (Event.RUN_START, "h2", "1", "tensorflow"),
        (Event.EPOCH_END, "h2", "1", "tensorflow"),
        (Event.RUN_END, "h1", "0", "tensorflow"),
        (Event.RUN_END, "h3", "2", "tensorflow"),  # ended, never seen starting: not ours
    ]
    assert unended_ranks(marks) == [("h2", "1", "tensorflow")]


def test_a_killed_rank_is_closed_as_failed_in_the_events_directory(tmp_path, no_framework_checks):
    plan = _plan(tmp_path, "--framework", "pytorch", "--synthetic", "--np", "2",
                 "--run-id", "r2")  # fmt: skip
    for rank in (0, 1):
        writer = EventWriter(FileSink(plan.spec.events_file(rank)), "r2", rank, "pytorch", "h")
        writer.emit(Event.RUN_START, {Workload.WORLD_SIZE: 2})
        if rank == 0:
            writer.emit(Event.RUN_END, {Workload.STATE: RunState.FAILED})
        writer.close()
    assert close_unended_ranks(plan, None) == 1
    points = read_events_dir(Path(plan.spec.events_dir))
    ends = [p for p in points if p.fields[Workload.EVENT] == Event.RUN_END]
    assert sorted(p.tags["rank"] for p in ends) == ["0", "1"]
    assert all(p.fields[Workload.STATE] == RunState.FAILED for p in ends)
    assert close_unended_ranks(plan, None) == 0  # nothing left open


# --- stopping: a stand-in for horovodrun with real processes and signals ---

FAKE_RANK = """\
import pathlib, signal, sys, time
out = pathlib.Path(sys.argv[-1])
def stop(signum, frame):
    out.with_suffix(".run_end").write_text(signal.Signals(signum).name)
    sys.exit(128 + signum)
signal.signal(signal.SIGTERM, stop)
out.write_text("started")
time.sleep(600)
"""

# Starts, each in a session of its own (as horovodrun's middlemen do): a rank (whose
# command line is `python -m workloads worker ...`), a process that ignores SIGTERM, and
# an orphan (its parent exits at once, so the launcher adopts it as subreaper).
FAKE_TOOL = """\
import os, subprocess, sys, time
work, pids = sys.argv[1], []
env = dict(os.environ, PYTHONPATH=os.path.join(work, "fake"))
rank = subprocess.Popen([sys.executable, "-m", "workloads", "worker", "--spec", "x",
                         os.path.join(work, "rank")], env=env, cwd=work, start_new_session=True)
stubborn = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"],
    start_new_session=True)
parent = subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
    "'import time; time.sleep(600)'], start_new_session=True, stdout=subprocess.DEVNULL); "
    "print(p.pid)"],
    stdout=subprocess.PIPE, text=True)
orphan = int(parent.communicate()[0])
pids = [os.getpid(), rank.pid, stubborn.pid, orphan]
session_of_its_own = os.getsid(0) == os.getpid()
with open(os.path.join(work, "pids"), "w") as out:
    out.write(" ".join(map(str, pids)) + f" {int(session_of_its_own)}\\n")
time.sleep(600)
"""

LAUNCHER = """\
import os, sys
from workloads.launch.launcher import run_tool
from workloads.launch.processes import Interrupted, become_subreaper, raise_on_signals
raise_on_signals()
assert become_subreaper()
try:
    run_tool([sys.executable, sys.argv[1], sys.argv[2]], dict(os.environ))
except Interrupted as stopped:
    sys.exit(stopped.exit_status)
"""


def gone(pid: int) -> bool:
    """No such process, or a zombie (dead, its status not yet collected)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def wait_for_file(path: Path, timeout: float, process: subprocess.Popen) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file() and path.read_text().endswith("\n"):
            return path.read_text()
        assert process.poll() is None, f"exited {process.returncode} before {path} appeared"
        time.sleep(0.1)
    raise AssertionError(f"{path} did not appear in {timeout} s")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_every_process_of_the_run_ranks_first(tmp_path, repo_env, signum):
    fake = tmp_path / "fake" / "workloads"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(FAKE_RANK)
    (tmp_path / "tool.py").write_text(FAKE_TOOL)
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(tmp_path / "tool.py"), str(tmp_path)],
        env=repo_env,
    )
    try:
        *pids, own_session = map(int, wait_for_file(tmp_path / "pids", 60, launcher).split())
        deadline = time.monotonic() + 60
        while not (tmp_path / "rank").exists():  # the rank's SIGTERM handler is in place
            assert time.monotonic() < deadline, "the stand-in rank did not start"
            time.sleep(0.1)
        assert own_session == 1  # a Ctrl-C at the terminal reaches the launcher alone
        assert not any(gone(pid) for pid in pids)
        launcher.send_signal(signum)
        # 5 s of grace for the process that ignores SIGTERM, then SIGKILL
        assert launcher.wait(60) == 128 + signum
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert all(gone(pid) for pid in pids), [pid for pid in pids if not gone(pid)]
    # the rank had its SIGTERM first and finished its own way
    assert (tmp_path / "rank.run_end").read_text() == "SIGTERM"


# --- a real run: Horovod + TensorFlow, two ranks, stopped by Ctrl-C while training ---

MARK_ENV = "EPOCHSCOPE_TEST_RUN_MARK"


def processes_with_mark(mark: str) -> list[str]:
    """Command lines of live processes whose environment carries ``MARK_ENV=mark``."""
    found = []
    needle = f"{MARK_ENV}={mark}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return found


def _needs_horovod_tensorflow():
    try:
        frameworks.check("tensorflow", 2)
    except frameworks.FrameworkError as error:
        pytest.skip(str(error))


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.timeout(900)
def test_ctrl_c_during_training_leaves_no_process_an_interrupted_run_and_epoch(tmp_path, repo_env):
    """SIGINT, as Ctrl-C at the terminal sends it, at step 3 of epoch 1's 50: every process
    goes, the run is interrupted, and epoch 1 is said to be interrupted by `collector report`
    (table and JSON), the --profile summary the launcher printed, and the dashboard."""
    _needs_horovod_tensorflow()
    mark = f"{os.getpid()}-{time.monotonic_ns()}"
    env = dict(repo_env, **{MARK_ENV: mark})
    runs, run_id = tmp_path / "runs", "killed-run"
    log = tmp_path / "run.log"
    argv = [
        sys.executable, "-m", "workloads", "run", "--framework", "tensorflow", "--synthetic",
        "--np", "2", "--image-size", "32", "--batch-size", "4", "--num-classes", "4",
        "--epochs", "100", "--steps-per-epoch", "50", "--warmup-steps", "1", "--step-every", "1",
        "--no-validate", "--profile", "--runs-dir", str(runs), "--run-id", run_id,
    ]  # fmt: skip

    def all_started() -> None:
        assert len(processes_with_mark(mark)) >= 4  # launcher, horovodrun, 2 ranks, ...

    # rank 0 prints a line per timed step: "[0]<stdout>:<step>\t<images/s>\t<loss>"
    status, output = ctrl_c_once_logged(argv, env, log, "[0]<stdout>:3\t", 600, 180,
                                        before_signal=all_started)  # fmt: skip
    assert status == 128 + signal.SIGINT, output[-4000:]
    assert processes_with_mark(mark) == [], output[-4000:]
    assert f"run {run_id} stopped by SIGINT: marked interrupted" in output
    assert "Epoch 1 interrupted: the run stopped in it" in output  # the --profile summary
    store = SqliteStore(runs / f"{run_id}.sqlite")
    try:
        (run,) = [run for run in store.runs() if run.run_id == run_id]
        ends = store.events(run_id, kinds=(Event.RUN_END,))
    finally:
        store.close()
    assert run.state == RunState.INTERRUPTED
    assert sorted(event.rank for event in ends) == [0, 1]
    assert all(event.fields[Workload.STATE] == RunState.INTERRUPTED for event in ends)
    assert not (runs / run_id / "collector.token").exists()
    report = [sys.executable, "-m", "collector", "report", run_id]
    report += ["--db", str(runs / f"{run_id}.sqlite")]
    as_json = subprocess.run([*report, "--format", "json"], env=repo_env, capture_output=True)
    rows = json.loads(as_json.stdout)["rows"]
    assert [(r["epoch"], r["state"]) for r in rows if r["host"] != "*"] == [(1, "interrupted")]
    table = subprocess.run(report, env=repo_env, capture_output=True, text=True).stdout
    assert "interrupted" in table and "Epoch 1 interrupted" in table
    from collector.queries import query
    from dashboard import figures

    with SqliteStore(runs / f"{run_id}.sqlite") as store:
        boundaries = query.epoch_boundaries(store, run_id)
    _, labels = figures.epoch_shading(boundaries, sorted(boundaries))
    assert [label["text"] for label in labels] == ["epoch 1 (interrupted)"]


def _needs_torchrun():
    try:
        frameworks.check("pytorch", 2)
    except frameworks.FrameworkError as error:
        pytest.skip(str(error))


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.timeout(900)
def test_ctrl_c_in_a_two_rank_pytorch_run_is_one_interrupted_run_without_a_traceback(
    tmp_path, repo_env
):
    """`workloads run --framework pytorch --np 2` (torchrun) stopped by Ctrl-C at step 3:
    no torchrun traceback in the output; `collector runs`, `collector scaling` and the
    per-epoch table all say interrupted, and the run's images/s comes from its timed steps."""
    _needs_torchrun()
    mark = f"{os.getpid()}-{time.monotonic_ns()}"
    env = dict(repo_env, **{MARK_ENV: mark})
    runs, run_id = tmp_path / "runs", "stopped-pt"
    log = tmp_path / "run.log"
    argv = [
        sys.executable, "-m", "workloads", "run", "--framework", "pytorch", "--synthetic",
        "--np", "2", "--image-size", "32", "--batch-size", "4", "--num-classes", "4",
        "--epochs", "100", "--steps-per-epoch", "50", "--warmup-steps", "1", "--step-every", "1",
        "--no-validate", "--profile", "--runs-dir", str(runs), "--run-id", run_id,
    ]  # fmt: skip
    # rank 0 prints a line per timed step: "<step>\t<images/s>\t<loss>"
    status, output = ctrl_c_once_logged(argv, env, log, "\n3\t", 600, 180)
    assert status == 128 + signal.SIGINT, output[-4000:]
    assert processes_with_mark(mark) == [], output[-4000:]
    assert "Traceback" not in output and "SignalException" not in output, output[-4000:]
    assert "ChildFailedError" not in output, output[-4000:]
    assert f"run {run_id} stopped by SIGINT: marked interrupted" in output
    assert "Epoch 1 interrupted: the run stopped in it" in output  # the --profile summary
    assert not (runs / run_id / "stopped").exists()
    # a spool directory a rank names exists (issue 45, item 2: one was named that did not)
    for line in output.splitlines():
        if "; they wait in " in line:
            assert Path(line.split("; they wait in ", 1)[1].strip()).is_dir(), line
    db = ["--db", str(runs / f"{run_id}.sqlite")]
    with SqliteStore(runs / f"{run_id}.sqlite") as store:
        ends = store.events(run_id, kinds=(Event.RUN_END,))
    assert sorted(event.rank for event in ends) == [0, 1]
    assert all(event.fields[Workload.STATE] == RunState.INTERRUPTED for event in ends)

    def collector(*args: str) -> str:
        command = [sys.executable, "-m", "collector", *args, *db]
        result = subprocess.run(command, env=repo_env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        return result.stdout

    (listed,) = json.loads(collector("runs", "--format", "json"))
    assert listed["state"] == RunState.INTERRUPTED
    assert listed["images_per_second"] is not None and listed["images_per_second"] > 0
    assert RunState.INTERRUPTED in collector("runs")
    scaled = json.loads(collector("scaling", "--format", "json"))
    assert [row["state"] for row in scaled] == [RunState.INTERRUPTED], scaled
    rows = json.loads(collector("report", run_id, "--format", "json"))["rows"]
    assert {(r["epoch"], r["state"]) for r in rows if r["host"] != "*"} == {(1, "interrupted")}


def test_step_sampling_follows_the_run_size(tmp_path, no_framework_checks):
    data = tmp_path / "jpeg"
    make_dataset(data, "jpeg", images=64, classes=2, image_size=16, progress=False)
    # 64 images / (batch 8 x 1) = 8 steps an epoch, 2 epochs: 4 warm-up, a step event each
    plan = _plan(tmp_path, "--framework", "pytorch", "--data-dir", str(data),
                 "--batch-size", "8", "--epochs", "2")  # fmt: skip
    assert (plan.spec.warmup_steps, plan.spec.step_every) == (4, 1)
    # synthetic: 100 steps an epoch, tf_cnn_benchmarks' 10 warm-up steps, 20 step events
    plan = _plan(tmp_path, "--framework", "pytorch", "--synthetic")
    assert (plan.spec.warmup_steps, plan.spec.step_every) == (10, 5)
    plan = _plan(tmp_path, "--framework", "pytorch", "--synthetic", "--step-every", "3",
                 "--warmup-steps", "0")  # fmt: skip
    assert (plan.spec.warmup_steps, plan.spec.step_every) == (0, 3)


def test_a_run_that_would_time_no_step_is_refused_before_training(tmp_path, no_framework_checks):
    data = tmp_path / "jpeg"
    make_dataset(data, "jpeg", images=64, classes=2, image_size=16, progress=False)
    with pytest.raises(UsageError, match=r"--batch-size 48 x 2 process\(es\) = 96 images per "
                       r"step, more than the data set's 64 training images"):  # fmt: skip
        _plan(tmp_path, "--framework", "pytorch", "--data-dir", str(data),
              "--batch-size", "48", "--np", "2")  # fmt: skip
    with pytest.raises(UsageError, match=r"--warmup-steps 10 leaves no step timed: the run "
                       r"has 8 steps \(1 epoch\(s\) x 8\); give --warmup-steps 2"):  # fmt: skip
        _plan(tmp_path, "--framework", "pytorch", "--data-dir", str(data),
              "--batch-size", "8", "--warmup-steps", "10")  # fmt: skip


# A horovodrun stand-in: on SIGTERM it relays a rank's last line (prefixed, as horovodrun
# does) and prints its own traceback about the ranks that exited, as the real one does.
NOISY_TOOL = """\
import signal, sys, time
def stop(signum, frame):
    sys.stderr.write("[1]<stderr>:rank stopped by SIGTERM\\n")
    sys.stderr.write("Traceback (most recent call last):\\n")
    sys.stderr.write('  File "horovodrun", line 8, in <module>\\n')
    sys.stderr.write("RuntimeError: Horovod detected that one or more processes exited\\n")
    sys.stderr.flush()
    sys.exit(1)
signal.signal(signal.SIGTERM, stop)
open(sys.argv[1], "w").write("started\\n")
time.sleep(600)
"""

QUIET_LAUNCHER = """\
import os, sys
from pathlib import Path
from workloads.launch.launcher import run_tool
from workloads.launch.processes import Interrupted, become_subreaper, raise_on_signals
raise_on_signals()
become_subreaper()
try:
    run_tool([sys.executable, sys.argv[1], sys.argv[2]], dict(os.environ),
             stop_log=Path(sys.argv[3]))
except Interrupted as stopped:
    sys.exit(stopped.exit_status)
"""


def test_ctrl_c_shows_the_ranks_last_lines_but_not_horovodruns_traceback(tmp_path, repo_env):
    (tmp_path / "tool.py").write_text(NOISY_TOOL)
    started, log = tmp_path / "started", tmp_path / "horovodrun-stop.log"
    launcher = subprocess.Popen(
        [sys.executable, "-c", QUIET_LAUNCHER, str(tmp_path / "tool.py"), str(started),
         str(log)],
        env=repo_env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for_file(started, 60, launcher)
        launcher.send_signal(signal.SIGINT)
        _, err = launcher.communicate(timeout=60)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 128 + signal.SIGINT
    assert "[1]<stderr>:rank stopped by SIGTERM" in err
    assert "Traceback" not in err and "RuntimeError" not in err
    assert f"'s own output while it was stopped (3 lines) is in {log}" in err
    assert "Horovod detected" in log.read_text()
