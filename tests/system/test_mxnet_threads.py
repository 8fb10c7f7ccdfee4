"""The bundled MXNet trainer sets its compute threads as the TensorFlow and PyTorch ones do
(the host's cores shared by its ranks), and its run_start says so (issue 45, item 5): its
2-rank run on 2 cores no longer reads as 2 x 2 threads, oversubscribed."""

from __future__ import annotations

import os

import pytest

from contract.schema import Workload
from workloads.record.cpus import MXNET_THREADS_ENV, cpu_fields


def test_set_in_the_program_and_reported(monkeypatch):
    mx = pytest.importorskip("mxnet")
    from workloads.train.mx_train import set_compute_threads

    for name in ("OMP_NUM_THREADS", MXNET_THREADS_ENV):  # set, then removed: restored after
        monkeypatch.setenv(name, "0")
        monkeypatch.delenv(name)
    cpus = len(os.sched_getaffinity(0))
    threads = max(1, cpus // 2)  # 2 ranks on this host
    set_compute_threads(mx, threads)
    assert float(mx.nd.ones((4, 4)).sum().asscalar()) == 16.0  # MXNet still computes
    fields = cpu_fields()
    assert fields[Workload.CPU_THREADS] == threads
    if threads != cpus:
        assert fields[Workload.CPU_THREADS_SOURCE] == "set in the program"
