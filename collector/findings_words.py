"""How each rule's evidence is said: ``words(evidence) -> Finding``, the one place where a
finding gets its title, explanation, severity and chart.

Every function here is a pure function of the evidence (``collector.findings_evidence``)
and the rules' thresholds: the same evidence always reads the same. The finding's
``evidence`` mapping is ``evidence_json(evidence)``; ``chart`` is a declared report column
(``collector.columns``), looked up when this module is imported.

Inference runs (``collector.inference``) have no epochs, so no per-epoch report column can
show their findings: their chart is ``NO_REPORT_COLUMN`` (""), and the dashboard's inference
page points them at its images/s-by-batch-size figure, which shows both.
"""

from __future__ import annotations

from functools import singledispatch

from collector.columns import BY_NAME
from collector.findings_evidence import (
    CRITICAL,
    INFO,
    INT8_TOP1_LOSS_LIMIT,
    MLPERF_STORAGE_RAM_MULTIPLE,
    RESOURCE_CHANGE_RATIO,
    SATURATION_GAIN,
    SCALING_EFFICIENCY_CRITICAL,
    SETTLED_READ_FRACTION,
    WARNING,
    CacheWarmup,
    DatasetFitsInMemory,
    FabricCarriesStorage,
    Finding,
    InputBound,
    Int8AccuracyLoss,
    PrecisionReadDemand,
    RateGrowth,
    ScalingLoss,
    StorageBound,
    StorageReads,
    ThroughputSaturated,
    UtilisationGrowth,
    evidence_json,
)
from collector.scaling import format_efficiency

GB = 1e9

# the report columns the findings point at (a misspelt name fails here, on import)
DISK_READ = BY_NAME["disk_read_mbps"]
NFS_SERVER_READ = BY_NAME["nfs_server_read_mbps"]
PAGE_CACHE_DELTA = BY_NAME["page_cache_delta_bytes"]
RX_MINUS_TX = BY_NAME["rx_minus_tx_mbps"]
IMAGES_PER_SECOND = BY_NAME["images_per_second"]
CPU_UTIL = BY_NAME["cpu_util_percent"]
NO_REPORT_COLUMN = ""  # inference findings: no per-epoch column (see the module's note)
TRAINING_READ = BY_NAME["training_read_bytes"]

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


def _gb(value: float | None) -> str:
    """Bytes as GB, or as MB below 1 GB (a small data set is not "0.0 GB")."""
    if value is None:
        return "n/a"
    if abs(value) < GB:
        return f"{value / 1e6:,.1f} MB"
    return f"{value / GB:,.1f} GB"


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


@words.register
def _(found: CacheWarmup) -> Finding:
    dataset = found.dataset_bytes
    growth = found.first_epoch_page_cache_growth_bytes_per_host
    of_what = f"of the data set ({_gb(dataset)})" if dataset else "of that"
    rate = found.first_epoch_storage_read_mbps
    explanation = (
        f"In epoch {found.first_epoch} {READS_TEXT[found.reads_judged]} took "
        f"{_gb(found.first_epoch_storage_read_bytes)} from storage"
        + (f" at {rate:,.1f} MB/s" if rate is not None else "")
        + f"; by epoch {found.settled_from_epoch} they had fallen below "
        f"{SETTLED_READ_FRACTION:.0%} {of_what}, and the last epochs read "
        f"{_gb(found.settled_storage_read_bytes_mean)} on average. The data set is being "
        "served from the page cache after the first pass."
    )
    if growth is not None and growth > 0:
        explanation += (
            f" The page cache grew by {_gb(growth)} per host during epoch "
            f"{found.first_epoch}" + (f" (data set: {_gb(dataset)})." if dataset else ".")
        )
    if found.measures_memory:
        explanation += (
            f" With a {_gb(dataset)} data set and {_gb(found.host_memory_bytes)} of RAM per "
            "host, the epochs after the first measure memory, not storage: to measure storage "
            f"the data set must be at least {MLPERF_STORAGE_RAM_MULTIPLE}x RAM (MLPerf "
            "Storage), or the caches must be dropped before every epoch."
        )
    return Finding(
        rule="cache_warmup",
        severity=WARNING if found.measures_memory else INFO,
        title=f"Storage reads stop after epoch {found.first_epoch}: later epochs run from cache",
        explanation=explanation,
        evidence=evidence_json(found),
        chart=READS_CHART[found.reads_judged],
    )


@words.register
def _(found: DatasetFitsInMemory) -> Finding:
    title = (
        "The data set fits in a host's RAM"
        if found.fits
        else f"The data set is less than {MLPERF_STORAGE_RAM_MULTIPLE}x a host's RAM"
    )
    explanation = (
        f"The data set is {_gb(found.dataset_bytes)} and each host has "
        f"{_gb(found.host_memory_bytes)} of RAM ({found.dataset_to_memory_ratio:.2g}x). "
        + (
            "After the first epoch the page cache can hold all of it, so throughput measures "
            "memory, not storage. "
            if found.fits
            else "A large part of it stays in the page cache between epochs. "
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
            f"{found.nfs_server_read_mbps:,.0f} MB/s within {found.relative_difference:.0%}. "
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


@words.register
def _(found: StorageBound) -> Finding:
    worst = found.worst
    epochs = epoch_list(found.epochs)
    explanation = (
        f"In epoch{_plural(found.epochs)} {epochs}, step throughput was unstable "
        f"(coefficient of variation up to {worst.step_images_per_second_cv:.2f} on "
        f"{worst.host}) while CPUs waited on I/O ({worst.iowait_percent:.0f}% iowait) and "
        f"storage was read at {worst.storage_read_mbps:,.0f} MB/s: training waited on storage."
    )
    if found.cv_without_storage_reads is not None:
        explanation += (
            f" In epochs without storage reads the variation was "
            f"{found.cv_without_storage_reads:.2f}: once the data is cached, throughput is "
            "steady."
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


@words.register
def _(found: ScalingLoss) -> Finding:
    efficiency = format_efficiency(found.efficiency_percent)
    ranks = ranks_text(found.gpus, found.on_gpus)
    explanation = (
        f"{ranks} on {nodes_text(found.nodes)} reached {found.images_per_second:,.0f} "
        f"images/s of an ideal {found.ideal:,.0f} (1 x {found.gpus}): {efficiency} efficiency."
    )
    changed = found.changed or []
    if found.reference_run is not None:
        against = (
            f"{found.reference_run} ({ranks_text(found.reference_gpus or 0, found.on_gpus)} "
            f"on {nodes_text(found.reference_nodes)})"
        )
        if changed:
            explanation += (
                f" Grew against {against}: " + "; ".join(growth_text(c) for c in changed) + "."
            )
        else:
            explanation += (
                f" No measured resource grew by {RESOURCE_CHANGE_RATIO:.2f}x against {against}."
            )
    title = f"Scaling efficiency {efficiency} on {ranks}"
    if changed:
        grew_with = "node count" if found.across_nodes else "rank count"
        title += f": {RESOURCE_LABELS[changed[0].resource]} grew with {grew_with}"
    return Finding(
        rule="scaling_loss",
        severity=CRITICAL if found.efficiency_percent < SCALING_EFFICIENCY_CRITICAL else WARNING,
        title=title,
        explanation=explanation,
        evidence=evidence_json(found),
        chart=RX_MINUS_TX if changed and "fabric" in changed[0].resource else "",
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
            f"{found.storage_read_mbps:,.1f} MB/s and trained "
            f"{_rate(found.images_per_second)} images/s; the {theirs} run "
            f"{found.other_run}, the same training otherwise (model, data set, batch per "
            f"rank, image size, ranks and nodes), read {found.other_storage_read_mbps:,.1f}"
            f" MB/s at {_rate(found.other_images_per_second)} images/s. A run that "
            "trains faster pulls images from storage faster: storage sized for the "
            "slower precision can hold the faster one back until the data set is cached."
        ),
        evidence=evidence_json(found),
        chart=NFS_SERVER_READ if found.nfs_read_most else DISK_READ,
    )


# --------------------------------------------------------------------------------------
# inference
# --------------------------------------------------------------------------------------


@words.register
def _(found: Int8AccuracyLoss) -> Finding:
    return Finding(
        rule="int8_accuracy_loss",
        severity=WARNING,
        title=f"INT8 loses {found.top1_loss * 100:.2f} points of top-1",
        explanation=(
            f"Top-1 fell from {found.fp32_top1:.2%} in FP32 to {found.int8_top1:.2%} in "
            f"INT8, more than the {INT8_TOP1_LOSS_LIMIT * 100:g} point this check "
            "allows (the study's TensorRT INT8 lost at most 0.18). Calibrate on more "
            "training pictures, ones like those served, or keep the layers that "
            "lose most in FP32."
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
            f"{found.largest_batch_size}: less than {SATURATION_GAIN:.0%} more. "
            "The node's compute is full; larger batches only add latency."
        ),
        evidence=evidence_json(found),
        chart=NO_REPORT_COLUMN,
    )
