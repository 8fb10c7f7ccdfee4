"""Findings on scenario runs stored through the write path: each rule's positive case beside
its near misses, so that no finding fires on an unlike comparison or a misread effect.

The runs are built by ``tests.support.run_builder`` (synthetic samples and events, as the agent and
the ranks write them) and stored in both the SQLite store and the in-memory reference.
"""

from __future__ import annotations

import pytest

from collector.analysis.epochs import build_report
from collector.findings.engine import Finding, run_findings
from tests.support.run_builder import NS, T0_NS, RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

MB = 1e6
DAY = 86_400 * NS


def findings_of(store, run_id: str, rule: str) -> list[Finding]:
    return [f for f in run_findings(store, run_id) if f.rule == rule]


def stored(make_store, *runs: RunBuilder):
    return make_store([p for run in runs for p in run.points()])


# --------------------------------------------------------------------------------------
# precision: only like runs are compared, and the text does not assume the faster one
# --------------------------------------------------------------------------------------


def precision_pair(fp16_mbps: float = 550, fp32_mbps: float = 430, **fp16) -> list[RunBuilder]:
    runs = []
    for index, (precision, mbps) in enumerate((("fp32", fp32_mbps), ("fp16", fp16_mbps))):
        settings = {"hosts": (f"{precision}-a", f"{precision}-b"), "precision": precision}
        settings |= fp16 if precision == "fp16" else {}
        run = RunBuilder(precision, t0_ns=T0_NS + index * DAY, **settings)
        per_host = mbps / 2 * MB
        run.epoch(100, 20_000, nfs_server_read=per_host, nfs_app_read=per_host)
        run.epoch(100, 20_000, nfs_app_read=per_host)
        runs.append(run)
    return runs


def test_precision_like_runs_compared_either_way(make_store):
    store = stored(make_store, *precision_pair(fp16_mbps=550, fp32_mbps=430))
    (finding,) = findings_of(store, "fp16", "precision_read_demand")
    assert finding.title == "FP16 reads storage 1.3x as fast as FP32"
    assert findings_of(store, "fp32", "precision_read_demand") == []
    # the other way round: FP32 is the faster reader, and the text says so plainly
    store = stored(make_store, *precision_pair(fp16_mbps=300, fp32_mbps=430))
    (finding,) = findings_of(store, "fp32", "precision_read_demand")
    assert finding.title == "FP32 reads storage 1.4x as fast as FP16"
    assert "faster arithmetic" not in finding.explanation.lower()


def test_precision_unlike_runs_never_compared(make_store):
    unlike = (
        {"batch_size": 128},  # batch per rank
        {"dataset_bytes": 45_000_000},  # another data set
        {"dataset_images": 256},
        {"image_size": 32},
        {"ranks_per_host": 2},  # world size
        {"framework": "mxnet"},
        {"model": "resnet101"},
    )
    for change in unlike:
        store = stored(make_store, *precision_pair(fp16_mbps=2000, fp32_mbps=30, **change))
        assert findings_of(store, "fp16", "precision_read_demand") == [], change
        assert findings_of(store, "fp32", "precision_read_demand") == [], change


# --------------------------------------------------------------------------------------
# scaling loss: worded for what changed, causes only what grew
# --------------------------------------------------------------------------------------


def scaling_pair(
    hosts: int,
    ranks_per_host: int,
    images_per_rank: int,
    gpus: bool = True,
    reads: tuple[tuple[int, int] | None, tuple[int, int] | None] = (None, None),
    **rates,
) -> list[RunBuilder]:
    """A 1-rank run (283 img/s) and one of ``hosts`` x ``ranks_per_host`` ranks; ``reads``:
    each rank's own (read_bytes, rchar) in the epoch, of the one and of the other."""
    one = RunBuilder("one", hosts=("one-a",), steps_per_epoch=5, gpus=gpus)
    one.epoch(100, 28_300, net_rx=1 * MB, net_tx=1 * MB, disk_read=6 * MB, reads=reads[0])
    many = RunBuilder(
        "many",
        hosts=tuple(f"many-{i}" for i in range(hosts)),
        ranks_per_host=ranks_per_host,
        steps_per_epoch=5,
        t0_ns=T0_NS + DAY,
        gpus=gpus,
    )
    many.epoch(100, images_per_rank, reads=reads[1], **rates)
    return [one, many]


def test_scaling_loss_on_one_node_does_not_blame_node_count(make_store):
    # 4 ranks x 20000 images / 100 s = 800 img/s of 4 x 283 = 1132: 71%
    runs = scaling_pair(1, 4, 20_000, net_rx=30 * MB, net_tx=30 * MB, disk_read=6 * MB)
    (finding,) = findings_of(stored(make_store, *runs), "many", "scaling_loss")
    assert finding.title.startswith("Scaling efficiency 71% on 4 GPUs")
    assert "node count" not in finding.title
    assert "grew with rank count" in finding.title
    assert finding.evidence["efficiency_percent"] == 100 * 800 / 1132


def test_scaling_loss_states_the_scaling_tables_images_per_second_lost(make_store):
    from collector.analysis.scaling import scaling_rows
    from collector.queries.query import scaling_table

    runs = scaling_pair(1, 4, 20_000, net_rx=30 * MB, net_tx=30 * MB, disk_read=6 * MB)
    store = stored(make_store, *runs)
    (finding,) = findings_of(store, "many", "scaling_loss")
    (row,) = [r for r in scaling_rows(store) if r["run_id"] == "many"]
    (shown,) = [r for r in scaling_table(store) if r["run_id"] == "many"]
    assert finding.evidence["lost_images_per_second"] == pytest.approx(1132 - 800)
    assert finding.evidence["lost_images_per_second"] == row["lost_images_per_second"]
    assert shown["lost_images_per_second"] == row["lost_images_per_second"]
    assert "332 images/s lost." in finding.explanation


def test_scaling_loss_across_nodes_names_node_count(make_store):
    runs = scaling_pair(2, 2, 20_000, ib_rcv=500 * MB, ib_xmit=500 * MB)
    (finding,) = findings_of(stored(make_store, *runs), "many", "scaling_loss")
    assert "grew with node count" in finding.title


def test_scaling_loss_never_lists_a_resource_that_fell(make_store):
    # storage reads per node fell (6 MB/s on one node -> 2 per node), fabric use grew
    runs = scaling_pair(2, 2, 20_000, disk_read=2 * MB, ib_rcv=500 * MB, ib_xmit=500 * MB)
    (finding,) = findings_of(stored(make_store, *runs), "many", "scaling_loss")
    resources = [c["resource"] for c in finding.evidence["changed"]]
    assert "storage_read_mbps_per_node" not in resources
    assert "fabric_bytes_per_image" in resources
    assert "storage reads" not in finding.explanation


def test_scaling_loss_calls_cpu_ranks_ranks(make_store):
    runs = scaling_pair(1, 4, 20_000, gpus=False, net_rx=30 * MB, net_tx=30 * MB)
    (finding,) = findings_of(stored(make_store, *runs), "many", "scaling_loss")
    assert "GPU" not in finding.title and "GPU" not in finding.explanation
    assert finding.title.startswith("Scaling efficiency 71% on 4 ranks")


def test_scaling_loss_silent_when_efficient(make_store):
    runs = scaling_pair(1, 4, 27_475)  # 1099 img/s: 97%
    assert findings_of(stored(make_store, *runs), "many", "scaling_loss") == []


# --------------------------------------------------------------------------------------
# the storage reads judged: the training's own when every rank of both runs sent them, else
# the hosts' (collector.findings.engine.judged_reads, one decision for every rule)
# --------------------------------------------------------------------------------------


def test_storage_bound_judges_the_trainings_own_reads(make_store):
    from tests.unit.test_findings import storage_run

    # each rank read 2,500 MB in the 100-s epoch 1: 50 MB/s per host of the hosts' 200
    run = storage_run("own", (1, 3), own=(2_500 * MB, 0))
    (finding,) = findings_of(stored(make_store, run), "own", "storage_bound")
    assert finding.evidence["reads_judged"] == "training"
    assert finding.evidence["host_epochs"][0]["storage_read_mbps"] == 50.0
    assert "the training's own processes read storage at 50 MB/s" in finding.explanation
    # the training itself read almost nothing (1 MB a rank): the hosts' 200 MB/s were
    # other processes', and the steps' instability is not the training waiting on storage
    quiet = storage_run("quiet", (1, 3), own=(1 * MB, 0))
    assert findings_of(stored(make_store, quiet), "quiet", "storage_bound") == []
    # no ranks' reads: the hosts' are judged, and said so
    (hosts,) = findings_of(stored(make_store, storage_run("h", (1, 3))), "h", "storage_bound")
    assert hosts.evidence["reads_judged"] == "hosts"
    assert "the hosts (every process) read storage at 200 MB/s" in hosts.explanation


def own_precision_pair(own_mbps: tuple[float, float], host_mbps: tuple[float, float]):
    """precision_pair's fp32 and fp16 runs (two hosts of one rank, 100-s epochs) whose ranks
    read ``own_mbps`` (fp32, fp16) per host in epoch 1 and whose hosts read ``host_mbps``."""
    runs = []
    for index, precision in enumerate(("fp32", "fp16")):
        run = RunBuilder(
            precision,
            hosts=(f"{precision}-a", f"{precision}-b"),
            precision=precision,
            t0_ns=T0_NS + index * DAY,
        )
        own = own_mbps[index]
        reads = (int(own * 100 * MB), int(own * 100 * MB) + int(MB)) if own is not None else None
        run.epoch(100, 20_000, disk_read=host_mbps[index] * MB, reads=reads)
        run.epoch(100, 20_000, reads=(0, int(MB)) if own is not None else None)
        runs.append(run)
    return runs


def test_precision_read_demand_judges_the_trainings_own_reads(make_store):
    # the hosts read alike (other processes' reads on top), the trainings 550 against 430
    store = stored(make_store, *own_precision_pair((215, 275), (600, 600)))
    (finding,) = findings_of(store, "fp16", "precision_read_demand")
    assert finding.evidence["reads_judged"] == "training"
    assert finding.evidence["storage_read_mbps"] == 550.0
    assert finding.evidence["other_storage_read_mbps"] == 430.0
    assert "the training's own reads" in finding.explanation
    assert finding.chart == "training_read_bytes"
    # the trainings read alike while the hosts' reads differ: nothing to say
    store = stored(make_store, *own_precision_pair((250, 250), (430, 700)))
    assert findings_of(store, "fp16", "precision_read_demand") == []
    # one run's ranks sent no reads: both runs are judged on the hosts' reads
    store = stored(make_store, *own_precision_pair((None, 250), (430, 700)))
    (finding,) = findings_of(store, "fp16", "precision_read_demand")
    assert finding.evidence["reads_judged"] == "hosts"
    assert finding.evidence["storage_read_mbps"] == 1400.0  # two hosts of 700
    assert "the hosts' storage reads" in finding.explanation


def test_scaling_loss_resources_judge_the_trainings_own_reads(make_store):
    # the ranks read 1 MB/s on one node, then 10 MB/s per rank on two nodes of two (20 per
    # node) while the hosts' disks read 6 then 2 MB/s: the training's reads grew
    one_rank, per_rank = (100 * int(MB), 101 * int(MB)), (1_000 * int(MB), 1_001 * int(MB))
    runs = scaling_pair(2, 2, 20_000, reads=(one_rank, per_rank), disk_read=2 * MB, net_rx=30 * MB)
    (finding,) = findings_of(stored(make_store, *runs), "many", "scaling_loss")
    assert finding.evidence["reads_judged"] == "training"
    storage = next(
        c for c in finding.evidence["changed"] if c["resource"] == "storage_read_mbps_per_node"
    )
    assert (storage["reference"], storage["run"]) == (1.0, 20.0)
    assert "(storage: the training's own reads" in finding.explanation
    # only the many-rank run's ranks sent reads: the hosts' are compared, and they fell
    runs = scaling_pair(2, 2, 20_000, reads=(None, per_rank), disk_read=2 * MB, net_rx=30 * MB)
    (finding,) = findings_of(stored(make_store, *runs), "many", "scaling_loss")
    assert finding.evidence["reads_judged"] == "hosts"
    resources = [c["resource"] for c in finding.evidence["changed"]]
    assert "storage_read_mbps_per_node" not in resources


# --------------------------------------------------------------------------------------
# cache warm-up: judged against the data set's size
# --------------------------------------------------------------------------------------


def small_dataset_run(first_mb: float, later_mb: float, dataset_bytes=45_000_000) -> RunBuilder:
    """The demo: a 45 MB data set on one host, 3 epochs of 20 s."""
    run = RunBuilder(
        "small", dataset_bytes=dataset_bytes, dataset_images=256, host_memory_bytes=24 * 10**9
    )
    run.epoch(20, 256, disk_read=first_mb / 20 * MB, cache_growth=first_mb / 20 * MB)
    run.epoch(20, 256, disk_read=later_mb / 20 * MB)
    run.epoch(20, 256, disk_read=later_mb / 20 * MB)
    return run


def test_cache_warmup_fires_on_the_demo(make_store):
    # epoch 1 read 64 MB of a 45 MB data set, epochs 2 and 3 nothing
    store = stored(make_store, small_dataset_run(64, 0))
    (finding,) = findings_of(store, "small", "cache_warmup")
    assert finding.evidence["first_epoch_storage_read_bytes"] == 64_000_000
    assert finding.evidence["first_epoch_read_to_dataset_ratio"] == round(64 / 45, 3)
    assert "45.0 MB" in finding.explanation


def test_cache_warmup_silent_when_epoch_1_read_little_of_the_data_set(make_store):
    # the data set was already cached: 5 MB of 45 MB in epoch 1
    store = stored(make_store, small_dataset_run(5, 0))
    assert findings_of(store, "small", "cache_warmup") == []


def test_cache_warmup_silent_while_later_epochs_keep_reading(make_store):
    # a data set larger than the cache: every epoch reads it again
    store = stored(make_store, small_dataset_run(64, 40))
    assert findings_of(store, "small", "cache_warmup") == []


# the training's own reads (ranks' /proc/<pid>/io) judged when every rank sent them: on a busy
# node the hosts' disks also carry other processes' reads


def own_reads_run(
    own_mb: tuple[float | None, ...],
    host_mb: tuple[float, ...],
    first_seconds: float = 20,
    shares: tuple[float, float, float] | None = None,
) -> RunBuilder:
    """A 45 MB data set on two hosts of two ranks, 20 s epochs (the first ``first_seconds``):
    each rank read ``own_mb[e]`` / 4 in epoch e (``None``: the ranks sent no reads), each
    host's disk ``host_mb[e]`` / 2."""
    run = RunBuilder(
        "own",
        hosts=("own-a", "own-b"),
        ranks_per_host=2,
        dataset_bytes=45_000_000,
        dataset_images=256,
        host_memory_bytes=24 * 10**9,
    )
    for index, (own, host) in enumerate(zip(own_mb, host_mb, strict=True)):
        per_rank = int(own / 4 * MB) if own is not None else None
        seconds = first_seconds if index == 0 else 20
        run.epoch(
            seconds,
            64,
            reads=(per_rank, per_rank + int(MB)) if per_rank is not None else None,
            shares=shares,
            disk_read=host / 2 / seconds * MB,
        )
    return run


def test_cache_warmup_judges_own_reads_while_the_hosts_reads_are_noisy(make_store):
    # the demo: the training read 67.4 MB, then 16 kB and 4 kB; the hosts' disks read 300 MB
    # in every epoch (other processes): their reads alone show no warm-up
    run = own_reads_run((67.4, 0.016, 0.004), (300, 320, 310))
    (finding,) = findings_of(stored(make_store, run), "own", "cache_warmup")
    assert finding.evidence["reads_judged"] == "training"
    assert finding.evidence["first_epoch_storage_read_bytes"] == 67_400_000
    assert finding.evidence["storage_read_bytes_by_epoch"] == {1: 67_400_000, 2: 16_000, 3: 4_000}
    assert finding.evidence["hosts_storage_read_bytes_by_epoch"] == {
        1: 300_000_000,
        2: 320_000_000,
        3: 310_000_000,
    }
    assert finding.evidence["first_epoch_storage_read_mbps"] == 67.4 / 20
    assert "the training's own reads" in finding.explanation
    assert "hosts' storage reads" not in finding.explanation
    assert finding.chart == "training_read_bytes"
    # the same hosts without the ranks' reads: the hosts' reads are judged, and show nothing
    host_only = own_reads_run((None, None, None), (300, 320, 310))
    assert findings_of(stored(make_store, host_only), "own", "cache_warmup") == []


def test_cache_warmup_without_own_reads_judges_the_hosts_reads(make_store):
    run = own_reads_run((None, None, None), (64, 0, 0))
    (finding,) = findings_of(stored(make_store, run), "own", "cache_warmup")
    assert finding.evidence["reads_judged"] == "hosts"
    assert finding.evidence["first_epoch_storage_read_bytes"] == 64_000_000
    assert "hosts_storage_read_bytes_by_epoch" not in finding.evidence
    assert "the hosts' storage reads" in finding.explanation
    assert finding.chart == "disk_read_mbps"


def test_cache_warmup_silent_when_own_reads_stay_flat(make_store):
    # the training reads 40 MB in every epoch (a data set not kept in the cache), while the
    # hosts' disks happen to read much in epoch 1 only: no warm-up
    run = own_reads_run((40, 40, 40), (300, 0, 0))
    assert findings_of(stored(make_store, run), "own", "cache_warmup") == []


def test_cache_warmup_judges_the_hosts_reads_unless_every_epoch_has_own_reads(make_store):
    # the ranks sent their reads in epoch 1 only: the hosts' reads are judged
    run = own_reads_run((67.4, None, None), (64, 0, 0))
    (finding,) = findings_of(stored(make_store, run), "own", "cache_warmup")
    assert finding.evidence["reads_judged"] == "hosts"


def test_the_rules_and_the_report_agree_on_the_trainings_own_reads(make_store):
    # one definition (collector.analysis.anatomy.epoch_reads): the report's training_read_bytes, the
    # cache warm-up's and the start-up's reads are the same numbers
    run = own_reads_run((67.4, 0.016, 0.004), (300, 320, 310), 60, shares=(0.7, 0.2, 0.0))
    store = stored(make_store, run)
    totals = {r.epoch: r.training_read_bytes for r in build_report(store, "own").total_rows()}
    (warm,) = findings_of(store, "own", "cache_warmup")
    (startup,) = findings_of(store, "own", "startup")
    assert totals == {1: 67_400_000, 2: 16_000, 3: 4_000}
    assert warm.evidence["storage_read_bytes_by_epoch"] == totals
    assert startup.evidence["first_read_bytes"] == totals[1]
    assert startup.evidence["settled_read_bytes"] == (totals[2] + totals[3]) / 2


def test_a_finding_points_at_a_declared_report_column():
    import pytest

    Finding("r", "info", "t", "e", chart="disk_read_mbps")
    with pytest.raises(ValueError, match="no report column"):
        Finding("r", "info", "t", "e", chart="disk_reads")
