"""A fake NVML: this machine has no GPU and no NVML library, so the tests mock NVML.

``FakeNvml`` answers the ``pynvml`` calls the gpu sampler makes from a list of GPU
descriptions (plain dicts, JSON-friendly). In a test process, ``install()`` monkeypatches
the real ``pynvml`` module's functions. For the agent as a real process (``agent sample
--once``, ``agent run``), ``fake_nvml_env()`` puts ``tests/support/fake_nvml_site`` first on
PYTHONPATH, whose ``pynvml`` is the real module with these functions swapped in, reading the
GPU descriptions from the JSON file named by ``EPOCHSCOPE_FAKE_NVML``, and points
LD_LIBRARY_PATH at a directory where ``libnvidia-ml.so.1`` is a link to an ordinary shared
library, so the sampler's "is the driver library there?" check passes.

The captured values are real GPUs' answers, read by hand from /work/shared/fixtures/gpu/:
  - ``h100-80gb-hbm3.capture.txt``: an H100 80GB HBM3, driver 590.48.01, in its
    ``load :: query (-q)`` section (gpu-burn + 2 memhogs) and its ``idle`` section;
  - ``a100-sxm4-80gb-mig.nvidia-smi.xml``: an A100-SXM4-80GB in MIG mode, driver 535,
    where utilization reads ``N/A`` (NVML answers NOT_SUPPORTED).
NVML speaks raw units (bytes, milliwatts, KB/s); nvidia-smi prints MiB and W, so the fake
is fed nvidia-smi's numbers turned back into NVML units (MiB x 2**20, W x 1000). Neither
capture holds a total-energy reading, PCIe byte counters, utilisation samples or processes:
tests that need them give made-up values and say so.

Behaviours a GPU description can ask for (each also reachable from the JSON file):
  - ``"pcie_delay": seconds``: every PCIe call (throughput or field values) takes that long,
    as ``nvmlDeviceGetPcieThroughput`` does on a real GPU (~20 ms);
  - ``"hang_while": path``: every NVML call on that GPU blocks while the file exists;
  - ``"lost_while": path`` or ``"lost": True``: every call raises GPU_IS_LOST;
  - ``"error_while": path``: ``nvmlDeviceGetPowerUsage`` raises NVML_ERROR_UNKNOWN;
  - ``"field_error_while": path``: every field value answers NVML_ERROR_UNKNOWN;
  - ``"energy_rate_mw": mW``, ``"pcie_bytes_per_second": (rx, tx)``: counters that grow
    with the wall clock (value = rate x time.time()), for per-epoch amounts;
  - ``"memory": (total, used, reserved)``: bytes as nvidia-smi prints them (its "Used"
    leaves the driver's "Reserved" out); a 2-tuple is reserved 0. ``"memory_v2":
    NOT_SUPPORTED``: a driver without ``nvmlDeviceGetMemoryInfo_v2`` (before R510);
  - ``NOT_SUPPORTED`` as a value: that call raises NVML_ERROR_NOT_SUPPORTED.
"""

from __future__ import annotations

import _ctypes
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
SITE = Path(__file__).resolve().parent / "fake_nvml_site"

NOT_SUPPORTED = "NOT_SUPPORTED"
MIB = 2**20

# H100 under load, "load :: query (-q)" section of the capture.
H100_LOAD: dict[str, Any] = {
    "name": "NVIDIA H100 80GB HBM3",  # Product Name
    "uuid": "GPU-00000000-0000-0000-0000-000000000000",  # GPU UUID (masked in the capture)
    "utilization": (100, 11),  # Utilization: GPU 100 %, Memory 11 %
    # FB Memory Usage: Total 81559, Reserved 479, Used 19818 MiB
    "memory": (81559 * MIB, 19818 * MIB, 479 * MIB),
    # nvmlDeviceGetPowerUsage is the 1 s average on Hopper: "Average Power Draw 629.45 W".
    "power_mw": 629450,
    "energy_mj": NOT_SUPPORTED,
    "temperature": 59,  # GPU Current Temp 59 C
    "sm_clock": 1980,  # Clocks: SM 1980 MHz
    "pcie_kbs": (6346, 3092),  # Rx Throughput 6346 KB/s, Tx Throughput 3092 KB/s
    "pcie_bytes": NOT_SUPPORTED,  # no field-value capture: the throughput calls answer
    "reasons": 0x0,  # Clocks Event Reasons all "Not Active"; csv active 0x0000000000000000
}
# The same H100 idle ("idle :: query (-q)").
H100_IDLE: dict[str, Any] = {
    **H100_LOAD,
    "utilization": (0, 0),
    "memory": (81559 * MIB, 0, 479 * MIB),  # Used 0 MiB, Reserved 479 MiB
    "power_mw": 69850,  # Average Power Draw 69.85 W
    "temperature": 41,
    "sm_clock": 345,
    "pcie_kbs": (329, 352),  # Rx 329 KB/s, Tx 352 KB/s
    "reasons": 0x1,  # Idle: Active; csv clocks_event_reasons.active 0x0000000000000001
}
# A100 in MIG mode (XML): <gpu_util>N/A</gpu_util>, <memory_util>N/A</memory_util>.
A100_MIG: dict[str, Any] = {
    "name": "NVIDIA A100-SXM4-80GB",  # <product_name>
    "uuid": "GPU-513536b6-7d19-9063-b049-1e69664bb298",  # <uuid>
    "utilization": NOT_SUPPORTED,
    "memory": (81920 * MIB, 50 * MIB),  # <fb_memory_usage> total 81920, used 50 MiB
    "power_mw": 67030,  # <power_draw>67.03 W</power_draw>
    "energy_mj": NOT_SUPPORTED,
    "temperature": 27,  # <gpu_temp>27 C</gpu_temp>
    "sm_clock": 1275,  # <clocks><sm_clock>1275 MHz
    "pcie_kbs": (0, 4000),  # <rx_util>0 KB/s</rx_util>, <tx_util>4000 KB/s</tx_util>
    "pcie_bytes": NOT_SUPPORTED,
    "reasons": 0x0,  # every clocks_event_reason "Not Active"
}

FUNCTIONS = (
    "nvmlInit",
    "nvmlShutdown",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetSamples",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetPcieThroughput",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetProcessUtilization",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
)


class FakeNvml:
    """Answers the pynvml calls the sampler makes, from a list of GPU descriptions.

    A GPU's handle is its index; a MIG device's is ``(index, slot)``, described by the
    GPU's ``"migs"`` list (``uuid``, ``name``, ``gi``, ``ci``, ``memory``, ``processes``).
    """

    def __init__(
        self, gpus: list[dict], event_reasons_symbol: bool = True, nvml: Any = None
    ) -> None:
        if nvml is None:
            import pynvml as nvml
        self.nvml = nvml
        self.gpus = [dict(gpu) for gpu in gpus]
        self.event_reasons_symbol = event_reasons_symbol
        self.init_calls = 0
        self.shutdown_calls = 0
        self.calls: list[tuple[str, Any]] = []  # (function, handle), in call order

    @classmethod
    def from_json(cls, path: str, nvml: Any) -> FakeNvml:
        return cls(json.loads(Path(path).read_text()), nvml=nvml)

    def install(self, monkeypatch: Any) -> FakeNvml:
        import agent.samplers.gpu as gpu_module

        for name in FUNCTIONS:
            monkeypatch.setattr(self.nvml, name, getattr(self, name))
        # the fake stands in for the driver, so its library counts as present
        monkeypatch.setattr(gpu_module, "nvml_library_loadable", lambda: True)
        return self

    def _error(self, code: int) -> Exception:
        return self.nvml.NVMLError(code)

    def _answer(self, value: Any) -> Any:
        if value == NOT_SUPPORTED:
            raise self._error(self.nvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def _gpu(self, handle: Any, function: str = "") -> dict:
        index = handle[0] if isinstance(handle, tuple) else handle
        gpu = self.gpus[index]
        self.calls.append((function, handle))
        hang = gpu.get("hang_while")
        while hang and os.path.exists(hang):
            time.sleep(0.01)
        lost = gpu.get("lost_while")
        if gpu.get("lost") or (lost and os.path.exists(lost)):
            raise self._error(self.nvml.NVML_ERROR_GPU_IS_LOST)
        if isinstance(handle, tuple):
            return gpu["migs"][handle[1]]
        return gpu

    def _pcie_wait(self, gpu: dict) -> None:
        delay = gpu.get("pcie_delay", 0)
        if delay:
            time.sleep(delay)

    def nvmlInit(self) -> None:
        self.init_calls += 1

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._gpu(handle, "name")["name"]

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return self._gpu(handle, "uuid")["uuid"]

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> SimpleNamespace:
        gpu, memory = self._answer(
            self._gpu(handle, "utilization").get("utilization", NOT_SUPPORTED)
        )
        return SimpleNamespace(gpu=gpu, memory=memory)

    def nvmlDeviceGetSamples(self, handle: Any, sampling_type: int, after_us: int) -> tuple:
        nvml = self.nvml
        key = {
            nvml.NVML_GPU_UTILIZATION_SAMPLES: "utilization_samples",
            nvml.NVML_MEMORY_UTILIZATION_SAMPLES: "memory_utilization_samples",
        }[sampling_type]
        samples = self._answer(self._gpu(handle, "samples").get(key, NOT_SUPPORTED))
        newer = [(stamp, value) for stamp, value in samples if stamp > after_us]
        if not newer:  # what NVML answers when no sample is newer than the timestamp
            raise self._error(nvml.NVML_ERROR_NOT_FOUND)
        structures = (nvml.c_nvmlSample_t * len(newer))()
        for structure, (stamp, value) in zip(structures, newer, strict=True):
            structure.timeStamp = stamp
            structure.sampleValue.uiVal = value
        return nvml.NVML_VALUE_TYPE_UNSIGNED_INT, structures[0 : len(newer)]

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> SimpleNamespace:
        """v1 (no version) counts the driver's reserved memory as used, as the real call
        does; v2 counts it apart, as nvidia-smi prints it. ``"memory_v2": NOT_SUPPORTED``
        is a driver before R510, which lacks ``nvmlDeviceGetMemoryInfo_v2``."""
        gpu = self._gpu(handle, "memory")
        total, used, *reserved = self._answer(gpu["memory"])
        reserved = reserved[0] if reserved else 0
        free = total - used - reserved
        if not version:
            return SimpleNamespace(total=total, used=used + reserved, free=free)
        if gpu.get("memory_v2") == NOT_SUPPORTED:
            raise self._error(self.nvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return SimpleNamespace(total=total, reserved=reserved, used=used, free=free)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        gpu = self._gpu(handle, "power")
        failing = gpu.get("error_while")
        if failing and os.path.exists(failing):
            raise self._error(self.nvml.NVML_ERROR_UNKNOWN)
        return self._answer(gpu.get("power_mw", NOT_SUPPORTED))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        gpu = self._gpu(handle, "energy")
        if "energy_rate_mw" in gpu:  # a counter growing with the wall clock
            return round(gpu["energy_rate_mw"] * time.time())
        return self._answer(gpu.get("energy_mj", NOT_SUPPORTED))

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        assert sensor == self.nvml.NVML_TEMPERATURE_GPU
        return self._answer(self._gpu(handle, "temperature").get("temperature", NOT_SUPPORTED))

    def nvmlDeviceGetClockInfo(self, handle: Any, clock: int) -> int:
        assert clock == self.nvml.NVML_CLOCK_SM
        return self._answer(self._gpu(handle, "clock").get("sm_clock", NOT_SUPPORTED))

    def nvmlDeviceGetPcieThroughput(self, handle: Any, counter: int) -> int:
        gpu = self._gpu(handle, "pcie_throughput")
        self._pcie_wait(gpu)
        rx, tx = self._answer(gpu.get("pcie_kbs", NOT_SUPPORTED))
        nvml = self.nvml
        return {nvml.NVML_PCIE_UTIL_RX_BYTES: rx, nvml.NVML_PCIE_UTIL_TX_BYTES: tx}[counter]

    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: list[int]) -> list:
        nvml = self.nvml
        gpu = self._gpu(handle, "field_values")
        self._pcie_wait(gpu)
        counters = gpu.get("pcie_bytes", NOT_SUPPORTED)
        if "pcie_bytes_per_second" in gpu:  # counters growing with the wall clock
            now = time.time()
            counters = [round(rate * now) for rate in gpu["pcie_bytes_per_second"]]
        by_id: dict[int, int] = {}
        if counters != NOT_SUPPORTED:
            by_id = {
                nvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: counters[0],
                nvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: counters[1],
            }
        unsupported = nvml.NVML_ERROR_NOT_SUPPORTED
        failing = gpu.get("field_error_while")
        if failing and os.path.exists(failing):  # each value answers NVML_ERROR_UNKNOWN
            unsupported = nvml.NVML_ERROR_UNKNOWN
            by_id = {}
        # The call itself succeeds; each value carries its own return code, as in NVML, in
        # the binding's own ctypes structures.
        values = (nvml.c_nvmlFieldValue_t * len(field_ids))()
        for value, field_id in zip(values, field_ids, strict=True):
            value.fieldId = field_id
            value.nvmlReturn = nvml.NVML_SUCCESS if field_id in by_id else unsupported
            value.valueType = nvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            value.value.ullVal = by_id.get(field_id, 0)
        return values

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        if not self.event_reasons_symbol:  # what a driver older than 535 answers
            raise self._error(self.nvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return self._answer(self._gpu(handle, "reasons").get("reasons", NOT_SUPPORTED))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return self._answer(self._gpu(handle, "reasons").get("reasons", NOT_SUPPORTED))

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list:
        processes = self._answer(self._gpu(handle, "processes").get("processes", []))
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in processes]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list:
        processes = self._answer(self._gpu(handle, "graphics").get("graphics_processes", []))
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in processes]

    def nvmlDeviceGetProcessUtilization(self, handle: Any, after_us: int) -> list:
        samples = self._answer(self._gpu(handle, "process_samples").get("process_samples", []))
        newer = [s for s in samples if s[1] > after_us]
        if not newer:
            raise self._error(self.nvml.NVML_ERROR_NOT_FOUND)
        structures = (self.nvml.c_nvmlProcessUtilizationSample_t * len(newer))()
        for structure, (pid, stamp, sm, mem) in zip(structures, newer, strict=True):
            structure.pid, structure.timeStamp = pid, stamp
            structure.smUtil, structure.memUtil = sm, mem
        return structures[0 : len(newer)]

    def nvmlDeviceGetMigMode(self, handle: Any) -> tuple[int, int]:
        gpu = self._gpu(handle, "mig_mode")
        if "migs" not in gpu:
            return (0, 0)
        return (self.nvml.NVML_DEVICE_MIG_ENABLE, self.nvml.NVML_DEVICE_MIG_ENABLE)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        return 7 if "migs" in self._gpu(handle, "mig_count") else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, slot: int) -> tuple[int, int]:
        gpu = self._gpu(handle, "mig_handle")
        if slot >= len(gpu.get("migs", [])):
            raise self._error(self.nvml.NVML_ERROR_NOT_FOUND)  # an empty slot
        return (handle, slot)

    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int:
        return self._gpu(handle, "gi")["gi"]

    def nvmlDeviceGetComputeInstanceId(self, handle: Any) -> int:
        return self._gpu(handle, "ci")["ci"]


def fake_nvml_env(tmp_path: Path, gpus: list[dict], env: dict[str, str]) -> dict[str, str]:
    """An environment in which ``python -m agent`` finds the fake NVML with ``gpus``."""
    scenario = tmp_path / "fake-nvml.json"
    scenario.write_text(json.dumps(gpus))
    library_dir = tmp_path / "fake-nvml-lib"
    library_dir.mkdir(exist_ok=True)
    link = library_dir / "libnvidia-ml.so.1"
    if not link.exists():
        link.symlink_to(_ctypes.__file__)  # any shared library: dlopen only has to succeed
    env = dict(env)
    env["EPOCHSCOPE_FAKE_NVML"] = str(scenario)
    env["PYTHONPATH"] = os.pathsep.join([str(SITE), str(REPO_ROOT), env.get("PYTHONPATH", "")])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        filter(None, [str(library_dir), env.get("LD_LIBRARY_PATH")])
    )
    return env
