"""NVIDIA GPU readings through NVML (the ``nvidia-ml-py`` package, ``import pynvml``).

Measurements ``gpu`` (schema ``Gpu``: one point per GPU and per MIG device) and
``gpu_process`` (schema ``GpuProcess``: one point per compute process on a GPU or MIG
device). The design, every NVML call and its caveats are in docs/gpu.md; in short:

Reading in the background, never in the tick:
  - One worker thread per physical GPU reads it (the GPU's MIG devices too) at the
    agent's interval, timed to finish just before the tick; ``sample()`` takes each
    GPU's latest complete reading and never calls NVML. ``nvmlDeviceGetPcieThroughput``
    alone blocks ~20 ms per call, so eight GPUs read in the tick would cost ~320 ms.
  - A reading's points carry the reading's own time (when its counters were read, one
    right after the other, first), so a counter is exact at its timestamp, and say how
    old the reading was at the tick that sent it (``reading_age_seconds``; the oldest is
    the ``agent`` measurement's ``gpu_reading_age_seconds``). Each reading is sent once:
    a tick that finds no new reading of a GPU sends nothing for it.
  - An NVML call that has not answered after ``call_timeout_seconds`` marks its GPU hung:
    the GPU gives no point (its last values would be stale), ``gpus_hung`` counts it and
    one warning says which call; its thread stays in the call (a thread cannot be
    interrupted inside a C call) and the GPU is reported again, with one info line, when
    the call answers. The other GPUs and samplers are not delayed.
  - ``GPU_IS_LOST`` (the GPU fell off the bus; the kernel logs an Xid 79): one warning, the
    GPU is no longer read, ``gpus_lost`` counts it. Any other NVML error on a call that
    should work (``UNKNOWN``, ``TIMEOUT``...) leaves that field out, logs once per GPU,
    call and error, and counts the GPU in ``gpus_failing`` until a reading is clean.

Counters where NVML has them:
  - PCIe bytes: ``nvmlDeviceGetFieldValues`` with ``NVML_FI_DEV_PCIE_COUNT_RX_BYTES`` /
    ``TX_BYTES`` (cumulative, ``pcie_rx_bytes``/``pcie_tx_bytes``); a driver or GPU that
    does not support them gets ``nvmlDeviceGetPcieThroughput`` (a 20 ms window, KB/s x
    1024, ``pcie_*_bytes_per_second``), decided once per GPU.
  - Energy: ``nvmlDeviceGetTotalEnergyConsumption`` mJ / 1000, cumulative since driver
    load (Volta+).
  - Utilisation: the mean of ``nvmlDeviceGetSamples(GPU_UTILIZATION_SAMPLES)`` (and
    ``MEMORY_UTILIZATION_SAMPLES``) newer than the last reading, so a burst between two
    readings counts (a first reading: the last second's); ``nvmlDeviceGetUtilizationRates``
    (NVML's last sample period) when samples are not supported or none is new.

Per process: ``nvmlDeviceGetComputeRunningProcesses`` and
``nvmlDeviceGetGraphicsRunningProcesses`` (pid, memory; a pid in both counted once) and
``nvmlDeviceGetProcessUtilization`` (SM and memory share per pid, mean of the samples
since the last reading), tagged ``pid`` and, for a process in a Slurm job's cgroup
(``/proc/<pid>/cgroup``), ``job_id``; on a GPU in MIG mode, per MIG device.

MIG: a GPU with MIG enabled gives its own point (power, energy, PCIe, temperature:
whole-GPU values; utilisation is not supported under MIG) and one point per MIG device,
tagged ``mig="<GPU instance>/<compute instance>"`` with the device's ``MIG-...`` uuid and
its memory. Totals over a node count the points without ``mig``.

No ``nvidia-ml-py``, no NVML library, no driver or no GPU: ``available()`` is False and
says why in one log line. NVML is initialised once, in ``available()``, and shut down by
``close()``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent.samplers.agent import AgentStats
from agent.samplers.base import Roots, read_text
from agent.samplers.jobs import parse_proc_cgroup_job
from contract.point import Point
from contract.schema import Gpu, GpuProcess, Tag

log = logging.getLogger(__name__)

INT64_MAX = 2**63 - 1
KIB = 1024
CALL_TIMEOUT_SECONDS = 5.0
FIRST_READING_WAIT_SECONDS = 2.0  # sample() waits this long, once, for a first reading
MIN_PERIOD_SECONDS = 0.05


@dataclass
class GpuReadings:
    """Raw NVML answers for one GPU or MIG device; None where the call failed."""

    utilization: Any = None  # nvmlUtilization_t: .gpu, .memory (percent)
    utilization_samples_percent: float | None = None  # mean of GPU_UTILIZATION_SAMPLES
    memory_utilization_samples_percent: float | None = None
    memory: Any = None  # nvmlMemory_t: .total, .used (bytes)
    power_milliwatts: int | None = None
    energy_millijoules: int | None = None
    temperature_celsius: int | None = None
    sm_clock_mhz: int | None = None
    pcie_rx_bytes: int | None = None  # NVML_FI_DEV_PCIE_COUNT_RX_BYTES
    pcie_tx_bytes: int | None = None
    pcie_rx_kilobytes_per_second: int | None = None
    pcie_tx_kilobytes_per_second: int | None = None
    clock_event_reasons: int | None = None


def gpu_fields(readings: GpuReadings) -> dict[str, int | float]:
    """The ``gpu`` fields in schema units from NVML's raw answers."""
    fields: dict[str, int | float] = {}
    if readings.utilization_samples_percent is not None:
        fields[Gpu.UTILIZATION_PERCENT] = readings.utilization_samples_percent
    elif readings.utilization is not None:
        fields[Gpu.UTILIZATION_PERCENT] = float(readings.utilization.gpu)
    if readings.memory_utilization_samples_percent is not None:
        fields[Gpu.MEMORY_UTILIZATION_PERCENT] = readings.memory_utilization_samples_percent
    elif readings.utilization is not None:
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
    if readings.pcie_rx_bytes is not None and readings.pcie_rx_bytes <= INT64_MAX:
        fields[Gpu.PCIE_RX_BYTES] = int(readings.pcie_rx_bytes)
    if readings.pcie_tx_bytes is not None and readings.pcie_tx_bytes <= INT64_MAX:
        fields[Gpu.PCIE_TX_BYTES] = int(readings.pcie_tx_bytes)
    if readings.pcie_rx_kilobytes_per_second is not None:
        fields[Gpu.PCIE_RX_BYTES_PER_SECOND] = float(readings.pcie_rx_kilobytes_per_second * KIB)
    if readings.pcie_tx_kilobytes_per_second is not None:
        fields[Gpu.PCIE_TX_BYTES_PER_SECOND] = float(readings.pcie_tx_kilobytes_per_second * KIB)
    if readings.clock_event_reasons is not None:
        fields[Gpu.THROTTLE_REASONS] = float(readings.clock_event_reasons)
    return fields


# A first reading has no last reading to start from: it takes the samples of the last
# second (the agent's default interval; nvidia-smi shows NVML's last sample period, 1/6 s
# to 1 s). From 0 it would average NVML's whole buffer: on an idle H200, 3 % against
# nvidia-smi's 0, from the seconds before the agent started.
FIRST_READING_WINDOW_US = 1_000_000


def first_reading_after(stamps: Sequence[int], after_us: int | None) -> int:
    """The timestamp to take samples after: ``after_us``, or on a first reading (None) one
    ``FIRST_READING_WINDOW_US`` before the newest sample."""
    if after_us is not None:
        return after_us
    return max(stamps, default=0) - FIRST_READING_WINDOW_US


def samples_mean(
    samples: Sequence[tuple[int, float]], after_us: int | None
) -> tuple[float | None, int | None]:
    """(mean of the sample values newer than ``after_us``, the newest timestamp seen).

    ``samples`` are (timestamp in microseconds, value) as ``nvmlDeviceGetSamples`` gives
    them; NVML may return samples at or before the timestamp asked for, which are left out.
    ``after_us`` None: a first reading (``first_reading_after``).
    """
    if not samples:
        return None, after_us
    after_us = first_reading_after([stamp for stamp, _ in samples], after_us)
    newer = [value for stamp, value in samples if stamp > after_us]
    newest = max(stamp for stamp, _ in samples)
    return (sum(newer) / len(newer) if newer else None), max(newest, after_us)


COUNTER_32_BIT_RANGE = 2**32


class Unwrapped32:
    """A driver counter that wraps at 2**32, kept as a count that only grows.

    NVML's PCIe byte counters (``NVML_FI_DEV_PCIE_COUNT_*``) wrap: on an H200 with driver
    580, 8 GiB copied to the GPU moved the receive counter by 0.67 GB (8.59 GB and ~8 %
    of packet headers, less two wraps) and its send counter back by 3.5 GB. A reading
    below the last, where the last fitted in 32 bits, is one wrap; below a last reading
    past 32 bits (a wider counter, never wrapped here) it is a reset (the driver
    reloaded), passed on as one. More than one wrap between two readings (4.3 GB in one
    interval) cannot be seen and counts as one.
    """

    def __init__(self) -> None:
        self.last: int | None = None
        self.wraps = 0

    def __call__(self, raw: int) -> int:
        if self.last is not None and raw < self.last < COUNTER_32_BIT_RANGE:
            self.wraps += 1
        self.last = raw
        return raw + self.wraps * COUNTER_32_BIT_RANGE


@dataclass
class ProcessReading:
    """One compute process on one GPU or MIG device."""

    pid: int
    memory_used_bytes: int | None = None
    sm_utilization_percent: float | None = None
    memory_utilization_percent: float | None = None


def process_fields(process: ProcessReading) -> dict[str, int | float]:
    fields: dict[str, int | float] = {}
    if process.memory_used_bytes is not None:
        fields[GpuProcess.MEMORY_USED_BYTES] = float(process.memory_used_bytes)
    if process.sm_utilization_percent is not None:
        fields[GpuProcess.SM_UTILIZATION_PERCENT] = process.sm_utilization_percent
    if process.memory_utilization_percent is not None:
        fields[GpuProcess.MEMORY_UTILIZATION_PERCENT] = process.memory_utilization_percent
    return fields


def _used_memory(process: Any) -> int | None:
    """``usedGpuMemory``: None where NVML cannot tell (Windows WDDM, some containers:
    NVML_VALUE_NOT_AVAILABLE, 2^64-1)."""
    used = getattr(process, "usedGpuMemory", None)
    return None if used is None or used > INT64_MAX else int(used)


def merge_processes(compute: Sequence[Any], graphics: Sequence[Any]) -> dict[int, int | None]:
    """Device memory per pid over NVML's compute and graphics process lists.

    A process with both contexts (CUDA and OpenGL/Vulkan) is listed in both with the same
    memory, its whole use on the device: it is counted once (the larger answer).
    """
    used: dict[int, int | None] = {}
    for process in (*compute, *graphics):
        pid, memory = int(process.pid), _used_memory(process)
        known = used.get(pid)
        used[pid] = memory if known is None else max(known, memory or 0)
    return used


def process_utilization(
    samples: Sequence[Any], after_us: int | None
) -> tuple[dict[int, tuple[float, float]], int | None]:
    """Per pid (mean SM %, mean memory %) over ``nvmlDeviceGetProcessUtilization`` samples
    newer than ``after_us`` (None: a first reading, ``first_reading_after``), and the
    newest timestamp seen."""
    if not samples:
        return {}, after_us
    after_us = first_reading_after([int(sample.timeStamp) for sample in samples], after_us)
    by_pid: dict[int, list[tuple[float, float]]] = {}
    newest = after_us
    for sample in samples:
        newest = max(newest, int(sample.timeStamp))
        if sample.timeStamp > after_us:
            by_pid.setdefault(int(sample.pid), []).append(
                (float(sample.smUtil), float(sample.memUtil))
            )
    means = {
        pid: (sum(s for s, _ in values) / len(values), sum(m for _, m in values) / len(values))
        for pid, values in by_pid.items()
    }
    return means, newest


class GpuLostError(Exception):
    """NVML said GPU_IS_LOST: the device is gone until reset."""


@dataclass
class _Device:
    index: int
    handle: Any
    uuid: str
    name: str
    mig: str = ""  # "<gi>/<ci>" for a MIG device


@dataclass
class Reading:
    """One complete reading of a GPU (and its MIG devices), as points without a time."""

    time_ns: int  # wall clock when the GPU's counters were read: the values' own time
    gpus: list[tuple[dict[str, str], dict[str, int | float]]]
    processes: list[tuple[dict[str, str], dict[str, int | float]]]
    failing: bool  # an NVML call failed with something other than "not supported"


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


# nvmlValueType_t (fixed by NVML's ABI) -> the member of the nvmlValue_t union it fills
_UNION_MEMBER = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}


def _union_value(value_type: int, value: Any) -> float | int | None:
    """The member of an ``nvmlValue_t`` union that ``value_type`` names."""
    member = _UNION_MEMBER.get(int(value_type))
    return None if member is None else getattr(value, member, None)


class GpuReader:
    """Reads one physical GPU (and its MIG devices) in its own thread.

    The sampler asks for a reading with ``request(due)``; the latest complete one is in
    ``latest``. ``call_in_progress()`` names the NVML call the thread is in and since when.
    """

    def __init__(self, nvml: Any, device: _Device) -> None:
        self.nvml = nvml
        self.device = device
        self.latest: Reading | None = None
        self.emitted: Reading | None = None  # the reading the sampler last sent
        self.lost = False
        self.last_duration = 0.0
        self.busy = False  # a reading is under way
        self.readings_done = 0
        self.first_done = threading.Event()
        self._condition = threading.Condition()
        self._due: float | None = None
        self._stop = False
        self._call: tuple[str, float] | None = None
        self._unsupported: set[str] = set()  # calls this GPU answered NOT_SUPPORTED to
        self._mig_enabled = False
        self._errors_logged: set[tuple[str, str, int]] = set()
        self._failing_now = False
        self._counters_ns = 0  # when the reading's counters were read (wall clock)
        self._last_sample_us: dict[tuple[str, str], int | None] = {}
        self._pcie_totals = (Unwrapped32(), Unwrapped32())  # rx, tx: they wrap at 2**32
        self.thread = threading.Thread(target=self._run, name=f"gpu-{device.index}", daemon=True)

    # -- the sampler's side ----------------------------------------------------------

    def start(self) -> None:
        self.thread.start()

    def request(self, due_monotonic: float) -> None:
        with self._condition:
            self._due = due_monotonic
            self._condition.notify()

    def stop(self) -> None:
        with self._condition:
            self._stop = True
            self._condition.notify()

    def call_in_progress(self) -> tuple[str, float] | None:
        return self._call

    # -- the thread ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._stop:
                    now = time.monotonic()
                    if self._due is not None and now >= self._due:
                        break
                    self._condition.wait(None if self._due is None else self._due - now)
                if self._stop:
                    return
                self._due = None
                self.busy = True
            started = time.monotonic()
            try:
                reading = self._read()
            except GpuLostError as error:
                self.lost, self.busy = True, False
                log.warning(
                    "gpu %d (%s) lost, no longer sampled (fell off the bus? see the "
                    "kernel log for an Xid): %s",
                    self.device.index,
                    self.device.uuid,
                    error,
                )
                self.first_done.set()
                return
            except Exception:  # a bug must not end the GPU's thread: logged once
                if ("*", "bug", 0) not in self._errors_logged:
                    self._errors_logged.add(("*", "bug", 0))
                    log.exception("reading gpu %d failed", self.device.index)
                # nothing to send, and the GPU counts as failing until a reading works
                reading = Reading(time.time_ns(), [], [], failing=True)
            finally:
                self._call = None
            self.last_duration = time.monotonic() - started
            self.latest = reading
            self.readings_done += 1
            self.busy = False
            self.first_done.set()

    def _memory_info(self, device: _Device) -> Any:
        """nvmlMemory_v2_t where the driver has it (R510 on), else nvmlMemory_t.

        v2's ``used`` is nvidia-smi's "Used": the driver's reserved memory (615 MiB on an
        H200 with driver 580, 479 MiB on an H100) is counted apart. v1's ``used`` is
        total - free, the reserved memory included, so an idle GPU would read 615 MiB used.
        """
        version = getattr(self.nvml, "nvmlMemory_v2", None)
        memory = None
        if version is not None:
            memory = self._nvml_call(
                "nvmlDeviceGetMemoryInfo", device.handle, version, device=device, variant="v2"
            )
        if memory is None:
            memory = self._nvml_call("nvmlDeviceGetMemoryInfo", device.handle, device=device)
        return memory

    def _nvml_call(
        self, function_name: str, *args: Any, device: _Device | None = None, variant: str = ""
    ) -> Any:
        """``pynvml.<function_name>(*args)``, or None when NVML cannot answer.

        Raises GpuLostError if the GPU left. An answer other than "not supported" is
        logged once per (device, call, error) and marks the reading as failing. ``variant``
        names another form of the same call (its arguments), remembered apart as
        unsupported.
        """
        nvml = self.nvml
        device = device or self.device
        key = f"{device.uuid}:{function_name}{variant}"
        if key in self._unsupported:
            return None
        function = getattr(nvml, function_name, None)
        if function is None:  # an older nvidia-ml-py without the binding
            self._unsupported.add(key)
            return None
        self._call = (function_name, time.monotonic())
        try:
            return function(*args)
        except nvml.NVMLError as error:
            value = getattr(error, "value", None)
            if value == nvml.NVML_ERROR_GPU_IS_LOST:
                raise GpuLostError(str(error)) from error
            # a struct version this driver does not know is an unsupported form of the call
            version_mismatch = getattr(nvml, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", None)
            if value in (
                nvml.NVML_ERROR_NOT_SUPPORTED,
                nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
                version_mismatch,
            ):
                self._unsupported.add(key)
            elif value not in (nvml.NVML_ERROR_NOT_FOUND, nvml.NVML_ERROR_NO_PERMISSION):
                self._note_error(device, function_name, value, str(error))
            return None
        finally:
            self._call = None

    def _note_error(self, device: _Device, function_name: str, value: Any, text: str) -> None:
        """An NVML error other than "not supported": the reading fails, logged once."""
        self._failing_now = True
        logged = (device.uuid, function_name, value)
        if logged not in self._errors_logged:
            self._errors_logged.add(logged)
            log.warning(
                "gpu %d%s (%s): %s failed: %s; the field is left out (logged once)",
                device.index,
                f" mig {device.mig}" if device.mig else "",
                device.uuid,
                function_name,
                text,
            )

    def _clock_event_reasons(self, handle: Any) -> int | None:
        # The "event reasons" call replaced "throttle reasons" (driver 535); a library or
        # driver without it raises FunctionNotFound (or the binding lacks it): remembered.
        value = self._nvml_call("nvmlDeviceGetCurrentClocksEventReasons", handle)
        if value is None:
            value = self._nvml_call("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return value

    def _samples_mean(self, device: _Device, sampling_type: int) -> float | None:
        key = (device.uuid, str(sampling_type))
        after = self._last_sample_us.get(key)
        since = 0 if after is None else after
        answer = self._nvml_call(
            "nvmlDeviceGetSamples", device.handle, sampling_type, since, device=device
        )
        if answer is None:
            return None
        value_type, samples = answer
        pairs = [(int(s.timeStamp), _union_value(value_type, s.sampleValue)) for s in samples]
        mean, self._last_sample_us[key] = samples_mean(
            [(stamp, value) for stamp, value in pairs if value is not None], after
        )
        return mean

    def _pcie_counters(self, handle: Any) -> tuple[int | None, int | None]:
        nvml = self.nvml
        key = f"{self.device.uuid}:pcie_field_values"
        # An nvidia-ml-py older than these field ids has no counters to ask for.
        field_ids = [
            getattr(nvml, "NVML_FI_DEV_PCIE_COUNT_RX_BYTES", None),
            getattr(nvml, "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", None),
        ]
        if key in self._unsupported or None in field_ids:
            return None, None
        values = self._nvml_call("nvmlDeviceGetFieldValues", handle, field_ids)
        if values is None:  # the call failed (logged if it was not "not supported")
            return None, None
        returns = [v.nvmlReturn for v in values]
        if any(r == nvml.NVML_ERROR_NOT_SUPPORTED for r in returns):
            self._unsupported.add(key)  # this driver or GPU: the throughput calls instead
        for code in set(returns) - {nvml.NVML_SUCCESS, nvml.NVML_ERROR_NOT_SUPPORTED}:
            text = str(nvml.NVMLError(code)) if isinstance(code, int) else repr(code)
            self._note_error(self.device, "nvmlDeviceGetFieldValues", code, text)
        if len(values) != 2 or any(r != nvml.NVML_SUCCESS for r in returns):
            return None, None  # this reading uses the throughput calls
        rx, tx = (_union_value(v.valueType, v.value) for v in values)
        if rx is None or tx is None:
            return None, None
        rx_total, tx_total = self._pcie_totals
        return rx_total(int(rx)), tx_total(int(tx))

    def _device_readings(self, device: _Device, whole_gpu: bool) -> GpuReadings:
        nvml = self.nvml
        call = self._nvml_call
        handle = device.handle
        readings = GpuReadings()
        if whole_gpu:
            # The counters first, one right after the other: the reading's time is theirs,
            # so that a counter is exact at its timestamp whatever the rest costs.
            before_ns = time.time_ns()
            readings.energy_millijoules = call("nvmlDeviceGetTotalEnergyConsumption", handle)
            readings.pcie_rx_bytes, readings.pcie_tx_bytes = self._pcie_counters(handle)
            self._counters_ns = (before_ns + time.time_ns()) // 2
        readings.utilization_samples_percent = self._samples_mean(
            device, nvml.NVML_GPU_UTILIZATION_SAMPLES
        )
        readings.memory_utilization_samples_percent = self._samples_mean(
            device, nvml.NVML_MEMORY_UTILIZATION_SAMPLES
        )
        readings.memory = self._memory_info(device)
        if (
            readings.utilization_samples_percent is None
            or readings.memory_utilization_samples_percent is None
        ):
            readings.utilization = call("nvmlDeviceGetUtilizationRates", handle, device=device)
        if not whole_gpu:
            return readings  # power, clocks, PCIe, energy are the parent GPU's
        readings.power_milliwatts = call("nvmlDeviceGetPowerUsage", handle)
        readings.temperature_celsius = call(
            "nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU
        )
        readings.sm_clock_mhz = call("nvmlDeviceGetClockInfo", handle, nvml.NVML_CLOCK_SM)
        if readings.pcie_rx_bytes is None:
            readings.pcie_rx_kilobytes_per_second = call(
                "nvmlDeviceGetPcieThroughput", handle, nvml.NVML_PCIE_UTIL_RX_BYTES
            )
            readings.pcie_tx_kilobytes_per_second = call(
                "nvmlDeviceGetPcieThroughput", handle, nvml.NVML_PCIE_UTIL_TX_BYTES
            )
        readings.clock_event_reasons = self._clock_event_reasons(handle)
        return readings

    def _mig_devices(self) -> list[_Device]:
        """The GPU's MIG devices, looked up at every reading (MIG can be reconfigured)."""
        nvml = self.nvml
        parent = self.device
        mode = self._nvml_call("nvmlDeviceGetMigMode", parent.handle)
        enabled = mode is not None and mode[0] == nvml.NVML_DEVICE_MIG_ENABLE
        if enabled != self._mig_enabled:
            # What a GPU supports changes with MIG (utilisation is not supported under
            # MIG): ask every call again. The first reading starts from nothing anyway.
            self._mig_enabled = enabled
            self._unsupported = {
                k for k in self._unsupported if k.endswith(":nvmlDeviceGetMigMode")
            }
        if not enabled:
            return []
        devices = []
        for slot in range(self._nvml_call("nvmlDeviceGetMaxMigDeviceCount", parent.handle) or 0):
            handle = self._nvml_call("nvmlDeviceGetMigDeviceHandleByIndex", parent.handle, slot)
            if handle is None:  # NOT_FOUND: an empty slot
                continue
            gpu_instance = self._nvml_call("nvmlDeviceGetGpuInstanceId", handle)
            compute_instance = self._nvml_call("nvmlDeviceGetComputeInstanceId", handle)
            devices.append(
                _Device(
                    parent.index,
                    handle,
                    _text(self._nvml_call("nvmlDeviceGetUUID", handle) or ""),
                    _text(self._nvml_call("nvmlDeviceGetName", handle) or parent.name),
                    mig=f"{gpu_instance}/{compute_instance}",
                )
            )
        return devices

    def _processes(self, device: _Device) -> list[ProcessReading]:
        compute = self._nvml_call(
            "nvmlDeviceGetComputeRunningProcesses", device.handle, device=device
        )
        graphics = self._nvml_call(
            "nvmlDeviceGetGraphicsRunningProcesses", device.handle, device=device
        )
        running = merge_processes(compute or [], graphics or [])
        if not running:
            return []
        key = (device.uuid, "processes")
        after = self._last_sample_us.get(key)
        since = 0 if after is None else after
        samples = self._nvml_call(
            "nvmlDeviceGetProcessUtilization", device.handle, since, device=device
        )
        utilization, self._last_sample_us[key] = process_utilization(samples or [], after)
        processes = []
        for pid, used in running.items():
            sm, memory = utilization.get(pid, (None, None))
            processes.append(ProcessReading(pid, used, sm, memory))
        return processes

    def _tags(self, device: _Device) -> dict[str, str]:
        tags = {Tag.GPU: str(device.index), Tag.UUID: device.uuid, Tag.NAME: device.name}
        if device.mig:
            tags[Tag.MIG] = device.mig
        return tags

    def _read(self) -> Reading:
        self._failing_now = False
        migs = self._mig_devices()
        gpus = []
        processes = []
        for device in [self.device, *migs]:
            whole_gpu = device is self.device
            fields = gpu_fields(self._device_readings(device, whole_gpu))
            if fields:
                gpus.append((self._tags(device), fields))
            if whole_gpu and migs:
                continue  # under MIG, processes belong to the MIG devices
            for process in self._processes(device):
                tags = {
                    Tag.GPU: str(device.index),
                    Tag.UUID: device.uuid,
                    Tag.PID: str(process.pid),
                }
                if device.mig:
                    tags[Tag.MIG] = device.mig
                fields = process_fields(process)
                if fields:
                    processes.append((tags, fields))
        return Reading(self._counters_ns, gpus, processes, self._failing_now)


@dataclass
class _Condition:
    """What has been logged about one GPU, so that each condition is logged once."""

    hung_since: float | None = None
    failing: bool = False
    lost_counted: bool = False


class GpuSampler:
    name = "gpu"

    def __init__(self, roots: Roots) -> None:
        self._proc = roots.proc  # NVML finds the GPUs; /proc names a pid's Slurm job
        self._nvml: Any = None
        self.readers: list[GpuReader] = []
        self._conditions: dict[int, _Condition] = {}
        self._last_tick: float | None = None
        self._waited_first = False
        self.call_timeout_seconds = CALL_TIMEOUT_SECONDS
        self.first_reading_wait_seconds = FIRST_READING_WAIT_SECONDS
        self.stats = AgentStats()  # the daemon gives the one its self sampler reports

    def _enumerate(self) -> list[_Device]:
        nvml = self._nvml
        devices = []
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
                name = _text(nvml.nvmlDeviceGetName(handle))
            except nvml.NVMLError as error:
                log.warning("gpu %d skipped: %s", index, error)
                continue
            devices.append(_Device(index, handle, uuid, name))
        return devices

    def available(self) -> bool:
        if self._nvml is not None:
            return bool(self.readers)
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
            devices = self._enumerate()
        except pynvml.NVMLError as error:
            self.close()
            log.info("gpu sampler off: NVML could not list GPUs (%s)", error)
            return False
        if not devices:
            self.close()
            log.info("gpu sampler off: NVML found no GPU")
            return False
        self.readers = [GpuReader(pynvml, device) for device in devices]
        now = time.monotonic()
        for reader in self.readers:
            self._conditions[reader.device.index] = _Condition()
            reader.start()
            reader.request(now)  # the first reading starts now, ready for the first tick
        return True

    def _schedule(self) -> None:
        """Ask every reader for its next reading, timed to end just before the next tick."""
        now = time.monotonic()
        period = None if self._last_tick is None else now - self._last_tick
        self._last_tick = now
        for reader in self.readers:
            if period is None or period < MIN_PERIOD_SECONDS:
                reader.request(now)
                continue
            # a reading that takes longer than the period starts at once
            lead = min(2 * reader.last_duration + 0.05, period)
            reader.request(now + period - lead)

    def _hung(self, reader: GpuReader, now: float) -> tuple[str, float] | None:
        call = reader.call_in_progress()
        if call is not None and now - call[1] > self.call_timeout_seconds:
            return call
        return None

    def _note_conditions(self, reader: GpuReader, hung: tuple[str, float] | None) -> None:
        """One log line when a GPU starts or stops hanging or failing."""
        device = reader.device
        condition = self._conditions[device.index]
        if hung is not None and condition.hung_since is None:
            condition.hung_since = hung[1]
            log.warning(
                "gpu %d (%s) hung: %s has not answered for %.1f s; not reported until it "
                "answers, the other GPUs go on",
                device.index,
                device.uuid,
                hung[0],
                time.monotonic() - hung[1],
            )
        elif hung is None and condition.hung_since is not None:
            log.info(
                "gpu %d (%s) answers again after %.1f s",
                device.index,
                device.uuid,
                time.monotonic() - condition.hung_since,
            )
            condition.hung_since = None
        failing = reader.latest is not None and reader.latest.failing
        if failing != condition.failing and not failing:
            log.info("gpu %d (%s) reads without errors again", device.index, device.uuid)
        condition.failing = failing

    def _wait_for_first_readings(self) -> None:
        if self._waited_first:
            return
        self._waited_first = True
        deadline = time.monotonic() + self.first_reading_wait_seconds
        for reader in self.readers:
            reader.first_done.wait(max(0.0, deadline - time.monotonic()))

    def sample(self, now_ns: int) -> list[Point]:
        if self._nvml is None:
            return []
        self._wait_for_first_readings()
        now = time.monotonic()
        points: list[Point] = []
        hung = lost = failing = 0
        oldest_age: float | None = None
        for reader in self.readers:
            if reader.lost:
                lost += 1
                continue
            hung_call = self._hung(reader, now)
            self._note_conditions(reader, hung_call)
            reading = reader.latest
            if hung_call is not None:
                hung += 1
                continue
            if reading is None:
                continue
            failing += reading.failing
            if reading is reader.emitted:
                continue  # no new reading since the last tick: nothing is sent twice
            reader.emitted = reading
            age = max(0.0, (now_ns - reading.time_ns) / 1e9)
            oldest_age = age if oldest_age is None else max(oldest_age, age)
            for tags, fields in reading.gpus:
                fields = {**fields, Gpu.READING_AGE_SECONDS: age}
                points.append(Point(Gpu.NAME, dict(tags), fields, reading.time_ns))
            for tags, fields in reading.processes:
                tags = {**tags, **self._job_tag(tags[Tag.PID])}
                points.append(Point(GpuProcess.NAME, tags, dict(fields), reading.time_ns))
        self._schedule()
        stats = self.stats
        stats.gpus_hung, stats.gpus_failing, stats.gpus_lost = hung, failing, lost
        stats.gpu_reading_age_seconds = oldest_age
        return points

    def _job_tag(self, pid: str) -> dict[str, str]:
        """``job_id`` of the Slurm job whose cgroup holds ``pid`` (``/proc/<pid>/cgroup``);
        no tag outside a job or once the process is gone."""
        job = parse_proc_cgroup_job(read_text(self._proc / pid / "cgroup") or "")
        return {} if job is None else {Tag.JOB_ID: job}

    def close(self) -> None:
        """Stop the readers and shut NVML down (once); the sampler then reports nothing."""
        nvml, self._nvml = self._nvml, None
        readers, self.readers = self.readers, []
        for reader in readers:
            reader.stop()
        stuck = False
        deadline = time.monotonic() + 1.0  # one second for all: a hung thread never ends
        for reader in readers:
            reader.thread.join(timeout=max(0.0, deadline - time.monotonic()))
            stuck |= reader.thread.is_alive()
        if nvml is None:
            return
        if stuck:  # a thread inside NVML: shutting NVML down under it is not safe
            log.debug("nvmlShutdown skipped: a GPU thread is still in an NVML call")
            return
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
