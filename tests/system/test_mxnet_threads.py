"""The bundled MXNet trainer sets its compute threads as the TensorFlow and PyTorch ones do
(the host's cores shared by its ranks), and its run_start says so (issue 45, item 5): its
2-rank run on 2 cores no longer reads as 2 x 2 threads, oversubscribed.

Checked in a fresh interpreter that imports MXNet alone: a rank's process holds one
framework, and ``cpu_fields`` reads the threads of whichever framework is loaded (in this
suite's process PyTorch and TensorFlow are loaded by earlier tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

CHECK = """
import json, os, sys
import mxnet as mx
from contract.schema import Workload
from workloads.record.cpus import MXNET_THREADS_ENV, cpu_fields
from workloads.train.mx_train import set_compute_threads
for name in ("OMP_NUM_THREADS", MXNET_THREADS_ENV):
    os.environ.pop(name, None)
set_compute_threads(mx, int(sys.argv[1]))
assert float(mx.nd.ones((4, 4)).sum().asscalar()) == 16.0  # MXNet still computes
fields = cpu_fields()
print(json.dumps({"threads": fields[Workload.CPU_THREADS],
                  "source": fields[Workload.CPU_THREADS_SOURCE]}))
"""


def test_set_in_the_program_and_reported(repo_env):
    pytest.importorskip("mxnet")
    cpus = len(os.sched_getaffinity(0))
    threads = max(1, cpus // 2)  # 2 ranks on this host
    env = {k: v for k, v in repo_env.items() if k != "OMP_NUM_THREADS"}
    done = subprocess.run(
        [sys.executable, "-c", CHECK, str(threads)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    fields = json.loads(done.stdout.strip().splitlines()[-1])
    assert fields["threads"] == threads
    if threads != cpus:
        assert fields["source"] == "set in the program"
