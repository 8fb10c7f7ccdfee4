"""End to end: ``agent sample --once`` over every captured host tree, diffed with golden files.

Like node_exporter's end-to-end test: the real CLI in a subprocess, the roots pointed at
``../shared/fixtures/roots/<tree>``, the whole JSON output compared with
``tests/golden/agent_sample_<tree>.json`` (times set to 0). To regenerate after a
deliberate change, run with ``EPOCHSCOPE_UPDATE_GOLDEN=1`` and review the diff.
The captured cgroup trees (``../shared/fixtures/cgroups/<tree>``, a Slurm node's) are
sampled the same way with ``--cgroup-root`` and golden files
``agent_sample_cgroup_<tree>.json``: the jobs sampler's whole output.

``gpu`` (NVML, not a file tree) and ``agent`` (this process's own CPU and memory) do
not read the roots, so they are left out; so are the per-sampler timings
(``agent_sampler``), which come with the ``agent`` sampler only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.samplers import SAMPLER_NAMES
from contract.point import Point, encode_lines
from tests.conftest import FIXTURE_ROOTS, fixture_root

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"
UPDATE = os.environ.get("EPOCHSCOPE_UPDATE_GOLDEN") == "1"
TREE_SAMPLERS = [name for name in SAMPLER_NAMES if name not in ("gpu", "agent")]
TREES = (
    sorted(p.name for p in FIXTURE_ROOTS.iterdir() if (p / "proc").is_dir())
    if (FIXTURE_ROOTS.is_dir())
    else []
)
# Captured cgroup trees (a Slurm node's): the tree is the --cgroup-root, its proc/ the
# --proc-root; the jobs sampler is the one that reads them.
CGROUP_TREES_DIR = FIXTURE_ROOTS.parent / "cgroups"
CGROUP_TREES = (
    sorted(p.name for p in CGROUP_TREES_DIR.iterdir() if p.is_dir())
    if CGROUP_TREES_DIR.is_dir()
    else []
)


def sample_once(tree: str, repo_env, output_format: str, cgroup: bool = False) -> str:
    root = CGROUP_TREES_DIR / tree if cgroup else fixture_root(tree)
    # root/sys does not exist in a cgroup tree: nothing is read from this host's /sys
    roots = ["--sys-root", str(root / "sys"), *(["--cgroup-root", str(root)] if cgroup else [])]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent",
            "sample",
            "--once",
            "--proc-root",
            str(root / "proc"),
            *roots,
            "--format",
            output_format,
            "--host",
            "golden",
            "--samplers",
            ",".join(TREE_SAMPLERS),
        ],
        capture_output=True,
        text=True,
        env=repo_env,
        timeout=60,
        check=True,
    )
    return result.stdout


def normalised(points: list[dict]) -> list[dict]:
    times = {point["time"] for point in points}
    assert len(times) <= 1, "one sample: every point carries the same time"
    return [{**point, "time": 0} for point in points]


@pytest.mark.parametrize(
    ("tree", "cgroup"), [(t, False) for t in TREES] + [(t, True) for t in CGROUP_TREES]
)
def test_sample_once_matches_golden(tree, cgroup, repo_env):
    points = normalised(json.loads(sample_once(tree, repo_env, "json", cgroup)))
    golden = GOLDEN_DIR / f"agent_sample_{'cgroup_' if cgroup else ''}{tree}.json"
    if UPDATE:
        GOLDEN_DIR.mkdir(exist_ok=True)
        golden.write_text(json.dumps(points, indent=1) + "\n")
    assert golden.exists(), f"{golden} is missing: run with EPOCHSCOPE_UPDATE_GOLDEN=1"
    expected = json.loads(golden.read_text())
    assert points == expected
    for point in points:
        assert point["tags"]["host"] == "golden"
        assert not point["measurement"].startswith("agent")  # no timing in a golden file


def test_line_format_is_the_json_sample_in_line_protocol(repo_env):
    tree = "procfs-mlx-hfi"
    as_json = json.loads(sample_once(tree, repo_env, "json"))
    as_lines = sample_once(tree, repo_env, "line").rstrip("\n").split("\n")
    time_ns = as_json[0]["time"]
    # Two runs, two times: compare with the time of each line taken off.
    expected = encode_lines(
        Point(p["measurement"], p["tags"], p["fields"], time_ns) for p in as_json
    ).split("\n")
    assert [line.rsplit(" ", 1)[0] for line in as_lines] == [
        line.rsplit(" ", 1)[0] for line in expected
    ]
    assert len(as_lines) == len(as_json) > 0
