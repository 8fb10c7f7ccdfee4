"""Every findings rule's exact output over a varied set of stored runs, against golden files.

The runs are the synthetic ones the findings tests build (``tests.support.run_builder``;
no GPU, HCA or NFS client here), stored in memory; each scenario's findings (rule,
severity, title, explanation, chart and evidence JSON, in the order ``run_findings``,
``inference_findings`` and ``job_findings`` give them) are compared with
``tests/golden/findings/<scenario>.json``. A refactor of the rules must leave these files
unchanged; after a deliberate change of wording or evidence, regenerate them with
``EPOCHSCOPE_UPDATE_GOLDEN=1`` and review the diff.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from collector.analysis.jobs import job_report
from collector.findings.engine import run_findings
from collector.findings.inference import inference_findings
from collector.findings.jobs import job_findings
from contract.schema import Workload
from tests.integration.test_anatomy_findings import input_run as anatomy_input_run
from tests.integration.test_anatomy_findings import startup_run, straggler_run, two_host_run
from tests.integration.test_findings_scenarios import scaling_pair, small_dataset_run
from tests.support.memory_store import MemoryStore
from tests.support.run_builder import RunBuilder
from tests.unit.test_accelerator_utilisation import waiting_run
from tests.unit.test_contention_finding import contended_run
from tests.unit.test_findings import (
    cached_after_first_epoch,
    input_run,
    precision_runs,
    scaling_runs,
    storage_run,
)
from tests.unit.test_findings_epoch_restart import restart_run
from tests.unit.test_findings_learning import learning_run
from tests.unit.test_inference_findings import RATES, recorded_report
from tests.unit.test_inference_views import report_of
from tests.unit.test_jobs import two_jobs
from tests.unit.test_residency import evicted_run as residency_evicted_run
from tests.unit.test_residency import issue_run

GOLDEN = Path(__file__).parents[1] / "golden" / "findings"
UPDATE = os.environ.get("EPOCHSCOPE_UPDATE_GOLDEN") == "1"
MB = 1e6
GB = 1e9


def points_of(*runs: RunBuilder) -> list:
    return [point for run in runs for point in run.points()]


def fabric_run() -> RunBuilder:
    run = RunBuilder("fabric", hosts=("n1", "n2"))
    run.epoch(
        100,
        10_000,
        nfs_server_read={"n1": 300 * MB, "n2": 320 * MB},
        nfs_app_read=320 * MB,
        ib_rcv={"n1": 500 * MB, "n2": 505 * MB},
        ib_xmit=200 * MB,
    )
    return run


def cold_run() -> RunBuilder:
    run = RunBuilder("cold", dataset_bytes=4000 * GB, host_memory_bytes=384 * GB)
    for _ in range(3):
        run.epoch(100, 10_000, nfs_server_read=300 * MB, nfs_app_read=300 * MB)
    return run


def oversubscribed_run() -> RunBuilder:
    """Two ranks of two threads and two loader workers each on two cores, busy."""
    cpus = {
        Workload.CPU_THREADS: 2,
        Workload.CPU_THREADS_SOURCE: "set in the program",
        Workload.LOADER_WORKERS: 2,
        Workload.CPUS_ALLOWED: "0-1",
    }
    run = RunBuilder("crowded-cores", cpus=2, gpus=False, ranks_per_host=2, run_start_fields=cpus)
    run.epoch(20, 160, cpu_busy=0.98, shares=(0.3, 0.6, 0.1))
    run.epoch(20, 160, cpu_busy=0.98, shares=(0.3, 0.6, 0.1))
    return run


# scenario -> (the stored points, the runs whose findings are kept)
RUN_SCENARIOS: dict[str, tuple[Callable[[], list], tuple[str, ...]]] = {
    "cache_warmup": (lambda: points_of(cached_after_first_epoch()), ("warm",)),
    "demo_small_dataset": (lambda: points_of(small_dataset_run(64, 0)), ("small",)),
    "cold_dataset": (lambda: points_of(cold_run()), ("cold",)),
    "fabric": (lambda: points_of(fabric_run()), ("fabric",)),
    "storage_unstable": (lambda: points_of(storage_run("unstable", (1, 3))), ("unstable",)),
    "input_bound": (lambda: points_of(input_run("cpu", 0.95, 40)), ("cpu",)),
    "scaling_across_nodes": (lambda: points_of(*scaling_runs(22_640)), ("p4", "p8")),
    "scaling_cpu_ranks": (
        lambda: points_of(*scaling_pair(1, 4, 20_000, gpus=False, net_rx=30 * MB, net_tx=30 * MB)),
        ("one", "many"),
    ),
    "precision": (lambda: points_of(*precision_runs(550)), ("fp32", "fp16")),
    "epoch_restart": (
        lambda: points_of(restart_run("torch", 1.5, hosts=("n1", "n2"), ranks_per_host=2)),
        ("torch",),
    ),
    "divergence": (
        lambda: points_of(learning_run("nan", [2.1, math.inf, math.nan], [0.25] * 3)),
        ("nan",),
    ),
    "not_learning": (
        lambda: points_of(learning_run("flat", [1.39, 1.39, 1.39, 1.39], [0.25] * 4)),
        ("flat",),
    ),
    "target_top1": (
        lambda: points_of(
            *(
                RunBuilder(f"t{n}", hosts=tuple(f"t{n}-{i}" for i in range(n)), target_top1=0.7)
                .epoch(100, 10_000, top1=0.5)
                .epoch(100, 10_000, top1=0.75 if n == 1 else 0.6)
                .epoch(100, 10_000, top1=0.8)
                for n in (1, 2)
            )
        ),
        ("t1", "t2"),
    ),
    "contention": (contended_run, ("crowded",)),
    "anatomy_two_hosts": (lambda: points_of(two_host_run()), ("cols",)),
    "input_wait_decode": (lambda: points_of(anatomy_input_run("wait", 0.3, 0.95)), ("wait",)),
    "straggler": (lambda: points_of(straggler_run("slow", [1, 1, 1])), ("slow",)),
    "dataset_cached_before_run": (lambda: issue_run("cached", 1.0, [1.0, 1.0, 1.0]), ("cached",)),
    "dataset_evicted": (
        lambda: residency_evicted_run("evicted", 40_000_000, [1.0, 1.0, 1.0]),
        ("evicted",),
    ),
    "accelerator_utilisation": (lambda: points_of(waiting_run("low", 0.12)), ("low",)),
    "startup": (lambda: points_of(startup_run("build", 300, (0.02, 0.3, 0.0))), ("build",)),
    "cpu_oversubscription": (lambda: points_of(oversubscribed_run()), ("crowded-cores",)),
    "jobs": (lambda: points_of(two_jobs()), ("run-a",)),
}
JOB_IDS = ("101", "102")


def as_json(findings) -> list[dict]:
    return [finding.to_dict() for finding in findings]


def compare(name: str, found: object) -> None:
    text = json.dumps(found, indent=1, sort_keys=False, default=str) + "\n"
    golden = GOLDEN / f"{name}.json"
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"{golden} is missing: run with EPOCHSCOPE_UPDATE_GOLDEN=1"
    assert json.loads(text) == json.loads(golden.read_text()), f"{name} differs from {golden}"


@pytest.mark.parametrize("scenario", list(RUN_SCENARIOS))
def test_run_findings_are_the_golden_ones(scenario):
    build, run_ids = RUN_SCENARIOS[scenario]
    store = MemoryStore()
    store.write(build())
    compare(scenario, {run_id: as_json(run_findings(store, run_id)) for run_id in run_ids})


def test_job_findings_are_the_golden_ones():
    store = MemoryStore()
    store.write(points_of(two_jobs()))
    compare("slurm_jobs", {job: as_json(job_findings(job_report(store, job))) for job in JOB_IDS})


def test_inference_findings_are_the_golden_ones(tmp_path):
    compare("inference_h200", as_json(inference_findings(recorded_report(tmp_path))))


def test_inference_findings_of_a_saturating_cpu_run_are_the_golden_ones(tmp_path):
    report = report_of(tmp_path, RATES, {"fp32": 0.75, "int8": 0.70})
    compare("inference_saturated", as_json(inference_findings(report)))


def test_the_golden_covers_these_rules():
    covered = set()
    for path in GOLDEN.glob("*.json"):
        found = json.loads(path.read_text())
        lists = found.values() if isinstance(found, dict) else [found]
        covered |= {finding["rule"] for findings in lists for finding in findings}
    assert covered == COVERED_RULES, sorted(covered)


COVERED_RULES = {
    "accelerator_utilisation",
    "cache_warmup",
    "contention",
    "cpu_oversubscription",
    "dataset_cached_before_run",
    "dataset_evicted",
    "dataset_fits_in_memory",
    "divergence",
    "epoch_restart",
    "extra_epochs_to_target",
    "fabric_carries_storage",
    "input_bound",
    "input_wait",
    "int8_accuracy_loss",
    "int8_slower",
    "job_cpus_unused",
    "job_gpus_idle",
    "job_memory_overrequested",
    "job_shared_node",
    "not_learning",
    "precision_read_demand",
    "scaling_loss",
    "startup",
    "storage_bound",
    "straggler",
    "throughput_saturated",
    "timing_unsteady",
}
