"""The side-by-side overhead results as one Markdown table (for docs/performance.md and
the benches' READMEs): one row per results JSON of ``bench/workload_throughput/run.py``
or ``bench/profile_overhead/user_scripts.py``.

    .venv/bin/python bench/overhead_table.py bench/workload_throughput/results-overhead-*.json \\
        bench/profile_overhead/results-user-*.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RATIOS = ("profiled_vs_bare", "anatomy_vs_no_anatomy", "profiled_vs_plain")
BOTTOM = {"profiled_vs_bare": "workload_no_anatomy", "anatomy_vs_no_anatomy":
          "workload_no_anatomy", "profiled_vs_plain": "plain"}  # fmt: skip
TOP = {"profiled_vs_bare": "workload_profiled", "anatomy_vs_no_anatomy": "workload",
       "profiled_vs_plain": "profiled"}  # fmt: skip


def rows(path: Path) -> list[str]:
    result = json.loads(path.read_text())
    config = result["config"]
    what = config.get("framework") or config.get("script")
    ranks = config.get("np") or (2 if config.get("script") == "torchrun" else 1)
    loads = result["load_average_range"]
    medians = result["median_images_per_second"]
    out = []
    for name in RATIOS:
        if name not in result or result[name] is None:
            continue
        ratio = result[name]
        low, high = ratio["bootstrap_95"]
        out.append(
            f"| {what} | {ranks} | {name} | {len(ratio['per_round'])} | "
            f"{medians[BOTTOM[name]]:.2f} | {medians[TOP[name]]:.2f} | "
            f"**{ratio['ratio_of_medians']:.3f}** | {low:.2f}-{high:.2f} | "
            f"{ratio['per_round_range'][0]:.2f}-{ratio['per_round_range'][1]:.2f} | "
            f"{loads['min']:.1f}-{loads['max']:.1f} | `{path.name}` |"
        )
    return out


def main() -> None:
    print(
        "| training | ranks | ratio | rounds | without, images/s | with | ratio of medians "
        "| 95% bootstrap | per-round ratios | load average | results |"
    )
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | --- | --- | --- | --- |")
    for name in sys.argv[1:]:
        for row in rows(Path(name)):
            print(row)


if __name__ == "__main__":
    main()
