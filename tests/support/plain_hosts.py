"""Runs on ordinary hosts, for the dashboard's tests and pictures: no NFS mount, no
InfiniBand port, no GPU; a local disk, a NIC that carries nothing, CPU ranks.

``PLAIN_RUN``: one host, three 60-s epochs of 4 ranks; the first 10 of epoch 1's 20 steps
are warm-up (not timed, no step events), the page cache grows by 0.5 MB/s in epoch 1
(30 MB on a 2 GB level). ``HOSTILE_RUN``: two hosts, one of them and the framework
named with HTML that plotly would make a link of (``HOSTILE``); its group has a 1-process
run (``HOSTILE_BASELINE``) so the scaling page draws both. ``ORPHAN_RUN``: 2 processes in a
group without a 1-process run (no efficiency).
"""

from __future__ import annotations

from pathlib import Path

from collector.store import SqliteStore
from tests.support.run_builder import NS, T0_NS, RunBuilder

PLAIN_RUN = "plain-cpu"
PLAIN_HOST = "laptop"
HOSTILE = '<a href="https://evil.example/" target="_top">x</a>'
HOSTILE_HREF = "https://evil.example/"
HOSTILE_RUN = "hostile-2proc"
HOSTILE_BASELINE = "hostile-1proc"
ORPHAN_RUN = "orphan-2proc"
EPOCH_SECONDS = 60.0
WARMUP_STEPS = 10
STEPS_PER_EPOCH = 20


def plain_run() -> RunBuilder:
    builder = RunBuilder(
        PLAIN_RUN,
        framework="pytorch",
        hosts=(PLAIN_HOST,),
        ranks_per_host=4,
        gpus=False,
        nfs=False,
        steps_per_epoch=STEPS_PER_EPOCH,
        warmup_steps=WARMUP_STEPS,
        warmup_step_events=False,
        t0_ns=T0_NS + 10 * 3600 * NS,
    )
    builder.epoch(
        EPOCH_SECONDS, 6_000, disk_read=50e6, cache_growth=0.5e6, cpu_busy=0.9, cpu_iowait=0.02
    )
    for _ in range(2):
        builder.epoch(EPOCH_SECONDS, 6_000, cpu_busy=0.95)
    return builder


def hostile_runs() -> list[RunBuilder]:
    out = []
    for index, (run_id, hosts) in enumerate(
        ((HOSTILE_BASELINE, (HOSTILE,)), (HOSTILE_RUN, (HOSTILE, "node2")))
    ):
        builder = RunBuilder(
            run_id,
            framework=HOSTILE,
            hosts=hosts,
            gpus=False,
            nfs=False,
            t0_ns=T0_NS + (20 + index) * 3600 * NS,
        )
        for _ in range(2):
            builder.epoch(30.0, 3_000, disk_read=10e6, net_rx=5e6, net_tx=1e6, cpu_busy=0.8)
        out.append(builder)
    return out


def orphan_run() -> RunBuilder:
    builder = RunBuilder(
        ORPHAN_RUN, framework="jax", hosts=("solo",), ranks_per_host=2, gpus=False, nfs=False,
        t0_ns=T0_NS + 30 * 3600 * NS,
    )  # fmt: skip
    for _ in range(2):
        builder.epoch(30.0, 3_000, cpu_busy=0.8)
    return builder


def build_plain_store(path: Path) -> SqliteStore:
    store = SqliteStore(path)
    for builder in [plain_run(), *hostile_runs(), orphan_run()]:
        store.write_points(builder.points())
    return store
