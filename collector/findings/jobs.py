"""The job rules: detections over a ``JobReport`` (``collector.analysis.jobs``) returning
typed evidence (``collector.findings.evidence``), worded by ``collector.findings.words`` as
the run rules are.

``job_gpus_idle``
    GPUs allocated to the job (its ``slurm_job`` ``gpus``) on which no process ran while
    it did, judged on nodes whose agent sent GPU process samples (elsewhere it is not
    known); a process tagged with another job's ``job_id`` is not this job's.
``job_cpus_unused``
    CPU efficiency (``collector.analysis.jobs.cpu_efficiency``) below
    ``JOB_CPU_EFFICIENCY_FLOOR``.
``job_memory_overrequested``
    The memory peak below ``JOB_MEMORY_USE_FLOOR`` of the memory limit, on the node nearest
    its limit.
``job_shared_node``
    Other jobs sampled on the job's nodes while it ran, with the CPU seconds they used in
    that time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from collector.analysis.jobs import JobReport
from collector.findings.evidence import (
    JOB_CPU_EFFICIENCY_FLOOR,
    JOB_MEMORY_USE_FLOOR,
    SEVERITY_ORDER,
    Finding,
    JobCpusUnused,
    JobGpusWithoutProcess,
    JobMemoryOverRequested,
    JobSharedNode,
)
from collector.findings.words import words


def detect_gpus_idle(report: JobReport) -> JobGpusWithoutProcess | None:
    idle = {
        node.host: list(node.gpus_without_process)
        for node in report.nodes
        if node.gpus_without_process
    }
    if not idle:
        return None
    allocated = sum(len(node.gpus) for node in report.nodes)
    return JobGpusWithoutProcess(
        job_id=report.job_id,
        allocated_gpus=allocated,
        idle_gpus=sum(len(gpus) for gpus in idle.values()),
        gpus_by_host=idle,
        gpu_util_percent=report.gpu_util_percent,
    )


def detect_cpus_unused(report: JobReport) -> JobCpusUnused | None:
    efficiency = report.cpu_efficiency
    if efficiency is None or efficiency >= JOB_CPU_EFFICIENCY_FLOOR:
        return None
    allocated, elapsed = report.allocated_cpus, report.elapsed_seconds
    used, held = report.cpu_seconds, report.allocated_cpu_seconds
    assert allocated is not None and elapsed is not None and used is not None and held
    return JobCpusUnused(
        job_id=report.job_id,
        allocated_cpus=allocated,
        elapsed_seconds=elapsed,
        cpu_seconds=used,
        allocated_cpu_seconds=held,
        cpu_efficiency_fraction=efficiency,
    )


def detect_memory_overrequested(report: JobReport) -> JobMemoryOverRequested | None:
    fraction = report.memory_use_fraction
    if fraction is None or fraction >= JOB_MEMORY_USE_FLOOR:
        return None
    peak, limit = report.memory_peak_bytes, report.allocated_memory_bytes
    assert peak is not None and limit is not None
    return JobMemoryOverRequested(
        job_id=report.job_id,
        memory_peak_bytes=peak,
        allocated_memory_bytes=limit,
        memory_use_fraction=fraction,
    )


def detect_shared_node(report: JobReport) -> JobSharedNode | None:
    if not report.neighbours:
        return None
    overlap: dict[str, float] = {}
    cpu: dict[str, float | None] = {}
    for near in report.neighbours:  # a job on several shared nodes: its sums
        overlap[near.job_id] = overlap.get(near.job_id, 0.0) + near.overlap_seconds
        if near.cpu_seconds is not None:
            cpu[near.job_id] = (cpu.get(near.job_id) or 0.0) + near.cpu_seconds
        else:
            cpu.setdefault(near.job_id, None)
    known = [v for v in cpu.values() if v is not None]
    total = sum(known) if known else None
    longest = max(overlap.values())
    return JobSharedNode(
        job_id=report.job_id,
        other_jobs=sorted(overlap),
        hosts=sorted({near.host for near in report.neighbours}),
        overlap_seconds_by_job=overlap,
        cpu_seconds_by_job=cpu,
        other_cpu_seconds=total,
        other_cpus_mean=None if total is None or not longest else total / longest,
    )


JobDetector = Callable[[JobReport], Any]
JOB_DETECTORS: dict[str, JobDetector] = {
    "job_gpus_idle": detect_gpus_idle,
    "job_cpus_unused": detect_cpus_unused,
    "job_memory_overrequested": detect_memory_overrequested,
    "job_shared_node": detect_shared_node,
}


def job_findings(report: JobReport) -> list[Finding]:
    """Each job rule's finding, most severe first."""
    found = [words(evidence) for detect in JOB_DETECTORS.values() if (evidence := detect(report))]
    return sorted(found, key=lambda f: SEVERITY_ORDER[f.severity])
