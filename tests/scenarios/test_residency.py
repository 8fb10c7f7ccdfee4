"""The data set's page-cache residency on real PyTorch runs: cached before the run, dropped
before it, and read through a cgroup v1 blkio throttle.

Each run is one process, two epochs of a small JPEG set at 32 px. Residency is measured by
the rank itself (mincore over the set's files), so it does not depend on the machine's
load. The storage-bound run's signals do: with other work on the machine iowait stays at 0
(others fill the idle time), so the rule reads the rank's own input wait instead, and the
step variation of a loaded machine is high in every epoch. Its data set is throttled hard
enough that epoch 1 waits on reads whatever the load: measured at load 15 on 2 cores,
input wait 37-56% (rule: 20%) in epoch 1 against 1.8% in epoch 2, step variation 0.41-0.62
(rule: 0.2). On a quiet machine the two loader workers' batches, read side by side through
the one limit, arrive in pairs: long and short steps alternate, and the variation is high
in epoch 1 only. Wall times here, at load 9-15: 73-157 s a run; most of it is start-up
(the two epochs took 25-60 s)."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from collector.findings.base import CACHED_PERCENT
from contract.schema import Event
from tests.scenarios.conftest import (
    BLKIO,
    MEMORY,
    REPO,
    blkio_read_limit,
    cache_code,
    run_training,
    slurm_job_memory_group,
)
from tests.support.page_in import read_files
from tests.support.real_runs import pad_jpegs
from workloads.train.datasets import make_dataset
from workloads.train.pagecache import evict

TRAINING = ("--framework", "pytorch", "--np", "1", "--epochs", "2", "--image-size", "32")


@pytest.fixture
def env() -> dict[str, str]:
    # evict the data set only, never the node's page cache (others' work on this machine)
    return {**os.environ, "PYTHONPATH": str(REPO), "EPOCHSCOPE_DROP_METHOD": "fadvise"}


def read_whole(root: Path) -> None:
    """``cat`` every file of the data set to /dev/null: it is in the page cache after."""
    read_files(sorted(path for path in root.rglob("*") if path.is_file()))


def test_a_data_set_cached_before_the_run_says_so_and_claims_no_storage_reads(
    sized_data, tmp_path, env
):
    data = sized_data("pytorch", images=24, val_images=4, image_size=256)
    read_whole(data)
    run = run_training(tmp_path, "cached", *TRAINING, "--data-dir", str(data),
                       "--batch-size", "4", "--no-validate", env=env)  # fmt: skip
    first = next(r for r in run.rows if r["epoch"] == 1)
    assert first["dataset_cached_start_percent"] >= CACHED_PERCENT  # "in memory", as ruled
    assert "cache_warmup" not in run.rules and "storage_bound" not in run.rules
    assert "dataset_evicted" not in run.rules  # nothing evicted it
    cached = run.finding("dataset_cached_before_run")
    assert cached["evidence"]["dataset_cached_before_run_percent"] >= 99.0
    assert "read it from memory" in cached["explanation"]
    assert "data cached %" in run.stdout  # the launcher's table shows the column


def test_a_dropped_data_set_is_read_in_epoch_1_and_served_from_the_cache_after(
    sized_data, tmp_path, env
):
    data = sized_data("pytorch", images=24, val_images=4, image_size=256)
    run = run_training(tmp_path, "cold", *TRAINING, "--data-dir", str(data),
                       "--batch-size", "4", "--drop-caches", env=env)  # fmt: skip
    assert "dataset_cached_before_run" not in run.rules
    assert "dataset_evicted" not in run.rules  # epoch 2 found the set where epoch 1 left it
    warm = run.finding("cache_warmup")
    evidence = warm["evidence"]
    # a whole pass (train, then validation) brings every file of the set in
    assert evidence["dataset_cached_before_run_percent"] <= 1.0
    assert evidence["dataset_cached_after_first_epoch_percent"] >= 99.0
    assert evidence["dataset_cached_start_percent_by_epoch"]["2"] >= 99.0
    assert warm["title"].startswith("Epoch 1 read the data set from storage")


def padded_set(data: Path) -> Path:
    """16 training and 2 validation pictures at 64 px, each padded to 2.5 MB: 45 MB, 30 s of
    reads at ``READ_LIMIT``."""
    make_dataset(data, "jpeg", images=16, classes=4, image_size=64, val_images=2,
                 progress=False)  # fmt: skip
    pad_jpegs(data, 2_500_000)
    return data


READ_LIMIT = 1_500_000  # bytes/s: a loaded rank steps at ~1 s, a batch needs ~3 s of reads


@pytest.mark.skipif(not os.access(BLKIO, os.W_OK), reason="needs root and cgroup v1 blkio")
def test_reads_throttled_by_blkio_make_epoch_1_storage_bound(tmp_path, env):
    data = padded_set(tmp_path / "padded")
    with blkio_read_limit(f"epochscope-throttle-{os.getpid()}", data, READ_LIMIT) as prefix:
        cache_code()
        run = run_training(tmp_path / "runs", "throttled", *TRAINING, "--data-dir", str(data),
                           "--batch-size", "2", "--loader-workers", "2", "--warmup-steps", "2",
                           "--step-every", "1", "--drop-caches", env=env,
                           prefix=prefix)  # fmt: skip
    bound = run.finding("storage_bound")
    assert bound["evidence"]["epochs"] == [1]  # epoch 2 read the set from the page cache
    (host_epoch,) = bound["evidence"]["host_epochs"]
    assert host_epoch["dataset_cached_start_percent"] <= 1.0
    assert host_epoch["dataset_cached_end_percent"] >= 99.0
    # the limit held: the training read no faster than it allows (the window has start-up)
    assert host_epoch["storage_read_mbps"] <= READ_LIMIT / 1e6 * 1.1
    assert "dataset_cached_before_run" not in run.rules
    # the eviction run's twin without the neighbour: epoch 2 read nothing of the set again
    assert "dataset_evicted" not in run.rules


def evict_after_the_first_epoch(db: Path, evict_once: Callable[[], object],
                                 stop: threading.Event) -> None:  # fmt: skip
    """A neighbour that keeps pushing the data set out of the page cache (``evict_once``
    every half second) from the moment the run's first ``epoch_end`` is in its store: epoch
    2 begins with the set measured cached and loses it a second or two in (the event's way
    to the store)."""
    first_epoch_ended = False
    while not stop.is_set():
        if not first_epoch_ended:
            try:
                with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as conn:
                    (ended,) = conn.execute(
                        "SELECT count(*) FROM events WHERE event = ?", (str(Event.EPOCH_END),)
                    ).fetchone()
            except sqlite3.Error:  # the store is not made yet
                ended = 0
            first_epoch_ended = ended > 0
        if first_epoch_ended:
            evict_once()
        stop.wait(0.5 if first_epoch_ended else 0.2)


# How the neighbour takes the pages, and the cause the host's counters must then name:
# - "invalidated": posix_fadvise DONTNEED on the set's files, as ``vmtouch -e`` does: the
#   pages are dropped without the kernel's reclaim, and reading them again is no refault;
# - "reclaim": the run in a memory cgroup of its own whose pages the kernel reclaims
#   (``memory.force_empty``: the reclaim a cgroup's limit or a proactive reclaimer such as
#   cgroup v2's ``memory.reclaim`` runs), so reading them again is counted as refaults.
# (Not "drop_caches": it would empty the whole machine's page cache every half second;
# tests/integration/test_sampler_memory.py produces that one once, on the counters alone.)
NEIGHBOURS = ("invalidated", "reclaim")


def evictor(neighbour: str, group: Path, data: Path) -> Callable[[], object]:
    """The neighbour's one eviction: reclaim the run's memory cgroup ``group``, or
    invalidate the files of ``data``."""
    if neighbour == "reclaim":
        return lambda: (group / "memory.force_empty").write_text("0")
    files = sorted(path for path in data.rglob("*") if path.is_file())
    return lambda: evict(files)


@pytest.mark.skipif(
    not (os.access(BLKIO, os.W_OK) and os.access(MEMORY, os.W_OK)),
    reason="needs root and cgroup v1 blkio and memory",
)
@pytest.mark.parametrize("neighbour", NEIGHBOURS)
def test_a_data_set_evicted_after_epoch_1_is_read_again_and_named(tmp_path, env, neighbour):
    """The run is a Slurm job in all but slurmd: its memory cgroup is where Slurm's cgroup
    v1 plugin puts a job's, and its environment has the SLURM_JOB_ID Slurm sets (the real
    Slurm runs are in test_slurm_real.py), so the agent reads the job's own refaults."""
    data = padded_set(tmp_path / "padded")
    runs = tmp_path / "runs"
    stop = threading.Event()
    job = str(os.getpid())
    env = {**env, "SLURM_JOB_ID": job}
    with (
        slurm_job_memory_group(job) as (group, in_memory_group),
        blkio_read_limit(f"epochscope-evict-{job}", data, READ_LIMIT) as in_blkio_group,
    ):
        evict_once = evictor(neighbour, group, data)
        thread = threading.Thread(
            target=evict_after_the_first_epoch, args=(runs / "evicted.sqlite", evict_once, stop)
        )
        cache_code()
        thread.start()
        try:
            run = run_training(runs, "evicted", *TRAINING, "--data-dir", str(data),
                               "--batch-size", "2", "--loader-workers", "2",
                               "--warmup-steps", "2", "--step-every", "1", "--drop-caches",
                               env=env, prefix=in_memory_group + in_blkio_group)  # fmt: skip
        finally:
            stop.set()
            thread.join()
    for row in run.rows:
        print(row["host"], row["epoch"], row["seconds"], row["training_read_bytes"],
              row["dataset_cached_start_percent"], row["dataset_cached_end_percent"],
              row["input_wait_percent"], row["page_cache_drops"],
              row["file_refault_bytes"])  # fmt: skip
    print(sorted(run.rules))

    evicted = run.finding("dataset_evicted")
    assert evicted["evidence"]["epochs"] == [2]
    worst = evicted["evidence"]["worst"]
    # measured before the neighbour came (the edge at epoch 1's end: 98.8-100% here)
    assert worst["dataset_cached_start_percent"] >= CACHED_PERCENT
    assert worst["evicted_percent"] >= 90.0  # epoch 2 read nearly the whole set again
    assert "cache_warmup" not in run.rules  # epoch 2 was not served from memory
    # the host's counters name how the pages left
    assert worst["cause"] == neighbour
    assert worst["page_cache_drops"] == 0
    # judged by the run's own job's refaults, read from its memory cgroup by the agent
    assert evicted["evidence"]["run_job_id"] == job
    assert worst["refaults_judged"] == "job"
    if neighbour == "reclaim":
        # nearly every byte read again was a refault (0.99-1.0 here)
        assert worst["refault_bytes_judged"] >= 0.9 * worst["training_read_bytes"]
        assert "The kernel's reclaim took them" in evicted["explanation"]
        assert next(iter(worst["refaults_by_job"])) == job
        assert f"job {job} (this run's)" in evicted["explanation"]
    else:
        assert "they were invalidated, as posix_fadvise DONTNEED" in evicted["explanation"]
    # Where the neighbour came before the loader's workers had taken the set from the cache
    # (the event reaches the store 0-2 s after the epoch's end), epoch 2 read all of it
    # again through the throttle and waited on it: storage-bound, though both its edges
    # may say cached. Where it came after, epoch 2 read a fifth of it (10 MB in 9 s).
    (second,) = [r for r in run.rows if r["epoch"] == 2 and r["host"] != "*"]
    if second["training_read_bytes"] >= 0.9 * evicted["evidence"]["dataset_files_bytes"]:
        assert 2 in run.finding("storage_bound")["evidence"]["epochs"]
