"""A rank's memory cgroup limit in its run_start fields (issue 42, item 4), from a real cgroup
v1 memory group made on this machine (root, /sys/fs/cgroup/memory mounted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from contract.schema import Workload

MEMORY = Path("/sys/fs/cgroup/memory")
LIMIT = 1 << 30

CHILD = """
import json, os, sys
from workloads.record.cpus import cpu_fields
print(json.dumps(cpu_fields()))
"""


@pytest.fixture
def memory_group():
    if os.geteuid() != 0 or not (MEMORY / "memory.limit_in_bytes").exists():
        pytest.skip("needs root and a cgroup v1 memory hierarchy")
    group = MEMORY / f"epochscope-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        (group / "memory.limit_in_bytes").write_text(str(LIMIT))
        yield group
    finally:
        group.rmdir()  # its only process has exited by then


def test_a_rank_in_a_1_gib_group_sends_its_limit(memory_group):
    inner = memory_group / "step_0"  # the limit is set above the rank's own group
    inner.mkdir()
    try:
        root = Path(__file__).resolve().parents[2]
        process = subprocess.Popen(
            [sys.executable, "-c", f"import time; time.sleep(0.3)\n{CHILD}"],
            stdout=subprocess.PIPE,
            text=True,
            cwd=root,
        )
        (inner / "cgroup.procs").write_text(str(process.pid))
        out, _ = process.communicate(timeout=60)
    finally:
        inner.rmdir()
    assert json.loads(out)[Workload.MEMORY_LIMIT_BYTES] == LIMIT
