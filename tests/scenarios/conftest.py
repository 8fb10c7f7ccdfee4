"""Real-run scenarios: each effect a finding explains is produced for real on this machine
(a data set dropped from or kept in the page cache, a CPU hog beside the run, a cgroup
limit on one rank, ...), a real training runs under ``workloads run --profile`` with its
local agent and collector, and the test asserts the right finding fires and no wrong one.

``make scenarios`` runs this folder; ``make test`` calls it after the rest of the suite, so
the scenarios get a machine no other test is loading (they are about contention).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.real_runs import (  # noqa: F401 - the scenarios import them from here
    BLKIO,
    FORMATS,
    MEMORY,
    PYTORCH_RUN_MODULES,
    REPO,
    ScenarioRun,
    blkio_read_limit,
    block_device_of,
    cache_code,
    collector_report,
    run_training,
    slurm_job_memory_group,
)
from workloads.train.datasets import make_dataset


def pytest_collection_modifyitems(items) -> None:
    """Every scenario is slow and needs the frameworks (a conftest's ``pytestmark`` would
    mark nothing)."""
    for item in items:
        if "tests/scenarios/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.frameworks)


@pytest.fixture(scope="session")
def scenario_data(tmp_path_factory):
    """``scenario_data(framework)``: a small data set in that framework's native format,
    made once per session: 256 training and 64 validation pictures of 4 classes, stored at
    256 px (trained at 32 px) so reading it is visible beside the libraries a rank loads."""
    root = tmp_path_factory.mktemp("scenario-data")
    made: dict[str, Path] = {}

    def data_for(framework: str) -> Path:
        if framework not in made:
            path = root / FORMATS[framework]
            make_dataset(path, FORMATS[framework], images=256, classes=4, image_size=256,
                         val_images=64, shards=4, progress=False)  # fmt: skip
            made[framework] = path
        return made[framework]

    return data_for


@pytest.fixture(scope="session")
def sized_data(tmp_path_factory):
    """``sized_data(framework, images, val_images, image_size)``: like ``scenario_data`` but
    of the size asked for (a set one epoch reads whole, pictures large enough for a read
    throttle to hold the loader back), made once per session."""
    root = tmp_path_factory.mktemp("sized-data")
    made: dict[tuple[str, int, int, int], Path] = {}

    def data_for(framework: str, images: int, val_images: int, image_size: int) -> Path:
        key = (framework, images, val_images, image_size)
        if key not in made:
            path = root / f"{FORMATS[framework]}-{images}-{val_images}-{image_size}"
            make_dataset(path, FORMATS[framework], images=images, classes=4,
                         image_size=image_size, val_images=val_images, shards=4,
                         progress=False)  # fmt: skip
            made[key] = path
        return made[key]

    return data_for
