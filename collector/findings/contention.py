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
``lost = images/s x others / training``: an upper bound. Its images/s is the run's over
the contended epochs by the one definition the run line uses
(``collector.analysis.throughput``: timed images over timed seconds per rank, summed over
ranks), so over a run contended in every epoch it is the run line's figure. A training
that waits on GPUs or storage, or has fewer threads than the host has CPUs, loses less;
memory bandwidth and cache contention, which slow it without taking CPU time, are not
seen.

What it cannot see: processes that were never among the agent's top few a tick (many
small ones add up to ``other_cpu_percent`` without being named), processes that started
and ended between two of the agent's samples, and children their parent reaped (their CPU
time moves into the parent's ``cutime``, which a process's own counter leaves out: a
fork-heavy neighbour such as ``ansible-playbook`` is named for a fraction of what its
children took), another process's I/O where ``/proc/<pid>/io`` is not readable (another
user's, without root), and processes in other containers or pid namespaces than the
agent's. So it says how much of the others' share the processes it names account for
(``named_cpu_percent``) and how much none of them does (``unnamed_cpu_percent``): on the
matrix's 8 controls it fired on at load 1.2 (2026-11-29 05:22-05:26 UTC, an
``ansible-playbook`` forking on the host) the named ones used 7-33% of the host's CPU time
beside others at 30-51%, 14-37% unnamed; on the quiet machine (07:16-07:18) the same
controls had others at 0-9% and nothing unnamed beyond the host's tick counting (-6 to
+6% over epochs of 0.3-2 s), the run's own launcher, agent and collector included.

Named causes: the CPUs a training's ranks computed on, against what they asked of them.

``cpu_oversubscription`` reads each rank's ``run_start`` (``workloads/record/cpus.py``): its
compute threads and where that count came from, its loader workers, the CPUs it may run
on (``sched_getaffinity``) and its cgroup CPU quota. Per host:

- the host's *cores* are the union of its ranks' allowed CPUs, capped by their cgroup
  quota when every rank has one (the ranks of one job share its cgroup);
- **oversubscribed** (warning): the ranks' compute threads together exceed the cores:
  threads wait for a core behind each other and for the loader workers;
- **rank quota** (warning): a rank's own cgroup allows it less CPU time than its compute
  threads would take (a rank of its own under a CPU quota): it straggles, and the
  ``straggler`` finding names what the others waited for;
- **workers compete** (info): the compute threads fit, but with the loader workers
  (``ranks x (threads + workers)``) they exceed the cores while the training's own
  processes (its ranks and their loaders: ``epoch_end`` ``cpu_seconds``) kept
  ``CPU_SATURATED_PERCENT`` of the cores busy in the settled epochs. A worker is runnable
  only while it decodes, so workers idle beside cached, small pictures cost nothing
  however many they are; and CPUs saturated by *other* processes are the ``contention``
  finding's, not a count of the training's own workers (on a shared host the host's
  utilisation would name every run with workers);
- **cores shared** (info, CPU trainings only): two or more ranks divide the host's cores
  and each computes with fewer threads than the host has (``OMP_NUM_THREADS=1`` set by
  torchrun is the usual source): the ranks add no cores, so their compute per step grows
  about as the ranks do and a scaling loss that reads "mostly compute" has this cause;
- **cores idle** (info, CPU trainings only): the ranks' compute threads together are
  fewer than the cores while the CPUs were not saturated (a launcher's
  ``OMP_NUM_THREADS=1`` on a one-rank host).

A host gets at most one of the first three, and beside it (unless oversubscribed) cores
shared or cores idle.

What it cannot see: whose CPU time the training's was, compute's or the workers' (with as
many compute threads as cores, busy compute alone saturates them, and idle workers beside
it are named); threads a library starts of its own (a BLAS with its own pool, a
TensorFlow inter-op pool busy with input); ranks pinned to different CPUs counted right
only when their ``cpus_allowed`` lists say so; other trainings on the host.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field, replace

from collector.analysis import decode
from collector.analysis.contention import TRAINING_CPU, ProcessUse, Window, other_processes
from collector.analysis.epochs import CPU_ALL_FIELDS, EpochAmounts, EpochRow
from collector.analysis.run import RunModel
from collector.analysis.throughput import rank_epoch_work, run_throughput
from collector.findings.base import (
    CPU_SATURATED_PERCENT,
    CPU_UTIL,
    HIDDEN,
    INFO,
    WARNING,
    Finding,
    digits,
    epoch_list,
    evidence_json,
    framework_kind,
    words,
)
from collector.findings.context import RunContext
from collector.store.api import WorkloadEvent, event_number
from contract.columns import BY_NAME
from contract.schema import Event, Workload
from contract.units import human_bytes

OVERSUBSCRIBED = "oversubscribed"


WORKERS_COMPETE = "workers_compete"


CORES_SHARED = "cores_shared"


CORES_IDLE = "cores_idle"


RANK_QUOTA = "rank_quota"


@dataclass(frozen=True)
class RankCpus:
    """One rank's CPUs as its ``run_start`` gave them (None: not sent)."""

    rank: int
    threads: int | None
    threads_source: str | None
    loader_workers: int | None
    cpus_allowed: str | None
    quota_cpus: float | None = field(metadata=digits(2))


@dataclass(frozen=True)
class CpuOversubscription:
    """One host's ranks against its cores (``verdict``: see the module's note)."""

    host: str
    verdict: str
    ranks: list[RankCpus]
    cores: float = field(metadata=digits(2))
    cores_source: str
    threads: int  # the ranks' compute threads, together
    loader_workers: int  # their loader workers, together
    cpu_util_percent: float | None = field(metadata=digits(1))
    on_gpus: bool = field(default=False, metadata=HIDDEN)
    # the cores the training's own processes kept busy in the settled epochs (its CPU
    # seconds over their wall time); None where a rank did not send its CPU seconds
    training_cores_busy: float | None = field(default=None, metadata=digits(2))
    framework: str = field(default="", metadata=HIDDEN)  # whose thread setting to name


def _number(event: WorkloadEvent, name: str) -> float | None:
    return event_number(event, name)


def _text(event: WorkloadEvent, name: str) -> str | None:
    value = event.fields.get(name)
    return value if isinstance(value, str) and value else None


def rank_cpus(event: WorkloadEvent) -> RankCpus:
    threads = _number(event, Workload.CPU_THREADS)
    workers = _number(event, Workload.LOADER_WORKERS)
    return RankCpus(
        rank=event.rank,
        threads=None if threads is None else int(threads),
        threads_source=_text(event, Workload.CPU_THREADS_SOURCE),
        loader_workers=None if workers is None else int(workers),
        cpus_allowed=_text(event, Workload.CPUS_ALLOWED),
        quota_cpus=_number(event, Workload.CPU_QUOTA_CPUS),
    )


def host_cores(ranks: list[RankCpus]) -> tuple[float, str] | None:
    """The cores a host's ranks may use and where that came from
    (``collector.analysis.decode.host_cores``); None when a rank did not say which CPUs it
    may use."""
    return decode.host_cores([r.cpus_allowed for r in ranks], [r.quota_cpus for r in ranks])


def over_quota(ranks: list[RankCpus]) -> list[RankCpus]:
    """The ranks whose own cgroup quota is less than their compute threads."""
    return [r for r in ranks if r.quota_cpus is not None and (r.threads or 0) > r.quota_cpus]


def judge_host(
    host: str,
    ranks: list[RankCpus],
    cpu_util_percent: float | None,
    on_gpus: bool,
    training_cores_busy: float | None = None,
) -> list[CpuOversubscription]:
    """The verdicts on one host's ranks (see the module's note): at most one of
    oversubscribed, rank quota and workers compete, then (CPU trainings not oversubscribed)
    cores shared or cores idle. ``cpu_util_percent`` is the host's (everyone's),
    ``training_cores_busy`` the cores the training's own processes kept busy."""
    if not ranks or any(r.threads is None for r in ranks):
        return []
    found = host_cores(ranks)
    if found is None:
        return []
    cores, source = found
    threads = sum(r.threads or 0 for r in ranks)
    workers = sum(r.loader_workers or 0 for r in ranks)
    saturated = cpu_util_percent is not None and cpu_util_percent >= CPU_SATURATED_PERCENT
    own_saturated = (
        training_cores_busy is not None
        and training_cores_busy >= CPU_SATURATED_PERCENT / 100 * cores
    )
    verdicts = []
    if threads > cores:
        verdicts.append(OVERSUBSCRIBED)
    elif over_quota(ranks):
        verdicts.append(RANK_QUOTA)
    elif threads + workers > cores and own_saturated:
        verdicts.append(WORKERS_COMPETE)
    if not on_gpus and threads <= cores:
        if len(ranks) >= 2 and max(r.threads or 0 for r in ranks) < cores:
            verdicts.append(CORES_SHARED)
        elif threads < cores and not saturated:
            verdicts.append(CORES_IDLE)
    return [
        CpuOversubscription(
            host,
            verdict,
            ranks,
            cores,
            source,
            threads,
            workers,
            cpu_util_percent,
            on_gpus,
            training_cores_busy,
        )
        for verdict in verdicts
    ]


def _settled_cpu_util(context: RunContext) -> dict[str, float]:
    """Each host's mean CPU utilisation over the complete epochs after the first (all of
    them when there is one)."""
    rows = [row for row, _ in context.hosts_rows()]
    epochs = sorted({row.epoch for row in rows})
    if len(epochs) >= 2:
        rows = [row for row in rows if row.epoch != epochs[0]]
    by_host: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        if row.cpu_util_percent is not None:
            by_host[row.host].append(row.cpu_util_percent)
    return {host: sum(values) / len(values) for host, values in by_host.items() if values}


def _settled_training_cores(context: RunContext) -> dict[str, float]:
    """Each host's cores kept busy by the training's own processes over the same epochs
    as ``_settled_cpu_util``: its CPU seconds over their wall time, when every one of
    those epochs has them."""
    pairs = context.hosts_rows()
    epochs = sorted({row.epoch for row, _ in pairs})
    if len(epochs) >= 2:
        pairs = [(row, amounts) for row, amounts in pairs if row.epoch != epochs[0]]
    cpu: dict[str, list[float]] = defaultdict(list)
    seconds: dict[str, float] = defaultdict(float)
    for row, amounts in pairs:
        cpu[row.host].append(amounts.values.get(TRAINING_CPU, math.nan))
        seconds[row.host] += amounts.seconds
    return {
        host: sum(values) / seconds[host]
        for host, values in cpu.items()
        if seconds[host] > 0 and not any(math.isnan(v) for v in values)
    }


def run_starts(model: RunModel) -> dict[str, dict[int, WorkloadEvent]]:
    """Each host's ranks' ``run_start`` (a rank's latest)."""
    starts: dict[str, dict[int, WorkloadEvent]] = defaultdict(dict)
    for event in model.epoch_events:
        if event.event == Event.RUN_START:
            starts[event.host][event.rank] = event
    return starts


def threads_per_rank(model: RunModel) -> tuple[int, str | None] | None:
    """The compute threads every rank of a run had, and where they came from (the lowest
    rank's words); None unless every rank said and all had the same count."""
    ranks = [rank_cpus(e) for host in run_starts(model).values() for e in host.values()]
    counts = {r.threads for r in ranks}
    if not ranks or len(counts) != 1 or None in counts:
        return None
    first = min(ranks, key=lambda r: r.rank)
    return int(first.threads or 0), first.threads_source


def detect_cpu_oversubscription(context: RunContext) -> list[CpuOversubscription]:
    starts = run_starts(context.model)
    util = _settled_cpu_util(context)
    training = _settled_training_cores(context)
    on_gpus = any(row.gpu_util_percent is not None for row, _ in context.hosts_rows())
    found = []
    for host in sorted(starts):
        ranks = [rank_cpus(starts[host][rank]) for rank in sorted(starts[host])]
        judged = judge_host(host, ranks, util.get(host), on_gpus, training.get(host))
        found.extend(replace(f, framework=context.run.framework) for f in judged)
    return found


# how each framework's ranks are given their compute threads
THREAD_SETTING = {
    "pytorch": "torch.set_num_threads(N) (or OMP_NUM_THREADS=N)",
    "tensorflow": "tf.config.threading.set_intra_op_parallelism_threads(N) (and "
    "set_inter_op_parallelism_threads)",
    "mxnet": "OMP_NUM_THREADS=N in each rank's environment before mxnet is imported",
    "unknown": "OMP_NUM_THREADS=N in each rank's environment",
}


def _count(number: int | None, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _rank_text(r: RankCpus) -> str:
    source = f" ({r.threads_source})" if r.threads_source else ""
    workers = "" if r.loader_workers is None else f" + {_count(r.loader_workers, 'loader worker')}"
    quota = "" if r.quota_cpus is None else f", a cgroup CPU quota of {r.quota_cpus:g} CPUs"
    return f"rank {r.rank}: {_count(r.threads, 'thread')}{source}{workers}{quota}"


def _cores(value: float) -> str:
    return f"{value:g} core{'s' if value != 1 else ''}"


@words.register
def word_cpu_oversubscription(found: CpuOversubscription) -> Finding:
    count = len(found.ranks)
    ranks = _count(count, "rank")
    run = "runs" if count == 1 else "run"
    listing = "; ".join(_rank_text(r) for r in found.ranks)
    cores = f"{_cores(found.cores)} ({found.cores_source})"
    util = (
        ""
        if found.cpu_util_percent is None
        else f" The host's CPUs were {found.cpu_util_percent:.0f}% busy."
    )
    if found.verdict == OVERSUBSCRIBED:
        severity = WARNING
        title = (
            f"CPU oversubscribed on {found.host}: {_count(found.threads, 'compute thread')} "
            f"on {_cores(found.cores)}"
        )
        why = (
            f"The {ranks} {run} {found.threads} compute threads and {found.loader_workers} "
            f"loader workers on {cores}: threads wait for a core behind each other, so "
            "compute time grows with no more work done. Give each rank at most "
            f"cores / ranks threads: {THREAD_SETTING[framework_kind(found.framework)]}."
        )
    elif found.verdict == RANK_QUOTA:
        severity = WARNING
        held = over_quota(found.ranks)
        names = ", ".join(f"rank {r.rank}" for r in held)
        title = (
            f"{names.capitalize()} on {found.host} held to "
            f"{'/'.join(f'{r.quota_cpus:g}' for r in held)} CPUs by a cgroup quota"
        )
        why = (
            f"{names.capitalize()} may use less CPU time than {_count(held[0].threads, 'thread')} "
            "would take (cpu.cfs_quota_us / cpu.cfs_period_us of its cgroup): it computes "
            "that much slower, and in a synchronous training every other rank waits for it."
        )
    elif found.verdict == WORKERS_COMPETE:
        severity = INFO
        title = (
            f"Loader workers compete with compute on {found.host}: "
            f"{_count(found.threads, 'thread')} + {_count(found.loader_workers, 'worker')} on "
            f"{_cores(found.cores)}"
        )
        why = (
            f"The {ranks} {run} {found.threads} compute threads and {found.loader_workers} "
            f"loader workers, {found.threads + found.loader_workers} in all, on {cores} "
            f"while its own processes kept {found.training_cores_busy or 0:.2f} of them busy: "
            "decoding takes cores from the compute threads."
        )
    elif found.verdict == CORES_SHARED:
        severity = INFO
        threads = sorted({r.threads for r in found.ranks if r.threads is not None})
        per_rank = "/".join(map(str, threads))
        title = (
            f"{ranks} share {_cores(found.cores)} on {found.host}: "
            f"{per_rank} thread{'s' if threads != [1] else ''} each"
        )
        why = (
            f"The {ranks} divide the host's {cores}: each computes with {per_rank} "
            f"thread{'s' if threads != [1] else ''} where one rank alone could use "
            f"{found.cores:g}. On CPUs, ranks on one host add no cores: each rank's compute "
            f"per step grows about {count}x against one rank with every core, which is the "
            "cause when a scaling loss reads as compute."
        )
    else:
        severity = INFO
        title = (
            f"{found.threads} compute thread{'s' if found.threads != 1 else ''} on "
            f"{_cores(found.cores)} of {found.host}"
        )
        why = (
            f"The {ranks} {'computes' if count == 1 else 'compute'} with {found.threads} thread"
            f"{'s' if found.threads != 1 else ''} in all on {cores}: "
            f"{found.cores - found.threads:g} cores are left to the loader or idle."
        )
    return Finding(
        rule="cpu_oversubscription",
        severity=severity,
        title=title,
        explanation=f"{why} {listing}.{util}",
        evidence=evidence_json(found),
        chart=CPU_UTIL,
    )


def cpu_oversubscription(context: RunContext) -> list[Finding]:
    return [words(found) for found in detect_cpu_oversubscription(context)]


CONTENTION_BUSY_PERCENT = CPU_SATURATED_PERCENT  # 85: the host's CPUs were saturated


# others used a fifth of the host's CPU time: well above what the agent (and, for a
# `workloads run --profile` run, the local collector) cost on a 2-core host, about 5 %
CONTENTION_OTHER_PERCENT = 20.0


NAMED_PROCESSES = 5  # in the words; the evidence keeps twice as many


# the others' CPU time no named process accounts for is worth a sentence from this share of
# the host's CPU time: above what /proc/stat's and the ranks' tick counting leave over
# epochs of 0.3-2 s on the quiet 2-vCPU machine (-6 to +6 %, bench/findings' controls of
# 2026-11-29 07:16-07:18 UTC) and the run's own agent and collector (about 1 % there)
UNNAMED_NOTE_PERCENT = 10.0


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
    # the run's images/s over the contended epochs, the run line's definition
    # (contended_images_per_second), and the upper bound of what the others cost it
    images_per_second: float | None = field(metadata=digits(2))
    lost_images_per_second: float | None = field(metadata=digits(2))
    all_epochs_contended: bool  # images_per_second is then the run line's figure
    other_read_bytes: float | None = field(metadata=digits(0))
    processes: list[OtherProcess]  # the 10 busiest others by CPU, then the top readers
    # of the host's CPU time over the contended host-epochs: what every process the agent
    # saw used, and what the others used beyond it (none of the named accounts for it)
    named_cpu_percent: float = field(metadata=digits(2))
    unnamed_cpu_percent: float = field(metadata=digits(2))
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


def contended_images_per_second(model: RunModel, epochs: set[int]) -> float | None:
    """The run's images/s over ``epochs``, by the one definition the run line uses
    (``run_throughput`` of its ranks' timed work), all hosts' ranks."""
    works = [w for w in rank_epoch_work(model) if w.epoch in epochs]
    return run_throughput(works).images_per_second


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
    other_seconds = 0.0
    for row, amounts in hits:
        window = cpu_capacity_seconds(amounts)
        capacity[amounts.host] += window
        other_seconds += (row.other_cpu_percent or 0.0) / 100 * window
    processes, by_job = _named(uses, capacity)
    total = sum(capacity.values())
    named_seconds = sum(use.cpu_seconds for use in uses)
    host_epochs = [
        ContendedEpoch(r.host, r.epoch, r.cpu_util_percent or 0.0, r.training_cpu_percent or 0.0,
                       r.other_cpu_percent or 0.0, r.images_per_second, lost_images_per_second(r))
        for r, _ in hits
    ]  # fmt: skip
    reads = [r.other_read_bytes for r, _ in hits if r.other_read_bytes is not None]
    epochs = {r.epoch for r, _ in hits}
    others = _mean([e.other_cpu_percent for e in host_epochs]) or 0.0
    training = _mean([e.training_cpu_percent for e in host_epochs]) or 0.0
    rate = contended_images_per_second(context.model, epochs)
    all_epochs = {r.epoch for r in context.totals()}
    return Contention(
        hosts=sorted({r.host for r, _ in hits}),
        epochs=sorted(epochs),
        other_cpu_percent_mean=others,
        training_cpu_percent_mean=training,
        images_per_second=rate,
        lost_images_per_second=rate * others / training if rate is not None and training else None,
        all_epochs_contended=epochs >= all_epochs,
        other_read_bytes=float(sum(reads)) if reads else None,
        processes=processes,
        named_cpu_percent=100 * named_seconds / total if total else 0.0,
        unnamed_cpu_percent=(
            100 * max(0.0, other_seconds - named_seconds) / total if total else 0.0
        ),
        cpu_share_by_job=by_job,
        host_epochs=host_epochs[:20],
    )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


@words.register
def word_contention(found: Contention) -> Finding:
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
    if found.unnamed_cpu_percent >= UNNAMED_NOTE_PERCENT:
        who += (
            f" The processes the agent saw used {found.named_cpu_percent:.0f}% of the host's "
            f"CPU time in those epochs; the other {found.unnamed_cpu_percent:.0f}% was taken "
            "by processes it never saw among its busiest: many small ones, none among the "
            "top few of a sample; short-lived ones, started and ended between two of its "
            "samples; children their parents reaped (their CPU time moves into the "
            "parent's, which a process's own counter leaves out), as a neighbour that forks "
            "many does (a build, a configuration run, a shell loop)."
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
    if found.lost_images_per_second is not None and found.images_per_second:
        potential = found.images_per_second + found.lost_images_per_second
        measured = (
            "its throughput, as the run line counts it"
            if found.all_epochs_contended
            else f"its throughput in {epochs}, as the run line counts it over all epochs"
        )
        cost = (
            f" If its speed follows the CPU time it gets (a CPU-bound training) and it could "
            f"have used all the CPU time the others took, it would have trained up to "
            f"{potential:,.1f} images/s instead of {found.images_per_second:,.1f} ({measured}):"
            f" up to {found.lost_images_per_second:,.1f} images/s lost, an upper bound (a "
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
