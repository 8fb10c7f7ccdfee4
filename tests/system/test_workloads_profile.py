"""``workloads profile -- COMMAND`` on unmodified scripts (tests/scripts/), end to end:
the real command, its embedded collector and agent, the scripts' own launchers
(python, torch.multiprocessing.spawn, torchrun), read back from the run's SQLite store.

PyTorch with torchvision (and PyTorch Lightning) runs in a user-like environment (CUDA
torch 2.14.1 + torchvision 0.29.1 on CPU, Lightning 2.6.6, epochscope[profile] installed
into it, made once by ``make user-torch-env``): torchvision does not load beside the
project's CPU torch 2.13.0. A PIL-only PyTorch script and Keras run in the project's own
environment.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

import pytest

from collector.store import SqliteStore
from contract.schema import AgentSelf, Event, RunState, Workload
from tests.conftest import REPO_ROOT
from workloads.autoprofile.config import RUN_ENV, ProfileConfig, site_dir
from workloads.autoprofile.keras_hooks import STEPS_PER_EXECUTION
from workloads.autoprofile.session import Placement, placement_from
from workloads.train.datasets import make_dataset

SCRIPTS = REPO_ROOT / "tests" / "scripts"
USER_VENV = Path(os.environ.get(
    "EPOCHSCOPE_USER_TORCH_VENV",
    Path.home() / ".cache" / "epochscope" / "venvs" / "torch2.14.1-tv0.29.1-py311",
))  # fmt: skip
HOST = socket.gethostname()
TIMEOUT = 540


# --- where a process sits -------------------------------------------------------------
@pytest.mark.parametrize(
    ("environ", "distributed", "expected"),
    [
        ({}, None, Placement(0, 1, 0, 1)),
        ({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, None,
         Placement(3, 8, 1, 2)),
        ({"HOROVOD_RANK": "5", "HOROVOD_SIZE": "6", "HOROVOD_LOCAL_RANK": "2",
          "HOROVOD_LOCAL_SIZE": "3"}, None, Placement(5, 6, 2, 3)),
        ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4",
          "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, None,
         Placement(1, 4, 1, 2)),
        ({"PMI_RANK": "2", "PMI_SIZE": "3"}, None, Placement(2, 3, 2, 3)),
        ({}, (1, 2), Placement(1, 2, 1, 2)),  # torch.multiprocessing.spawn + init
        ({"SLURM_PROCID": "4", "SLURM_NTASKS": "8", "SLURM_LOCALID": "0",
          "SLURM_NTASKS_PER_NODE": "4(x2)"}, None, Placement(4, 8, 0, 4)),
        # an initialised torch.distributed says more than a Slurm allocation around it
        ({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, (1, 2), Placement(1, 2, 1, 2)),
    ],
)  # fmt: skip
def test_placement_from_launchers_then_torch_distributed_then_slurm(environ, distributed, expected):
    assert placement_from(environ, distributed) == expected


# --- the sitecustomize ----------------------------------------------------------------
PROBE = (
    "import sys; "
    "print('finder', any(type(f).__name__ == 'PostImportFinder' for f in sys.meta_path)); "
    "print('users', getattr(sys.modules.get('sitecustomize'), 'USERS', None))"
)


def run_probe(tmp_path: Path, profiled: bool) -> str:
    users = tmp_path / "users"
    users.mkdir(exist_ok=True)
    (users / "sitecustomize.py").write_text("USERS = 'ran'\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site_dir()), str(users), str(REPO_ROOT)])
    env.pop(RUN_ENV, None)
    if profiled:
        env[RUN_ENV] = ProfileConfig("r", "http://127.0.0.1:9", str(tmp_path)).encode()
    result = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                            text=True, timeout=60, check=True)  # fmt: skip
    return result.stdout


def test_sitecustomize_instruments_and_runs_the_one_it_shadows(tmp_path):
    assert run_probe(tmp_path, profiled=True).split("\n")[:2] == ["finder True", "users ran"]


def test_sitecustomize_does_nothing_outside_a_profile(tmp_path):
    assert run_probe(tmp_path, profiled=False).split("\n")[:2] == ["finder False", "users ran"]


# --- running workloads profile ---------------------------------------------------------
def profile(
    python: str,
    runs: Path,
    run_id: str,
    *command: str,
    options=(),
    env=None,
    hang_seconds: float = TIMEOUT - 30,
    retry_if_hung: bool = False,
):
    """``workloads profile`` of ``command``, its output captured. A run still going after
    ``hang_seconds`` is stuck: every Python process of it prints its threads' stacks
    (faulthandler, on SIGABRT) and the test fails with them, or with ``retry_if_hung``
    warns with them and runs once more."""
    argv = [python, "-m", "workloads", "profile", "--runs-dir", str(runs), "--run-id", run_id,
            "--step-every", "1", *options, "--", *command]  # fmt: skip
    for attempt in (1, 2) if retry_if_hung else (1,):
        result = run_or_dump_stacks(argv, env, runs.parent, hang_seconds)
        if isinstance(result, subprocess.CompletedProcess):
            return result
        message = f"`workloads profile` of {run_id} hung for {hang_seconds:.0f} s:\n{result}"
        if attempt == 2 or not retry_if_hung:
            pytest.fail(message)
        warnings.warn(message + "\n(run again)", stacklevel=2)
        shutil.rmtree(runs / run_id, ignore_errors=True)
        (runs / f"{run_id}.sqlite").unlink(missing_ok=True)
    raise AssertionError("unreachable")


def run_or_dump_stacks(
    argv: list[str], env: dict[str, str] | None, cwd: Path, seconds: float
) -> subprocess.CompletedProcess | str:
    """The finished run, or (past ``seconds``) its process tree and every Python process's
    stacks, after which all of them are killed."""
    import psutil

    env = dict(os.environ if env is None else env, PYTHONFAULTHANDLER="1")
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env, cwd=cwd)  # fmt: skip
    try:
        out, err = process.communicate(timeout=seconds)
        return subprocess.CompletedProcess(argv, process.returncode, out, err)
    except subprocess.TimeoutExpired:
        tree = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
        listing = []
        for member in tree:
            with contextlib.suppress(psutil.Error):
                listing.append(f"{member.pid} {member.ppid()} {member.status()} "
                               f"{shlex.join(member.cmdline())[:300]}")  # fmt: skip
                member.send_signal(signal.SIGABRT)
        time.sleep(3)
        for member in tree:
            with contextlib.suppress(psutil.Error):
                member.kill()
        out, err = process.communicate()
        return (
            "\n".join(listing)
            + "\n--- stderr ---\n"
            + err[-30000:]
            + "\n--- stdout ---\n"
            + out[-3000:]
        )


def events(runs: Path, run_id: str):
    store = SqliteStore(runs / f"{run_id}.sqlite")
    try:
        return store.events(run_id)
    finally:
        store.close()


def by_rank(run_events) -> dict[int, list]:
    ranks = defaultdict(list)
    for event in run_events:
        ranks[event.rank].append(event)
    return dict(ranks)


def check_epochs(rank_events, epochs: int, images: int, steps: int, input_wait: bool = True):
    """Per epoch of one rank: its share of images, its steps, windows in order."""
    kinds = [e.event for e in rank_events if e.event != Event.STEP]
    assert kinds == [Event.RUN_START] + [Event.EPOCH_START, Event.EPOCH_END] * epochs + [
        Event.RUN_END
    ], kinds
    ends = [e for e in rank_events if e.event == Event.EPOCH_END]
    starts = [e for e in rank_events if e.event == Event.EPOCH_START]
    assert [e.fields[Workload.EPOCH] for e in ends] == list(range(1, epochs + 1))
    assert all(e.fields[Workload.IMAGES] == images for e in ends), [e.fields for e in ends]
    assert [e.fields[Workload.STEP] for e in ends] == [steps * n for n in range(1, epochs + 1)]
    for start, end in zip(starts, ends, strict=True):
        assert start.time_ns < end.time_ns
    for end, next_start in zip(ends, starts[1:], strict=False):
        assert end.time_ns <= next_start.time_ns
    step_events = [e for e in rank_events if e.event == Event.STEP]
    assert len(step_events) == steps * epochs  # --step-every 1
    for epoch in ends:
        window = [s for s in step_events if s.fields[Workload.EPOCH] == epoch.fields["epoch"]]
        assert sum(s.fields[Workload.IMAGES] for s in window) == images
        if input_wait:
            assert epoch.fields[Workload.INPUT_WAIT_SECONDS] > 0
            assert epoch.fields[Workload.INPUT_WAIT_SECONDS] < epoch.fields[Workload.SECONDS]
    run_end = rank_events[-1]
    assert run_end.fields[Workload.STATE] == RunState.FINISHED
    return ends


ANATOMY_PARTS = (Workload.INPUT_WAIT_SECONDS, Workload.COMPUTE_SECONDS,
                 Workload.COMMUNICATION_SECONDS, Workload.OTHER_STEP_SECONDS)  # fmt: skip


def assert_parts_add_up(event) -> None:
    """input wait + compute + communication + the rest = the step's (epoch's steps') time."""
    parts = [event.fields[name] for name in ANATOMY_PARTS]
    assert all(part >= 0 for part in parts), event.fields
    assert sum(parts) == pytest.approx(event.fields[Workload.SECONDS], rel=1e-6, abs=1e-6)


def report_rows(python: str, runs: Path, run_id: str) -> list[dict]:
    result = subprocess.run(
        [python, "-m", "collector", "report", run_id, "--db", str(runs / f"{run_id}.sqlite"),
         "--format", "json"], capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return [row for row in json.loads(result.stdout)["rows"] if row["host"] == HOST]


def printed_accuracies(stdout: str, pattern: str) -> list[float]:
    return [float(value) for value in re.findall(pattern, stdout)]


TRAIN, VAL, CLASSES, BATCH = 32, 16, 4, 8


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    made = {}

    def get(data_format: str, stored_size: int = 32, images: int = TRAIN) -> Path:
        key = (data_format, stored_size, images)
        if key not in made:
            out = tmp_path_factory.mktemp("data") / f"{data_format}-{stored_size}-{images}"
            make_dataset(
                out,
                data_format,
                images=images,
                classes=CLASSES,
                image_size=stored_size,
                val_images=VAL,
                shards=2,
                progress=False,
            )
            made[key] = out
        return made[key]

    return get


@pytest.fixture
def runs(tmp_path) -> Path:
    path = tmp_path / "runs"
    path.mkdir()
    return path


def project_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


# --- failure modes: a clear message and the command's exit status ----------------------
pytestmark = pytest.mark.timeout(TIMEOUT)


@pytest.mark.slow
def test_a_command_that_is_not_python_keeps_its_status_and_says_nothing_trained(runs):
    result = profile(sys.executable, runs, "sh", "sh", "-c", "echo from-sh; exit 0",
                     env=project_env())  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "from-sh" in result.stdout
    assert "no training was seen in `sh -c 'echo from-sh; exit 0'`" in result.stderr
    assert events(runs, "sh") == []


@pytest.mark.slow
def test_a_command_that_fails_before_training_is_said_to_have_failed(runs):
    """`workloads profile python missing.py`: the command failed, which says nothing of
    whether it would have trained (no `workloads.track` hint)."""
    result = profile(sys.executable, runs, "sh", "sh", "-c", "echo from-sh; exit 3",
                     env=project_env())  # fmt: skip
    assert result.returncode == 3, result.stderr
    assert "from-sh" in result.stdout
    assert "`sh -c 'echo from-sh; exit 3'` failed: it exited with status 3 before any " \
        "training was seen" in result.stderr  # fmt: skip
    assert "no training was seen in" not in result.stderr
    assert "workloads.track" not in result.stderr
    missing = profile(sys.executable, runs, "nofile", sys.executable, "no-such-script.py",
                      env=project_env())  # fmt: skip
    assert missing.returncode == 2
    assert "no-such-script.py` failed: it exited with status 2" in missing.stderr
    assert "workloads.track" not in missing.stderr


def test_without_the_profile_extra_it_says_which_extra_to_install(runs, tmp_path):
    """An environment without line-protocol-parser (the `profile` extra): one line naming
    the extra, exit 2, nothing started."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import sys\nsys.modules['line_protocol_parser'] = None\n"
    )
    env = project_env()
    env["PYTHONPATH"] = os.pathsep.join([str(hide), env["PYTHONPATH"]])
    result = profile(sys.executable, runs, "noextra", sys.executable, "-c", "print('ran')",
                     env=env)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "workloads: workloads profile needs the `profile` extra, which this environment lacks "
        "(no line_protocol_parser): pip install 'epochscope[profile]' (or `pip install "
        "'/path/to/epochscope[profile]'` from a checkout)"
    ]
    assert "ran" not in result.stdout and not (runs / "noextra").exists()


@pytest.mark.slow
def test_a_python_script_with_no_loop_and_a_missing_command(runs):
    result = profile(sys.executable, runs, "noloop", sys.executable, "-c", "print('hello')",
                     env=project_env())  # fmt: skip
    assert result.returncode == 0 and "hello" in result.stdout
    assert "no training was seen" in result.stderr and "workloads.track" in result.stderr
    missing = profile(sys.executable, runs, "missing", "no-such-command-xyz", env=project_env())
    assert missing.returncode == 127
    assert "no-such-command-xyz: command not found" in missing.stderr


@pytest.mark.slow
def test_explicit_track_api(runs):
    result = profile(sys.executable, runs, "track", sys.executable, str(SCRIPTS / "track_loop.py"),
                     env=project_env())  # fmt: skip
    assert result.returncode == 0, result.stderr
    (rank,) = by_rank(events(runs, "track")).values()
    ends = check_epochs(rank, epochs=2, images=12, steps=3)
    assert rank[0].fields[Workload.MODEL] == "hand-rolled" and rank[0].framework == "custom"
    assert [e.fields[Workload.TOP1] for e in ends] == [0.5, 0.75]
    assert ends[0].fields[Workload.LOSS] == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)
    assert ends[0].fields[Workload.INPUT_WAIT_SECONDS] == pytest.approx(0.03)
    # outside workloads profile the same script runs and says nothing
    plain = subprocess.run([sys.executable, str(SCRIPTS / "track_loop.py")], env=project_env(),
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert plain.returncode == 0 and plain.stdout == "done\n" and plain.stderr == ""


@pytest.mark.slow
@pytest.mark.parametrize("dash", ["installed", "missing"])
def test_the_dashboard_command_printed_works_here_or_says_what_to_install(runs, tmp_path, dash):
    """With only the `profile` extra (no dash, flask, plotly) `dashboard serve` cannot run:
    the last line says to install the `server` extra first."""
    env = project_env()
    if dash == "missing":
        hide = tmp_path / "hide"
        hide.mkdir()
        (hide / "sitecustomize.py").write_text(
            "import sys\nsys.modules['dash'] = sys.modules['flask'] = None\n"
        )
        env["PYTHONPATH"] = os.pathsep.join([str(hide), env["PYTHONPATH"]])
    result = profile(sys.executable, runs, "dash", sys.executable, str(SCRIPTS / "track_loop.py"),
                     env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr
    [line] = [x for x in result.stdout.splitlines() if x.startswith("open the dashboard")]
    shown = line.removeprefix("open the dashboard on this run: ")
    assert shown.endswith(f"serve --db {runs / 'dash.sqlite'}")
    if dash == "missing":
        assert shown.startswith(
            "pip install 'epochscope[server]' (this environment has no dash, flask), then "
        )
        return
    command = shlex.split(shown)  # as a shell would run it, here
    assert command[-3:] == ["serve", "--db", str(runs / "dash.sqlite")]
    works = subprocess.run([*command[:-2], "--help"], capture_output=True, text=True,
                           env=env, timeout=120)  # fmt: skip
    assert works.returncode == 0 and "--db" in works.stdout, works.stderr


@pytest.mark.slow
def test_an_external_collector_with_a_token_file(runs, tmp_path):
    from workloads.launch.local_stack import free_port, stop, wait_for_port

    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(0o600)
    port, db = free_port(), tmp_path / "collector.sqlite"
    log = tmp_path / "collector.log"
    collector = subprocess.Popen(
        [sys.executable, "-m", "collector", "serve", "--db", str(db),
         "--listen", f"127.0.0.1:{port}", "--token-file", str(token)],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, env=project_env(),
    )  # fmt: skip
    try:
        wait_for_port(port, collector, "collector", log)
        url = f"http://127.0.0.1:{port}"
        result = profile(sys.executable, runs, "remote", sys.executable,
                         str(SCRIPTS / "track_loop.py"), env=project_env(),
                         options=("--collector", url, "--token-file", str(token),
                                  "--samples-wait", "1"))  # fmt: skip
    finally:
        stop(collector)
    assert result.returncode == 0, result.stderr
    assert "s3cret" not in result.stdout + result.stderr
    assert "run remote: per epoch" in result.stdout  # read back through the read API
    # no agent on this host pushes to that collector: the table says it is provisional
    final = f"collector report remote --collector {url} --token-file {token}"
    assert f"not yet in; the final table: {final}" in result.stdout
    store = SqliteStore(db)
    try:
        stored = store.events("remote")
    finally:
        store.close()
    (rank,) = by_rank(stored).values()
    check_epochs(rank, epochs=2, images=12, steps=3)
    assert not (runs / "remote.sqlite").exists()  # no embedded collector


# --- PyTorch in the project's environment (no torchvision) -------------------------------
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed: make frameworks")  # fmt: skip


@pytest.mark.slow
@pytest.mark.frameworks
@needs_torch
def test_pytorch_loop_recognised_unmodified(data, runs):
    jpeg = data("jpeg")
    result = profile(sys.executable, runs, "pt", sys.executable,
                     str(SCRIPTS / "torch_folder_train.py"), str(jpeg), "--batch-size", str(BATCH),
                     options=("--data-dir", str(jpeg)), env=project_env())  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    (rank,) = by_rank(events(runs, "pt")).values()
    ends = check_epochs(rank, epochs=2, images=TRAIN, steps=TRAIN // BATCH)
    start = rank[0].fields
    assert start[Workload.MODEL] == "SmallNet" and start[Workload.BATCH_SIZE] == BATCH
    assert start[Workload.WORLD_SIZE] == 1 and start[Workload.DATASET_IMAGES] == TRAIN
    assert rank[0].framework == "pytorch"
    # the script's own validate() and epochscope's count agree
    printed = printed_accuracies(result.stdout, r"acc (\d\.\d+)")
    assert [e.fields[Workload.TOP1] for e in ends] == pytest.approx(printed, abs=1e-3)
    assert all(e.fields[Workload.LOSS] > 0 for e in ends)
    # its training loader (1 worker, not persistent) started its worker again in epoch 2;
    # epoch 1's pass began before it was known to train
    assert [e.fields.get(Workload.LOADER_WORKERS_STARTED) for e in ends] == [None, 1]
    for end in ends:  # a lone process: the step's anatomy, with no communication
        parts = [end.fields[name] for name in (Workload.INPUT_WAIT_SECONDS,
                 Workload.COMPUTE_SECONDS, Workload.OTHER_STEP_SECONDS)]  # fmt: skip
        assert parts[1] > 0 and end.fields[Workload.COMMUNICATION_SECONDS] == 0
        assert sum(parts) == pytest.approx(end.fields[Workload.SECONDS])
    assert "run pt: per epoch" in result.stdout and "epoch  host" in result.stdout
    # the summary's step split: the report's input/compute/all-reduce shares, per epoch
    table = result.stdout[result.stdout.index("epoch  host") :].splitlines()
    heads = re.split(r"\s{2,}", table[0].strip())[-4:]
    assert heads == ["input %", "compute %", "comm %", "AU %"]
    shares = [re.split(r"\s{2,}", line.strip())[-4:] for line in table[1:3]]
    assert all(float(share[1]) > 0 and share[2] == "0.0" for share in shares), table
    # AU: the timed steps' time not waiting for input; "–" for an epoch whose few steps
    # were all warm-up (AU, like images/s, leaves them out)
    assert all(share[3] == "–" or 0 < float(share[3]) <= 100 for share in shares), table
    # every edge exact: the agent sampled at the first pass's start (before the loader was
    # known to train) and at each epoch's last pass end (validation), not only between ticks
    rows = report_rows(sys.executable, runs, "pt")
    assert [row["epoch"] for row in rows] == [1, 2]
    assert [row["interpolated_edges"] for row in rows] == ["", ""], rows
    assert "Interpolated edges" not in result.stdout
    starts = [e for e in rank if e.event == Event.EPOCH_START]
    assert starts[0].time_ns > rank[0].time_ns  # run_start just before epoch 1's start


@pytest.mark.slow
@pytest.mark.frameworks
@needs_torch
def test_a_crashing_training_keeps_its_status_and_is_marked_failed(data, runs):
    jpeg = data("jpeg")
    result = profile(sys.executable, runs, "crash", sys.executable,
                     str(SCRIPTS / "torch_folder_train.py"), str(jpeg), "--fail-in-epoch", "2",
                     env=project_env())  # fmt: skip
    assert result.returncode == 1
    assert "RuntimeError: the script failed in epoch 2" in result.stderr
    assert "exited with status 1" in result.stderr
    (rank,) = by_rank(events(runs, "crash")).values()
    assert rank[-1].event == Event.RUN_END and rank[-1].fields[Workload.STATE] == RunState.FAILED
    ends = [e for e in rank if e.event == Event.EPOCH_END]
    assert [e.fields[Workload.IMAGES] for e in ends] == [TRAIN, 0]


def agent_edge_samples(runs: Path, run_id: str) -> int:
    """Edge samples the run's embedded agent took (its ``edge_samples`` counter)."""
    store = SqliteStore(runs / f"{run_id}.sqlite")
    try:
        infos = store.list_series(AgentSelf.NAME, AgentSelf.EDGE_SAMPLES)
        series = store.read_series(infos, -(2**62), 2**62)
    finally:
        store.close()
    return int(max(value for data in series for value in data.values))


@pytest.mark.slow
@pytest.mark.frameworks
@needs_torch
def test_evaluation_every_few_steps_asks_the_agent_only_where_an_epoch_may_end(runs):
    result = profile(sys.executable, runs, "evals", sys.executable,
                     str(SCRIPTS / "torch_eval_every.py"), env=project_env())  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert re.findall(r"evaluation passes: (\d+)", result.stdout) == ["16"]  # 8 an epoch
    (rank,) = by_rank(events(runs, "evals")).values()
    check_epochs(rank, epochs=2, images=64, steps=16)
    # the epoch edges stay exact: real readings at the start and at validation's end
    rows = report_rows(sys.executable, runs, "evals")
    assert [row["interpolated_edges"] for row in rows] == ["", ""], rows
    # asked at: the first untrained validation's start (not the second's: that loader ran
    # a whole pass with no optimizer step), the training pass's start; epoch 1's first
    # evaluation's end (the training pass went on after it: evaluations run inside epochs,
    # not asked again), its training pass's end and validation's end; epoch 2's start,
    # training pass's end, validation's end; run_end. Asking at every pass took 25.
    assert agent_edge_samples(runs, "evals") == 9


# --- Keras fit on tf.data ----------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="make frameworks")
def test_keras_fit_on_tf_data_recognised_unmodified(data, runs):
    tfrecord = data("tfrecord")
    result = profile(
        sys.executable,
        runs,
        "keras",
        sys.executable,
        str(SCRIPTS / "keras_fit.py"),
        str(tfrecord),
        options=("--data-dir", str(tfrecord)),
        env=project_env(),
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    (rank,) = by_rank(events(runs, "keras")).values()
    ends = check_epochs(rank, epochs=2, images=TRAIN, steps=TRAIN // BATCH)
    assert rank[0].framework == "tensorflow" and rank[0].fields[Workload.MODEL] == "small_cnn"
    # the step's anatomy: the batch fetched outside the compiled step (input wait), the
    # compiled step (compute), no all-reduce in one process
    for event in ends + [e for e in rank if e.event == Event.STEP]:
        assert_parts_add_up(event)
        assert event.fields[Workload.INPUT_WAIT_SECONDS] > 0
        assert event.fields[Workload.COMPUTE_SECONDS] > 0
        assert event.fields[Workload.COMMUNICATION_SECONDS] == 0
    assert rank[0].fields[Workload.BATCH_SIZE] == BATCH
    printed = printed_accuracies(result.stdout, r"(\d\.\d{6})")
    assert [e.fields[Workload.TOP1] for e in ends] == pytest.approx(printed, abs=1e-5)
    assert all(e.fields[Workload.LOSS] > 0 for e in ends)
    # the rank's own reads (/proc/<pid>/io), in the table
    assert all(e.fields[Workload.PROCESS_RCHAR_BYTES] > 0 for e in ends)
    rows = report_rows(sys.executable, runs, "keras")
    assert all(row["training_read_bytes"] is not None for row in rows), rows
    assert "own read" in result.stdout


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="make frameworks")
def test_keras_fit_with_steps_per_execution_runs_as_it_is_without_anatomy(data, runs):
    tfrecord = data("tfrecord")
    result = profile(sys.executable, runs, "spe", sys.executable, str(SCRIPTS / "keras_fit.py"),
                     str(tfrecord), "--epochs", "1", "--steps-per-execution", "2",
                     "--steps-per-epoch", str(TRAIN // BATCH), "--validation-steps",
                     str(VAL // BATCH), env=project_env())  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    said = f"epochscope: Keras fit: no step anatomy ({STEPS_PER_EXECUTION})"
    assert result.stderr.count(said) == 1, result.stderr[-4000:]
    (rank,) = by_rank(events(runs, "spe")).values()
    # one step per execution of 2 batches; every image counted
    (end,) = check_epochs(rank, epochs=1, images=TRAIN, steps=TRAIN // BATCH // 2,
                          input_wait=False)  # fmt: skip
    assert Workload.COMPUTE_SECONDS not in end.fields


# Horovod's Keras example on 1 and 2 processes: tests/system/test_keras_horovod_profile.py


# --- PyTorch + torchvision in a user's environment (make user-torch-env) -----------------
def user_python() -> str:
    """The user-like environment's python, once epochscope from this checkout is in it."""
    python = USER_VENV / "bin" / "python"
    if not python.exists():
        pytest.skip(f"{USER_VENV} is missing: `make user-torch-env` makes it")
    check = subprocess.run(
        # -I: not this checkout from the working directory, but what the venv has installed
        [str(python), "-I", "-c", "import workloads, torchvision; print(workloads.__file__)"],
        capture_output=True, text=True, timeout=TIMEOUT,  # minutes on a loaded machine
    )  # fmt: skip
    if check.returncode != 0 or not check.stdout.startswith(str(REPO_ROOT)):
        pytest.skip(f"{USER_VENV} holds no epochscope from {REPO_ROOT}: make user-torch-env")
    return str(python)


def user_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # nothing of the project's environment: epochscope as installed
    env["PATH"] = os.pathsep.join([str(USER_VENV / "bin"), env.get("PATH", "")])
    return env


@functools.cache
def has_lightning(python: str) -> bool:
    # importing Lightning takes minutes on a loaded 2-core machine: asked once
    return subprocess.run([python, "-c", "import lightning"], timeout=TIMEOUT).returncode == 0


def lightning_python() -> str:
    python = user_python()
    if not has_lightning(python):
        pytest.skip(f"lightning is not in {USER_VENV}: make user-torch-env")
    return python


BIG_TRAIN, BIG_SIZE = 96, 480  # 9.6 MB of JPEGs, so the data set's reads stand out


@pytest.mark.slow
@pytest.mark.frameworks
def test_imagenet_example_one_process_reads_the_data_set_in_epoch_1_only(data, runs):
    python = user_python()
    jpeg = data("jpeg", stored_size=BIG_SIZE, images=BIG_TRAIN)
    result = profile(
        python, runs, "tv", python, str(SCRIPTS / "imagenet_train.py"), str(jpeg),
        "--epochs", "3", "--batch-size", str(BATCH),
        options=("--data-dir", str(jpeg), "--drop-caches"), env=user_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    (rank,) = by_rank(events(runs, "tv")).values()
    ends = check_epochs(rank, epochs=3, images=BIG_TRAIN, steps=BIG_TRAIN // BATCH)
    assert rank[0].fields[Workload.MODEL] == "ResNet"  # torchvision's resnet18
    printed = printed_accuracies(result.stdout, r"Acc@1 (\d+\.\d+)")
    assert [100 * e.fields[Workload.TOP1] for e in ends] == pytest.approx(printed, abs=0.01)
    rows = report_rows(python, runs, "tv")
    assert [row["images"] for row in rows] == [BIG_TRAIN] * 3
    reads = [row["disk_read_bytes"] for row in rows]
    assert reads[0] >= 0.8 * BIG_TRAIN * 100_000, reads  # ~100 kB a picture, all from disk
    # then from the page cache: the rank's own reads (/proc/<pid>/io of the script and its
    # loader workers) tell it, the host's disk counters cannot (the machine's other work,
    # other tests included, reads too: 52.7 MB and 21.8 MB in epochs 2 and 3 were seen)
    own = [row["training_read_bytes"] for row in rows]
    assert own[0] >= 0.8 * BIG_TRAIN * 100_000 and max(own[1:]) < own[0] / 10, own
    assert all(row["training_cache_read_bytes"] >= 0.8 * BIG_TRAIN * 100_000 for row in rows[1:])
    assert "own read" in result.stdout  # in the table printed at the end
    # the data set's residency, measured by the rank (mincore): dropped, then read in epoch 1
    cached = [row["dataset_cached_start_percent"] for row in rows]
    assert cached[0] <= 1.0 and min(cached[1:]) >= 50.0, cached  # the training split at least


@pytest.mark.slow
@pytest.mark.frameworks
def test_lightning_example_recognised_unmodified(data, runs):
    python = lightning_python()
    jpeg = data("jpeg")
    result = profile(python, runs, "lit", python, str(SCRIPTS / "lightning_train.py"), str(jpeg),
                     "--batch-size", str(BATCH), "--persistent-workers",
                     options=("--data-dir", str(jpeg)), env=user_env())  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    (rank,) = by_rank(events(runs, "lit")).values()
    # Trainer(max_epochs=2): its sanity-check validation is in no epoch
    ends = check_epochs(rank, epochs=2, images=TRAIN, steps=TRAIN // BATCH)
    start = rank[0].fields
    assert start[Workload.MODEL] == "LitClassifier" and start[Workload.BATCH_SIZE] == BATCH
    assert start[Workload.WORLD_SIZE] == 1 and rank[0].framework == "pytorch"
    # its one training loader's workers, kept across epochs: none started after epoch 1
    assert (start[Workload.LOADER_WORKERS], start[Workload.PERSISTENT_WORKERS]) == (1, 1)
    assert [e.fields.get(Workload.LOADER_WORKERS_STARTED) for e in ends] == [None, 0]
    # the module's self.log("val_acc", ...) is the epoch's top-1, as the script printed it
    printed = printed_accuracies(result.stdout, r"val_acc (\d\.\d+)")
    assert [e.fields[Workload.TOP1] for e in ends] == pytest.approx(printed, abs=1e-4)
    assert all(e.fields[Workload.LOSS] > 0 for e in ends)
    for event in ends + [e for e in rank if e.event == Event.STEP]:
        assert_parts_add_up(event)
        assert event.fields[Workload.COMPUTE_SECONDS] > 0
        assert event.fields[Workload.COMMUNICATION_SECONDS] == 0  # one process
    assert all(e.fields[Workload.PROCESS_RCHAR_BYTES] > 0 for e in ends)
    rows = report_rows(python, runs, "lit")
    assert [row["images"] for row in rows] == [TRAIN, TRAIN]
    assert all(row["training_read_bytes"] is not None for row in rows)


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_lightning_multi_process_strategies_each_rank_trains_its_share(data, runs, strategy):
    """``Trainer(strategy="ddp", devices=2)`` starts rank 1 by running the script again;
    ``ddp_spawn`` pickles the trainer, with epochscope's callback in it, into two spawned
    processes (the one that called ``fit`` trains nothing and is no rank)."""
    python = lightning_python()
    jpeg = data("jpeg")
    workers = "1" if strategy == "ddp" else "0"  # each spawned worker would import torch again
    # Hung once in 30+ full runs (CI, stop 38: 540 s, no output kept); 35 runs of it alone
    # never did. Stuck past 200 s (it takes 10-30 s), the stacks are kept and it runs again.
    result = profile(python, runs, strategy, python, str(SCRIPTS / "lightning_train.py"),
                     str(jpeg), "--batch-size", str(BATCH), "--strategy", strategy,
                     "--devices", "2", "--workers", workers, env=user_env(),
                     hang_seconds=200, retry_if_hung=True)  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    ranks = by_rank(events(runs, strategy))
    assert sorted(ranks) == [0, 1]
    for rank in ranks.values():
        # Lightning's DistributedSampler: half the pictures each, 2 steps of 8 an epoch
        ends = check_epochs(rank, epochs=2, images=TRAIN // 2, steps=TRAIN // 2 // BATCH)
        start = rank[0].fields
        assert start[Workload.MODEL] == "LitClassifier" and start[Workload.WORLD_SIZE] == 2
        for event in ends + [e for e in rank if e.event == Event.STEP]:
            assert_parts_add_up(event)
            assert event.fields[Workload.COMPUTE_SECONDS] > 0
        # the all-reduce of Lightning's DistributedDataParallel, timed by epochscope's hook
        assert all(e.fields[Workload.COMMUNICATION_SECONDS] > 0 for e in ends), ends
    rows = report_rows(python, runs, strategy)
    assert [row["images"] for row in rows] == [TRAIN, TRAIN]


def spawn_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.parametrize("launcher", ["torchrun", "spawn"])
def test_imagenet_example_two_ranks_each_train_their_share(data, runs, launcher):
    python = user_python()
    jpeg = data("jpeg")
    script = [str(SCRIPTS / "imagenet_train.py"), str(jpeg), "--batch-size", str(BATCH // 2)]
    if launcher == "torchrun":
        # a free port, not torchrun's default 29500: other tests' trainings run beside it
        command = [str(USER_VENV / "bin" / "torchrun"), "--nproc-per-node", "2",
                   "--master-port", str(spawn_port()), *script, "--dist-url", "env://"]  # fmt: skip
    else:
        # loader workers in the data loaders: none (each would start a fresh interpreter
        # importing torch, under a spawned rank: minutes on 2 cores, and nothing more tested)
        command = [python, *script, "-j", "0", "--multiprocessing-distributed", "--nprocs", "2",
                   "--dist-url", f"tcp://127.0.0.1:{spawn_port()}"]  # fmt: skip
    result = profile(python, runs, launcher, *command, env=user_env())
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    ranks = by_rank(events(runs, launcher))
    assert sorted(ranks) == [0, 1]  # the launcher process itself is no rank
    for rank in ranks.values():
        check_epochs(rank, epochs=2, images=TRAIN // 2, steps=TRAIN // BATCH)
        assert rank[0].fields[Workload.WORLD_SIZE] == 2
        assert rank[0].fields[Workload.MODEL] == "ResNet"  # inside DistributedDataParallel
        # DDP's all-reduce timed around backward (nothing of DDP replaced)
        ends = [e for e in rank if e.event == Event.EPOCH_END]
        steps = [e for e in rank if e.event == Event.STEP]
        for event in ends + steps:
            assert_parts_add_up(event)
            assert event.fields[Workload.COMPUTE_SECONDS] > 0
            assert Workload.OVERLAP_SECONDS not in event.fields  # DDP's own all-reduce
        assert all(e.fields[Workload.COMMUNICATION_SECONDS] > 0 for e in ends), ends
        assert all(e.fields[Workload.PROCESS_RCHAR_BYTES] > 0 for e in ends)  # its own reads
    rows = report_rows(python, runs, launcher)
    assert [row["images"] for row in rows] == [TRAIN, TRAIN]
    assert all(row["communication_percent"] > 0 for row in rows), rows
