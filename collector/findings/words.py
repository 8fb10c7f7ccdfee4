"""How each rule's evidence is said: ``words(evidence) -> Finding``, the one place where a
finding gets its title, explanation, severity and chart.

Every function here is a pure function of the evidence (``collector.findings.evidence``)
and the rules' thresholds: the same evidence always reads the same. The finding's
``evidence`` mapping is ``evidence_json(evidence)``; ``chart`` is a declared report column
(``contract.columns``), looked up when this module is imported.

Inference runs (``collector.analysis.inference``) have no epochs, so no per-epoch report column can
show their findings: their chart is ``NO_REPORT_COLUMN`` (""), and the dashboard's inference
page points them at its images/s-by-batch-size figure, which shows both.
"""

from __future__ import annotations

from functools import singledispatch

from collector.findings.evidence import (
    AU_PASS,
    CEILING_BOUND_SHARE,
    CRITICAL,
    DECODE_BOUND_SHARE,
    DECODE_PAST_SHARE,
    EPOCH_RESTART_SHARE,
    INFO,
    INPUT_WAIT_SHARE,
    INT8_TOP1_LOSS_LIMIT,
    IOWAIT_HIGH_PERCENT,
    MIN_TIMED_SECONDS,
    MLPERF_STORAGE_RAM_MULTIPLE,
    RESOURCE_CHANGE_RATIO,
    SATURATION_GAIN,
    SCALING_CRITICAL_FRACTION,
    SCALING_EFFICIENCY_CRITICAL,
    SCALING_LOSS_MIN_FRACTION,
    SCALING_WARNING_FRACTION,
    SETTLED_READ_FRACTION,
    SEVERITY_ORDER,
    SPREAD_LIMIT,
    STEP_CV_UNSTABLE,
    WARNING,
    AcceleratorUtilisation,
    CacheWarmup,
    DatasetCachedBeforeRun,
    DatasetEvicted,
    DatasetFitsInMemory,
    EpochRestart,
    EvictedHostEpoch,
    FabricCarriesStorage,
    Finding,
    InputBound,
    InputWaitHost,
    Int8AccuracyLoss,
    Int8Slower,
    JobCpusUnused,
    JobGpusWithoutProcess,
    JobMemoryOverRequested,
    JobSharedNode,
    PartChange,
    PrecisionReadDemand,
    RateGrowth,
    RestartEpoch,
    ScalingAttribution,
    ScalingLoss,
    Startup,
    StorageBound,
    StorageReads,
    StragglerEpoch,
    Stragglers,
    ThroughputSaturated,
    TimingUnsteady,
    UtilisationGrowth,
    decode_verdict,
    evidence_json,
    link_verdict,
)
from contract.columns import BY_NAME, human_bytes
from contract.schema import ExecutionProvider
from contract.units import format_efficiency, format_fraction, format_points

# the report columns the findings point at (a misspelt name fails here, on import)
DISK_READ = BY_NAME["disk_read_mbps"]
NFS_SERVER_READ = BY_NAME["nfs_server_read_mbps"]
PAGE_CACHE_DELTA = BY_NAME["page_cache_delta_bytes"]
RX_MINUS_TX = BY_NAME["rx_minus_tx_mbps"]
IMAGES_PER_SECOND = BY_NAME["images_per_second"]
ACCELERATOR_UTIL = BY_NAME["accelerator_util_percent"]
CPU_UTIL = BY_NAME["cpu_util_percent"]
INPUT_WAIT = BY_NAME["input_wait_percent"]
COMPUTE = BY_NAME["compute_percent"]
COMMUNICATION = BY_NAME["communication_percent"]
NO_REPORT_COLUMN = ""  # inference findings: no per-epoch column (see the module's note)
TRAINING_READ = BY_NAME["training_read_bytes"]
DATASET_CACHED = BY_NAME["dataset_cached_start_percent"]

RESOURCE_LABELS = {
    "fabric_bytes_per_image": "network bytes per image",
    "storage_read_mbps_per_node": "storage reads per node (MB/s)",
    "cpu_util_percent": "CPU utilisation (%)",
    "gpu_util_percent": "GPU utilisation (%)",
}


@singledispatch
def words(evidence: object) -> Finding:
    """The finding a rule's evidence makes."""
    raise TypeError(f"no wording for {type(evidence).__name__}")


def _bytes(value: float | None, missing: str = "n/a") -> str:
    """Bytes as the evidence and the tables write them (``human_bytes``: 45.0 MB, 4.1 kB;
    a small data set is not "0.0 GB", a few kB read are not "0.0 MB")."""
    return missing if value is None else human_bytes(value)


def _measured_bytes(value: float | None) -> str:
    return _bytes(value, missing="not measured")


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.1f}"


def epoch_list(epochs: list[int]) -> str:
    if len(epochs) > 6:
        return f"{', '.join(map(str, epochs[:5]))}, ... {epochs[-1]}"
    return ", ".join(map(str, epochs))


def _plural(items: list) -> str:
    return "s" if len(items) > 1 else ""


# --------------------------------------------------------------------------------------
# cache warm-up and data set size
# --------------------------------------------------------------------------------------


READS_TEXT = {
    StorageReads.TRAINING: "the training's own reads (its ranks' /proc/<pid>/io read_bytes)",
    StorageReads.HOSTS: "the hosts' storage reads (disks and NFS servers, every process)",
}
READS_CHART = {StorageReads.TRAINING: TRAINING_READ, StorageReads.HOSTS: DISK_READ}
READER = {
    StorageReads.TRAINING: "the training's own processes",
    StorageReads.HOSTS: "the hosts (every process)",
}


def _mbps_text(rate: float) -> str:
    """A read rate: whole MB/s from 10 on (as the findings always wrote them), two
    significant digits below (a throttled 1.4 MB/s, not "1", nor 37 kB/s as "0.0")."""
    return f"{rate:,.0f}" if rate >= 10 else f"{rate:.2g}"


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}%"  # 99.6% is not rounded up to 100%


def _cached_by_epoch(by_epoch: dict[int, float]) -> str:
    """``epoch 1 100%, epoch 2 100%``: the data set's share cached as each epoch began."""
    return ", ".join(f"epoch {epoch} {_percent(value)}" for epoch, value in by_epoch.items())


@words.register
def _(found: CacheWarmup) -> Finding:
    dataset = found.dataset_bytes
    growth = found.first_epoch_page_cache_growth_bytes_per_host
    of_what = f"of the data set ({_bytes(dataset)})" if dataset else "of that"
    rate = found.first_epoch_storage_read_mbps
    took = (
        f"{READS_TEXT[found.reads_judged]} took "
        f"{_bytes(found.first_epoch_storage_read_bytes)} from storage"
        + (f" at {_mbps_text(rate)} MB/s" if rate is not None else "")
    )
    if found.measured:
        later = {
            epoch: value
            for epoch, value in (found.dataset_cached_start_percent_by_epoch or {}).items()
            if epoch > found.first_epoch
        }
        explanation = (
            f"The data set was {_percent(found.dataset_cached_before_run_percent)} in the page "
            f"cache before the run and {_percent(found.dataset_cached_after_first_epoch_percent)}"
            f" at the end of epoch {found.first_epoch} (measured with mincore): epoch "
            f"{found.first_epoch} read it from storage; {took}. The later epochs began with "
            f"it cached ({_cached_by_epoch(later)}): they were served from the page cache and "
            f"read {_bytes(found.settled_storage_read_bytes_mean)} from storage on average."
        )
        title = (
            f"Epoch {found.first_epoch} read the data set from storage; later epochs ran from "
            "the page cache"
        )
    else:
        explanation = (
            f"In epoch {found.first_epoch} {took}; by epoch {found.settled_from_epoch} they had "
            f"fallen below {format_fraction(SETTLED_READ_FRACTION)} {of_what}, and the last "
            f"epochs read {_bytes(found.settled_storage_read_bytes_mean)} on average. The data "
            "set is being served from the page cache after the first pass."
        )
        title = f"Storage reads stop after epoch {found.first_epoch}: later epochs run from cache"
    if growth is not None and growth > 0:
        explanation += (
            f" The page cache grew by {_bytes(growth)} per host during epoch "
            f"{found.first_epoch}" + (f" (data set: {_bytes(dataset)})." if dataset else ".")
        )
    if found.measures_memory:
        explanation += (
            f" With a {_bytes(dataset)} data set and {_bytes(found.host_memory_bytes)} of RAM per "
            "host, the epochs after the first measure memory, not storage: to measure storage "
            f"the data set must be at least {MLPERF_STORAGE_RAM_MULTIPLE}x RAM (MLPerf "
            "Storage), or the caches must be dropped before every epoch."
        )
    return Finding(
        rule="cache_warmup",
        severity=WARNING if found.measures_memory else INFO,
        title=title,
        explanation=explanation,
        evidence=evidence_json(found),
        chart=DATASET_CACHED if found.measured else READS_CHART[found.reads_judged],
    )


@words.register
def _(found: DatasetCachedBeforeRun) -> Finding:
    read = found.first_epoch_storage_read_bytes
    explanation = (
        f"Before the run {_percent(found.dataset_cached_before_run_percent)} of the data set's "
        f"{_bytes(found.dataset_files_bytes)} sat in "
        + ("every host's" if found.hosts_cached_before_run_percent else "the host's")
        + f" page cache (measured with mincore): epoch {found.first_epoch} read it from "
        "memory, not from storage, so no epoch of this run tells anything about storage "
        f"(as each epoch began: {_cached_by_epoch(found.dataset_cached_start_percent_by_epoch)})."
    )
    if read:
        explanation += (
            f" The {_bytes(read)} {READER[found.reads_judged]} read from storage in epoch "
            f"{found.first_epoch} were other files, not the data set: the libraries, model and "
            "code the ranks loaded."
        )
    explanation += (
        " To measure storage, run with --drop-caches (the data set is evicted before the run)."
    )
    return Finding(
        rule="dataset_cached_before_run",
        severity=INFO,
        title="The data set was already in the page cache before the run: epoch 1 read it "
        "from memory",
        explanation=explanation,
        evidence=evidence_json(found),
        chart=DATASET_CACHED,
    )


@words.register
def _(found: DatasetEvicted) -> Finding:
    worst = found.worst
    explanation = (
        f"On {worst.host}, {_percent(worst.dataset_cached_start_percent)} of the data set's "
        f"{_bytes(found.dataset_files_bytes)} was in the page cache as epoch {worst.epoch} "
        f"began and {_percent(worst.dataset_cached_end_percent)} as it ended (measured with "
        f"mincore), and the training's own processes read {_bytes(worst.training_read_bytes)} "
        f"from storage in it: at least {_bytes(worst.evicted_bytes)} "
        f"({_percent(worst.evicted_percent)} of the data set"
        + (": some pages left more than once" if worst.evicted_percent > 100 else "")
        + ") left the cache during the epoch "
        "(read + cached at the start - cached at the end), and what the ranks read of it "
        "after that came from storage again."
    )
    if len(found.host_epochs) > 1:
        explanation += (
            f" {len(found.host_epochs)} host-epochs did so, in epoch{_plural(found.epochs)} "
            f"{epoch_list(found.epochs)}."
        )
    if worst.page_cache_delta_bytes is not None:
        explanation += (
            f" The host's page cache (every file's) changed by "
            f"{'-' if worst.page_cache_delta_bytes < 0 else '+'}"
            f"{_bytes(abs(worst.page_cache_delta_bytes))} over that epoch."
        )
    explanation += _eviction_cause(worst, found.dataset_to_memory_ratio)
    explanation += _whose_refaults(worst, found.run_job_id)
    explanation += (
        " Those epochs measure storage, not memory, and do not compare with epochs that found "
        "the data set cached."
    )
    return Finding(
        rule="dataset_evicted",
        severity=WARNING,
        title=f"The data set left the page cache during epoch{_plural(found.epochs)} "
        f"{epoch_list(found.epochs)}, after the first",
        explanation=explanation,
        evidence=evidence_json(found),
        chart=TRAINING_READ,
    )


def _whose_refaults(worst: EvictedHostEpoch, run_job: str | None) -> str:
    """The Slurm jobs on the host whose file pages came back after reclaim in the epoch."""
    jobs = {job: b for job, b in (worst.refaults_by_job or {}).items() if b > 0}
    if not jobs or worst.cause != "reclaim":
        return ""
    named = [
        f"job {job} (this run's) {_bytes(b)}" if job == run_job else f"job {job} {_bytes(b)}"
        for job, b in list(jobs.items())[:5]
    ]
    text = f" Whose pages came back on {worst.host}, by Slurm job: {', '.join(named)}."
    if run_job is not None and list(jobs) == [run_job]:
        text += (
            " Only this run's job lost pages: its own memory limit, most likely (the page "
            "cache its ranks read counts against it; Slurm's --mem)."
        )
    return text


def _eviction_cause(worst: EvictedHostEpoch, ratio: float | None) -> str:
    """What took the pages, as the kernel's counters over the epoch tell it
    (``rules.eviction_cause``)."""
    refaulted = _bytes(worst.refault_bytes_judged or 0)
    where = (
        "by this run's job (its memory cgroup's workingset_refault_file)"
        if worst.refaults_judged == "job"
        else "on the host (vmstat workingset_refault_file, every job's files)"
    )
    if worst.cause == "drop_caches":
        times = worst.page_cache_drops or 0
        return (
            f" The host's page cache was dropped {times} time{'s' if times != 1 else ''} "
            "during that epoch (vm.drop_caches: root's echo 1 or 3 > "
            "/proc/sys/vm/drop_caches, as some job prologs and epilogs, benchmarks and "
            "admins' scripts do)."
        )
    if worst.cause == "reclaim":
        return (
            f" The kernel's reclaim took them: of the {_bytes(worst.training_read_bytes)} "
            f"the ranks read, {refaulted} were file pages it had evicted, read back {where}. "
            "Memory ran short: other jobs' memory on the node, this job's memory cgroup "
            "limit (its page cache counts against it), or the kernel's proactive reclaim "
            "(DAMON pageout)."
        )
    if worst.cause == "invalidated":
        return (
            " Neither a drop_caches (none counted on the host) nor the kernel's reclaim "
            f"(of the {_bytes(worst.training_read_bytes)} the ranks read, only {refaulted} "
            f"were pages it had evicted, read back {where}) took them: they were "
            "invalidated, as posix_fadvise DONTNEED, vmtouch -e or rewriting the files "
            "does, by another job or by this one."
        )
    lead = (
        f" The data set fits in a host's RAM ({ratio:.2g}x), so something else took the "
        "memory or dropped the pages:"
        if ratio is not None and ratio <= 1.0
        else " Something took the memory or dropped the pages:"
    )
    return lead + (
        " other jobs' memory on the node, this job's memory cgroup limit (its page cache "
        "counts against it), a drop_caches or vmtouch -e run by another job, or the kernel's "
        "proactive reclaim (DAMON pageout)."
    )


@words.register
def _(found: DatasetFitsInMemory) -> Finding:
    title = (
        "The data set fits in a host's RAM"
        if found.fits
        else f"The data set is less than {MLPERF_STORAGE_RAM_MULTIPLE}x a host's RAM"
    )
    explanation = (
        f"The data set is {_bytes(found.dataset_bytes)} and each host has "
        f"{_bytes(found.host_memory_bytes)} of RAM ({found.dataset_to_memory_ratio:.2g}x). "
        + (
            "After the first epoch the page cache can hold all of it, so throughput measures "
            "memory, not storage. "
            if found.fits
            else "A large part of it stays in the page cache between epochs. "
        )
        + (
            f"Measured: {_percent(found.dataset_cached_at_end_percent)} of it was in the page "
            "cache at the end of the run. "
            if found.dataset_cached_at_end_percent is not None
            else ""
        )
        + f"MLPerf Storage requires a data set of at least {MLPERF_STORAGE_RAM_MULTIPLE}x "
        "RAM to measure storage."
    )
    return Finding(
        rule="dataset_fits_in_memory",
        severity=WARNING if found.fits else INFO,
        title=title,
        explanation=explanation,
        evidence=evidence_json(found),
        chart=PAGE_CACHE_DELTA,
    )


# --------------------------------------------------------------------------------------
# fabric carries storage
# --------------------------------------------------------------------------------------


@words.register
def _(found: FabricCarriesStorage) -> Finding:
    fabric = "InfiniBand" if found.fabric == "ib" else "the NICs"
    return Finding(
        rule="fabric_carries_storage",
        severity=INFO,
        title="The fabric carries the storage reads: receive minus send = storage read rate",
        explanation=(
            f"On {found.host} in epoch {found.epoch}, {fabric} received "
            f"{found.rcv_mbps:,.0f} MB/s and sent {found.xmit_mbps:,.0f} MB/s. The "
            f"{found.rx_minus_tx_mbps:,.0f} MB/s surplus matches the NFS read rate of "
            f"{found.nfs_server_read_mbps:,.0f} MB/s within "
            f"{format_fraction(found.relative_difference)}. "
            "Gradients are sent and received in equal amounts, so the surplus is the data "
            "set: storage traffic shares the fabric with the all-reduce "
            f"({found.matching_host_epochs} of {found.compared_host_epochs} host-epochs with "
            "NFS reads match)."
        ),
        evidence=evidence_json(found),
        chart=RX_MINUS_TX,
    )


# --------------------------------------------------------------------------------------
# storage bound and input bound
# --------------------------------------------------------------------------------------


def ceiling_sentence(host: str, percent: float, nfs: bool = False) -> str:
    """Storage reads against the host's measured ceiling (its disks', or its NFS mounts'
    where the reads came from NFS), with the rule for "at its limit"."""
    ceiling = "NFS read ceiling" if nfs else "disk read ceiling"
    if percent >= 100 * CEILING_BOUND_SHARE:
        limit = (
            "the NFS mount was at its measured limit (the server or the path to it)"
            if nfs
            else "the disk was at its limit"
        )
        return (
            f"That is {percent:.0f}% of {host}'s measured {ceiling} (agent ceilings): "
            f"{limit}; faster storage, or the data set cached or local, would help."
        )
    return (
        f"That is {percent:.0f}% of {host}'s measured {ceiling} (agent ceilings), "
        f"under the {100 * CEILING_BOUND_SHARE:.0f}% that would mean bandwidth: reads too "
        "small or too few at a time (latency), or a limit set elsewhere (a cgroup, a shared "
        "device)."
    )


@words.register
def _(found: StorageBound) -> Finding:
    worst = found.worst
    epochs = epoch_list(found.epochs)
    iowait = worst.iowait_percent
    if iowait is not None and iowait >= IOWAIT_HIGH_PERCENT:
        waited = f"CPUs waited on I/O ({iowait:.0f}% iowait)"
    else:
        waited = (
            f"the ranks waited for input {_percent(worst.input_wait_percent)} of their step time"
        )
    explanation = (
        f"In epoch{_plural(found.epochs)} {epochs}, step throughput was unstable "
        f"(coefficient of variation up to {worst.step_images_per_second_cv:.2f} on "
        f"{worst.host}) while {waited} and "
        f"{READER[found.reads_judged]} read storage at {_mbps_text(worst.storage_read_mbps)} "
        "MB/s: "
        "training waited on storage."
    )
    if worst.nfs_read_ceiling_percent is not None:
        explanation += " " + ceiling_sentence(worst.host, worst.nfs_read_ceiling_percent, nfs=True)
    elif worst.disk_read_ceiling_percent is not None:
        explanation += " " + ceiling_sentence(worst.host, worst.disk_read_ceiling_percent)
    if worst.dataset_cached_start_percent is not None:
        explanation += (
            f" The data set was {_percent(worst.dataset_cached_start_percent)} in "
            f"{worst.host}'s page cache as epoch {worst.epoch} began and "
            f"{_percent(worst.dataset_cached_end_percent)} as it ended (measured with "
            "mincore): the epoch read it from storage."
        )
    if found.cv_without_storage_reads is not None:
        explanation += (
            f" In epochs without storage reads the variation was "
            f"{found.cv_without_storage_reads:.2f}: "
            + (
                "once the data is cached, throughput is steady."
                if found.cv_without_storage_reads < STEP_CV_UNSTABLE
                else "unsteady too, so part of the variation is not storage's."
            )
        )
    return Finding(
        rule="storage_bound",
        severity=WARNING,
        title=f"Storage-bound epoch{_plural(found.epochs)} {epochs}",
        explanation=explanation,
        evidence=evidence_json(found),
        chart=IMAGES_PER_SECOND,
    )


@words.register
def _(found: InputBound) -> Finding:
    return Finding(
        rule="input_bound",
        severity=WARNING,
        title="Input-bound: CPUs saturated while GPUs wait",
        explanation=(
            f"On {', '.join(found.hosts)} in epoch{_plural(found.epochs)} "
            f"{epoch_list(found.epochs)}, CPUs were {found.cpu_util_percent_mean:.0f}% busy "
            f"while GPUs ran kernels {found.gpu_util_percent_mean:.0f}% of the time. The input "
            "pipeline (JPEG decoding, augmentation) cannot feed the GPUs: more decoding "
            "threads, a faster CPU, GPU decoding or pre-processed records would raise "
            "throughput."
        ),
        evidence=evidence_json(found),
        chart=CPU_UTIL,
    )


# --------------------------------------------------------------------------------------
# scaling loss
# --------------------------------------------------------------------------------------


def nodes_text(count: int | None) -> str:
    return f"{count} node{'s' if count != 1 else ''}"


def ranks_text(count: int, on_gpus: bool) -> str:
    """``4 GPUs`` for a run whose hosts showed GPUs, else ``4 ranks`` (CPU processes)."""
    noun = "GPU" if on_gpus else "rank"
    return f"{count} {noun}{'s' if count != 1 else ''}"


def growth_text(change: RateGrowth | UtilisationGrowth) -> str:
    label = RESOURCE_LABELS[change.resource]
    if isinstance(change, UtilisationGrowth):
        how = f"{change.change_points:+.0f} points"
    elif change.ratio:
        how = f"{change.ratio:.2f}x"
    else:
        how = "from zero"
    return f"{label}: {change.reference:,.0f} -> {change.run:,.0f} ({how})"


PART_LABELS = {
    "communication": "all-reduce (communication)",
    "input_wait": "input wait",
    "compute": "compute (forward + backward)",
    "other": "the rest of the step (update, callbacks)",
}
CHART_BY_PART = {
    "communication": COMMUNICATION,
    "input_wait": INPUT_WAIT,
    "compute": COMPUTE,
    "other": COMPUTE,
}


def _images(rate: float) -> str:
    """Images/s whole from 100 on, else to one decimal (a CPU run's 4.5 is not "4")."""
    return f"{rate:,.0f}" if abs(rate) >= 100 else f"{rate:,.1f}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f}"


def part_change_text(change: PartChange) -> str:
    lost = change.lost_images_per_second
    share = (
        f"{abs(lost):,.1f} images/s"
        if lost is not None
        else f"{format_fraction(abs(change.loss_share))} of the loss"
    )
    return (
        f"{PART_LABELS[change.part]} {_ms(change.reference_seconds)} -> "
        f"{_ms(change.run_seconds)} ms/step: {share}"
    )


NOTHING_GREW = "no part of the step (input wait, compute, all-reduce, the rest) grew"


def _epochs_text(epochs: list[int]) -> str:
    if not epochs:
        return "no epoch"
    if len(epochs) == 1:
        return f"epoch {epochs[0]}"
    if epochs == list(range(epochs[0], epochs[-1] + 1)):
        return f"epochs {epochs[0]}-{epochs[-1]}"
    return "epochs " + ", ".join(map(str, epochs))


def attribution_text(found: ScalingAttribution, against: str) -> str:
    """The step anatomy's account of a scaling loss: where the lost images/s went."""
    over = (
        "with epoch 1's start-up included (a run of one epoch has no later epoch to compare)"
        if found.start_up_included
        else "over the epochs after the first"
    )
    text = (
        f" Against {against}, measured by the step anatomy {over} "
        f"({_epochs_text(found.epochs)}; the reference's {_epochs_text(found.reference_epochs)}), "
        f"each of the {found.ranks} ranks trained "
        f"{found.images_per_second_per_rank:,.1f} images/s against "
        f"{found.reference_images_per_second_per_rank:,.1f} per rank "
    )
    if found.lost_fraction_per_rank <= 0:
        return text + (
            f"(no fewer), a step taking {_ms(found.seconds_per_step)} ms against "
            f"{_ms(found.reference_seconds_per_step)}: {NOTHING_GREW}; the images/s were "
            "lost outside those steps (epoch 1's start-up), or were lost already in the "
            "reference run."
        )
    lost = found.lost_images_per_second
    text += (
        f"({format_fraction(found.lost_fraction_per_rank)} fewer), a step taking "
        f"{_ms(found.seconds_per_step)} ms instead of {_ms(found.reference_seconds_per_step)}."
    )
    if found.grown:
        split = (
            f" The {lost:,.1f} images/s lost over the run (ideal - actual, as the scaling "
            "table gives it) split by each part's share of that slower step: "
            if lost is not None
            else " With no 1-GPU run to give the images/s lost, each part's share of that "
            "slower step: "
        )
        text += split + "; ".join(map(part_change_text, found.grown)) + "."
        text += threads_text(found)
        offsets = [
            p
            for p in found.shrunk
            if (-p.lost_images_per_second >= 0.05 if lost is not None else -p.loss_share >= 1e-3)
        ]  # shows as 0.1 images/s, or 0.1 %
        if offsets:
            text += " Offset by: " + "; ".join(map(part_change_text, offsets)) + "."
    else:
        text += f" But {NOTHING_GREW}: the images/s were lost outside the timed steps."
    reference, run = found.reference_fabric_bytes_per_step, found.fabric_bytes_per_step
    return (
        text
        + (
            f" Fabric traffic per step per node: {_measured_bytes(reference)} -> "
            f"{_measured_bytes(run)}."
        )
        + allreduce_ceiling_text(found)
    )


def _bytes_rate(bytes_per_second: float) -> str:
    if bytes_per_second >= 1e9:
        return f"{bytes_per_second / 1e9:,.1f} GB/s"
    return f"{_mbps_text(bytes_per_second / 1e6)} MB/s"


OVER_CEILING = 1.10  # above it a rate is more than the link carries, not a noisy reading


def allreduce_ceiling_text(found: ScalingAttribution) -> str:
    """The all-reduce's rate against the fabric's measured ceiling, with the rule for
    "bandwidth-bound" (``link_verdict``); "" without a ceiling."""
    rate, ceiling = found.allreduce_bytes_per_second, found.fabric_ceiling_bytes_per_second
    share = found.allreduce_ceiling_percent
    if rate is None or ceiling is None or share is None:
        return ""
    text = (
        f" While the ranks waited on it, the all-reduce moved {_bytes_rate(rate)} per node, "
        f"{share:.0f}% of the fabric's measured {_bytes_rate(ceiling)} (agent ceilings)"
    )
    verdict = link_verdict(share, found.allreduce_ceiling_least_percent)
    if verdict == "under":
        return text + (
            f", under the {100 * CEILING_BOUND_SHARE:.0f}% that would mean bandwidth: not "
            "bandwidth; latency (many small tensors: fusion helps) or waiting for slower "
            "ranks, or too little overlap with backward."
        )
    helps = "a faster link or fewer gradient bytes (fp16, compression) would help."
    unsure = (
        "Had it run behind the whole of compute too (what ran behind backward is not "
        f"measured), it would have run at {found.allreduce_ceiling_least_percent or 0:.0f}% "
        "of the link: overlap, not only bandwidth, may explain the share; the link is not "
        "shown to bound the all-reduce."
    )
    least = found.allreduce_seconds_at_ceiling
    if share > 100 * OVER_CEILING and least is not None:
        text += (
            f": more than the link carries, so the wait was not the whole transfer. At the "
            f"link's rate the gradients need at least {_ms(least)} ms per step"
        )
        if verdict == "not_shown":
            return f"{text}. {unsure}"
        return text + (
            "; the rest ran behind backward, in compute's time: the link bounds the "
            f"all-reduce (bandwidth-bound); {helps}"
        )
    if verdict == "not_shown":
        return text + (
            f", at or above the {100 * CEILING_BOUND_SHARE:.0f}% that would mean "
            f"bandwidth if the wait were the whole transfer. {unsure}"
        )
    return text + f": bandwidth-bound; {helps}"


def threads_text(found: ScalingAttribution) -> str:
    """Why compute grew, when the ranks computed with fewer threads than the reference's."""
    mine, theirs = found.threads_per_rank, found.reference_threads_per_rank
    if mine is None or theirs is None or mine >= theirs:
        return ""
    if not any(p.part == "compute" for p in found.grown):
        return ""

    def said(threads: int, source: str | None) -> str:
        return f"{threads} thread{'' if threads == 1 else 's'}" + (f" ({source})" if source else "")

    return (
        f" Compute grew as each rank computed with {said(mine, found.threads_source)} "
        f"where the reference's ranks had {said(theirs, found.reference_threads_source)}: "
        "the ranks divided the cores (see cpu_oversubscription)."
    )


def attribution_severity(found: ScalingAttribution) -> str:
    fraction = found.lost_fraction_per_rank
    if fraction >= SCALING_CRITICAL_FRACTION:
        return CRITICAL
    return WARNING if fraction >= SCALING_WARNING_FRACTION else INFO


@words.register
def _(found: ScalingLoss) -> Finding:
    ranks = ranks_text(found.gpus, found.on_gpus)
    efficiency = (
        format_efficiency(found.efficiency_percent)
        if found.efficiency_percent is not None
        else None
    )
    if efficiency is not None:
        explanation = (
            f"{ranks} on {nodes_text(found.nodes)} reached {_images(found.images_per_second)} "
            f"images/s of an ideal {_images(found.ideal)} (1 x {found.gpus}): {efficiency} "
            "efficiency"
            + (
                f", {_images(found.lost_images_per_second)} images/s lost."
                if found.lost_images_per_second and found.lost_images_per_second > 0
                else "."
            )
        )
        title = f"Scaling efficiency {efficiency} on {ranks}"
    else:
        explanation = (
            f"{ranks} on {nodes_text(found.nodes)} reached {_images(found.images_per_second)} "
            "images/s (no 1-GPU run of this training to give its efficiency)."
        )
        title = f"Scaling loss on {ranks}"
    severities = []
    if found.below_floor:
        critical = found.efficiency_percent < SCALING_EFFICIENCY_CRITICAL
        severities.append(CRITICAL if critical else WARNING)
    against = (
        f"{found.reference_run} ({ranks_text(found.reference_gpus or 0, found.on_gpus)} "
        f"on {nodes_text(found.reference_nodes)})"
    )
    chart = ""
    attribution = found.attribution
    changed = found.changed or []
    if attribution is not None:
        explanation += attribution_text(attribution, against)
        if attribution.lost_fraction_per_rank >= SCALING_LOSS_MIN_FRACTION:
            severities.append(attribution_severity(attribution))
        lost = attribution.lost_images_per_second
        if attribution.lost_fraction_per_rank > 0 and attribution.grown:
            top = attribution.grown[0]
            how_much = (
                f"{lost:,.1f} images/s lost to scaling"
                if lost is not None and lost > 0
                else f"{format_fraction(attribution.lost_fraction_per_rank)} fewer images/s "
                "per rank"
            )
            title += f": {how_much}, mostly {PART_LABELS[top.part]}"
            chart = CHART_BY_PART[top.part].name
        else:
            title += f": no part of the step grew against {found.reference_run}"
    elif found.reference_run is not None:
        storage_compared = any("storage" in c.resource for c in changed)
        reads = (
            f" (storage: {READS_TEXT[found.reads_judged]})"
            if found.reads_judged and storage_compared
            else ""
        )
        if changed:
            explanation += (
                f" Grew against {against}: "
                + "; ".join(growth_text(c) for c in changed)
                + f".{reads}"
            )
            grew_with = "node count" if found.across_nodes else "rank count"
            title += f": {RESOURCE_LABELS[changed[0].resource]} grew with {grew_with}"
            chart = RX_MINUS_TX.name if "fabric" in changed[0].resource else ""
        else:
            explanation += (
                f" No measured resource grew by {RESOURCE_CHANGE_RATIO:.2f}x against "
                f"{against}{reads}."
            )
    return Finding(
        rule="scaling_loss",
        severity=min(severities, key=SEVERITY_ORDER.__getitem__) if severities else INFO,
        title=title,
        explanation=explanation,
        evidence=evidence_json(found),
        chart=chart,
    )


# --------------------------------------------------------------------------------------
# epoch restart
# --------------------------------------------------------------------------------------

# what restarts with every epoch, and what keeps it, per framework (framework_kind)
RESTART_WORDS = {
    "pytorch": (
        "DataLoader worker start-up",
        "the DataLoader's worker processes start again at every epoch (each new iterator "
        "forks num_workers processes, which import, open the data set and fill their "
        "prefetch queues before the first batch). Create the DataLoader with "
        "persistent_workers=True (and num_workers > 0) to keep them across epochs",
    ),
    "tensorflow": (
        "input pipeline restart",
        "the input pipeline starts again at every epoch (a new tf.data iterator fills its "
        "shuffle and prefetch buffers before the first batch). Iterate one repeated data "
        "set across epochs to keep it",
    ),
    "mxnet": (
        "data loader restart",
        "the data loader starts again at every epoch (its workers and prefetch before the "
        "first batch). Keep one loader's workers across epochs to avoid it",
    ),
    "unknown": (
        "input restart",
        "something starts again at every epoch, most often the input pipeline's workers "
        "or iterator (for a PyTorch DataLoader: persistent_workers=True keeps them)",
    ),
}


def restart_text(hit: RestartEpoch) -> str:
    return (
        f"epoch {hit.epoch}: {hit.first_step_seconds:,.2f} s against "
        f"{hit.other_steps_median_seconds:,.2f} s ({format_fraction(hit.extra_share)} of the "
        "epoch)"
    )


def loader_text(found: EpochRestart) -> str:
    """What the run's ranks said of their loader (``run_start``), when they did."""
    if found.loader_workers is None:
        return ""
    text = f" The training's loader: {found.loader_workers} workers"
    if found.persistent_workers is None:
        return text + "."
    if found.persistent_workers and found.loader_workers > 0:
        return (
            text + ", persistent_workers=True: they are kept, so what restarts is another "
            "part of the loop (a new loader or sampler made every epoch)."
        )
    return text + f", persistent_workers={found.persistent_workers}."


@words.register
def _(found: EpochRestart) -> Finding:
    short, long = RESTART_WORDS[framework_kind(found.framework)]
    worst = max(found.epochs, key=lambda h: h.first_step_seconds / h.other_steps_median_seconds)
    ratio = worst.first_step_seconds / worst.other_steps_median_seconds
    listing = "; ".join(restart_text(h) for h in found.epochs[:6])
    more = f" and {len(found.epochs) - 6} more" if len(found.epochs) > 6 else ""
    return Finding(
        rule="epoch_restart",
        severity=WARNING if found.extra_share_mean >= 2 * EPOCH_RESTART_SHARE else INFO,
        title=f"An epoch's first step took up to {ratio:.1f}x its others: {short}",
        explanation=(
            f"In {len(found.epochs)} of {found.epochs_checked} epochs after the first, the "
            f"first timed step took at least {found.threshold_ratio:.0f}x the median of the "
            f"epoch's other steps, {found.extra_seconds_mean:,.2f} s extra per epoch "
            f"({format_fraction(found.extra_share_mean)} of it): {listing}{more}. Most "
            f"likely {long}.{loader_text(found)}"
        ),
        evidence=evidence_json(found),
        chart=IMAGES_PER_SECOND,
    )


# --------------------------------------------------------------------------------------
# precision and read demand
# --------------------------------------------------------------------------------------


@words.register
def _(found: PrecisionReadDemand) -> Finding:
    mine, theirs = found.precision, found.other_precision
    return Finding(
        rule="precision_read_demand",
        severity=INFO,
        title=f"{mine.upper()} reads storage {found.ratio:.1f}x as fast as {theirs.upper()}",
        explanation=(
            f"In epoch {found.epoch} this {mine} run read storage at "
            f"{found.storage_read_mbps:,.1f} MB/s ({READS_TEXT[found.reads_judged]}, "
            "in both runs) and trained "
            f"{_rate(found.images_per_second)} images/s; the {theirs} run "
            f"{found.other_run}, the same training otherwise (model, data set, batch per "
            f"rank, image size, ranks and nodes), read {found.other_storage_read_mbps:,.1f}"
            f" MB/s at {_rate(found.other_images_per_second)} images/s. A run that "
            "trains faster pulls images from storage faster: storage sized for the "
            "slower precision can hold the faster one back until the data set is cached."
        ),
        evidence=evidence_json(found),
        chart=(
            TRAINING_READ
            if found.reads_judged == StorageReads.TRAINING
            else NFS_SERVER_READ
            if found.nfs_read_most
            else DISK_READ
        ),
    )


# --------------------------------------------------------------------------------------
# the step anatomy's input wait, stragglers and start-up
# --------------------------------------------------------------------------------------


CAUSE_TEXT = {
    "epoch_start": "The wait was the epochs' start: what starts again with every epoch (a"
    " DataLoader's worker processes without persistent_workers=True, an input iterator made"
    " per epoch) held each epoch's first batch back; persistent workers or longer epochs"
    " would help, more workers would not",
    "storage": "Storage-bound: the training's reads came from storage"
    " (or the CPUs sat in iowait); a faster file system, more read-ahead or caching the data"
    " set would help",
    "decode": "Decode-bound: the training's CPUs were saturated decoding and augmenting; more"
    " or faster cores, GPU decoding (DALI) or pre-processed records would help",
    "others": "The node's CPUs were saturated by other processes than the training's: its"
    " loaders waited for CPU (the contention finding names who else ran); fewer neighbours,"
    " a CPU reservation or pre-processed records would help",
    "undetermined": "Neither storage nor decoding was shown to be the limit: more loader"
    " workers or a deeper prefetch would help",
}


@words.register
def _(found: InputWaitHost) -> Finding:
    def number(value: float | None, unit: str, digits: int = 0) -> str:
        return "not measured" if value is None else f"{value:,.{digits}f}{unit}"

    return Finding(
        rule="input_wait",
        severity=WARNING if found.input_wait_share >= 2 * INPUT_WAIT_SHARE else INFO,
        title=(
            f"Input-bound on {found.host}: {format_fraction(found.input_wait_share)} of step time "
            f"waiting for data ({found.cause.replace('_', ' ')})"
        ),
        explanation=(
            f"In epoch{'s' if len(found.epochs) > 1 else ''} "
            f"{', '.join(map(str, found.epochs))} the ranks on {found.host} waited for their "
            f"next batch {format_fraction(found.input_wait_share)} of the step time. CPU "
            f"{number(found.cpu_util_percent, '%')} busy, iowait "
            f"{number(found.iowait_percent, '%', 1)}, storage "
            f"{number(found.storage_read_mbps, ' MB/s', 1)}; the training itself read "
            f"{_measured_bytes(found.training_read_bytes)} from storage of "
            f"{_measured_bytes(found.training_rchar_bytes)} read in all. "
            + CAUSE_TEXT[found.cause]
            + "."
            + first_step_sentence(found)
            + decode_sentence(found.decode_ceiling_percent, found.decode_cores)
            + au_sentence(found.accelerator_utilisation)
        ),
        evidence=evidence_json(found),
        chart=INPUT_WAIT,
    )


def first_step_sentence(found: InputWaitHost) -> str:
    """How much of the wait fell in the epochs' first steps, where that decided the cause."""
    if found.cause != "epoch_start" or found.first_step_wait_share is None:
        return ""
    return (
        f" {format_fraction(found.first_step_wait_share)} of the wait fell in the epochs'"
        " first steps."
    )


def decode_sentence(percent: float | None, cores: float | None) -> str:
    """The input's images/s against the decode ceiling, with the rule for "CPU-bound
    input" (``decode_verdict``; empty when not measured)."""
    if percent is None or cores is None:
        return ""
    of = f"the measured decode rate of {cores:g} core{'' if cores == 1 else 's'}"
    verdict = decode_verdict(percent)
    if verdict == "bound":
        return f" Input decoding at {percent:.0f}% of {of}: CPU-bound input."
    if verdict == "past":
        return (
            f" Input at {percent:.0f}% of {of}, past {100 * DECODE_PAST_SHARE:.0f}%: the "
            "pictures were not decoded one by one at this rate (decoded beforehand and kept "
            "as tensors, or much smaller than the 500x375 measured), so decoding was not "
            "the limit."
        )
    return (
        f" Input decoding at {percent:.0f}% of {of}, under the "
        f"{100 * DECODE_BOUND_SHARE:.0f}% that would mean the cores could decode no faster: "
        "the cores were also busy with other work (the training's own compute on CPU-only "
        "ranks, other processes) or the loader's workers were too few."
    )


def au_sentence(utilisation: float | None) -> str:
    """The AU the MLPerf Storage way, against its pass mark (empty when not measured)."""
    if utilisation is None:
        return ""
    verdict = "under" if utilisation < AU_PASS else "at or over"
    return (
        f" Accelerator utilisation (AU, the MLPerf Storage way: timed step time not "
        f"waiting for input) was {format_fraction(utilisation)}, {verdict} the "
        f"{format_fraction(AU_PASS)} MLPerf Storage requires for ResNet-50."
    )


@words.register
def _(found: AcceleratorUtilisation) -> Finding:
    ranks = ", ".join(
        f"rank {r.rank} {format_fraction(r.accelerator_utilisation)}" for r in found.ranks
    )
    return Finding(
        rule="accelerator_utilisation",
        severity=INFO,
        title=(
            f"AU {format_fraction(found.accelerator_utilisation)} on {found.host}: under "
            f"MLPerf Storage's {format_fraction(found.pass_mark)} for ResNet-50"
        ),
        explanation=(
            f"In epoch{'s' if len(found.epochs) > 1 else ''} "
            f"{', '.join(map(str, found.epochs))} the ranks on {found.host} spent "
            f"{format_fraction(found.accelerator_utilisation)} of their timed step time "
            f"computing (forward, backward, all-reduce, optimizer) and the rest waiting for "
            f"their next batch ({ranks}). The wait is "
            f"{format_fraction(found.input_wait_share)} of step time, under the "
            f"{format_fraction(INPUT_WAIT_SHARE)} that makes it input-bound, but a storage "
            "system MLPerf Storage would pass keeps the accelerators busy "
            f"{format_fraction(found.pass_mark)} of the time or more."
        ),
        evidence=evidence_json(found),
        chart=ACCELERATOR_UTIL,
    )


def straggler_epoch_text(hit: StragglerEpoch) -> str:
    waits = ", ".join(
        f"rank {w.rank} on {w.host} in its {PART_LABELS[w.part]} "
        f"(+{_ms(w.extra_seconds_per_step)} ms)"
        for w in hit.waits
    )
    waited = f"; the others' wait for it landed in: {waits}" if waits else ""
    return (
        f"epoch {hit.epoch}: rank {hit.rank} on {hit.host} spent "
        f"{_ms(hit.part_seconds_per_step)} ms/step in {PART_LABELS[hit.slow_part]} against "
        f"{_ms(hit.others_part_seconds_per_step)} on the other ranks (+"
        f"{_ms(hit.part_seconds_per_step - hit.others_part_seconds_per_step)} ms){waited}"
    )


@words.register
def _(found: Stragglers) -> Finding:
    first = found.epochs[0]
    listing = "; ".join(straggler_epoch_text(h) for h in found.epochs)
    if found.same_rank and len(found.epochs) > 1:
        verdict = (
            f"The same rank (rank {first.rank} on {first.host}) every time: a slow node, "
            "device or its data path, not chance."
        )
    elif found.same_rank:
        verdict = "Seen in one epoch only."
    else:
        verdict = (
            "A different rank from epoch to epoch: a moving straggler, typical of data "
            "loading (uneven shards, cache misses) or noisy neighbours rather than a slow node."
        )
    return Finding(
        rule="straggler",
        severity=WARNING if found.same_rank and len(found.epochs) > 1 else INFO,
        title=(
            f"Straggler: rank {first.rank} on {first.host}, slow in {PART_LABELS[first.slow_part]}"
            if found.same_rank
            else "Stragglers move from rank to rank"
        ),
        explanation=(
            "The other ranks wait for the slowest at their next collective (the all-reduce, "
            "a buffer broadcast at the start of forward, a barrier), so one slow rank sets "
            f"everyone's step time. {listing}. {verdict}"
        ),
        evidence=evidence_json(found),
        chart=COMMUNICATION,
    )


def startup_reads_text(found: Startup) -> str:
    if found.first_read_bytes is None and found.settled_read_bytes is None:
        return "The training's own reads were not measured (its ranks sent none). "
    return (
        f"The training read {_measured_bytes(found.first_read_bytes)} from storage in epoch 1 and "
        f"{_measured_bytes(found.settled_read_bytes)} per later epoch. "
    )


def framework_kind(framework: str) -> str:
    """``tensorflow``, ``mxnet``, ``pytorch`` or ``unknown``, from a run's framework tag."""
    name = (framework or "").lower()
    if name in ("tensorflow", "tf", "keras") or name.startswith("tensorflow"):
        return "tensorflow"
    if name.startswith("mxnet"):
        return "mxnet"
    if name in ("pytorch", "torch", "lightning") or name.startswith("pytorch"):
        return "pytorch"
    return "unknown"


# what a framework does in its first steps besides reading: (short, with its parts)
WARMUP_WORDS = {
    "tensorflow": ("graph building and XLA compilation", "graph building and XLA compilation"),
    "mxnet": ("hybridize and graph building", "hybridize (building the symbolic graph)"),
    "pytorch": (
        "eager start-up",
        "the eager loop's start-up: data loader workers starting, first-batch allocation, "
        "cudnn autotune",
    ),
    "unknown": ("warm-up", "warm-up"),
}


@words.register
def _(found: Startup) -> Finding:
    ratio = found.first_seconds_per_step / found.settled_seconds_per_step
    parts = ", ".join(
        f"{PART_LABELS[p]} +{s:,.1f} s" for p, s in found.extra_seconds_by_part.items() if s > 0.05
    )
    short, long = WARMUP_WORDS[framework_kind(found.framework)]
    title_cause, cause = {
        "build": (short, f"{long} (compute and the rest of the step), not storage"),
        "reads": (
            "the first reads of the data set",
            "the first reads of the data set (input wait)",
        ),
        "input_start": (
            "the input pipeline's start-up",
            "the input pipeline's start-up (input wait), not storage: its loader workers"
            " starting (with the spawn start method each imports the framework afresh) and"
            " filling their first batches",
        ),
        "mixed": (f"both {short} and first reads", f"both {long}; and first reads"),
    }[found.cause]
    return Finding(
        rule="startup",
        severity=INFO,
        title=f"Epoch 1 took {ratio:.1f}x as long per step: {title_cause}",
        explanation=(
            f"Epoch 1 ran {found.first_seconds_per_step * 1000:,.0f} ms per step against "
            f"{found.settled_seconds_per_step * 1000:,.0f} later: {found.extra_seconds:,.1f} s "
            f"extra per rank ({parts}). Mostly {cause}. {startup_reads_text(found)}"
            "Throughput figures leave the warm-up steps out for this reason."
        ),
        evidence=evidence_json(found),
        chart=INPUT_WAIT if found.cause in ("reads", "input_start") else COMPUTE,
    )


# --------------------------------------------------------------------------------------
# inference
# --------------------------------------------------------------------------------------


@words.register
def _(found: Int8AccuracyLoss) -> Finding:
    return Finding(
        rule="int8_accuracy_loss",
        severity=WARNING,
        title=f"INT8 loses {format_points(found.top1_loss).lstrip('+')} of top-1",
        explanation=(
            f"Top-1 fell from {format_fraction(found.fp32_top1)} in FP32 to "
            f"{format_fraction(found.int8_top1)} in INT8, more than the "
            f"{format_points(INT8_TOP1_LOSS_LIMIT).lstrip('+')} this check "
            "allows (the study's TensorRT INT8 lost at most 0.18). Calibrate on more "
            "training pictures, ones like those served, or keep the layers that "
            "lose most in FP32."
        ),
        evidence=evidence_json(found),
        chart=NO_REPORT_COLUMN,
    )


# why INT8 gains nothing, by the ONNX Runtime execution provider that ran it
INT8_SLOWER_WHY = {
    ExecutionProvider.CUDA: (
        "ONNX Runtime's CUDA provider has no fused INT8 convolution for a QDQ model: it runs"
        " the QuantizeLinear and DequantizeLinear nodes around FP32 convolutions, which only"
        " adds work (on an H200: 0.62-0.73x). INT8 on a GPU's tensor cores is TensorRT's:"
        " install TensorRT so that ONNX Runtime's TensorRT provider loads (the study's 3.7x"
        " on a V100 was TensorRT's), or serve FP16"
    ),
    ExecutionProvider.TENSORRT: (
        "TensorRT built the engine, so it kept higher-precision kernels for the quantised"
        " layers or the batches were too small to fill the tensor cores; TensorRT's verbose"
        " log names each layer's precision"
    ),
    ExecutionProvider.CPU: (
        "On a CPU, INT8 pays through its integer dot products (AVX-512 VNNI or AVX-VNNI:"
        " vpdpbusd); without them the quantise and dequantise work costs more than the"
        " integer kernels save. Try the other encoding (`--int8-format qoperator` or `qdq`)"
        " or keep FP32 on this CPU"
    ),
}


@words.register
def _(found: Int8Slower) -> Finding:
    by_batch = ", ".join(f"{x:.2f}x at batch {b}" for b, x in sorted(found.speedups.items()))
    why = INT8_SLOWER_WHY.get(
        found.execution_provider,
        f"{found.execution_provider} ran both precisions; its INT8 kernels did not pay for"
        " the quantise and dequantise work",
    )
    return Finding(
        rule="int8_slower",
        severity=WARNING,
        title=f"INT8 is slower than FP32 on {found.execution_provider}",
        explanation=(
            f"INT8 ({found.int8_format.upper()}) ran at {by_batch} of FP32's images/s. {why}."
        ),
        evidence=evidence_json(found),
        chart=NO_REPORT_COLUMN,
    )


@words.register
def _(found: ThroughputSaturated) -> Finding:
    precision = found.precision.upper()
    return Finding(
        rule="throughput_saturated",
        severity=INFO,
        title=f"{precision} throughput stops growing at batch size {found.batch_size}",
        explanation=(
            f"{precision} runs {found.images_per_second:.1f} images/s at batch "
            f"{found.batch_size} and {found.largest_images_per_second:.1f} at batch "
            f"{found.largest_batch_size}: less than {format_fraction(SATURATION_GAIN)} more. "
            f"{'The GPU' if found.execution_provider in ExecutionProvider.GPU else 'The node'}'s"
            " compute is full; larger batches only add latency."
        ),
        evidence=evidence_json(found),
        chart=NO_REPORT_COLUMN,
    )


@words.register
def _(found: TimingUnsteady) -> Finding:
    precision = found.precision.upper()
    batches = "" if found.timed_batches is None else f" over {found.timed_batches} batches"
    reasons = []
    if found.too_short:
        reasons.append(
            f"was timed for {found.timed_seconds:.3g} s{batches}, under the "
            f"{MIN_TIMED_SECONDS:g} s this check asks"
        )
    if found.too_spread and found.latency_spread is not None:
        reasons.append(f"its batches' p90/p10 is {found.latency_spread:.2f}, over {SPREAD_LIMIT:g}")
    what = (
        f"the INT8 speed-up at batch {found.batch_size} ({found.int8_speedup:.2f}x)"
        if found.int8_speedup is not None
        else f"its images/s at batch {found.batch_size}"
    )
    trouble = (
        "too little time" if found.too_short and not found.too_spread
        else "too wide a spread" if not found.too_short
        else "too little time, too widely spread"
    )  # fmt: skip
    return Finding(
        rule="timing_unsteady",
        severity=WARNING,
        title=f"{precision} at batch size {found.batch_size} rests on {trouble} to quote",
        explanation=(
            f"{precision} at batch {found.batch_size} {' and '.join(reasons)}, so "
            f"{what} moves from one run to the next (twenty batches of one picture gave "
            "5.48x and 4.73x on two runs of the same models). Time it longer "
            f"(`workloads infer --min-seconds {MIN_TIMED_SECONDS:g}` or more) on a node "
            "nothing else loads."
        ),
        evidence=evidence_json(found),
        chart=NO_REPORT_COLUMN,
    )


# --------------------------------------------------------------------------------------
# Slurm jobs
# --------------------------------------------------------------------------------------


def _hosts_gpus(gpus_by_host: dict[str, list[str]]) -> str:
    return "; ".join(f"{host}: GPU {', '.join(gpus)}" for host, gpus in gpus_by_host.items())


@words.register
def _(found: JobGpusWithoutProcess) -> Finding:
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
def _(found: JobCpusUnused) -> Finding:
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
def _(found: JobMemoryOverRequested) -> Finding:
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
def _(found: JobSharedNode) -> Finding:
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
