"""Side-by-side ratios for the overhead benches: variants interleaved round by round, the
order reversed every other round (A B, B A, A B, ...), so that a load drifting over the
measurement hits every variant alike; each variant's figure is the median over its rounds,
and the ratio of two medians comes with a bootstrap interval (each variant's rounds
resampled with replacement, independently) and the per-round ratios (the two runs of a
round ran back to back, sharing that moment's load).

Run the bench under the bench lock and at a higher priority than the other work on the
machine, so that ``nice -n 19`` builds and tests beside it take little of its CPU:

    flock /work/bench.lock nice -n -10 .venv/bin/python bench/<bench>/<script>.py ...

A process's nice value alone does not do that where the kernel groups tasks by session
(``/proc/sys/kernel/sched_autogroup_enabled`` = 1, Debian's default): CPU time is first
shared between sessions' autogroups, each weighing as one nice-0 task whatever its tasks'
nice values, so every other session running ``nice -n 19`` work takes as much of a core as
the whole bench. ``take_priority`` (called first by the benches) therefore moves the bench
into a cgroup of its own (cgroup v1 ``cpu`` controller, ``cpu.shares`` = 88761, the weight
of a nice -20 task, against 1024 for each other busy session): its children stay in it
even where a launcher starts them in new sessions (Horovod's ``safe_shell_exec`` calls
``setsid``, which would put them in a fresh nice-0 autogroup). Without that controller it
falls back to an autogroup of its own at nice -20 (root).
"""

from __future__ import annotations

import contextlib
import os
import random
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path


def interleaved(rounds: int, variants: list[str]) -> Iterator[tuple[int, str]]:
    """(round, variant) in the order they run: A B, B A, A B, ..."""
    for round_index in range(rounds):
        order = variants if round_index % 2 == 0 else variants[::-1]
        for variant in order:
            yield round_index, variant


BENCH_CGROUP = Path("/sys/fs/cgroup/cpu/epochscope-bench")
BENCH_SHARES = 88761  # the weight of nice -20; a nice-0 session weighs 1024


def take_priority() -> dict[str, object]:
    """This process and its children ahead of the other sessions' work (see the module
    docstring); what was done, for the results."""
    state: dict[str, object] = {"nice": os.getpriority(os.PRIO_PROCESS, 0)}
    try:
        BENCH_CGROUP.mkdir(exist_ok=True)
        (BENCH_CGROUP / "cpu.shares").write_text(str(BENCH_SHARES))
        (BENCH_CGROUP / "cgroup.procs").write_text(str(os.getpid()))
        return state | {"cpu_cgroup": str(BENCH_CGROUP), "cpu_shares": BENCH_SHARES}
    except OSError as error:
        print(f"no cpu cgroup of our own ({error}): an autogroup instead", file=sys.stderr)
    enabled = Path("/proc/sys/kernel/sched_autogroup_enabled")
    if not enabled.exists() or enabled.read_text().strip() != "1":
        return state
    with contextlib.suppress(OSError):  # a process group leader keeps the caller's session
        os.setsid()
    try:
        Path("/proc/self/autogroup").write_text("-20")
    except OSError as error:
        print(f"could not raise the autogroup's priority: {error}", file=sys.stderr)
    return state | {"autogroup": Path("/proc/self/autogroup").read_text().strip()}


def load_average() -> float:
    """The 1-minute load average."""
    return round(os.getloadavg()[0], 2)


def bootstrap_ratio_of_medians(
    top: list[float], bottom: list[float], resamples: int = 20000, level: float = 0.95
) -> tuple[float, float]:
    """A percentile bootstrap interval of median(top) / median(bottom)."""
    generator = random.Random(0)
    ratios = sorted(
        statistics.median(generator.choices(top, k=len(top)))
        / statistics.median(generator.choices(bottom, k=len(bottom)))
        for _ in range(resamples)
    )
    tail = (1.0 - level) / 2.0
    return ratios[int(tail * resamples)], ratios[min(int((1.0 - tail) * resamples), resamples - 1)]


def bootstrap_median(
    values: list[float], resamples: int = 20000, level: float = 0.95
) -> tuple[float, float]:
    """A percentile bootstrap interval of the median of ``values`` (e.g. paired ratios,
    one per round)."""
    generator = random.Random(0)
    medians = sorted(
        statistics.median(generator.choices(values, k=len(values))) for _ in range(resamples)
    )
    tail = (1.0 - level) / 2.0
    high = min(int((1.0 - tail) * resamples), resamples - 1)
    return medians[int(tail * resamples)], medians[high]


def ratio_summary(results: dict[str, list[float]], top: str, bottom: str) -> dict[str, object]:
    """``top`` / ``bottom``: the ratio of the medians, its 95% bootstrap interval, the
    per-round ratios with their median and range."""
    paired = [a / b for a, b in zip(results[top], results[bottom], strict=True)]
    low, high = bootstrap_ratio_of_medians(results[top], results[bottom])
    return {
        "ratio_of_medians": statistics.median(results[top]) / statistics.median(results[bottom]),
        "bootstrap_95": [low, high],
        "per_round": paired,
        "per_round_median": statistics.median(paired),
        "per_round_range": [min(paired), max(paired)],
        "rounds_top_slower": sum(r < 1.0 for r in paired),
    }


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}
