"""Side-by-side ratios for the overhead benches: variants interleaved round by round, the
order reversed every other round (A B, B A, A B, ...), so that a load drifting over the
measurement hits every variant alike; each variant's figure is the median over its rounds,
and the ratio of two medians comes with a bootstrap interval (each variant's rounds
resampled with replacement, independently) and the per-round ratios (the two runs of a
round ran back to back, sharing that moment's load).

Run the bench under the bench lock and at a higher priority than the other work on the
machine, so that ``nice -n 19`` builds and tests beside it take little of its CPU:

    flock /work/bench.lock nice -n -10 .venv/bin/python bench/<bench>/<script>.py ...

The load average before every run is recorded (``load_average``): it counts the other
work too, so it says how busy the machine was, not how much CPU the bench got.
"""

from __future__ import annotations

import os
import random
import statistics
from collections.abc import Iterator


def interleaved(rounds: int, variants: list[str]) -> Iterator[tuple[int, str]]:
    """(round, variant) in the order they run: A B, B A, A B, ..."""
    for round_index in range(rounds):
        order = variants if round_index % 2 == 0 else variants[::-1]
        for variant in order:
            yield round_index, variant


def load_average() -> float:
    """The 1-minute load average."""
    return round(os.getloadavg()[0], 2)


def nice_value() -> int:
    """This process's nice value (the measured processes inherit it)."""
    return os.getpriority(os.PRIO_PROCESS, 0)


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
