"""A known disk ceiling set for real (issue 29): a cgroup v1 blkio throttle
(``blkio.throttle.read_bps_device``) on the disk that holds the data set. ``agent ceilings``
calibrated inside the throttle measures about the throttle; a small PyTorch run inside it,
its data set dropped from the page cache, is storage-bound in epoch 1 with its disk reads
stated as a share of that ceiling, and the same run with the data set cached is not.

The runs are test_residency.py's throttled run (a padded JPEG set: reading is slow,
decoding cheap) with the calibrated ceilings file given to the run's agent. The disk
column counts every process's reads of the host's disks, the training's among them: on
this shared machine others' reads may add to it, never take from it, so the share is
bounded below by the training's own reads and above by the throttle plus what others read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from collector.findings.base import CACHED_PERCENT
from contract.schema import Ceiling
from tests.scenarios.conftest import BLKIO, REPO, blkio_read_limit, cache_code, run_training
from tests.scenarios.test_residency import READ_LIMIT, TRAINING, padded_set, read_whole
from tests.support.views import whole_percent_texts

pytestmark = pytest.mark.skipif(
    not os.access(BLKIO, os.W_OK), reason="needs root and cgroup v1 blkio"
)

CALIBRATION_TOLERANCE = 0.25  # the measured sequential ceiling against the throttle
BOUND_PERCENT = 80.0  # CEILING_BOUND_SHARE: reads at the disk's limit
MOST_OF_THE_EPOCH_PERCENT = 60.0  # the training's own reads over epoch 1, of the ceiling


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "EPOCHSCOPE_DROP_METHOD": "fadvise",
            "EPOCHSCOPE_CEILINGS_FILE": str(tmp_path / "ceilings.json")}  # fmt: skip


@pytest.fixture
def padded(tmp_path) -> Path:
    return padded_set(tmp_path / "padded")


def calibrate(prefix: tuple[str, ...], data: Path, env: dict[str, str]) -> float:
    """``agent ceilings`` inside the throttle: the data disk's sequential read ceiling."""
    result = subprocess.run(
        [*prefix, sys.executable, "-m", "agent", "ceilings", "--data-dir", str(data),
         "--disk-mib", "8", "--disk-seconds", "3", "--cpu-seconds", "0.2"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    kept = json.loads(Path(env["EPOCHSCOPE_CEILINGS_FILE"]).read_text())["ceilings"]
    (sequential,) = [c for c in kept if c["field"] == str(Ceiling.DISK_SEQUENTIAL_READ)]
    return float(sequential["value"])


def train(tmp_path: Path, run_id: str, data: Path, env, prefix, *more: str):
    return run_training(tmp_path / "runs", run_id, *TRAINING, "--data-dir", str(data),
                        "--batch-size", "2", "--loader-workers", "2", "--warmup-steps", "2",
                        "--step-every", "1", *more, env=env, prefix=prefix)  # fmt: skip


def test_a_blkio_throttle_is_the_measured_ceiling_a_cold_run_is_bound_by(tmp_path, padded, env):
    with blkio_read_limit(f"epochscope-ceiling-{os.getpid()}", padded, READ_LIMIT) as prefix:
        cache_code()
        ceiling = calibrate(prefix, padded, env)
        assert ceiling == pytest.approx(READ_LIMIT, rel=CALIBRATION_TOLERANCE)
        cache_code()
        cold = train(tmp_path, "cold", padded, env, prefix, "--drop-caches")
        read_whole(padded)
        cache_code()
        cached = train(tmp_path, "cached", padded, env, prefix)
    print(f"ceiling {ceiling / 1e6:.2f} MB/s under a {READ_LIMIT / 1e6:.2f} MB/s throttle")
    for run in (cold, cached):
        for row in run.rows:
            print(run.run_id, row["host"], row["epoch"], row["seconds"],
                  row["disk_read_mbps"], row["disk_read_ceiling_percent"],
                  row["training_read_bytes"], row["input_wait_percent"],
                  row["iowait_percent"])  # fmt: skip
        print(run.run_id, sorted(run.rules))

    bound = cold.finding("storage_bound")
    assert bound["evidence"]["epochs"] == [1]
    (host_epoch,) = bound["evidence"]["host_epochs"]
    share = host_epoch["disk_read_ceiling_percent"]
    (first,) = [r for r in cold.rows if r["epoch"] == 1 and r["host"] != "*"]
    own_share = 100 * first["training_read_bytes"] / first["seconds"] / ceiling
    # reading took most of epoch 1 (30 s of reads at the limit; start-up the rest)
    assert own_share >= MOST_OF_THE_EPOCH_PERCENT
    assert share >= 0.9 * own_share  # the host's reads hold the training's own
    assert any(
        f"That is {whole}% of" in bound["explanation"] for whole in whole_percent_texts(share)
    )
    if share >= BOUND_PERCENT:
        assert "the disk was at its limit" in bound["explanation"]

    # cached: the training read next to nothing and waited on nothing. (Its host-wide
    # disk share is not asserted: others' reads on this machine, outside the throttle,
    # reached 8x the throttled ceiling in one run.)
    assert "storage_bound" not in cached.rules
    assert "dataset_evicted" not in cold.rules and "dataset_evicted" not in cached.rules
    (cached_first,) = [r for r in cached.rows if r["epoch"] == 1 and r["host"] != "*"]
    # "in memory" as the findings define it: this VM's host reclaims pages it sees idle for
    # 60 s (DAMON pageout), and once took 1.2% of the set between read_whole and the run
    assert cached_first["dataset_cached_start_percent"] >= CACHED_PERCENT
    assert cached_first["training_read_bytes"] <= 0.15 * first["training_read_bytes"]
