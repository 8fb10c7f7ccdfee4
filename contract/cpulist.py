"""The cpulist format of ``Workload.CPUS_ALLOWED`` (as the kernel writes ``Cpus_allowed_list``:
``0-3,8``), written by the ranks and read by the findings."""

from __future__ import annotations


def parse_cpu_list(text: str) -> set[int]:
    """A cpulist (``0-3,8``) as CPU numbers."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part.strip():
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def format_cpu_list(cpus: set[int]) -> str:
    """CPU numbers as a cpulist: ``{0, 1, 2, 3, 8}`` -> ``0-3,8``."""
    ranges: list[str] = []
    ordered = sorted(cpus)
    index = 0
    while index < len(ordered):
        end = index
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        low, high = ordered[index], ordered[end]
        ranges.append(str(low) if low == high else f"{low}-{high}")
        index = end + 1
    return ",".join(ranges)
