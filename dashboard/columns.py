"""What each column shown by the dashboard means, and how its numbers are written.

The per-epoch table shows a subset of the report's columns; each header's label and tooltip
come from their one declaration in ``contract.columns``.
MB is 10^6 bytes and GB 10^9 bytes, as in the collector's reports. A value the collector
could not measure is ``None`` and shows as "–", never as 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dash.dash_table.Format import Format, Group, Scheme, Symbol, Trim

from contract import columns as report_columns
from contract.text import shown
from contract.units import (
    FRACTION_DIGITS,
    format_fraction,
    format_short_duration,
    human_bytes,
    whole_percent,
)

MISSING = "–"


@dataclass(frozen=True)
class Column:
    key: str  # the report column
    label: str  # header text
    help: str  # tooltip
    kind: str  # how to write the number: see format_value


# how the dashboard writes each unit of contract.columns
KIND_OF_UNIT = {
    report_columns.TEXT: "text",
    report_columns.TIME: "text",
    report_columns.SECONDS: "seconds",
    report_columns.COUNT: "int",
    report_columns.RATE: "rate",
    report_columns.MBPS: "rate",
    report_columns.BYTES: "bytes",
    report_columns.PERCENT: "percent",
    report_columns.RATIO: "ratio",
    report_columns.JOULES: "rate",  # a number with one decimal, grouped: 12,345.6
}


def _epoch_column(name: str, more: str = "") -> Column:
    """A per-epoch table column as ``contract.columns`` declares it."""
    spec = report_columns.BY_NAME[name]
    return Column(name, spec.label, spec.help + more, KIND_OF_UNIT[spec.unit])


# the report's columns the per-epoch table shows, in this order
EPOCH_COLUMNS: tuple[Column, ...] = (
    _epoch_column("epoch", " (hover a row's epoch for its start and end)"),
    *(
        _epoch_column(name)
        for name in (
            "host",
            "state",
            "seconds",
            "images",
            "images_per_second",
            "loss",
            "top1",
            "disk_read_mbps",
            "disk_read_ceiling_percent",
            "decode_ceiling_percent",
            "nfs_server_read_mbps",
            "nfs_read_ceiling_percent",
            "nfs_cache_hit_ratio",
            "ib_rcv_mbps",
            "ib_xmit_mbps",
            "net_rx_mbps",
            "net_tx_mbps",
            "rx_minus_tx_mbps",
            "fabric_ceiling_percent",
            "page_cache_delta_bytes",
            "dataset_cached_start_percent",
            "dataset_cached_end_percent",
            "major_faults",
            "page_cache_drops",
            "file_refault_bytes",
            "cpu_util_percent",
            "iowait_percent",
            "gpu_util_percent",
            "gpu_energy_joules",
            "gpu_pcie_ceiling_percent",
            "seconds_per_step",
            "input_wait_percent",
            "compute_percent",
            "communication_percent",
            "accelerator_util_percent",
            "training_read_bytes",
            "training_cache_read_bytes",
            "training_cpu_percent",
            "other_cpu_percent",
            "other_read_bytes",
        )
    ),
)

RUN_COLUMNS: tuple[Column, ...] = (
    Column("run_id", "Run", "Run identifier (opens the run)", "text"),
    Column("framework", "Framework", "Training framework the ranks reported", "text"),
    Column("model", "Model", "Model being trained", "text"),
    Column("gpus", "Ranks", "World size: ranks in the run (one GPU each, or processes)", "int"),
    Column("hosts", "Hosts", "Hosts that ran ranks", "int"),
    Column("precision", "Precision", "fp32, fp16 or bf16 (mixed precision)", "text"),
    Column("batch_size", "Batch/rank", "Images per step on each rank", "int"),
    Column("data_set", "Data set", "Format and training images (synthetic: no input I/O)", "text"),
    Column(
        "images_per_second",
        "Images/s",
        "Aggregate throughput of every rank (warm-up steps left out)",
        "rate",
    ),
    Column("state", "State", "live while ranks are still writing events", "text"),
    Column("start", "Start (UTC)", "First event of the run", "text"),
)

SCALING_COLUMNS: tuple[Column, ...] = (
    Column("run_id", "Run", "Run identifier (opens the run)", "text"),
    Column("gpus", "Ranks", "World size: ranks in the run (GPUs or processes)", "int"),
    Column("nodes", "Nodes", "Hosts that ran them", "int"),
    Column(
        "scope",
        "Scope",
        "baseline (the group's 1-GPU run), intra-node (one node) or inter-node (several)",
        "text",
    ),
    Column("precision", "Precision", "fp32, fp16 or bf16 (mixed precision)", "text"),
    Column("batch_size", "Batch/rank", "Images per step on each rank", "int"),
    Column("data_format", "Data set", "Format of the training data", "text"),
    Column("images_per_second", "Images/s", "Aggregate throughput of every rank", "rate"),
    Column("ideal", "Ideal", "Baseline images/s × GPUs", "rate"),
    Column(
        "efficiency_percent", "Efficiency %", "Images/s / ideal, whole percent", "whole_percent"
    ),
    Column("speedup", "Speed-up", "Images/s / baseline images/s", "ratio2"),
    Column("final_top1", "Final top-1", "Last validation top-1 accuracy reported", "fraction"),
    Column("target_top1", "Target top-1", "Top-1 accuracy the run aims for", "fraction"),
    Column("epochs_to_target", "Epochs to target", "Epochs until top-1 reached the target", "int"),
    Column(
        "seconds_to_target",
        "Time to target",
        "Wall time from the run's start until top-1 reached the target",
        "duration",
    ),
    Column(
        "time_to_target_speedup",
        "Time-to-target speed-up",
        "The group's smallest run that reached the same target: its time to target / this run's",
        "ratio2",
    ),
)

# a Slurm job's numbers (collector.analysis.jobs defines each; collector.views.jobs names them)
_JOB_NUMBERS: tuple[Column, ...] = (
    Column(
        "elapsed_seconds",
        "Elapsed",
        "First to last sample of the job, plus one sampling interval",
        "duration",
    ),
    Column("allocated_cpus", "CPUs", "CPUs in the job's cpuset", "int"),
    Column("cpu_seconds", "CPU s", "CPU time of the job's processes (its cgroup)", "seconds"),
    Column(
        "cpu_efficiency",
        "CPU eff.",
        "CPU seconds used / (allocated CPUs × elapsed)",
        "fraction",
    ),
    Column("memory_peak_bytes", "Mem peak", "Highest memory charge (page cache included)", "bytes"),
    Column("allocated_memory_bytes", "Mem limit", "The job's memory limit per node", "bytes"),
    Column("memory_use_fraction", "Mem use", "Memory peak / memory limit", "fraction"),
    Column(
        "process_read_bytes", "Read", "read_bytes of the job's processes (/proc/<pid>/io)", "bytes"
    ),
    Column("process_write_bytes", "Written", "write_bytes of the job's processes", "bytes"),
    Column(
        "file_refault_bytes",
        "Refaults",
        "The job's file pages read back after the kernel's reclaim had evicted them",
        "bytes",
    ),
    Column("allocated_gpus", "GPUs", "GPUs Slurm gave the job", "int"),
    Column("gpu_util_percent", "GPU %", "Mean utilisation of the job's GPUs", "percent"),
    Column(
        "gpu_memory_peak_bytes",
        "GPU mem",
        "Peak GPU memory of the job's own processes (NVML pid -> job cgroup)",
        "bytes",
    ),
    Column(
        "gpu_process_sm_percent",
        "Own SM %",
        "The job's processes' share of its GPUs' SM time",
        "percent",
    ),
)
JOB_COLUMNS: tuple[Column, ...] = (
    Column("job_id", "Job", "Slurm job id (opens the job)", "text"),
    Column("user", "User", "The job's owner", "text"),
    Column("account", "Account", "SLURM_JOB_ACCOUNT, where Slurm set one", "text"),
    Column("partition", "Partition", "SLURM_JOB_PARTITION", "text"),
    Column("nodes", "Nodes", "Nodes whose agent saw the job", "text"),
    Column("start", "Start (UTC)", "The job's first sample", "text"),
    *_JOB_NUMBERS,
    Column("runs", "Runs", "Training runs whose ranks ran in the job", "text"),
)
JOB_NODE_COLUMNS: tuple[Column, ...] = (
    Column("host", "Node", "A node the job ran on", "text"),
    Column("start", "Start (UTC)", "The job's first sample on the node", "text"),
    Column("end", "End (UTC)", "The job's last sample on the node", "text"),
    *_JOB_NUMBERS,
)


def format_value(value: Any, kind: str) -> str:
    """A cell's text: missing data as "–", numbers rounded for reading."""
    if value is None:
        return MISSING
    if kind == "text":  # a writer's text: escapes visible, cut (the cell's title has it all)
        return shown(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if kind == "int":
        return f"{round(value):,}"
    if kind == "whole_percent":
        return str(whole_percent(value / 100.0))
    if kind == "seconds":
        return f"{value:,.1f}"
    if kind == "rate":
        return f"{value:,.1f}"
    if kind == "percent":
        return f"{value:.1f}"
    if kind == "fraction":
        return format_fraction(value)
    if kind == "ratio":
        return f"{value:.3f}"
    if kind == "ratio2":
        return f"{value:.2f}"
    if kind == "bytes":
        return human_bytes(value)  # as the collector's tables write them: 2.0 GB
    if kind == "duration":
        return format_short_duration(value)
    raise ValueError(f"unknown column kind {kind!r}")


def _number_format(kind: str) -> Format:
    """How a DataTable writes a number of this kind (d3-format), as ``format_value`` does."""
    fixed = {
        "int": 0,
        "whole_percent": 0,
        "seconds": 1,
        "rate": 1,
        "percent": 1,
        "ratio": 3,
        "ratio2": 2,
    }
    if kind in fixed:
        grouped = Group.yes if kind in ("int", "seconds", "rate") else Group.no
        return Format(precision=fixed[kind], scheme=Scheme.fixed, group=grouped, nully=MISSING)
    if kind == "fraction":  # 0.749 -> 74.9%, 0.75 -> 75%: as format_fraction writes it
        return Format(
            precision=FRACTION_DIGITS, scheme=Scheme.percentage, trim=Trim.yes, nully=MISSING
        )
    if kind == "bytes":  # 1.23GB: SI prefixes, 3 significant digits
        return (
            Format(precision=3, scheme=Scheme.decimal_si_prefix, nully=MISSING)
            .symbol(Symbol.yes)
            .symbol_suffix("B")
        )
    raise ValueError(f"no number format for column kind {kind!r}")


def table_column(column: Column) -> dict[str, Any]:
    """A ``dash_table.DataTable`` column. Numbers stay numbers in the table's data, so that
    sorting by a column is numeric; the browser writes them as ``format_value`` would."""
    spec: dict[str, Any] = {"name": column.label, "id": column.key}
    if column.kind == "text":
        return {**spec, "type": "text"}
    return {**spec, "type": "numeric", "format": _number_format(column.kind)}
