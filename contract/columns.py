"""The per-epoch report's columns, each declared once: name, unit, digits, headings, help.

As ``contract.schema`` names every raw field once, this module names every *derived* column of
the per-epoch report once. Everything that shows a column derives from here: ``EpochRow``
and the report's JSON/CSV keys (``REPORT_COLUMNS``, rounded to ``digits``), the text table
of ``collector report`` and of ``workloads run --profile`` (``heading``, ``format_cell``),
the dashboard's per-epoch table (``label``, ``help`` as its tooltip) and the README's table
(``markdown_table``, checked by a test). How each column is *computed* is in
``collector.analysis.epochs`` (node metrics over the epoch windows),
``collector.analysis.throughput`` (images/s) and ``collector.analysis.anatomy`` (the step-time
split).

This module imports nothing from the rest of the collector.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contract.units import MISSING, human_bytes, no_negative_zero

# units: how a value is written
TEXT, TIME, SECONDS, COUNT, RATE, BYTES, MBPS, PERCENT, RATIO, JOULES = (
    "text",
    "time",
    "s",
    "count",
    "images/s",
    "bytes",
    "MB/s",
    "%",
    "ratio",
    "J",
)

# named groups for ``collector report --columns``
DEFAULT = "default"
GROUPS = ("epoch", "storage", "nfs", "fabric", "memory", "cpu", "gpu", "steps", "training_io")


@dataclass(frozen=True)
class ReportColumn:
    name: str  # the JSON/CSV key and EpochRow attribute
    heading: str  # short heading of the text tables
    label: str  # the dashboard table's header
    unit: str  # one of the units above
    digits: int | None  # JSON rounding; None: a whole number
    help: str  # what it means (dashboard tooltip, README)
    group: str  # one of GROUPS
    default: bool = False  # in the readable default set of `collector report`
    in_report: bool = True  # False: derived by the dashboard's table only


def _column(*args, **kwargs) -> ReportColumn:
    return ReportColumn(*args, **kwargs)


PHYSICAL_NICS = "physical NICs (IPoIB in; bonds, bridges, veth, ifb out)"

SPEC: tuple[ReportColumn, ...] = (
    _column("host", "host", "Host", TEXT, None,
            "The host, or * for all hosts together (sums of amounts over the longest host "
            "window)", "epoch", default=True),
    _column("epoch", "epoch", "Epoch", COUNT, None, "Epoch number, from 1", "epoch",
            default=True),
    _column("start", "start (UTC)", "Start (UTC)", TIME, None,
            "Start of the epoch on this host's clock (ISO 8601, UTC)", "epoch"),
    _column("end", "end (UTC)", "End (UTC)", TIME, None,
            "End of the epoch on this host's clock (ISO 8601, UTC)", "epoch"),
    _column("state", "state", "State", TEXT, None,
            "Whether the epoch ended: complete; running (not yet, the run is live); "
            "interrupted (the run was stopped in it by Ctrl-C, a signal or a killed rank: its "
            "seconds and images are only what was done before the stop)", "epoch",
            default=True),
    _column("seconds", "s", "Seconds", SECONDS, 3,
            "Length of the epoch on this host's clock (validation and start-up included)",
            "epoch", default=True),
    _column("images", "images", "Images", COUNT, None,
            "Images the host's ranks processed in the epoch", "epoch", default=True),
    _column("images_per_second", "img/s", "Images/s", RATE, 2,
            "Throughput: each rank's timed steps' images over their seconds (warm-up steps "
            "left out), summed over the host's ranks; the same rule as the run's images/s",
            "epoch", default=True),
    _column("disk_read_bytes", "disk read", "Disk read", BYTES, None,
            "Bytes read from local block devices of kind disk", "storage", default=True),
    _column("disk_read_mbps", "disk MB/s", "Disk read MB/s", MBPS, 3,
            "Reads from local block devices of kind disk (partitions, device-mapper, md and "
            "loop devices left out: their I/O is already counted on the disk below them)",
            "storage"),
    _column("disk_read_ceiling_percent", "disk % max", "Disk read % of ceiling", PERCENT,
            1, "The reads of the devices with a measured sequential read ceiling (agent "
            "ceilings: direct I/O, 1 MiB reads) as a share of those devices' ceilings, each "
            "device's reads against its own; devices without a ceiling are left out; – where "
            "none was measured",
            "storage"),
    _column("decode_ceiling_percent", "decode % max", "Decode % of ceiling", PERCENT, 1,
            "Images/s as a share of this host's decode ceiling: the measured JPEG decode rate "
            "per core (agent ceilings) times the cores the ranks may use (CPUs allowed, "
            "capped by a cgroup CPU quota); JPEG data sets only, – elsewhere", "cpu"),
    _column("disk_write_bytes", "disk write", "Disk write", BYTES, None,
            "Bytes written to local block devices of kind disk", "storage"),
    _column("nfs_server_read_bytes", "NFS server", "NFS server read", BYTES, None,
            "Bytes fetched from NFS servers (each duplicate mount counted once)", "nfs",
            default=True),
    _column("nfs_server_read_mbps", "NFS MB/s", "NFS server read MB/s", MBPS, 3,
            "Bytes fetched from NFS servers over the network (each duplicate mount counted "
            "once)", "nfs"),
    _column("nfs_app_read_bytes", "NFS app", "NFS application read", BYTES, None,
            "Bytes applications read from NFS mounts (page-cache hits included)", "nfs"),
    _column("nfs_cache_hit_ratio", "NFS hit", "NFS cache hits", RATIO, 4,
            "Share of the bytes applications read from NFS that the page cache served: "
            "1 - server read / application read", "nfs"),
    _column("ib_rcv_bytes", "IB rcv", "IB received", BYTES, None,
            "InfiniBand bytes received, all ports", "fabric"),
    _column("ib_xmit_bytes", "IB xmit", "IB sent", BYTES, None,
            "InfiniBand bytes sent, all ports", "fabric"),
    _column("ib_rcv_mbps", "IB rcv MB/s", "IB rcv MB/s", MBPS, 3,
            "InfiniBand bytes received per second, all ports", "fabric"),
    _column("ib_xmit_mbps", "IB xmit MB/s", "IB xmit MB/s", MBPS, 3,
            "InfiniBand bytes sent per second, all ports", "fabric"),
    _column("net_rx_bytes", "NIC rx", "NIC received", BYTES, None,
            f"Bytes received on {PHYSICAL_NICS}", "fabric"),
    _column("net_tx_bytes", "NIC tx", "NIC sent", BYTES, None,
            f"Bytes sent on {PHYSICAL_NICS}", "fabric"),
    _column("net_rx_mbps", "NIC rx MB/s", "NIC rx MB/s", MBPS, 3,
            f"Bytes received per second on {PHYSICAL_NICS}", "fabric", in_report=False),
    _column("net_tx_mbps", "NIC tx MB/s", "NIC tx MB/s", MBPS, 3,
            f"Bytes sent per second on {PHYSICAL_NICS}", "fabric", in_report=False),
    _column("rx_minus_tx_mbps", "rx-tx MB/s", "Rcv − send MB/s", MBPS, 3,
            "Received minus sent on the fabric (InfiniBand when the host has any, else the "
            "NICs). Gradients go out and come in in equal amounts, so with storage on the "
            "fabric this is the storage read rate", "fabric", default=True),
    _column("page_cache_delta_bytes", "cache Δ", "Page cache Δ", BYTES, None,
            "Growth of the page cache (memory.cached_bytes) from the start to the end of the "
            "epoch", "memory", default=True),
    _column("major_faults", "maj faults", "Major faults", COUNT, None,
            "Page faults that had to read from storage", "memory"),
    _column("page_cache_drops", "cache drops", "Page cache drops", COUNT, None,
            "Times the host's page cache was dropped (echo 1 or 3 > /proc/sys/vm/drop_caches)",
            "memory"),
    _column("file_refault_bytes", "refaults", "File refaults", BYTES, None,
            "File pages read back in after the kernel's reclaim had evicted them (memory "
            "pressure, a cgroup's limit, DAMON pageout), every job's on the host", "memory"),
    _column("cpu_util_percent", "CPU %", "CPU %", PERCENT, 2,
            "Share of all CPU time that was neither idle nor iowait", "cpu", default=True),
    _column("iowait_percent", "iowait %", "iowait %", PERCENT, 2,
            "Share of all CPU time spent waiting on I/O", "cpu", default=True),
    _column("gpu_util_percent", "GPU %", "GPU %", PERCENT, 2,
            "Time-weighted mean utilisation over the host's GPUs (whole GPUs, one each; "
            "MIG devices are part of theirs)", "gpu", default=True),
    _column("gpu_energy_joules", "GPU J", "GPU energy (J)", JOULES, 1,
            "Energy the host's GPUs used, summed (NVML's cumulative counter, Volta and newer)",
            "gpu"),
    _column("gpu_pcie_rx_bytes", "PCIe rx", "GPU PCIe received", BYTES, None,
            "Bytes the host's GPUs received over PCIe, summed (NVML's PCIe byte counters, "
            "where the driver has them)", "gpu"),
    _column("gpu_pcie_tx_bytes", "PCIe tx", "GPU PCIe sent", BYTES, None,
            "Bytes the host's GPUs sent over PCIe, summed (NVML's PCIe byte counters)", "gpu"),
    _column("gpu_pcie_ceiling_percent", "PCIe % max", "GPU PCIe % of ceiling", PERCENT, 1,
            "The GPUs' busier PCIe direction (received or sent, summed over the host's GPUs) "
            "per second as a share of their links' maxima (agent ceilings: NVML's maximum "
            "generation and width, one direction); – where none was measured", "gpu"),
    _column("seconds_per_step", "s/step", "Seconds per step", RATIO, 4,
            "Mean wall time of one training step on the host's ranks", "steps"),
    _column("input_wait_percent", "input %", "Input wait %", PERCENT, 2,
            "Share of the ranks' step time spent waiting for the next batch from the input "
            "pipeline", "steps", default=True),
    _column("compute_percent", "compute %", "Compute %", PERCENT, 2,
            "Share of the ranks' step time in forward and backward (all-reduce hidden behind "
            "backward included once, here)", "steps", default=True),
    _column("communication_percent", "comm %", "All-reduce %", PERCENT, 2,
            "Share of the ranks' step time waiting for the gradient all-reduce once the "
            "gradients were ready (including waiting for slower ranks)", "steps",
            default=True),
    _column("accelerator_util_percent", "AU %", "Accelerator utilisation %", PERCENT, 2,
            "AU as MLPerf Storage defines it: the share of the ranks' timed steps' wall time "
            "not spent waiting for input (warm-up steps left out); MLPerf Storage passes "
            "ResNet-50 at 90% or more", "steps", default=True),
    _column("training_read_bytes", "own read", "Training's storage reads", BYTES, None,
            "What the training's own processes (ranks and their data loaders) read from "
            "storage: /proc/<pid>/io read_bytes, mapped libraries included", "training_io",
            default=True),
    _column("training_cache_read_bytes", "own cached", "Training's cache reads", BYTES,
            None, "What the training's own reads got from the page cache: rchar - read_bytes",
            "training_io"),
    _column("dataset_cached_start_percent", "data cached %", "Data set cached at start %",
            PERCENT, 1,
            "Share of the data set's bytes (its files under --data-dir) in the host's page "
            "cache as the epoch began (mincore, by the host's first rank; epoch 1: before the "
            "run): 100 means the epoch read it from memory, not storage", "memory",
            default=True),
    _column("dataset_cached_end_percent", "cached at end %", "Data set cached at end %",
            PERCENT, 1,
            "Share of the data set's bytes in the host's page cache as the epoch ended",
            "memory"),
    # who else was on the host (collector.analysis.contention): the training's share of the
    # host's CPU time against everything else's, and the storage reads that were not its own
    _column("training_cpu_percent", "own CPU %", "Training's CPU %", PERCENT, 2,
            "Share of all the host's CPU time the training's own processes used (its ranks "
            "and their data loaders, as each rank counts itself)", "cpu"),
    _column("other_cpu_percent", "others' CPU %", "Others' CPU %", PERCENT, 2,
            "Share of all the host's CPU time every other process used: busy CPU time "
            "(CPU %) minus the training's own, floored at 0", "cpu", default=True),
    _column("other_read_bytes", "others' read", "Others' storage reads", BYTES, None,
            "Storage reads (disk plus NFS server) that were not the training's own: the "
            "host's minus the training's read_bytes, floored at 0", "training_io"),
    # the fabric against its measured ceiling (agent ceilings; collector.analysis.epochs)
    _column("fabric_ceiling_mbps", "fabric max MB/s", "Fabric ceiling MB/s", MBPS, 3,
            "The fabric's ceiling, one direction: the TCP throughput agent ceilings --peer "
            "measured to another node where there is one, else the NICs' negotiated link "
            "rates (sysfs); InfiniBand ports' rates when the fabric is InfiniBand",
            "fabric"),
    _column("fabric_ceiling_percent", "fabric % max", "Fabric % of ceiling", PERCENT, 1,
            "The fabric's busier direction (InfiniBand when the host has any, else the "
            "NICs) in MB/s as a share of its ceiling (fabric max MB/s); averaged over the "
            "epoch, so an all-reduce's bursts peak higher; – where none was measured",
            "fabric"),
    # NFS server reads against the mounts' measured read rates (agent ceilings)
    _column("nfs_read_ceiling_percent", "NFS % max", "NFS read % of ceiling", PERCENT, 1,
            "NFS server read MB/s as a share of this host's measured NFS read ceiling (agent "
            "ceilings: direct I/O, 1 MiB reads of a file on each mount, summed over the "
            "mounts); – where none was measured", "nfs"),
    _column("interpolated_edges", "interp. edges", "Interpolated edges", TEXT, None,
            "Epoch edges (start, end) with no agent edge sample at them: the node amounts "
            "there are interpolated between two agent ticks (no agent answered the rank, or "
            "the Prometheus backend); empty when both edges are real readings", "epoch"),
    _column("loss", "loss", "Loss", RATIO, 4,
            "Training loss of the epoch: the mean over the run's ranks of each rank's mean "
            "loss over its steps (their epoch_end events; the run's, the same on each host "
            "row); – where the trainer sent none or it was NaN/Inf", "epoch"),
    _column("top1", "top-1", "Top-1", RATIO, 4,
            "Validation top-1 accuracy after the epoch (0-1), mean over the ranks (the "
            "run's, the same on each host row); – without validation", "epoch"),
)  # fmt: skip

# an epoch's ``state``: defined in collector.analysis.epochs (``epoch_state``), written by
# every view
COMPLETE, RUNNING, INTERRUPTED = "complete", "running", "interrupted"

BY_NAME: dict[str, ReportColumn] = {column.name: column for column in SPEC}
REPORT_COLUMNS: tuple[ReportColumn, ...] = tuple(c for c in SPEC if c.in_report)
REPORT_COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in REPORT_COLUMNS)
COLUMN_HELP: dict[str, str] = {column.name: column.help for column in SPEC}


def select(spec: str) -> tuple[ReportColumn, ...]:
    """The report columns named by ``--columns``: ``default``, ``all``, or a comma list of
    group and column names (``storage,cpu,gpu_util_percent``). host and epoch always lead."""
    wanted = [part.strip() for part in spec.split(",") if part.strip()]
    chosen: set[str] = {"host", "epoch"}
    for part in wanted:
        if part == "all":
            chosen |= set(REPORT_COLUMN_NAMES)
        elif part == DEFAULT:
            chosen |= {c.name for c in REPORT_COLUMNS if c.default}
        elif part in GROUPS:
            chosen |= {c.name for c in REPORT_COLUMNS if c.group == part}
        elif part in BY_NAME and BY_NAME[part].in_report:
            chosen.add(part)
        else:
            known = ", ".join(("default", "all", *GROUPS))
            raise ValueError(f"unknown column or group {part!r} (groups: {known}; or a column)")
    return tuple(c for c in REPORT_COLUMNS if c.name in chosen)


def format_cell(column: ReportColumn, value: object) -> str:
    """A value as the text tables write it: missing data as "–", never 0."""
    if value is None or (isinstance(value, float) and value != value):
        return MISSING
    if column.unit == TEXT:
        return str(value)
    if column.unit == TIME:
        return str(value)[11:19]  # HH:MM:SS of the ISO time
    if not isinstance(value, int | float):
        return str(value)
    if column.unit == COUNT:
        return f"{round(value):,}"
    if column.unit == BYTES:
        return human_bytes(value)
    if column.unit == RATIO:
        return no_negative_zero(f"{value:,.{min(column.digits or 3, 3)}f}")
    return no_negative_zero(f"{value:,.1f}")


def unfinished_epochs_note(rows: list[dict[str, Any]]) -> str:
    """The line under a per-epoch table naming the epochs that did not end (``state``
    running or interrupted), so that their short seconds and few images are read as what
    they are; "" when every epoch ended. ``rows``: the report's rows as dicts."""
    unfinished: dict[str, list[str]] = {}
    for row in rows:
        state = row.get("state") or COMPLETE
        if state != COMPLETE and row.get("host") != "*":
            unfinished.setdefault(state, [])
            label = f"epoch {row['epoch']}"
            if label not in unfinished[state]:
                unfinished[state].append(label)
    parts = []
    if INTERRUPTED in unfinished:
        parts.append(
            f"{', '.join(unfinished[INTERRUPTED]).capitalize()} interrupted: the run stopped in "
            "it, so its seconds and images are only what was done before the stop."
        )
    if RUNNING in unfinished:
        parts.append(
            f"{', '.join(unfinished[RUNNING]).capitalize()} still running: its seconds and "
            "images so far."
        )
    return " ".join(parts)


def markdown_table() -> str:
    """The README's table of the report's columns."""
    lines = ["| column | unit | meaning |", "| --- | --- | --- |"]
    for column in REPORT_COLUMNS:
        unit = "" if column.unit in (TEXT, TIME, RATIO) else column.unit
        lines.append(f"| `{column.name}` | {unit} | {column.help} |")
    return "\n".join(lines)
