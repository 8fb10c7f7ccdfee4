"""INT8 against FP32 on this CPU, side by side in rounds: ResNet-50 in ONNX Runtime.

One export of the project's ResNet-50 (freshly initialised: the speed does not depend on
the weights' values), quantised both ways (QDQ and QOperator), calibrated on training
pictures of a synthetic JPEG data set. Each round times, for every batch size, FP32, INT8
QDQ and INT8 QOperator one after the other (the order rotated every round so drifting
load hits all alike) with ``workloads.infer.measure.time_batches``, the figure
``workloads infer`` reports. The speed-up of a round is INT8 images/s over the FP32 of the
same round; the result is the median over rounds, with the spread.

    .venv/bin/python bench/inference/run.py --image-size 224 --batch-sizes 1,8,32 \
        --rounds 5 --out bench/inference/results.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from workloads.infer import measure, model  # noqa: E402
from workloads.infer.images import load_split  # noqa: E402
from workloads.train.checkpoint import Architecture  # noqa: E402
from workloads.train.datasets import describe, make_dataset  # noqa: E402

VARIANTS = ("fp32", "int8-qdq", "int8-qoperator")


def cpu_flags() -> list[str]:
    """The integer dot-product instructions the CPU advertises."""
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512vnni", "avx_vnni", "amx_int8")
    with open("/proc/cpuinfo", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                return [flag for flag in wanted if flag in flags]
    return []


def cpu_name() -> str:
    with open("/proc/cpuinfo", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-sizes", default="1,8,32")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup-batches", type=int, default=2)
    parser.add_argument("--timed-batches", type=int, default=3)
    parser.add_argument("--calibration-images", type=int, default=64)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]

    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        data = work / "data"
        make_dataset(
            data,
            "jpeg",
            images=args.calibration_images,
            classes=8,
            image_size=args.image_size + 32,
            val_images=max(batch_sizes),
            progress=False,
        )
        info = describe(data)
        network = Architecture(num_classes=8).build()
        fp32 = model.export_onnx(network, args.image_size, work / "fp32.onnx")
        calibration = load_split(info, "train", args.image_size).pixels
        paths = {
            "fp32": fp32,
            "int8-qdq": model.quantize_int8(fp32, calibration, "qdq", work / "qdq.onnx"),
            "int8-qoperator": model.quantize_int8(
                fp32, calibration, "qoperator", work / "qop.onnx"
            ),
        }
        pixels = load_split(info, "val", args.image_size).pixels
        sessions = {name: model.open_session(path) for name, path in paths.items()}
        rates: dict[str, dict[int, list[float]]] = {
            v: {b: [] for b in batch_sizes} for v in VARIANTS
        }
        load_before = os.getloadavg()
        started = time.time()
        for round_index in range(args.rounds):
            order = VARIANTS[round_index % 3 :] + VARIANTS[: round_index % 3]
            for batch_size in batch_sizes:
                for variant in order:
                    timing = measure.time_batches(
                        sessions[variant].run,
                        pixels,
                        batch_size,
                        args.warmup_batches,
                        min_batches=args.timed_batches,
                        min_seconds=0.0,  # rounds, interleaved, hold the figure still
                    )
                    rates[variant][batch_size].append(timing.images_per_second)
            print(
                f"round {round_index + 1}/{args.rounds} done, load {os.getloadavg()[0]:.1f}",
                file=sys.stderr,
            )
    result = {
        "cpu": cpu_name(),
        "cpu_dot_product_flags": cpu_flags(),
        "cores": os.cpu_count(),
        "image_size": args.image_size,
        "rounds": args.rounds,
        "timed_batches": args.timed_batches,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "seconds": time.time() - started,
        "batch_sizes": {},
    }
    for batch_size in batch_sizes:
        row: dict[str, object] = {}
        for variant in VARIANTS:
            row[f"{variant}_images_per_second_median"] = statistics.median(
                rates[variant][batch_size]
            )
        for variant in VARIANTS[1:]:
            speedups = [
                int8 / base
                for int8, base in zip(
                    rates[variant][batch_size], rates["fp32"][batch_size], strict=True
                )
            ]
            row[f"{variant}_speedup_median"] = statistics.median(speedups)
            row[f"{variant}_speedup_range"] = [min(speedups), max(speedups)]
        result["batch_sizes"][str(batch_size)] = row
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
