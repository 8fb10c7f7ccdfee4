"""Findings rules (collector.findings.engine): each on stored data built for it, firing and not.

The runs are synthetic (no GPU, HCA or NFS client here): rates are constant per epoch, so
the evidence can be checked against hand arithmetic.
"""

from __future__ import annotations

import json
import re

import pytest

from collector.findings.engine import Finding, run_findings
from tests.support.run_builder import NS, T0_NS, RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

MB = 1e6
GB = 1e9


def findings_of(store, run_id: str, rule: str) -> list[Finding]:
    return [f for f in run_findings(store, run_id) if f.rule == rule]


def cached_after_first_epoch(run_id="warm", dataset_bytes=143 * GB, memory=384 * GB, **kw):
    """Like study 002/003: the first epoch reads the data set over NFS, later epochs hit
    the page cache."""
    run = RunBuilder(
        run_id, hosts=("n1", "n2"), dataset_bytes=dataset_bytes, host_memory_bytes=memory, **kw
    )
    run.epoch(100, 10_000, nfs_server_read=300 * MB, nfs_app_read=300 * MB, cache_growth=290 * MB)
    run.epoch(100, 10_000, nfs_server_read=6 * MB, nfs_app_read=300 * MB)
    run.epoch(100, 10_000, nfs_app_read=300 * MB)
    run.epoch(100, 10_000, nfs_app_read=300 * MB)
    return run


# --------------------------------------------------------------------------------------
# cache warm-up and data set size
# --------------------------------------------------------------------------------------


def test_cache_warmup_fires_when_reads_stop_after_epoch_1(make_store):
    store = make_store(cached_after_first_epoch().points())
    (finding,) = findings_of(store, "warm", "cache_warmup")
    # 143 GB data set on 384 GB hosts: later epochs measure memory, which it says (info:
    # a caveat for a storage measurement, not a fault of the run; issue 42's matrix)
    assert finding.severity == "info"
    assert "the epochs after the first measure memory, not storage" in finding.explanation
    assert finding.chart == "disk_read_mbps"
    evidence = finding.evidence
    # 2 hosts x 300 MB/s x 100 s
    assert evidence["first_epoch_storage_read_bytes"] == 60_000_000_000
    assert evidence["first_epoch_storage_read_mbps"] == 600.0
    # epoch 2 reads 2 x 6 MB/s x 100 s = 1.2 GB = 2% of epoch 1 -> settled from epoch 2;
    # the second half of epochs 2..4 (epochs 3, 4) read nothing
    assert evidence["settled_from_epoch"] == 2
    assert evidence["settled_storage_read_bytes_mean"] == 0
    assert evidence["storage_read_bytes_by_epoch"] == {
        1: 60_000_000_000,
        2: 1_200_000_000,
        3: 0,
        4: 0,
    }
    # 290 MB/s x 100 s per host
    assert evidence["first_epoch_page_cache_growth_bytes_per_host"] == 29_000_000_000
    assert evidence["page_cache_growth_to_dataset_ratio"] == 0.203  # 29 GB of 143 GB
    assert evidence["dataset_to_memory_ratio"] == pytest.approx(143 / 384, abs=1e-3)
    assert "measure memory, not storage" in finding.explanation


def test_cache_warmup_silent_on_random_tensors(make_store):
    """A ``--synthetic`` run reads no data set: what its epoch 1 read was the start-up's.
    On a real H200 (bench/gpu_check/results/h200-2026-11-28.md) torch's CUDA libraries,
    loaded lazily in the first steps, made 305 MB in epoch 1 and 0 later, and this rule said
    the data set had settled in the page cache."""
    run = cached_after_first_epoch(data_format="synthetic")
    assert findings_of(make_store(run.points()), "warm", "cache_warmup") == []


def test_cache_warmup_is_info_when_the_data_set_is_5x_ram(make_store):
    # reads fell, but the data set (200 GB, of which epoch 1 read 60 GB) is over 5x the
    # hosts' RAM (32 GB): later epochs still measure storage, not memory
    run = cached_after_first_epoch(dataset_bytes=200 * GB, memory=32 * GB)
    (finding,) = findings_of(make_store(run.points()), "warm", "cache_warmup")
    assert finding.severity == "info"
    assert "measure memory" not in finding.explanation


def test_cache_warmup_silent_while_every_epoch_reads_storage(make_store):
    run = RunBuilder("cold", dataset_bytes=4000 * GB, host_memory_bytes=384 * GB)
    for _ in range(3):
        run.epoch(100, 10_000, nfs_server_read=300 * MB, nfs_app_read=300 * MB)
    store = make_store(run.points())
    assert findings_of(store, "cold", "cache_warmup") == []
    assert findings_of(store, "cold", "dataset_fits_in_memory") == []


def test_dataset_fits_in_memory_is_info_when_it_only_states_the_configuration(make_store):
    def finding_for(dataset_gb: float) -> list[Finding]:
        run = RunBuilder(
            f"d{dataset_gb}", dataset_bytes=dataset_gb * GB, host_memory_bytes=384 * GB
        )
        run.epoch(10, 100)
        return findings_of(make_store(run.points()), f"d{dataset_gb}", "dataset_fits_in_memory")

    (fits,) = finding_for(143)
    assert fits.severity == "info"  # fits outright: the healthy case (warning: a limit)
    assert fits.title == "The data set fits in a host's RAM"
    assert fits.evidence["dataset_to_memory_ratio"] == pytest.approx(0.372, abs=1e-3)
    (partly,) = finding_for(1000)  # 2.6x RAM: still below MLPerf Storage's 5x
    assert partly.severity == "info"
    assert finding_for(1920) == []  # exactly 5 x 384 GB


# --------------------------------------------------------------------------------------
# fabric carries storage
# --------------------------------------------------------------------------------------


def test_fabric_carries_storage_when_rx_minus_tx_matches_nfs_reads(make_store):
    run = RunBuilder("fabric", hosts=("n1", "n2"))
    # study 003: ~300 MB/s receive surplus per node = the storage read rate
    run.epoch(
        100,
        10_000,
        nfs_server_read={"n1": 300 * MB, "n2": 320 * MB},
        nfs_app_read=320 * MB,
        ib_rcv={"n1": 500 * MB, "n2": 505 * MB},
        ib_xmit=200 * MB,
    )
    (finding,) = findings_of(make_store(run.points()), "fabric", "fabric_carries_storage")
    assert finding.severity == "info" and finding.chart == "rx_minus_tx_mbps"
    evidence = finding.evidence
    # the strongest reader: n2, 505 - 200 = 305 MB/s vs 320 MB/s NFS, 4.7% apart
    assert (evidence["host"], evidence["fabric"]) == ("n2", "ib")
    assert evidence["rx_minus_tx_mbps"] == 305.0
    assert evidence["nfs_server_read_mbps"] == 320.0
    assert evidence["relative_difference"] == pytest.approx(15 / 320, abs=1e-4)
    assert (evidence["matching_host_epochs"], evidence["compared_host_epochs"]) == (2, 2)


def test_fabric_carries_storage_on_the_nics_without_infiniband(make_store):
    run = RunBuilder("nic")
    run.epoch(100, 10_000, nfs_server_read=100 * MB, net_rx=150 * MB, net_tx=45 * MB)
    (finding,) = findings_of(make_store(run.points()), "nic", "fabric_carries_storage")
    assert finding.evidence["fabric"] == "net"
    assert finding.evidence["rx_minus_tx_mbps"] == 105.0  # within 5% of 100


def test_fabric_silent_when_storage_is_not_on_the_fabric(make_store):
    run = RunBuilder("apart", hosts=("n1", "n2"))
    # receive = send: storage goes elsewhere (another network), 300 MB/s NFS reads
    run.epoch(100, 10_000, nfs_server_read=300 * MB, ib_rcv=500 * MB, ib_xmit=500 * MB)
    assert findings_of(make_store(run.points()), "apart", "fabric_carries_storage") == []


# --------------------------------------------------------------------------------------
# storage bound and input bound
# --------------------------------------------------------------------------------------


def storage_run(
    run_id: str, uncached_pattern: tuple[float, ...] | None, own: tuple[float, float] | None = None
) -> RunBuilder:
    """Two hosts of two ranks reading 200 MB/s from NFS with 20% iowait in epoch 1, cached
    in epoch 2; ``own``: each rank's own storage reads in epoch 1 and 2 (bytes)."""
    run = RunBuilder(run_id, hosts=("n1", "n2"), ranks_per_host=2, steps_per_epoch=6)
    reads = [(int(b), int(b + MB)) for b in own] if own is not None else [None, None]
    run.epoch(
        100,
        6_000,
        step_pattern=uncached_pattern,
        nfs_server_read=200 * MB,
        nfs_app_read=200 * MB,
        cpu_busy=0.3,
        cpu_iowait=0.2,
        reads=reads[0],
    )
    run.epoch(60, 6_000, nfs_app_read=200 * MB, cpu_busy=0.6, reads=reads[1])
    return run


def test_storage_bound_when_iowait_unstable_steps_and_reads_coincide(make_store):
    # steps alternate 1 and 3 time units: images/s alternate r and r/3,
    # mean 2r/3, standard deviation r/3 -> coefficient of variation 0.5
    store = make_store(storage_run("unstable", (1, 3)).points())
    (finding,) = findings_of(store, "unstable", "storage_bound")
    assert finding.severity == "warning" and finding.chart == "images_per_second"
    assert finding.evidence["epochs"] == [1]
    first = finding.evidence["host_epochs"][0]
    assert first["step_images_per_second_cv"] == pytest.approx(0.5)
    assert first["iowait_percent"] == 20.0
    assert first["storage_read_mbps"] == 200.0
    assert finding.evidence["cv_without_storage_reads"] == 0.0  # epoch 2, cached
    assert len(finding.evidence["host_epochs"]) == 2  # n1 and n2


def test_storage_bound_silent_when_steps_are_steady(make_store):
    store = make_store(storage_run("steady", None).points())
    assert findings_of(store, "steady", "storage_bound") == []


def test_storage_bound_silent_when_instability_is_not_while_reading(make_store):
    run = RunBuilder("jitter", steps_per_epoch=6)
    run.epoch(100, 6_000, step_pattern=(1, 3), cpu_iowait=0.2)  # no storage reads at all
    assert findings_of(make_store(run.points()), "jitter", "storage_bound") == []


def input_run(run_id: str, cpu_busy: float, gpu_util: float) -> RunBuilder:
    run = RunBuilder(run_id, ranks_per_host=4)
    run.epoch(100, 10_000, cpu_busy=cpu_busy, gpu_util=gpu_util)
    return run


def test_input_bound_when_cpus_saturate_and_gpus_idle(make_store):
    store = make_store(input_run("cpu", 0.95, 40).points())
    (finding,) = findings_of(store, "cpu", "input_bound")
    assert finding.chart == "cpu_util_percent"
    assert finding.evidence["cpu_util_percent_mean"] == 95.0
    # 99 s at 40% and the last second ramping to the idle 0% read at 100 s: 39.8
    assert finding.evidence["gpu_util_percent_mean"] == pytest.approx(39.8)


@pytest.mark.parametrize(("cpu_busy", "gpu_util"), [(0.95, 95), (0.5, 40)])
def test_input_bound_silent_otherwise(make_store, cpu_busy, gpu_util):
    store = make_store(input_run("fine", cpu_busy, gpu_util).points())
    assert findings_of(store, "fine", "input_bound") == []


# --------------------------------------------------------------------------------------
# scaling loss
# --------------------------------------------------------------------------------------


def scaling_runs(eight_gpu_images_per_rank: int) -> list[RunBuilder]:
    day = 86_400 * NS

    def run(run_id, hosts, ranks, images, t0, **rates):
        builder = RunBuilder(
            run_id,
            hosts=tuple(f"{run_id}-n{i}" for i in range(1, hosts + 1)),
            ranks_per_host=ranks,
            steps_per_epoch=5,
            t0_ns=t0,
        )
        builder.epoch(100, images, **rates)
        return builder

    return [
        run("p1", 1, 1, 28_300, T0_NS, net_rx=1 * MB, net_tx=1 * MB),  # 283 img/s
        run("p4", 1, 4, 27_475, T0_NS + day, net_rx=1 * MB, net_tx=1 * MB),  # 1099 img/s
        run(
            "p8",
            2,
            4,
            eight_gpu_images_per_rank,
            T0_NS + 2 * day,
            ib_rcv=500 * MB,
            ib_xmit=500 * MB,
        ),
    ]


def test_scaling_loss_names_the_resource_that_grew_with_nodes(make_store):
    # 8 ranks x 22640 images / 100 s = 1811.2 img/s of an ideal 283 x 8 = 2264: 80%
    runs = scaling_runs(22_640)
    store = make_store([p for run in runs for p in run.points()])
    (finding,) = findings_of(store, "p8", "scaling_loss")
    assert finding.severity == "warning"
    evidence = finding.evidence
    assert (evidence["efficiency_percent"], evidence["ideal"]) == (80, 2264.0)
    assert evidence["reference_run"] == "p4"  # the single-node run with most GPUs
    changed = {c["resource"]: c for c in evidence["changed"]}
    # p4: NIC 2 MB/s x 100 s = 200 MB over 4 x 27475 images = 1819.8 B/image
    # p8: IB 2 hosts x 1000 MB/s x 100 s = 200 GB over 8 x 22640 images = 1104240.3 B/image
    fabric = changed["fabric_bytes_per_image"]
    assert (fabric["reference"], fabric["run"]) == (1819.8, 1104240.3)
    assert finding.title.startswith("Scaling efficiency 80% on 8 GPUs")
    assert finding.chart == "rx_minus_tx_mbps"
    # the 1-GPU and intra-node runs scale fine: nothing to say about them
    assert findings_of(store, "p4", "scaling_loss") == []


def test_scaling_loss_silent_at_92_percent(make_store):
    # 8 x 25937.5 would be 2075 img/s; 25940 per rank -> 2075.2 img/s, 92%
    runs = scaling_runs(25_940)
    store = make_store([p for run in runs for p in run.points()])
    assert findings_of(store, "p8", "scaling_loss") == []


def test_findings_are_json_ready_and_most_severe_first(make_store):
    # under a 100 GB memory limit of its own, the 143 GB set fits the hosts' RAM, not the
    # limit: that warning comes before cache_warmup's info, though the engine runs it later
    limit = {"memory_limit_bytes": 100 * GB}
    store = make_store(cached_after_first_epoch(run_start_fields=limit).points())
    findings = run_findings(store, "warm")
    assert [f.rule for f in findings] == ["dataset_fits_in_memory", "cache_warmup"]
    assert [f.severity for f in findings] == ["warning", "info"]
    json.dumps([f.to_dict() for f in findings], allow_nan=False)


# --------------------------------------------------------------------------------------
# precision and read demand
# --------------------------------------------------------------------------------------


def precision_runs(fp16_mbps: float, fp16_batch: int = 64, **fp16) -> list[RunBuilder]:
    """Study 003, two nodes: FP16 read ~550 MB/s where FP32 read 430, the two runs alike in
    everything but precision (``fp16`` overrides one of the FP16 run's settings)."""
    day = 86_400 * NS
    runs = []
    for run_id, precision, batch, mbps, images, t0, extra in (
        ("fp32", "fp32", 64, 430, 20_000, T0_NS, {}),
        ("fp16", "fp16", fp16_batch, fp16_mbps, 36_000, T0_NS + day, fp16),
    ):
        run = RunBuilder(
            run_id,
            hosts=(f"{run_id}-a", f"{run_id}-b"),
            precision=precision,
            batch_size=batch,
            t0_ns=t0,
            **extra,
        )
        half = mbps / 2 * MB  # per host: the two nodes together read `mbps`
        run.epoch(100, images, nfs_server_read=half, nfs_app_read=half)
        run.epoch(100, images, nfs_app_read=half)
        runs.append(run)
    return runs


def test_precision_read_demand_fires_on_the_faster_reader(make_store):
    store = make_store([p for run in precision_runs(550) for p in run.points()])
    (finding,) = findings_of(store, "fp16", "precision_read_demand")
    assert finding.title == "FP16 reads storage 1.3x as fast as FP32"
    evidence = finding.evidence
    assert (evidence["storage_read_mbps"], evidence["other_storage_read_mbps"]) == (550, 430)
    assert evidence["ratio"] == pytest.approx(550 / 430, abs=1e-3)  # 1.279
    # 2 hosts x 36000 images / 100 s against 2 x 20000 / 100 s
    assert (evidence["images_per_second"], evidence["other_images_per_second"]) == (720, 400)
    assert finding.chart == "nfs_server_read_mbps"
    # neutral about which precision is faster
    assert "faster arithmetic" not in finding.explanation.lower()
    # the FP32 run reads less: nothing to say about it
    assert findings_of(store, "fp32", "precision_read_demand") == []


def test_precision_read_demand_silent_when_reads_are_alike(make_store):
    store = make_store([p for run in precision_runs(450) for p in run.points()])
    assert findings_of(store, "fp16", "precision_read_demand") == []  # 450 / 430 = 1.05


def test_a_small_data_set_is_told_in_mb_not_as_zero_gb(make_store):
    # the make-demo data set: 45.6 MB on 24 GB hosts -> "45.6 MB", never "0.0 GB"
    run = cached_after_first_epoch(run_id="small", dataset_bytes=45_600_000, memory=24 * GB)
    texts = [f.explanation for f in run_findings(make_store(run.points()), "small")]
    assert any("45.6 MB" in text for text in texts), texts
    assert not any(re.search(r"(?<![\d.])0\.0 GB", text) for text in texts)
    assert any("(0.0019x)" in text for text in texts)  # 45.6 MB / 24 GB
