"""The ``contention`` rule: others on the training's hosts took CPU time it could have used.

How it decides, per host and complete epoch (the report's rows,
``collector.analysis.epochs``):

- the host's CPUs were saturated: ``cpu_util_percent`` at least ``CONTENTION_BUSY_PERCENT``
  (with idle CPU left, the others did not take CPU time the training was waiting for);
- everything that is not the training used at least ``CONTENTION_OTHER_PERCENT`` of the
  host's CPU time (``other_cpu_percent``: busy CPU time minus the ranks' own CPU seconds,
  each rank with its data loaders).

It then names who: the other processes the agent saw among the node's busiest in those
epochs (``collector.analysis.contention.other_processes``: command, pid, user, Slurm job),
each with its share of the host's CPU time and its storage reads, and the jobs they belong
to.

The throughput it likely cost, and the model behind it: if the training's speed follows
the CPU time it gets (a CPU-bound training, as on a CPU-only node or with an input
pipeline that decodes on the CPU) and it could have used all the CPU time the others
took, it would have run ``(training + others) / training`` times as fast. So
``lost = images/s x others / training``: an upper bound. A training that waits on GPUs or
storage, or has fewer threads than the host has CPUs, loses less; memory bandwidth and
cache contention, which slow it without taking CPU time, are not seen.

What it cannot see: processes that were never among the agent's top few a tick (many
small ones add up to ``other_cpu_percent`` without being named), another process's I/O
where ``/proc/<pid>/io`` is not readable (another user's, without root), and processes
in other containers or pid namespaces than the agent's.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from collector.analysis.contention import ProcessUse, Window, other_processes
from collector.analysis.epochs import CPU_ALL_FIELDS, EpochAmounts, EpochRow
from collector.findings.context import RunContext
from collector.findings.evidence import (
    CPU_SATURATED_PERCENT,
    WARNING,
    Finding,
    digits,
    evidence_json,
)
from collector.findings.words import epoch_list, words
from contract.columns import BY_NAME
from contract.units import human_bytes

CONTENTION_BUSY_PERCENT = CPU_SATURATED_PERCENT  # 85: the host's CPUs were saturated
# others used a fifth of the host's CPU time: well above what the agent (and, for a
# `workloads run --profile` run, the local collector) cost on a 2-core host, about 5 %
CONTENTION_OTHER_PERCENT = 20.0
NAMED_PROCESSES = 5  # in the words; the evidence keeps twice as many
OTHER_CPU = BY_NAME["other_cpu_percent"]


@dataclass(frozen=True)
class OtherProcess:
    """One other process over the contended epochs, on one host."""

    host: str
    pid: int
    command: str
    user: str | None
    job_id: str | None
    cpu_seconds: float = field(metadata=digits(2))
    cpu_share: float = field(metadata=digits(4))  # of the host's CPU time in those epochs
    read_bytes: float | None = field(default=None, metadata=digits(0))

    @property
    def label(self) -> str:
        who = [f"pid {self.pid}"]
        if self.user:
            who.append(f"user {self.user}")
        if self.job_id:
            who.append(f"job {self.job_id}")
        return f"{self.command} ({', '.join(who)})"


@dataclass(frozen=True)
class ContendedEpoch:
    host: str
    epoch: int
    cpu_util_percent: float = field(metadata=digits(2))
    training_cpu_percent: float = field(metadata=digits(2))
    other_cpu_percent: float = field(metadata=digits(2))
    images_per_second: float | None = field(metadata=digits(2))
    lost_images_per_second: float | None = field(metadata=digits(2))


@dataclass(frozen=True)
class Contention:
    """Host-epochs where others took a share of saturated CPUs, and who they were."""

    hosts: list[str]
    epochs: list[int]
    other_cpu_percent_mean: float = field(metadata=digits(2))
    training_cpu_percent_mean: float = field(metadata=digits(2))
    images_per_second_mean: float | None = field(metadata=digits(2))
    lost_images_per_second_mean: float | None = field(metadata=digits(2))  # the upper bound
    other_read_bytes: float | None = field(metadata=digits(0))
    processes: list[OtherProcess]  # the 10 busiest others by CPU, then the top readers
    cpu_share_by_job: dict[str, float]  # Slurm job -> its named processes' CPU share
    host_epochs: list[ContendedEpoch]  # the first 20
    thresholds: dict[str, float] = field(
        default_factory=lambda: {
            "cpu_util_percent": CONTENTION_BUSY_PERCENT,
            "other_cpu_percent": CONTENTION_OTHER_PERCENT,
        }
    )


def contended(row: EpochRow) -> bool:
    return (
        row.cpu_util_percent is not None
        and row.other_cpu_percent is not None
        and row.training_cpu_percent is not None
        and row.cpu_util_percent >= CONTENTION_BUSY_PERCENT
        and row.other_cpu_percent >= CONTENTION_OTHER_PERCENT
    )


def lost_images_per_second(row: EpochRow) -> float | None:
    """The model's upper bound (see the module's note): images/s x others / training."""
    if row.images_per_second is None or not row.training_cpu_percent:
        return None
    return row.images_per_second * (row.other_cpu_percent or 0.0) / row.training_cpu_percent


def cpu_capacity_seconds(amounts: EpochAmounts) -> float:
    """All the host's CPU time in the window (every mode of /proc/stat, idle included)."""
    values = [amounts.values.get(f"cpu_{f}", math.nan) for f in CPU_ALL_FIELDS]
    return sum(v for v in values if v == v)


def _named(
    uses: list[ProcessUse], capacity: dict[str, float]
) -> tuple[list[OtherProcess], dict[str, float]]:
    totals: dict[tuple[str, int, str, str | None, str | None], list[float]] = defaultdict(
        lambda: [0.0, 0.0, 0.0]
    )
    for use in uses:
        total = totals[(use.host, use.pid, use.command, use.user, use.job_id)]
        total[0] += use.cpu_seconds
        if use.read_bytes is not None:
            total[1] += use.read_bytes
            total[2] = 1.0  # its reads were readable
    named = [
        OtherProcess(
            host,
            pid,
            command,
            user,
            job,
            cpu,
            cpu / capacity[host] if capacity.get(host) else 0.0,
            reads if seen else None,
        )
        for (host, pid, command, user, job), (cpu, reads, seen) in totals.items()
    ]
    named.sort(key=lambda p: (-p.cpu_seconds, p.host, p.pid))
    by_job: dict[str, float] = defaultdict(float)
    for process in named:
        if process.job_id:
            by_job[process.job_id] += process.cpu_share
    readers = sorted((p for p in named if p.read_bytes), key=lambda p: -(p.read_bytes or 0.0))
    kept = named[: 2 * NAMED_PROCESSES]
    kept += [p for p in readers[:NAMED_PROCESSES] if p not in kept]
    return kept, dict(by_job)


def detect_contention(context: RunContext) -> Contention | None:
    hits = [(row, amounts) for row, amounts in context.hosts_rows() if contended(row)]
    if not hits:
        return None
    windows = [Window(r.host, r.epoch, r.start_ns, r.end_ns) for r, _ in hits]
    found = other_processes(context.store, context.model, windows)
    uses = [use for window in windows for use in found.get((window.host, window.epoch), [])]
    capacity: dict[str, float] = defaultdict(float)
    for _, amounts in hits:
        capacity[amounts.host] += cpu_capacity_seconds(amounts)
    processes, by_job = _named(uses, capacity)
    host_epochs = [
        ContendedEpoch(r.host, r.epoch, r.cpu_util_percent or 0.0, r.training_cpu_percent or 0.0,
                       r.other_cpu_percent or 0.0, r.images_per_second, lost_images_per_second(r))
        for r, _ in hits
    ]  # fmt: skip
    rates = [e.images_per_second for e in host_epochs if e.images_per_second is not None]
    lost = [e.lost_images_per_second for e in host_epochs if e.lost_images_per_second is not None]
    reads = [r.other_read_bytes for r, _ in hits if r.other_read_bytes is not None]
    return Contention(
        hosts=sorted({r.host for r, _ in hits}),
        epochs=sorted({r.epoch for r, _ in hits}),
        other_cpu_percent_mean=_mean([e.other_cpu_percent for e in host_epochs]) or 0.0,
        training_cpu_percent_mean=_mean([e.training_cpu_percent for e in host_epochs]) or 0.0,
        images_per_second_mean=_mean(rates),
        lost_images_per_second_mean=_mean(lost),
        other_read_bytes=float(sum(reads)) if reads else None,
        processes=processes,
        cpu_share_by_job=by_job,
        host_epochs=host_epochs[:20],
    )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


@words.register
def _(found: Contention) -> Finding:
    epochs = f"epoch{'s' if len(found.epochs) > 1 else ''} {epoch_list(found.epochs)}"
    if found.processes:
        named = "; ".join(
            f"{p.label} on {p.host}: {100 * p.cpu_share:.0f}% of the host's CPU time"
            + (f", {human_bytes(p.read_bytes)} read" if p.read_bytes else "")
            for p in found.processes[:NAMED_PROCESSES]
        )
        who = f"The busiest of them: {named}."
    else:
        who = (
            "The agent named no process (its processes sampler did not run, or none "
            "stood out among the busiest): many small ones may add up."
        )
    jobs = ""
    if found.cpu_share_by_job:
        jobs = (
            " Slurm jobs among them: "
            + ", ".join(
                f"job {job} ({100 * share:.0f}%)"
                for job, share in sorted(found.cpu_share_by_job.items())
            )
            + "."
        )
    cost = ""
    if found.lost_images_per_second_mean is not None and found.images_per_second_mean:
        potential = found.images_per_second_mean + found.lost_images_per_second_mean
        cost = (
            f" If its speed follows the CPU time it gets (a CPU-bound training) and it could "
            f"have used all the CPU time the others took, it would have trained up to "
            f"{potential:,.1f} images/s instead of {found.images_per_second_mean:,.1f}: up to "
            f"{found.lost_images_per_second_mean:,.1f} images/s lost, an upper bound (a "
            "training waiting on GPUs or storage, or with fewer threads than CPUs, loses less)."
        )
    reads = ""
    if found.other_read_bytes:
        reads = f" Others also read {human_bytes(found.other_read_bytes)} from storage meanwhile."
    return Finding(
        rule="contention",
        severity=WARNING,
        title="Other processes took CPU time from the training",
        explanation=(
            f"On {', '.join(found.hosts)} in {epochs}, the CPUs were saturated and processes "
            f"other than the training used {found.other_cpu_percent_mean:.0f}% of the host's "
            f"CPU time, against the training's own {found.training_cpu_percent_mean:.0f}%. "
            f"{who}{jobs}{cost}{reads}"
        ),
        evidence=evidence_json(found),
        chart=OTHER_CPU,
    )
