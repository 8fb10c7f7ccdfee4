"""NVIDIA GPU readings through NVML (the ``nvidia-ml-py`` package, ``import pynvml``).

Measurement ``gpu`` (schema ``Gpu``), one point per GPU.

Tags:
  - ``gpu``: the NVML device index (``0``, ``1``, ...)
  - ``uuid``: ``GPU-...`` from ``nvmlDeviceGetUUID``
  - ``name``: the product name from ``nvmlDeviceGetName`` (``NVIDIA H100 80GB HBM3``)

Fields:
  - ``utilization_percent`` (float, %): ``nvmlDeviceGetUtilizationRates().gpu``, the share
    of the last sample period in which a kernel ran.
  - ``memory_utilization_percent`` (float, %): ``.memory`` of the same call, the share of
    time device memory was read or written.
  - ``memory_used_bytes``, ``memory_total_bytes`` (float, bytes):
    ``nvmlDeviceGetMemoryInfo`` (v1: ``used`` includes memory the driver reserves).
  - ``power_watts`` (float, W): ``nvmlDeviceGetPowerUsage`` milliwatts / 1000. NVML
    returns a 1-second average on Ampere (except A100) and newer, an instantaneous
    reading on A100 and older.
  - ``energy_joules`` (float, J, cumulative): ``nvmlDeviceGetTotalEnergyConsumption``
    millijoules / 1000, since the driver was loaded (Volta and newer).
  - ``temperature_celsius`` (float, °C): ``nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)``.
  - ``sm_clock_mhz`` (float, MHz): ``nvmlDeviceGetClockInfo(NVML_CLOCK_SM)``.
  - ``pcie_rx_bytes_per_second``, ``pcie_tx_bytes_per_second`` (float, bytes/s):
    ``nvmlDeviceGetPcieThroughput`` KB/s x 1024 (NVML's "KB" is taken as KiB, as in the
    rest of nvidia-smi's memory units).
  - ``throttle_reasons`` (float, bitmask): ``nvmlDeviceGetCurrentClocksEventReasons``
    (``...ClocksThrottleReasons`` on drivers without it): 0x1 idle, 0x4 software power
    cap, 0x8 hardware slowdown, 0x20 software thermal, 0x40 hardware thermal,
    0x80 power brake...

Caveats:
  - Any NVML call that raises (``NotSupported``: utilization of a GPU in MIG mode, energy
    before Volta; ``NoPermission``...) just leaves its field out.
  - A GPU that raises ``GPU_IS_LOST`` (fell off the bus) is dropped with one warning and
    not sampled again; the other GPUs go on.
  - No ``nvidia-ml-py``, no NVML library, no driver or no GPU: ``available()`` is False
    and says why in one log line. NVML is initialised once, in ``available()``, and shut
    down by ``close()``.
  - ``nvmlDeviceGetPcieThroughput`` measures over about 20 ms per call, so the two PCIe
    calls cost about 40 ms per GPU and sample.
  - MIG instances are not sampled separately; the parent GPU's point carries what NVML
    reports for the whole GPU.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.point import Point
from agent.samplers.base import Roots
from agent.schema import Gpu, Tag

log = logging.getLogger(__name__)

INT64_MAX = 2**63 - 1
KIB = 1024


@dataclass
class GpuReadings:
    """Raw NVML answers for one GPU; None where the call failed."""

    utilization: Any = None  # nvmlUtilization_t: .gpu, .memory (percent)
    memory: Any = None  # nvmlMemory_t: .total, .used (bytes)
    power_milliwatts: int | None = None
    energy_millijoules: int | None = None
    temperature_celsius: int | None = None
    sm_clock_mhz: int | None = None
    pcie_rx_kilobytes_per_second: int | None = None
    pcie_tx_kilobytes_per_second: int | None = None
    clock_event_reasons: int | None = None


def gpu_fields(readings: GpuReadings) -> dict[str, int | float]:
    """The ``gpu`` fields in schema units from NVML's raw answers."""
    fields: dict[str, int | float] = {}
    if readings.utilization is not None:
        fields[Gpu.UTILIZATION_PERCENT] = float(readings.utilization.gpu)
        fields[Gpu.MEMORY_UTILIZATION_PERCENT] = float(readings.utilization.memory)
    if readings.memory is not None:
        fields[Gpu.MEMORY_USED_BYTES] = float(readings.memory.used)
        fields[Gpu.MEMORY_TOTAL_BYTES] = float(readings.memory.total)
    if readings.power_milliwatts is not None:
        fields[Gpu.POWER_WATTS] = readings.power_milliwatts / 1000
    # An unsigned 64-bit counter: a value beyond 2**63 is a wrapped difference, not
    # energy, and is left out rather than written as a wrong number.
    if readings.energy_millijoules is not None and readings.energy_millijoules <= INT64_MAX:
        fields[Gpu.ENERGY_JOULES] = readings.energy_millijoules / 1000
    if readings.temperature_celsius is not None:
        fields[Gpu.TEMPERATURE_CELSIUS] = float(readings.temperature_celsius)
    if readings.sm_clock_mhz is not None:
        fields[Gpu.SM_CLOCK_MHZ] = float(readings.sm_clock_mhz)
    if readings.pcie_rx_kilobytes_per_second is not None:
        fields[Gpu.PCIE_RX_BYTES_PER_SECOND] = float(readings.pcie_rx_kilobytes_per_second * KIB)
    if readings.pcie_tx_kilobytes_per_second is not None:
        fields[Gpu.PCIE_TX_BYTES_PER_SECOND] = float(readings.pcie_tx_kilobytes_per_second * KIB)
    if readings.clock_event_reasons is not None:
        fields[Gpu.THROTTLE_REASONS] = float(readings.clock_event_reasons)
    return fields


class GpuLostError(Exception):
    """NVML said GPU_IS_LOST: the device is gone until reset."""


@dataclass
class _Device:
    index: int
    handle: Any
    uuid: str
    name: str


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class GpuSampler:
    name = "gpu"

    def __init__(self, roots: Roots) -> None:
        del roots  # NVML finds the GPUs itself
        self._nvml: Any = None
        self._devices: list[_Device] = []

    def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)``, or None when NVML cannot answer; GpuLostError if the GPU left."""
        try:
            return function(*args)
        except self._nvml.NVMLError as error:
            if getattr(error, "value", None) == self._nvml.NVML_ERROR_GPU_IS_LOST:
                raise GpuLostError(str(error)) from error
            return None

    def _clock_event_reasons(self, handle: Any) -> int | None:
        nvml = self._nvml
        # The "event reasons" call replaced "throttle reasons" (driver 535); a library or
        # driver without it raises FunctionNotFound (or the binding lacks it).
        for name in (
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
        ):
            function = getattr(nvml, name, None)
            if function is None:
                continue
            try:
                return function(handle)
            except nvml.NVMLError as error:
                value = getattr(error, "value", None)
                if value == nvml.NVML_ERROR_GPU_IS_LOST:
                    raise GpuLostError(str(error)) from error
                if value != nvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                    return None
        return None

    def _readings(self, handle: Any) -> GpuReadings:
        nvml = self._nvml
        call = self._call
        return GpuReadings(
            utilization=call(nvml.nvmlDeviceGetUtilizationRates, handle),
            memory=call(nvml.nvmlDeviceGetMemoryInfo, handle),
            power_milliwatts=call(nvml.nvmlDeviceGetPowerUsage, handle),
            energy_millijoules=call(nvml.nvmlDeviceGetTotalEnergyConsumption, handle),
            temperature_celsius=call(
                nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU
            ),
            sm_clock_mhz=call(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM),
            pcie_rx_kilobytes_per_second=call(
                nvml.nvmlDeviceGetPcieThroughput, handle, nvml.NVML_PCIE_UTIL_RX_BYTES
            ),
            pcie_tx_kilobytes_per_second=call(
                nvml.nvmlDeviceGetPcieThroughput, handle, nvml.NVML_PCIE_UTIL_TX_BYTES
            ),
            clock_event_reasons=self._clock_event_reasons(handle),
        )

    def _enumerate(self) -> list[_Device]:
        nvml = self._nvml
        devices = []
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(self._call(nvml.nvmlDeviceGetUUID, handle) or "")
                name = _text(self._call(nvml.nvmlDeviceGetName, handle) or "")
            except (nvml.NVMLError, GpuLostError) as error:
                log.warning("gpu %d skipped: %s", index, error)
                continue
            devices.append(_Device(index, handle, uuid, name))
        return devices

    def available(self) -> bool:
        if self._nvml is not None:
            return bool(self._devices)
        if not nvml_library_loadable():
            log.info("gpu sampler off: no NVML driver library (%s)", NVML_LIBRARY)
            return False
        try:
            import pynvml
        except ImportError:
            log.info("gpu sampler off: nvidia-ml-py (pynvml) is not installed")
            return False
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as error:
            log.info("gpu sampler off: NVML could not start (%s)", error)
            return False
        self._nvml = pynvml
        try:
            self._devices = self._enumerate()
        except pynvml.NVMLError as error:
            self.close()
            log.info("gpu sampler off: NVML could not list GPUs (%s)", error)
            return False
        if not self._devices:
            self.close()
            log.info("gpu sampler off: NVML found no GPU")
            return False
        return True

    def sample(self, now_ns: int) -> list[Point]:
        points = []
        for device in list(self._devices):
            try:
                fields = gpu_fields(self._readings(device.handle))
            except GpuLostError as error:
                log.warning(
                    "gpu %d (%s) lost, no longer sampled: %s", device.index, device.uuid, error
                )
                self._devices.remove(device)
                continue
            if not fields:
                continue
            tags = {Tag.GPU: str(device.index), Tag.UUID: device.uuid, Tag.NAME: device.name}
            points.append(Point(Gpu.NAME, tags, fields, now_ns))
        return points

    def close(self) -> None:
        """Shut NVML down (once); the sampler then reports nothing."""
        nvml, self._nvml, self._devices = self._nvml, None, []
        if nvml is not None:
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError as error:
                log.debug("nvmlShutdown failed: %s", error)


NVML_LIBRARY = "libnvidia-ml.so.1"


def nvml_library_loadable() -> bool:
    """Is the driver's NVML library there? Checked before importing pynvml, whose ~2 MB
    a node without NVIDIA GPUs should not pay for (the agent's RSS is a target)."""
    import ctypes

    try:
        ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        return False
    return True


SAMPLER = GpuSampler
