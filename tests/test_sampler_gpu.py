"""The gpu sampler with a fake NVML.

This machine has no GPU and no NVML library, so NVML is faked: the ``pynvml`` functions
the sampler calls are monkeypatched to answer what real GPUs answered, read by hand from
/work/shared/fixtures/gpu/:
  - ``h100-80gb-hbm3.capture.txt``: an H100 80GB HBM3, driver 590.48.01, in its
    ``load :: query (-q)`` section (gpu-burn + 2 memhogs) and its ``idle`` section;
  - ``a100-sxm4-80gb-mig.nvidia-smi.xml``: an A100-SXM4-80GB in MIG mode, driver 535,
    where utilization reads ``N/A`` (NVML answers NOT_SUPPORTED).
NVML speaks raw units (bytes, milliwatts, KB/s); nvidia-smi prints MiB and W, so the fake
is fed nvidia-smi's numbers turned back into NVML units (MiB x 2**20, W x 1000).
Neither capture holds a total-energy reading, so the fake answers NOT_SUPPORTED for it
there, and a separate test feeds a made-up energy value.
The real, unpatched NVML is used by the no-NVML test.
"""

from __future__ import annotations

import logging
import sys
from types import SimpleNamespace

import pynvml
import pytest

import agent.samplers.gpu as gpu_module
from agent.point import encode_lines
from agent.samplers import make_sampler
from agent.samplers.base import Roots
from agent.samplers.gpu import GpuReadings, gpu_fields

NOW = 1_700_000_000_000_000_000
MIB = 2**20
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED

# H100 under load, "load :: query (-q)" section of the capture.
H100_LOAD = {
    "name": "NVIDIA H100 80GB HBM3",  # Product Name
    "uuid": "GPU-00000000-0000-0000-0000-000000000000",  # GPU UUID (masked in the capture)
    "utilization": (100, 11),  # Utilization: GPU 100 %, Memory 11 %
    "memory": (81559 * MIB, 19818 * MIB),  # FB Memory Usage: Total 81559, Used 19818 MiB
    # nvmlDeviceGetPowerUsage is the 1 s average on Hopper: "Average Power Draw 629.45 W".
    "power_mw": 629450,
    "energy_mj": NOT_SUPPORTED,
    "temperature": 59,  # GPU Current Temp 59 C
    "sm_clock": 1980,  # Clocks: SM 1980 MHz
    "pcie_kbs": (6346, 3092),  # Rx Throughput 6346 KB/s, Tx Throughput 3092 KB/s
    "reasons": 0x0,  # Clocks Event Reasons all "Not Active"; csv active 0x0000000000000000
}
# The same H100 idle ("idle :: query (-q)").
H100_IDLE = {
    **H100_LOAD,
    "utilization": (0, 0),
    "memory": (81559 * MIB, 0),  # Used 0 MiB
    "power_mw": 69850,  # Average Power Draw 69.85 W
    "temperature": 41,
    "sm_clock": 345,
    "pcie_kbs": (329, 352),  # Rx 329 KB/s, Tx 352 KB/s
    "reasons": 0x1,  # Idle: Active; csv clocks_event_reasons.active 0x0000000000000001
}
# A100 in MIG mode (XML): <gpu_util>N/A</gpu_util>, <memory_util>N/A</memory_util>.
A100_MIG = {
    "name": "NVIDIA A100-SXM4-80GB",  # <product_name>
    "uuid": "GPU-513536b6-7d19-9063-b049-1e69664bb298",  # <uuid>
    "utilization": NOT_SUPPORTED,
    "memory": (81920 * MIB, 50 * MIB),  # <fb_memory_usage> total 81920, used 50 MiB
    "power_mw": 67030,  # <power_draw>67.03 W</power_draw>
    "energy_mj": NOT_SUPPORTED,
    "temperature": 27,  # <gpu_temp>27 C</gpu_temp>
    "sm_clock": 1275,  # <clocks><sm_clock>1275 MHz
    "pcie_kbs": (0, 4000),  # <rx_util>0 KB/s</rx_util>, <tx_util>4000 KB/s</tx_util>
    "reasons": 0x0,  # every clocks_event_reason "Not Active"
}

H100_LOAD_FIELDS = {
    "utilization_percent": 100.0,
    "memory_utilization_percent": 11.0,
    "memory_used_bytes": 20_780_679_168.0,  # 19818 x 1048576
    "memory_total_bytes": 85_520_809_984.0,  # 81559 x 1048576
    "power_watts": 629.45,  # 629450 mW / 1000
    "temperature_celsius": 59.0,
    "sm_clock_mhz": 1980.0,
    "pcie_rx_bytes_per_second": 6_498_304.0,  # 6346 KB/s x 1024
    "pcie_tx_bytes_per_second": 3_166_208.0,  # 3092 KB/s x 1024
    "throttle_reasons": 0.0,
}


class FakeNvml:
    """Answers the pynvml calls the sampler makes, from a list of GPU descriptions."""

    def __init__(self, gpus: list[dict], event_reasons_symbol: bool = True) -> None:
        self.gpus = [dict(gpu) for gpu in gpus]
        self.event_reasons_symbol = event_reasons_symbol
        self.init_calls = 0
        self.shutdown_calls = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
        for name in (
            "nvmlInit",
            "nvmlShutdown",
            "nvmlDeviceGetCount",
            "nvmlDeviceGetHandleByIndex",
            "nvmlDeviceGetName",
            "nvmlDeviceGetUUID",
            "nvmlDeviceGetUtilizationRates",
            "nvmlDeviceGetMemoryInfo",
            "nvmlDeviceGetPowerUsage",
            "nvmlDeviceGetTotalEnergyConsumption",
            "nvmlDeviceGetTemperature",
            "nvmlDeviceGetClockInfo",
            "nvmlDeviceGetPcieThroughput",
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
        ):
            monkeypatch.setattr(pynvml, name, getattr(self, name))
        # the fake stands in for the driver, so its library counts as present
        monkeypatch.setattr(gpu_module, "nvml_library_loadable", lambda: True)
        return self

    @staticmethod
    def _answer(value):
        if isinstance(value, int) and value == NOT_SUPPORTED:
            raise pynvml.NVMLError(NOT_SUPPORTED)
        if isinstance(value, pynvml.NVMLError):
            raise value
        return value

    def _gpu(self, handle) -> dict:
        gpu = self.gpus[handle]
        if gpu.get("lost"):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    def nvmlInit(self):
        self.init_calls += 1

    def nvmlShutdown(self):
        self.shutdown_calls += 1

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        return self._gpu(handle)["name"]

    def nvmlDeviceGetUUID(self, handle):
        return self._gpu(handle)["uuid"]

    def nvmlDeviceGetUtilizationRates(self, handle):
        value = self._answer(self._gpu(handle)["utilization"])
        return SimpleNamespace(gpu=value[0], memory=value[1])

    def nvmlDeviceGetMemoryInfo(self, handle):
        total, used = self._answer(self._gpu(handle)["memory"])
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetPowerUsage(self, handle):
        return self._answer(self._gpu(handle)["power_mw"])

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return self._answer(self._gpu(handle)["energy_mj"])

    def nvmlDeviceGetTemperature(self, handle, sensor):
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._answer(self._gpu(handle)["temperature"])

    def nvmlDeviceGetClockInfo(self, handle, clock):
        assert clock == pynvml.NVML_CLOCK_SM
        return self._answer(self._gpu(handle)["sm_clock"])

    def nvmlDeviceGetPcieThroughput(self, handle, counter):
        rx, tx = self._answer(self._gpu(handle)["pcie_kbs"])
        return {pynvml.NVML_PCIE_UTIL_RX_BYTES: rx, pynvml.NVML_PCIE_UTIL_TX_BYTES: tx}[counter]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        if not self.event_reasons_symbol:  # what a driver older than 535 answers
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return self._answer(self._gpu(handle)["reasons"])

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return self._answer(self._gpu(handle)["reasons"])


def start(fake: FakeNvml, monkeypatch) -> tuple:
    fake.install(monkeypatch)
    sampler = make_sampler("gpu", Roots())
    assert sampler.available()
    return sampler, fake


def test_h100_under_load(monkeypatch):
    sampler, _ = start(FakeNvml([H100_LOAD]), monkeypatch)
    points = sampler.sample(NOW)
    assert len(points) == 1
    point = points[0]
    assert point.measurement == "gpu" and point.time_ns == NOW
    assert point.tags == {
        "gpu": "0",
        "uuid": "GPU-00000000-0000-0000-0000-000000000000",
        "name": "NVIDIA H100 80GB HBM3",
    }
    # No energy field: the fake has no captured energy value (NOT_SUPPORTED).
    assert point.fields == H100_LOAD_FIELDS
    assert encode_lines(points).startswith(
        "gpu,gpu=0,name=NVIDIA\\ H100\\ 80GB\\ HBM3,uuid=GPU-00000000-0000-0000-0000-000000000000 "
        "utilization_percent=100.0,memory_utilization_percent=11.0,"
    )


def test_h100_idle_has_idle_clock_reason(monkeypatch):
    sampler, _ = start(FakeNvml([H100_IDLE]), monkeypatch)
    assert sampler.sample(NOW)[0].fields == {
        "utilization_percent": 0.0,
        "memory_utilization_percent": 0.0,
        "memory_used_bytes": 0.0,
        "memory_total_bytes": 85_520_809_984.0,  # 81559 x 1048576
        "power_watts": 69.85,  # 69850 mW / 1000
        "temperature_celsius": 41.0,
        "sm_clock_mhz": 345.0,
        "pcie_rx_bytes_per_second": 336_896.0,  # 329 x 1024
        "pcie_tx_bytes_per_second": 360_448.0,  # 352 x 1024
        "throttle_reasons": 1.0,  # nvmlClocksEventReasonGpuIdle
    }


def test_a100_mig_has_no_utilization(monkeypatch):
    sampler, _ = start(FakeNvml([H100_LOAD, A100_MIG]), monkeypatch)
    points = sampler.sample(NOW)
    assert [p.tags["gpu"] for p in points] == ["0", "1"]
    a100 = points[1]
    assert a100.tags == {
        "gpu": "1",
        "uuid": "GPU-513536b6-7d19-9063-b049-1e69664bb298",
        "name": "NVIDIA A100-SXM4-80GB",
    }
    # Utilization is N/A under MIG: both utilization fields are absent, not 0.
    assert a100.fields == {
        "memory_used_bytes": 52_428_800.0,  # 50 x 1048576
        "memory_total_bytes": 85_899_345_920.0,  # 81920 x 1048576
        "power_watts": 67.03,  # 67030 mW / 1000
        "temperature_celsius": 27.0,
        "sm_clock_mhz": 1275.0,
        "pcie_rx_bytes_per_second": 0.0,
        "pcie_tx_bytes_per_second": 4_096_000.0,  # 4000 x 1024
        "throttle_reasons": 0.0,
    }


def test_energy_counter_is_in_joules_and_u64_overflow_is_a_gap(monkeypatch):
    # Made-up energy values: no capture holds one.
    sampler, fake = start(FakeNvml([{**H100_LOAD, "energy_mj": 123_456_789_012}]), monkeypatch)
    fields = sampler.sample(NOW)[0].fields
    assert fields["energy_joules"] == 123_456_789.012  # NVML's millijoules / 1000
    fake.gpus[0]["energy_mj"] = 2**64 - 1  # does not fit a signed 64-bit integer
    assert "energy_joules" not in sampler.sample(NOW)[0].fields


def test_throttle_reasons_fallback_on_older_driver(monkeypatch):
    sampler, _ = start(FakeNvml([{**H100_IDLE}], event_reasons_symbol=False), monkeypatch)
    assert sampler.sample(NOW)[0].fields["throttle_reasons"] == 1.0


def test_lost_gpu_drops_out_without_crashing(monkeypatch, caplog):
    sampler, fake = start(FakeNvml([H100_LOAD, A100_MIG]), monkeypatch)
    assert len(sampler.sample(NOW)) == 2
    caplog.set_level(logging.WARNING, logger="agent.samplers.gpu")
    fake.gpus[1]["lost"] = True  # the A100 fell off the bus
    for _ in range(3):
        points = sampler.sample(NOW)
        assert [p.tags["gpu"] for p in points] == ["0"]
        assert points[0].fields == H100_LOAD_FIELDS
    assert len(caplog.records) == 1
    assert "lost" in caplog.records[0].getMessage()


def test_nvml_initialised_once_and_shut_down_on_close(monkeypatch):
    sampler, fake = start(FakeNvml([H100_LOAD]), monkeypatch)
    assert sampler.available()  # asked again: no second nvmlInit
    sampler.sample(NOW)
    sampler.sample(NOW)
    assert fake.init_calls == 1
    sampler.close()
    sampler.close()
    assert fake.shutdown_calls == 1
    assert sampler.sample(NOW) == []


def test_no_gpu_disables_with_one_log_line(monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="agent.samplers.gpu")
    fake = FakeNvml([]).install(monkeypatch)
    sampler = make_sampler("gpu", Roots())
    assert sampler.available() is False
    assert len(caplog.records) == 1
    assert fake.shutdown_calls == 1
    assert sampler.sample(NOW) == []


def test_real_nvml_missing_on_this_machine(caplog):
    """No fake here: this machine has no libnvidia-ml, so the real nvmlInit fails."""
    caplog.set_level(logging.DEBUG, logger="agent.samplers.gpu")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has a working NVML")
    sampler = make_sampler("gpu", Roots())
    assert sampler.available() is False
    assert len(caplog.records) == 1
    assert "NVML" in caplog.records[0].getMessage()
    assert sampler.sample(NOW) == []
    sampler.close()


def test_no_driver_library_means_pynvml_is_never_imported(monkeypatch, caplog):
    """This machine has no libnvidia-ml.so.1: the sampler turns itself off before pynvml."""
    if gpu_module.nvml_library_loadable():
        pytest.skip("this machine has the NVIDIA driver library")
    caplog.set_level(logging.DEBUG, logger="agent.samplers.gpu")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # importing it would raise
    sampler = make_sampler("gpu", Roots())
    assert sampler.available() is False
    assert [r.getMessage() for r in caplog.records] == [
        "gpu sampler off: no NVML driver library (libnvidia-ml.so.1)"
    ]


def test_no_nvidia_ml_py_installed(monkeypatch, caplog):
    caplog.set_level(logging.DEBUG, logger="agent.samplers.gpu")
    monkeypatch.setattr(gpu_module, "nvml_library_loadable", lambda: True)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    sampler = make_sampler("gpu", Roots())
    assert sampler.available() is False
    assert len(caplog.records) == 1


def test_gpu_fields_is_pure():
    readings = GpuReadings(
        memory=SimpleNamespace(total=4 * MIB, used=MIB),
        power_milliwatts=250_500,
        pcie_rx_kilobytes_per_second=2,
    )
    assert gpu_fields(readings) == {
        "memory_used_bytes": 1_048_576.0,
        "memory_total_bytes": 4_194_304.0,
        "power_watts": 250.5,
        "pcie_rx_bytes_per_second": 2048.0,
    }
    assert gpu_fields(GpuReadings()) == {}
