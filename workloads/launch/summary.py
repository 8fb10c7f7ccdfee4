"""Per-epoch throughput from a run's own event files (runs without a collector).

The aggregate is built from every rank's ``epoch_end`` by the one definition of
``contract.throughput``: a rank's images/s is its ``timed_images`` over its ``timed_seconds``
(warm-up excluded); a host's is the sum over its ranks, the run's the sum over all ranks
(tf_cnn_benchmarks' total images/sec), the same figure the collector's views show.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from collector.views.epoch_table import aligned, column_widths, rows_to_show
from contract.columns import BY_NAME, COMPLETE, format_cell, unfinished_epochs_note
from contract.markers import ALL_HOSTS
from contract.point import Point
from contract.schema import Event, Tag, Workload
from contract.throughput import TimedWork, images_per_second
from workloads.record.events import read_events_file


@dataclass(frozen=True)
class EpochRow:
    epoch: int
    host: str  # ALL_HOSTS for the run's total
    ranks: int
    images: int
    images_per_second: float
    loss: float | None
    top1: float | None
    top5: float | None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def epoch_rows(points: list[Point]) -> list[EpochRow]:
    """One row per (epoch, host) and one total row per epoch, epoch by epoch."""
    groups: dict[tuple[int, str], list[Point]] = defaultdict(list)
    for point in points:
        if point.measurement == Workload.NAME and point.fields.get(Workload.EVENT) == (
            Event.EPOCH_END
        ):
            epoch = int(point.fields[Workload.EPOCH])
            groups[(epoch, point.tags[Tag.HOST])].append(point)
            groups[(epoch, ALL_HOSTS)].append(point)
    rows = []
    for (epoch, host), ends in sorted(
        groups.items(), key=lambda item: (item[0][0], item[0][1] == ALL_HOSTS, item[0][1])
    ):
        rate = images_per_second((_rank_of(end), _timed(end)) for end in ends) or 0.0
        rows.append(
            EpochRow(
                epoch=epoch,
                host=host,
                ranks=len(ends),
                images=sum(int(end.fields.get(Workload.IMAGES, 0)) for end in ends),
                images_per_second=rate,
                loss=_mean([e.fields[Workload.LOSS] for e in ends if Workload.LOSS in e.fields]),
                top1=_mean([e.fields[Workload.TOP1] for e in ends if Workload.TOP1 in e.fields]),
                top5=_mean([e.fields[Workload.TOP5] for e in ends if Workload.TOP5 in e.fields]),
            )
        )
    return rows


def _rank_of(point: Point) -> tuple[str, str]:
    return point.tags[Tag.HOST], point.tags[Tag.RANK]


def _timed(point: Point) -> TimedWork:
    return TimedWork(
        float(point.fields.get(Workload.TIMED_IMAGES, 0)),
        float(point.fields.get(Workload.TIMED_SECONDS, 0.0)),
    )


def run_images_per_second(points: list[Point]) -> float | None:
    """The run's images/s over every epoch (``contract.throughput``), from the ``epoch_end``
    events: what ``collector runs`` and ``collector scaling`` show for the same run."""
    ends = [
        p
        for p in points
        if p.measurement == Workload.NAME and p.fields.get(Workload.EVENT) == Event.EPOCH_END
    ]
    return images_per_second((_rank_of(end), _timed(end)) for end in ends)


def read_events_dir(events_dir: Path) -> list[Point]:
    points = []
    for path in sorted(events_dir.glob("events-rank*.jsonl")):
        points.extend(read_events_file(path))
    return points


def format_table(rows: list[EpochRow]) -> str:
    def number(value: float | None, digits: int = 3) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    lines = [f"{'epoch':>5}  {'host':<20} {'ranks':>5} {'images':>8} {'images/s':>9} "
             f"{'loss':>7} {'top1':>6} {'top5':>6}"]  # fmt: skip
    for row in rows:
        lines.append(
            f"{row.epoch:>5}  {row.host:<20} {row.ranks:>5} {row.images:>8} "
            f"{row.images_per_second:>9.1f} {number(row.loss):>7} {number(row.top1):>6} "
            f"{number(row.top5):>6}"
        )
    return "\n".join(lines)


def print_epoch_table(events_dir: Path) -> None:
    points = read_events_dir(events_dir)
    rows = epoch_rows(points)
    if rows:
        print(format_table(rows), flush=True)
        print(format_run_rate(run_images_per_second(points)), flush=True)
    else:
        print(f"no epoch_end events in {events_dir}", flush=True)


# --- the per-epoch table of a profiled run (`collector report --format json` rows) ---

# the report's columns (contract.columns) that tell where a profiled run's input came from
# and where its step time went; NFS only where a host read over NFS, the training's own reads
# only where its ranks sent them, the step anatomy only where the run's steps carried one
ANATOMY_COLUMNS = (
    "input_wait_percent",
    "compute_percent",
    "communication_percent",
    "accelerator_util_percent",
)
PROFILE_COLUMNS = (
    "state",  # only when an epoch did not end
    "seconds",
    "images",
    "images_per_second",
    "disk_read_bytes",
    "disk_read_mbps",
    "nfs_server_read_bytes",
    "training_read_bytes",
    "page_cache_delta_bytes",
    "dataset_cached_start_percent",  # only where the ranks measured it (a data set)
    "cpu_util_percent",
    "iowait_percent",
    "gpu_util_percent",  # only on hosts with GPUs
    *ANATOMY_COLUMNS,
)


def format_profile_table(rows: list[dict]) -> str:
    """The columns of a profiled run that tell where its input came from and how its step
    time split (input wait, compute, all-reduce: where the run has a step anatomy), per
    epoch and host (and the run's total per epoch when there are several hosts), headed and
    written as ``collector report`` writes them."""
    shown = rows_to_show(rows)
    anatomy = any(row.get(name) is not None for row in rows for name in ANATOMY_COLUMNS)
    optional = {
        **dict.fromkeys(ANATOMY_COLUMNS, anatomy),
        "nfs_server_read_bytes": any(row.get("nfs_server_read_bytes") for row in rows),
        # ranks that sent their /proc/<pid>/io (0 is a reading)
        "training_read_bytes": any(row.get("training_read_bytes") is not None for row in rows),
        "state": any(row.get("state", COMPLETE) != COMPLETE for row in rows),
        "dataset_cached_start_percent": any(
            row.get("dataset_cached_start_percent") is not None for row in rows
        ),
        "gpu_util_percent": any(row.get("gpu_util_percent") is not None for row in rows),
    }
    columns = [BY_NAME[name] for name in PROFILE_COLUMNS if optional.get(name, True)]
    headers = ["epoch", "host", *(c.heading for c in columns)]
    cells = [
        [str(row["epoch"]), row["host"], *(format_cell(c, row.get(c.name)) for c in columns)]
        for row in shown
    ]
    widths = [5, max([4, *(len(row["host"]) for row in shown)])]
    widths += column_widths(headers[2:], [row[2:] for row in cells], least=7)
    # the epoch right-aligned, the host left, the numbers right
    lines = [_profile_line(headers, widths)]
    lines += [_profile_line(row, widths) for row in cells]
    note = unfinished_epochs_note(rows)
    if note:
        lines.append(note)
    return "\n".join(lines)


def _profile_line(values: list[str], widths: list[int]) -> str:
    epoch, host, *numbers = values
    rest = aligned(numbers, widths[2:], left=0, separator="  ")
    return f"{epoch:>{widths[0]}}  {host:<{widths[1]}}  {rest}"


def format_run_rate(rate: float | None) -> str:
    """The run's throughput line, as every rank count and view reports it."""
    if rate is None:
        return "run: no timed steps (all warm-up)"
    return (
        f"run: {rate:,.1f} images/s (every rank's timed steps, warm-up left out, summed over ranks)"
    )


def format_findings(findings: list[dict]) -> str:
    if not findings:
        return "No findings."
    lines = []
    for finding in findings:
        lines.append(f"{finding['severity'].upper()} {finding['title']}")
        lines.append(f"  {finding['explanation']}")
    return "\n".join(lines)
