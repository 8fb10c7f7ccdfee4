"""Each findings rule's detection returns typed evidence (beside it, in its family's module) with
the values of the scenario, and its wording (``collector.findings.base.words``) is a pure function
of that evidence: the same evidence always makes the same finding, with no store at all.

The scenarios are those of tests/unit/test_findings.py and
tests/integration/test_findings_scenarios.py
(synthetic runs stored through the write path: no GPU, HCA or NFS client here), so the
expected values are hand arithmetic.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest

from collector.findings import base as findings_words
from collector.findings.base import evidence_json, words
from collector.findings.cache import CacheWarmup, DatasetFitsInMemory
from collector.findings.engine import DETECTORS, RULES, run_context, run_findings
from collector.findings.input import BusyHostEpoch, InputBound
from collector.findings.scaling import RateGrowth, ResourceUse, ScalingLoss
from collector.findings.storage import (
    FabricCarriesStorage,
    PrecisionReadDemand,
    StorageBound,
    UnstableHostEpoch,
)
from tests.integration.test_findings_scenarios import scaling_pair, small_dataset_run, stored
from tests.support.run_builder import RunBuilder
from tests.unit.test_findings import (
    cached_after_first_epoch,
    input_run,
    precision_runs,
    scaling_runs,
    storage_run,
)

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

MB = 1e6
GB = 1e9
approx = pytest.approx


def detect(store, run_id: str, rule: str):
    return DETECTORS[rule](run_context(store, run_id))


# --------------------------------------------------------------------------------------
# detection: typed evidence with the scenario's values
# --------------------------------------------------------------------------------------


def test_cache_warmup_evidence(make_store):
    store = make_store(cached_after_first_epoch().points())
    found = detect(store, "warm", "cache_warmup")
    # 2 hosts x 300 MB/s x 100 s in epoch 1; epoch 2 reads 2 x 6 MB/s x 100 s; 290 MB/s of
    # page cache growth per host; a 143 GB data set on 384 GB hosts
    assert found == CacheWarmup(
        first_epoch=1,
        first_epoch_storage_read_bytes=60_000_000_000,
        first_epoch_storage_read_mbps=600.0,
        settled_from_epoch=2,
        settled_storage_read_bytes_mean=0.0,
        settled_to_first_ratio=0.0,
        first_epoch_read_to_dataset_ratio=approx(60 / 143),
        storage_read_bytes_by_epoch={1: 60_000_000_000, 2: 1_200_000_000, 3: 0, 4: 0},
        first_epoch_page_cache_growth_bytes_per_host=29_000_000_000,
        page_cache_growth_to_dataset_ratio=approx(29 / 143),
        dataset_bytes=143 * GB,
        host_memory_bytes=384 * GB,
        dataset_to_memory_ratio=approx(143 / 384),
    )
    assert found.measures_memory


def test_cache_warmup_evidence_of_the_demo_and_its_near_miss(make_store):
    found = detect(stored(make_store, small_dataset_run(64, 0)), "small", "cache_warmup")
    assert (found.first_epoch_storage_read_bytes, found.first_epoch_storage_read_mbps) == (
        64_000_000,
        3.2,
    )
    assert found.first_epoch_read_to_dataset_ratio == approx(64 / 45)
    assert found.first_epoch_page_cache_growth_bytes_per_host == approx(64_000_000)
    assert found.dataset_to_memory_ratio == approx(45e6 / 24e9)  # exact, not 0.002
    assert found.measures_memory
    # 5 MB of the 45 MB data set in epoch 1: it was cached already
    assert detect(stored(make_store, small_dataset_run(5, 0)), "small", "cache_warmup") is None


def test_dataset_fits_in_memory_evidence(make_store):
    def found(dataset_gb: float):
        run = RunBuilder(
            f"d{dataset_gb}", dataset_bytes=dataset_gb * GB, host_memory_bytes=384 * GB
        )
        run.epoch(10, 100)
        return detect(make_store(run.points()), f"d{dataset_gb}", "dataset_fits_in_memory")

    fits = found(143)
    assert fits == DatasetFitsInMemory(143 * GB, 384 * GB, approx(143 / 384))
    assert fits.fits
    assert not found(1000).fits  # 2.6x RAM
    assert found(1920) is None  # exactly 5 x 384 GB


def test_fabric_carries_storage_evidence(make_store):
    run = RunBuilder("fabric", hosts=("n1", "n2"))
    run.epoch(
        100,
        10_000,
        nfs_server_read={"n1": 300 * MB, "n2": 320 * MB},
        nfs_app_read=320 * MB,
        ib_rcv={"n1": 500 * MB, "n2": 505 * MB},
        ib_xmit=200 * MB,
    )
    # the strongest NFS reader, n2: 505 - 200 = 305 MB/s against 320 MB/s of NFS reads
    assert detect(make_store(run.points()), "fabric", "fabric_carries_storage") == (
        FabricCarriesStorage(
            host="n2",
            epoch=1,
            fabric="ib",
            rcv_mbps=505.0,
            xmit_mbps=200.0,
            rx_minus_tx_mbps=305.0,
            nfs_server_read_mbps=320.0,
            relative_difference=approx(15 / 320),
            matching_host_epochs=2,
            compared_host_epochs=2,
        )
    )
    apart = RunBuilder("apart", hosts=("n1", "n2"))
    apart.epoch(100, 10_000, nfs_server_read=300 * MB, ib_rcv=500 * MB, ib_xmit=500 * MB)
    assert detect(make_store(apart.points()), "apart", "fabric_carries_storage") is None


def test_storage_bound_evidence(make_store):
    # steps alternate 1 and 3 time units: images/s r and r/3, coefficient of variation 0.5
    found = detect(
        make_store(storage_run("unstable", (1, 3)).points()), "unstable", "storage_bound"
    )
    unstable = [UnstableHostEpoch(host, 1, 20.0, approx(0.5), 200.0) for host in ("n1", "n2")]
    assert found == StorageBound(
        epochs=[1], host_epochs=unstable, worst=unstable[0], cv_without_storage_reads=0.0
    )
    steady = make_store(storage_run("steady", None).points())
    assert detect(steady, "steady", "storage_bound") is None


def test_input_bound_evidence(make_store):
    found = detect(make_store(input_run("cpu", 0.95, 40).points()), "cpu", "input_bound")
    # 99 s at 40% and the last second ramping to the idle 0% read at 100 s: 39.8
    assert found == InputBound(
        hosts=["node1"],
        epochs=[1],
        cpu_util_percent_mean=approx(95.0),
        gpu_util_percent_mean=approx(39.8),
        host_epochs=[BusyHostEpoch("node1", 1, approx(95.0), approx(39.8))],
    )
    fine = make_store(input_run("fine", 0.95, 95).points())
    assert detect(fine, "fine", "input_bound") is None


def test_scaling_loss_evidence_across_nodes(make_store):
    store = make_store([p for run in scaling_runs(22_640) for p in run.points()])
    found = detect(store, "p8", "scaling_loss")
    # 8 ranks x 22640 images / 100 s = 1811.2 img/s of 8 x 283 = 2264
    assert (found.gpus, found.nodes, found.scope) == (8, 2, "inter-node")
    assert (found.images_per_second, found.ideal) == (approx(1811.2), approx(2264.0))
    assert found.efficiency_percent == approx(80.0)
    assert (found.reference_run, found.reference_gpus, found.reference_nodes) == ("p4", 4, 1)
    assert found.across_nodes and found.on_gpus
    # fabric bytes per image: p4's NICs 200 MB over 4 x 27475 images, p8's InfiniBand
    # 200 GB over 8 x 22640
    assert isinstance(found.reference_resources, ResourceUse)
    assert found.changed[0] == RateGrowth(
        "fabric_bytes_per_image", 1819.8, 1104240.3, approx(1104240.3 / 1819.8)
    )
    assert [c.resource for c in found.changed] == ["fabric_bytes_per_image"]
    assert detect(store, "p4", "scaling_loss") is None  # 97%: nothing to say


def test_scaling_loss_evidence_of_cpu_ranks_on_one_node(make_store):
    runs = scaling_pair(1, 4, 20_000, gpus=False, net_rx=30 * MB, net_tx=30 * MB)
    found = detect(stored(make_store, *runs), "many", "scaling_loss")
    assert found.efficiency_percent == approx(100 * 800 / 1132)
    assert (found.reference_run, found.on_gpus, found.across_nodes) == ("one", False, False)
    # a resource that fell is no cause: storage reads per node are not among the changes
    runs = scaling_pair(2, 2, 20_000, disk_read=2 * MB, ib_rcv=500 * MB, ib_xmit=500 * MB)
    found = detect(stored(make_store, *runs), "many", "scaling_loss")
    assert [c.resource for c in found.changed] == ["fabric_bytes_per_image"]
    assert found.run_resources.storage_read_mbps_per_node < (
        found.reference_resources.storage_read_mbps_per_node
    )


def test_precision_read_demand_evidence(make_store):
    store = make_store([p for run in precision_runs(550) for p in run.points()])
    assert detect(store, "fp16", "precision_read_demand") == PrecisionReadDemand(
        precision="fp16",
        other_run="fp32",
        other_precision="fp32",
        batch_size=64,
        other_batch_size=64,
        storage_read_mbps=550.0,
        other_storage_read_mbps=430.0,
        images_per_second=720.0,
        other_images_per_second=400.0,
        ratio=approx(550 / 430),
        epoch=1,
        nfs_read_most=True,
    )
    assert detect(store, "fp32", "precision_read_demand") is None
    alike = make_store([p for run in precision_runs(450) for p in run.points()])
    assert detect(alike, "fp16", "precision_read_demand") is None  # 1.05x


# --------------------------------------------------------------------------------------
# wording: a pure function of the evidence
# --------------------------------------------------------------------------------------


def every_rules_evidence(make_store) -> list:
    stores = [
        (make_store(cached_after_first_epoch().points()), "warm"),
        (make_store(storage_run("unstable", (1, 3)).points()), "unstable"),
        (make_store(input_run("cpu", 0.95, 40).points()), "cpu"),
        (make_store([p for run in scaling_runs(22_640) for p in run.points()]), "p8"),
        (make_store([p for run in precision_runs(550) for p in run.points()]), "fp16"),
    ]
    fabric = RunBuilder("fabric")
    fabric.epoch(100, 10_000, nfs_server_read=100 * MB, net_rx=150 * MB, net_tx=45 * MB)
    stores.append((make_store(fabric.points()), "fabric"))
    restart = RunBuilder("restart", framework="pytorch", steps_per_epoch=20)
    for _ in range(3):  # every epoch's first step 1.5 s, the others 0.1 s
        restart.epoch(3.4, 1280, step_pattern=(15.0,) + (1.0,) * 19)
    stores.append((make_store(restart.points()), "restart"))
    found = []
    for store, run_id in stores:
        context = run_context(store, run_id)
        found += [e for detect in DETECTORS.values() if (e := detect(context)) is not None]
    return found


def test_a_rule_is_its_detection_worded(make_store):
    evidence = every_rules_evidence(make_store)
    assert {type(e).__name__ for e in evidence} == {
        "CacheWarmup",
        "DatasetFitsInMemory",
        "FabricCarriesStorage",
        "StorageBound",
        "InputBound",
        "EpochRestart",
        "ScalingLoss",
        "PrecisionReadDemand",
    }
    assert [r.__name__ for r in RULES] == list(DETECTORS)
    # what run_findings says is exactly the wording of what the detectors found
    store = make_store([p for run in precision_runs(550) for p in run.points()])
    context = run_context(store, "fp16")
    said = [f for f in run_findings(store, "fp16") if f.rule in DETECTORS]
    worded = [words(e) for d in DETECTORS.values() if (e := d(context)) is not None]
    assert sorted(said, key=lambda f: f.rule) == sorted(worded, key=lambda f: f.rule)


def test_wording_is_a_pure_function_of_the_evidence(make_store):
    for evidence in every_rules_evidence(make_store):
        kept = copy.deepcopy(evidence)
        finding = words(evidence)
        assert words(kept) == finding  # an equal copy: the same finding
        assert evidence == kept  # nothing changed in the evidence
        assert finding.evidence == evidence_json(evidence)
        assert finding.rule in DETECTORS


def test_wording_needs_no_store():
    # evidence made by hand, as a test or another tool would: the words follow from it
    found = ScalingLoss(
        gpus=4,
        nodes=1,
        images_per_second=800.0,
        ideal=1132.0,
        efficiency_percent=100 * 800 / 1132,
        scope="intra-node",
        lost_images_per_second=1132.0 - 800.0,
        reference_run="one",
        reference_gpus=1,
        reference_nodes=1,
        reference_resources=ResourceUse(1000.0, 6.0, 50.0, None),
        run_resources=ResourceUse(3000.0, 6.0, 55.0, None),
        changed=[RateGrowth("fabric_bytes_per_image", 1000.0, 3000.0, 3.0)],
        on_gpus=False,
    )
    finding = words(found)
    assert finding.title == (
        "Scaling efficiency 71% on 4 ranks: network bytes per image grew with rank count"
    )
    assert finding.severity == "critical"  # below 75%
    assert "ideal 1,132 (1 x 4): 71% efficiency, 332 images/s lost." in finding.explanation
    assert "network bytes per image: 1,000 -> 3,000 (3.00x)" in finding.explanation
    assert finding.chart == "rx_minus_tx_mbps"
    on_gpus = words(dataclasses.replace(found, on_gpus=True, across_nodes=True, nodes=2))
    assert on_gpus.title.endswith("on 4 GPUs: network bytes per image grew with node count")
    with pytest.raises(TypeError, match="no wording"):
        words(object())


def test_evidence_json_rounds_where_declared_and_leaves_out_the_wordings_inputs():
    found = ScalingLoss(8, 2, 1811.2, 2264.0, 80.0, "inter-node", 452.8, on_gpus=False)
    # no reference run: its fields are left out, not null; on_gpus/across_nodes never shown
    assert evidence_json(found) == {
        "gpus": 8,
        "nodes": 2,
        "images_per_second": 1811.2,
        "ideal": 2264.0,
        "efficiency_percent": 80.0,
        "scope": "inter-node",
        "lost_images_per_second": 452.8,
    }
    warm = CacheWarmup(
        first_epoch=1,
        first_epoch_storage_read_bytes=64e6,
        first_epoch_storage_read_mbps=3.2,
        settled_from_epoch=2,
        settled_storage_read_bytes_mean=12.6,
        settled_to_first_ratio=12.6 / 64e6,
        dataset_to_memory_ratio=45e6 / 24e9,
    )
    shown = evidence_json(warm)
    assert shown["settled_storage_read_bytes_mean"] == 13  # a whole number of bytes
    assert shown["settled_to_first_ratio"] == 0.0  # 4 digits
    assert shown["dataset_to_memory_ratio"] == 0.002  # 3 digits; the evidence keeps 0.001875
    assert warm.dataset_to_memory_ratio == 0.001875


def test_every_chart_is_a_declared_column():
    from contract.columns import BY_NAME, ReportColumn

    charts = [v for v in vars(findings_words).values() if isinstance(v, ReportColumn)]
    assert charts and all(BY_NAME[c.name] is c for c in charts)


def test_the_anatomy_rules_evidence_goes_through_the_same_wording():
    from collector.findings.input import Startup

    found = Startup(2.0, 0.5, 9.0, {"input_wait": 0.0, "compute": 9.0}, "build", None, None)
    assert words(found).title == "Epoch 1 took 4.0x as long per step: warm-up"  # no framework
    found = dataclasses.replace(found, framework="tensorflow")
    assert words(found).title == (
        "Epoch 1 took 4.0x as long per step: graph building and XLA compilation"
    )
