"""The tick's cost with N slow GPUs: read in the tick (the old design) against the reader
threads (the current one), side by side in one run, with the FAKE NVML of the tests.

NVML is mocked (tests/support/fake_nvml.py): each PCIe call sleeps ``--pcie-ms`` (NVML's
``nvmlDeviceGetPcieThroughput`` samples a 20 ms window), field values are not supported,
so every reading makes the two throughput calls, as on a driver without PCIe counters.
What this measures is the sampler's structure, not a GPU: on a real GPU run
bench/gpu_check/compare.py.

    .venv/bin/python bench/gpu_check/fake_tick.py --gpus 8 --pcie-ms 20 --ticks 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

import pytest  # noqa: E402  (MonkeyPatch, to install the fake)

from agent.samplers.base import Roots  # noqa: E402
from agent.samplers.gpu import GpuSampler  # noqa: E402
from tests.support.fake_nvml import H100_LOAD, FakeNvml  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pcie-ms", type=float, default=20.0)
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between ticks")
    args = parser.parse_args()
    gpus = [
        {**H100_LOAD, "uuid": f"GPU-{i}", "pcie_delay": args.pcie_ms / 1000}
        for i in range(args.gpus)
    ]
    with pytest.MonkeyPatch.context() as monkeypatch:
        FakeNvml(gpus).install(monkeypatch)
        sampler = GpuSampler(Roots())
        assert sampler.available()
        sampler.sample(time.time_ns())  # the first readings, waited for once

        in_tick, threaded, ages, complete = [], [], [], 0
        for tick in range(args.ticks):
            # the old design: every GPU read, one after the other, inside the tick
            started = time.perf_counter()
            for reader in sampler.readers:
                reader._read()
            in_tick.append(time.perf_counter() - started)
            time.sleep(max(0.0, args.interval - in_tick[-1]))
            # the current one: the tick takes the readers' latest readings
            started = time.perf_counter()
            points = sampler.sample(time.time_ns())
            threaded.append(time.perf_counter() - started)
            if tick >= 2:  # the first ticks learn the interval (their readings are older)
                ages += [p.fields["reading_age_seconds"] for p in points]
                complete += len(points) == args.gpus
            time.sleep(args.interval)
        sampler.close()

    def ms(values: list[float]) -> str:
        return f"median {statistics.median(values) * 1000:.2f} ms, max {max(values) * 1000:.2f} ms"

    print(f"{args.gpus} GPUs, {args.pcie_ms:g} ms per PCIe call, {args.ticks} ticks (FAKE NVML)")
    print(f"read in the tick:      {ms(in_tick)}")
    print(f"reader threads (tick): {ms(threaded)}")
    print(f"reading age:           {ms(ages)} (after the first 2 ticks)")
    print(f"ticks with a new reading of every GPU: {complete} of {args.ticks - 2}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
