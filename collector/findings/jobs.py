"""The job rules: detections over a ``JobReport`` (``collector.analysis.jobs``) returning
typed evidence defined here, worded by ``collector.findings.base.words`` as
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
from dataclasses import dataclass, field
from typing import Any

from collector.analysis.jobs import JobReport
from collector.findings.base import (
    INFO,
    NO_REPORT_COLUMN,
    SEVERITY_ORDER,
    WARNING,
    Finding,
    _bytes,
    digits,
    evidence_json,
    words,
)
from contract.units import format_fraction

# CPUs allocated and unused: CPU seconds used below half of allocated CPUs x elapsed
JOB_CPU_EFFICIENCY_FLOOR = 0.5


# memory request far above use: the peak below a quarter of the limit
JOB_MEMORY_USE_FLOOR = 0.25


@dataclass(frozen=True)
class JobGpusWithoutProcess:
    """GPUs allocated to the job on which no process ran while it did (nodes whose agent
    lists GPU processes only)."""

    job_id: str
    allocated_gpus: int
    idle_gpus: int
    gpus_by_host: dict[str, list[str]]  # the idle ones
    gpu_util_percent: float | None = field(default=None, metadata=digits(1))


@dataclass(frozen=True)
class JobCpusUnused:
    """CPU seconds used below ``JOB_CPU_EFFICIENCY_FLOOR`` of the allocated CPU seconds."""

    job_id: str
    allocated_cpus: float
    elapsed_seconds: float = field(metadata=digits(1))
    cpu_seconds: float = field(metadata=digits(1))
    allocated_cpu_seconds: float = field(metadata=digits(1))
    cpu_efficiency_fraction: float = field(metadata=digits(4))
    floor_fraction: float = JOB_CPU_EFFICIENCY_FLOOR

    @property
    def cpus_used(self) -> float:
        """The CPUs the job kept busy on average."""
        return self.cpu_seconds / self.elapsed_seconds if self.elapsed_seconds else 0.0


@dataclass(frozen=True)
class JobMemoryOverRequested:
    """The memory peak below ``JOB_MEMORY_USE_FLOOR`` of the limit (on the node nearest it)."""

    job_id: str
    memory_peak_bytes: float
    allocated_memory_bytes: float
    memory_use_fraction: float = field(metadata=digits(4))
    floor_fraction: float = JOB_MEMORY_USE_FLOOR


@dataclass(frozen=True)
class JobSharedNode:
    """Other jobs were sampled on the job's nodes while it ran."""

    job_id: str
    other_jobs: list[str]
    hosts: list[str]
    overlap_seconds_by_job: dict[str, float]
    cpu_seconds_by_job: dict[str, float | None]
    other_cpu_seconds: float | None = field(default=None, metadata=digits(1))
    # their CPU seconds over the longest overlap: the CPUs they kept busy meanwhile
    other_cpus_mean: float | None = field(default=None, metadata=digits(2))


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


def _hosts_gpus(gpus_by_host: dict[str, list[str]]) -> str:
    return "; ".join(f"{host}: GPU {', '.join(gpus)}" for host, gpus in gpus_by_host.items())


@words.register
def word_job_gpus_without_process(found: JobGpusWithoutProcess) -> Finding:
    utilisation = (
        f" The job's GPUs were busy {found.gpu_util_percent:.1f}% of the time on average."
        if found.gpu_util_percent is not None
        else ""
    )
    return Finding(
        rule="job_gpus_idle",
        severity=WARNING,
        title=f"{found.idle_gpus} of {found.allocated_gpus} allocated GPUs ran no process",
        explanation=(
            f"Job {found.job_id} was given {found.allocated_gpus} GPU"
            f"{'s' if found.allocated_gpus != 1 else ''} and no process ran on "
            f"{_hosts_gpus(found.gpus_by_host)} while it ran (the node's GPU process "
            "samples). Ask for the GPUs the job uses (--gpus, --gres=gpu:N), or make every "
            "rank use its own GPU." + utilisation
        ),
        evidence=evidence_json(found),
        chart=NO_REPORT_COLUMN,
    )


@words.register
def word_job_cpus_unused(found: JobCpusUnused) -> Finding:
    return Finding(
        rule="job_cpus_unused",
        severity=WARNING,
        title=(
            f"CPU efficiency {format_fraction(found.cpu_efficiency_fraction)}: most allocated "
            "CPUs were idle"
        ),
        explanation=(
            f"Job {found.job_id} had {found.allocated_cpus:g} CPUs for "
            f"{found.elapsed_seconds:,.0f} s ({found.allocated_cpu_seconds:,.0f} CPU seconds) "
            f"and used {found.cpu_seconds:,.1f} CPU seconds: {found.cpus_used:.2f} CPUs busy "
            f"on average, below {format_fraction(found.floor_fraction)} of what it held. Ask "
            "for fewer CPUs (--cpus-per-task, --ntasks), or give the data loaders more "
            "workers if they are what should use them."
        ),
        evidence=evidence_json(found),
        chart=NO_REPORT_COLUMN,
    )


@words.register
def word_job_memory_over_requested(found: JobMemoryOverRequested) -> Finding:
    return Finding(
        rule="job_memory_overrequested",
        severity=INFO,
        title=(
            f"Memory peak {format_fraction(found.memory_use_fraction)} of the job's memory limit"
        ),
        explanation=(
            f"Job {found.job_id} asked for {_bytes(found.allocated_memory_bytes)} per node "
            f"and its memory peaked at {_bytes(found.memory_peak_bytes)} (page cache "
            f"included), below {format_fraction(found.floor_fraction)} of it. Memory held "
            "and unused keeps other jobs off the node: ask for less (--mem)."
        ),
        evidence=evidence_json(found),
        chart=NO_REPORT_COLUMN,
    )


@words.register
def word_job_shared_node(found: JobSharedNode) -> Finding:
    others = ", ".join(found.other_jobs)
    took = (
        f"; they used {found.other_cpu_seconds:,.1f} CPU seconds meanwhile"
        + (
            f" ({found.other_cpus_mean:.2f} CPUs busy on average)"
            if found.other_cpus_mean is not None
            else ""
        )
        if found.other_cpu_seconds is not None
        else ""
    )
    return Finding(
        rule="job_shared_node",
        severity=INFO,
        title=f"Shared {', '.join(found.hosts)} with {len(found.other_jobs)} other job"
        + ("s" if len(found.other_jobs) > 1 else ""),
        explanation=(
            f"Job {found.job_id} ran beside job{'s' if len(found.other_jobs) > 1 else ''} "
            f"{others} on {', '.join(found.hosts)}{took}. The node's own series (CPU, "
            "memory, disk, network) count every job on it: read them as the node's, not "
            "this job's, or ask for the node alone (--exclusive)."
        ),
        evidence=evidence_json(found),
        chart=NO_REPORT_COLUMN,
    )
