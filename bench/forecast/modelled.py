"""Forecast the stored runs modelled on the studies (bench/dashboard/screenshots.py: 1 GPU,
1 x 4 GPUs, 2 x 4 GPUs, and the 4 x 4 GPU Isilon-like run) from smaller ones and print the
error against the stored (modelled) figures. Not CI: ``python bench/forecast/modelled.py``.

The modelled runs are written by hand from the studies' tables, so this checks the model's
arithmetic against those tables, not against measured hardware (see docs/forecast.md)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.dashboard.screenshots import DEMO_RUN, build_demo_store
from collector.analysis.epochs import build_report
from collector.analysis.forecast import forecast, measured_run
from collector.analysis.throughput import rank_epoch_work, run_throughput

RESNET50_GRADIENT_BYTES = 25.6e6 * 4  # 25.6 M FP32 parameters


def steady_rate(store, run_id: str) -> tuple[float, int]:
    report = build_report(store, run_id)
    works = [w for w in rank_epoch_work(report.model) if w.epoch > 1]
    return run_throughput(works).images_per_second, len({w.host for w in works})


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        store = build_demo_store(Path(folder) / "modelled.sqlite")
        cases = (("hvd-4gpu", 2, "hvd-8gpu"), ("hvd-4gpu", 4, DEMO_RUN), ("hvd-8gpu", 4, DEMO_RUN))
        print("from       to nodes  forecast img/s  stored img/s  error   eff fc  eff stored")
        for source, nodes, target in cases:
            run = measured_run(
                build_report(store, source),
                gradient_bytes=RESNET50_GRADIENT_BYTES,
                link_bytes_per_second=100e9 / 8 if source == "hvd-4gpu" else None,
            )
            (row,) = forecast(run, [nodes])
            actual, _ = steady_rate(store, target)
            stored_eff = actual / (row.gpus * run.per_rank_rate)
            error = row.images_per_second / actual - 1
            print(
                f"{source:10} {nodes:8}  {row.images_per_second:14.0f}  {actual:12.0f}"
                f"  {error:+6.1%}  {row.efficiency:6.0%}  {stored_eff:10.0%}"
            )
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
