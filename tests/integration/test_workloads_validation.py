"""``workloads run`` refuses what cannot work before training: a collector URL that cannot
work (``workloads.cli.main`` in this process: its framework check needs the frameworks), a
truncated or damaged data set file (the real CLI, as a process); a picture that fails to
decode mid-run is named. The refusals made while reading the arguments (a --run-id that
would leave --runs-dir, a misspelt option) are tests/unit/test_command_refusals.py's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import run_main
from tests.support.loopback import free_port
from workloads.cli import main as workloads_main


def _unreachable_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("notaurl", "must start with http:// or https://"),
        ("http://", "names no host"),
        ("http://:8086", "names no host"),
        ("http://head:99999", "has a port that is not 0..65535"),
        ("unreachable", "cannot reach the collector at http://127.0.0.1:"),
    ],
)
def test_a_collector_url_that_cannot_work_is_refused_before_training(tmp_path, capfd, url, message):
    """Before, ``--collector notaurl`` ended in a ValueError traceback (exit 1) from the
    pre-flight write; every form is now refused with one line and exit 2, nothing trained."""
    url = _unreachable_url() if url == "unreachable" else url
    runs = tmp_path / "runs"
    argv = ["run", "--framework", "pytorch", "--synthetic"]
    argv += ["--batch-size", "2", "--image-size", "32", "--steps-per-epoch", "2"]
    argv += ["--runs-dir", str(runs), "--collector", url]
    result = run_main(workloads_main, argv, capfd)  # capfd: a started rank's output too
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert "epoch" not in result.stdout.lower()  # no training started
    assert not runs.exists()  # nothing written


# --- a truncated or damaged data set file is named before training ------------------------


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """Tiny synthetic data sets (8 + 4 pictures of 32 px) in each format, made once."""
    root = tmp_path_factory.mktemp("datasets")
    for data_format in ("tfrecord", "jpeg", "recordio"):
        argv = [sys.executable, "-m", "workloads", "dataset", "make", "--format", data_format]
        argv += ["--images", "8", "--val-images", "4", "--classes", "2", "--image-size", "32"]
        argv += ["--shards", "2", "--out", str(root / data_format)]
        made = subprocess.run(argv, capture_output=True, text=True, env=_repo_env(), timeout=600)
        assert made.returncode == 0, made.stderr
    return root


def damaged_copy(datasets: Path, tmp_path: Path, data_format: str, damage: str) -> tuple:
    """A copy of one data set with one file damaged: (data dir, the damaged file)."""
    copy = tmp_path / data_format
    shutil.copytree(datasets / data_format, copy)
    if data_format == "tfrecord":
        victim = copy / "train-00001-of-00002"
    elif data_format == "recordio":
        victim = copy / "train.rec"
    else:
        victim = sorted((copy / "train").glob("*/*.JPEG"))[3]
    data = victim.read_bytes()
    if damage == "truncated":
        victim.write_bytes(data[: len(data) - 100])
    elif damage == "not a picture":
        victim.write_bytes(b"<html>" + data[6:])
    elif damage == "garbled header":  # start and end markers intact, the rest unreadable
        victim.write_bytes(data[:4] + b"\0" * 300 + data[304:])
    return copy, victim


def _repo_env() -> dict[str, str]:
    repo = str(Path(__file__).resolve().parents[2])
    return dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))
    )


FRAMEWORK_OF = {"tfrecord": "tensorflow", "jpeg": "pytorch", "recordio": "mxnet"}


def run_on(data_dir: Path, framework: str, runs: Path, env: dict) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "workloads", "run", "--framework", framework]
    argv += ["--data-dir", str(data_dir), "--batch-size", "2", "--image-size", "32"]
    argv += ["--epochs", "1", "--loader-workers", "1", "--no-validate", "--runs-dir", str(runs)]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.parametrize(
    ("data_format", "damage", "message"),
    [
        ("tfrecord", "truncated", "truncated: record 4 at byte"),
        ("jpeg", "truncated", "truncated JPEG: no end-of-image marker"),
        ("jpeg", "not a picture", "not a picture: it starts with 3c 68 74 6d"),
        ("recordio", "truncated", "truncated: record at byte"),
    ],
)
def test_a_truncated_or_damaged_file_is_named_before_training(
    datasets, tmp_path, repo_env, data_format, damage, message
):
    """Before, such a file failed mid-run (a framework's error, no file named); now the
    up-front check names it: exit 2 before any process starts."""
    data_dir, victim = damaged_copy(datasets, tmp_path, data_format, damage)
    result = run_on(data_dir, FRAMEWORK_OF[data_format], tmp_path / "runs", repo_env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"workloads: {victim}: {message}" in result.stderr
    assert "Traceback" not in result.stderr
    assert "epoch" not in result.stdout.lower()


def test_the_check_leaves_a_cold_data_set_out_of_the_page_cache(datasets, tmp_path):
    from workloads.train.datasets import describe, verify_files
    from workloads.train.pagecache import evict, residency

    data_dir = tmp_path / "jpeg"
    shutil.copytree(datasets / "jpeg", data_dir)
    info = describe(data_dir)
    paths = info.paths("train") + info.paths("val")
    evict(paths)
    before = residency(paths).resident_bytes  # 0, unless tmp_path is a tmpfs
    verify_files(info)
    assert residency(paths).resident_bytes == before


def test_a_picture_that_fails_to_decode_mid_run_is_named(datasets, tmp_path, repo_env):
    """Start and end markers intact (the up-front check passes), the header unreadable:
    the rank that decodes it fails naming the file."""
    data_dir, victim = damaged_copy(datasets, tmp_path, "jpeg", "garbled header")
    result = run_on(data_dir, "pytorch", tmp_path / "runs", repo_env)
    assert result.returncode != 0
    assert f"{victim}: cannot decode this picture" in result.stdout + result.stderr


def test_a_reader_that_goes_away_ends_a_workloads_command_quietly(repo_env, tmp_path):
    data = tmp_path / "data"
    made = subprocess.run(
        [sys.executable, "-m", "workloads", "dataset", "make", "--format", "jpeg", "--images",
         "4", "--classes", "2", "--image-size", "8", "--out", str(data), "--shards", "1"],
        capture_output=True, text=True, env=repo_env, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    read_end, write_end = os.pipe()
    os.close(read_end)  # `| head` that has already gone
    try:
        result = subprocess.run(
            [sys.executable, "-m", "workloads", "dataset", "describe", str(data)],
            stdout=write_end, stderr=subprocess.PIPE, text=True, env=repo_env, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert result.returncode == 141, result.stderr
    assert result.stderr == ""
