"""The gpu sampler with a fake NVML (tests/support/fake_nvml.py).

This machine has no GPU and no NVML library, so NVML is mocked: the ``pynvml`` functions
the sampler calls are monkeypatched to answer what real GPUs answered (an H100 under load
and idle, an A100 in MIG mode, captured in /work/shared/fixtures/gpu/; see
tests/support/fake_nvml.py). Values no capture holds (energy, PCIe byte counters, utilisation
samples, processes, MIG devices' ids) are made up, and say so where used.
The real, unpatched NVML is used by the no-NVML tests.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from types import SimpleNamespace

import pynvml
import pytest

import agent.samplers.gpu as gpu_module
from agent.samplers import make_sampler
from agent.samplers.agent import AgentSampler, AgentStats
from agent.samplers.base import Roots
from agent.samplers.gpu import GpuReadings, gpu_fields, samples_mean
from contract.point import Point, encode_lines
from tests.integration.test_agent_shipper import wait_until
from tests.support.fake_nvml import A100_MIG, H100_IDLE, H100_LOAD, MIB, NOT_SUPPORTED, FakeNvml

NOW = 1_700_000_000_000_000_000

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


def start(fake: FakeNvml, monkeypatch, **settings) -> tuple:
    fake.install(monkeypatch)
    sampler = make_sampler("gpu", Roots())
    for name, value in settings.items():
        setattr(sampler, name, value)
    assert sampler.available()
    return sampler, fake


@pytest.fixture(autouse=True)
def _close_samplers(monkeypatch):
    """Every sampler started here is closed, so no reader thread outlives its test."""
    made = []
    original = gpu_module.GpuSampler.available

    def tracked(self):
        made.append(self)
        return original(self)

    monkeypatch.setattr(gpu_module.GpuSampler, "available", tracked)
    yield
    for sampler in made:
        sampler.close()


def fields_of(point: Point) -> dict:
    """The point's fields without the reading's age (which depends on the clock)."""
    fields = dict(point.fields)
    assert fields.pop("reading_age_seconds") >= 0.0
    return fields


def fresh(sampler, now_ns: int = NOW) -> list[Point]:
    """A sample whose readings all started after this call (readers read in threads)."""
    readers = sampler.readers
    sampler.sample(now_ns)
    assert wait_until(lambda: not any(r.busy for r in readers))
    done = [r.readings_done for r in readers]
    sampler.sample(now_ns)  # asks every reader for its next reading, now
    assert wait_until(
        lambda: all(r.lost or r.readings_done > d for r, d in zip(readers, done, strict=True))
    )
    return sampler.sample(now_ns)


def test_h100_under_load(monkeypatch):
    sampler, _ = start(FakeNvml([H100_LOAD]), monkeypatch)
    points = sampler.sample(NOW)
    assert len(points) == 1
    point = points[0]
    # stamped with the reading's own time (halfway through it), not the tick's
    assert point.measurement == "gpu"
    assert point.time_ns == sampler.readers[0].latest.time_ns
    assert point.tags == {
        "gpu": "0",
        "uuid": "GPU-00000000-0000-0000-0000-000000000000",
        "name": "NVIDIA H100 80GB HBM3",
    }
    # No energy field: the capture has no energy value (NOT_SUPPORTED); no PCIe byte
    # counters (field values NOT_SUPPORTED): the 20 ms throughput gauges instead.
    assert fields_of(point) == H100_LOAD_FIELDS
    assert encode_lines(points).startswith(
        "gpu,gpu=0,name=NVIDIA\\ H100\\ 80GB\\ HBM3,uuid=GPU-00000000-0000-0000-0000-000000000000 "
        "utilization_percent=100.0,memory_utilization_percent=11.0,"
    )


def test_h100_idle_has_idle_clock_reason(monkeypatch):
    sampler, _ = start(FakeNvml([H100_IDLE]), monkeypatch)
    assert fields_of(sampler.sample(NOW)[0]) == {
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


def test_memory_used_leaves_the_drivers_reserved_memory_out_as_nvidia_smi_does(monkeypatch):
    """Found on a real H200 (driver 580.159.04, bench/gpu_check/results/): idle, nvidia-smi
    printed 0 MiB used and the agent 615 MiB, the driver's reserved memory, which the v1
    call counts as used. The v2 call counts it apart; a driver without it (before R510)
    still gives v1's figure, and that is no failure."""
    sampler, _ = start(FakeNvml([H100_IDLE]), monkeypatch)
    assert sampler.sample(NOW)[0].fields["memory_used_bytes"] == 0.0  # nvidia-smi: 0 MiB
    old_driver = {**H100_IDLE, "memory_v2": NOT_SUPPORTED}
    sampler, _ = start(FakeNvml([old_driver]), monkeypatch)
    assert sampler.sample(NOW)[0].fields["memory_used_bytes"] == 479.0 * MIB  # Reserved
    assert not sampler.readers[0].latest.failing


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
    assert fields_of(a100) == {
        "memory_used_bytes": 52_428_800.0,  # 50 x 1048576
        "memory_total_bytes": 85_899_345_920.0,  # 81920 x 1048576
        "power_watts": 67.03,  # 67030 mW / 1000
        "temperature_celsius": 27.0,
        "sm_clock_mhz": 1275.0,
        "pcie_rx_bytes_per_second": 0.0,
        "pcie_tx_bytes_per_second": 4_096_000.0,  # 4000 x 1024
        "throttle_reasons": 0.0,
    }


# Made-up MIG devices on the captured A100 (the XML lists no instances): two 3g.40gb
# devices, each with one training process.
A100_WITH_MIG_DEVICES = {
    **A100_MIG,
    "migs": [
        {
            "uuid": "MIG-11111111-1111-1111-1111-111111111111",
            "name": "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
            "gi": 1,
            "ci": 0,
            "memory": (40192 * MIB, 30000 * MIB),
            "processes": [(4242, 29000 * MIB)],
        },
        {
            "uuid": "MIG-22222222-2222-2222-2222-222222222222",
            "name": "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
            "gi": 2,
            "ci": 0,
            "memory": (40192 * MIB, 1000 * MIB),
            "processes": [(4343, 900 * MIB)],
        },
    ],
}


def test_mig_devices_are_points_of_their_own_tagged_mig(monkeypatch):
    sampler, fake = start(FakeNvml([H100_LOAD, A100_WITH_MIG_DEVICES]), monkeypatch)
    points = sampler.sample(NOW)
    gpus = [p for p in points if p.measurement == "gpu"]
    assert [(p.tags["gpu"], p.tags.get("mig"), p.tags["uuid"]) for p in gpus] == [
        ("0", None, "GPU-00000000-0000-0000-0000-000000000000"),
        ("1", None, "GPU-513536b6-7d19-9063-b049-1e69664bb298"),
        ("1", "1/0", "MIG-11111111-1111-1111-1111-111111111111"),
        ("1", "2/0", "MIG-22222222-2222-2222-2222-222222222222"),
    ]
    # A MIG device has its memory; power, clocks, PCIe are the whole GPU's (parent only).
    assert fields_of(gpus[2]) == {
        "memory_used_bytes": 30000.0 * MIB,
        "memory_total_bytes": 40192.0 * MIB,
    }
    assert gpus[2].tags["name"] == "NVIDIA A100-SXM4-80GB MIG 3g.40gb"
    assert fields_of(gpus[1])["power_watts"] == 67.03
    processes = [p for p in points if p.measurement == "gpu_process"]
    assert [(p.tags, p.fields) for p in processes] == [
        (
            {"gpu": "1", "uuid": "MIG-11111111-1111-1111-1111-111111111111", "mig": "1/0"}
            | {"pid": "4242"},
            {"memory_used_bytes": 29000.0 * MIB},
        ),
        (
            {"gpu": "1", "uuid": "MIG-22222222-2222-2222-2222-222222222222", "mig": "2/0"}
            | {"pid": "4343"},
            {"memory_used_bytes": 900.0 * MIB},
        ),
    ]
    # Under MIG the parent's process list is not asked (its processes are the devices').
    assert ("processes", 1) not in fake.calls


def test_mig_reconfigured_while_running(monkeypatch):
    """MIG turned on, then off again (made-up sequence on the captured H100's values)."""
    sampler, fake = start(FakeNvml([H100_LOAD]), monkeypatch)
    assert fields_of(sampler.sample(NOW)[0])["utilization_percent"] == 100.0
    gpu = fake.gpus[0]
    gpu["migs"] = A100_WITH_MIG_DEVICES["migs"][:1]
    gpu["utilization"] = NOT_SUPPORTED  # what NVML answers for a GPU in MIG mode
    points = fresh(sampler)
    assert [p.tags.get("mig") for p in points if p.measurement == "gpu"] == [None, "1/0"]
    assert "utilization_percent" not in points[0].fields
    del gpu["migs"]
    gpu["utilization"] = H100_LOAD["utilization"]
    points = fresh(sampler)
    # utilisation is asked again once MIG is off: it was only unsupported under MIG
    assert [p.tags.get("mig") for p in points if p.measurement == "gpu"] == [None]
    assert fields_of(points[0])["utilization_percent"] == 100.0


def test_pcie_byte_counters_from_field_values_replace_the_throughput_calls(monkeypatch):
    # Made-up counters: the capture's driver did not report field values.
    gpu = {**H100_LOAD, "pcie_bytes": (7_000_000_000, 3_000_000_000)}
    sampler, fake = start(FakeNvml([gpu]), monkeypatch)
    fields = fields_of(sampler.sample(NOW)[0])
    assert fields["pcie_rx_bytes"] == 7_000_000_000
    assert fields["pcie_tx_bytes"] == 3_000_000_000
    assert type(fields["pcie_rx_bytes"]) is int  # a byte counter is an integer
    assert "pcie_rx_bytes_per_second" not in fields
    assert ("pcie_throughput", 0) not in fake.calls


def test_pcie_counters_that_wrap_at_32_bits_keep_growing(monkeypatch):
    """On a real H200 (driver 580, bench/gpu_check/results/h200-2026-11-28.md) 8 GiB
    copied to the GPU moved the receive counter by 0.67 GB and the send counter back by
    3.5 GB: they wrap at 2**32. Values here are that copy's, as the counters read them."""
    wrap = 2**32
    before = (4_000_000_000, 4_200_000_000)
    gpu = {**H100_LOAD, "pcie_bytes": before}
    sampler, fake = start(FakeNvml([gpu]), monkeypatch)
    first = fields_of(fresh(sampler)[0])
    assert (first["pcie_rx_bytes"], first["pcie_tx_bytes"]) == before
    # 9.262 GB received (the 8 GiB and their packets' headers: two wraps, read as one),
    # 0.806 GB sent (read requests: one wrap)
    received, sent = 9_261_738_448, 806_240_764
    fake.gpus[0]["pcie_bytes"] = ((before[0] + received) % wrap, (before[1] + sent) % wrap)
    second = fields_of(fresh(sampler)[0])
    assert second["pcie_tx_bytes"] - first["pcie_tx_bytes"] == sent  # one wrap: exact
    # more than one wrap in one interval cannot be seen: whole wraps short, still growing
    grew = second["pcie_rx_bytes"] - first["pcie_rx_bytes"]
    assert 0 < grew < received and (received - grew) % wrap == 0


def test_a_32_bit_counter_is_unwrapped_and_a_64_bit_one_reset():
    from agent.samplers.gpu import Unwrapped32

    counter = Unwrapped32()
    assert [counter(v) for v in (10, 2**32 - 5, 3, 2**32 - 1, 0)] == [
        10, 2**32 - 5, 2**32 + 3, 2 * 2**32 - 1, 2 * 2**32
    ]  # fmt: skip
    wide = Unwrapped32()  # a reading past 32 bits: the counter is wider, a drop is a reset
    assert [wide(v) for v in (5 * 2**32, 7, 9)] == [5 * 2**32, 7, 9]


def test_field_values_unsupported_fall_back_to_throughput_and_are_not_asked_again(monkeypatch):
    sampler, fake = start(FakeNvml([H100_LOAD]), monkeypatch)  # pcie_bytes NOT_SUPPORTED
    fields = fields_of(fresh(sampler)[0])
    assert fields["pcie_rx_bytes_per_second"] == 6_498_304.0
    assert "pcie_rx_bytes" not in fields
    assert fake.calls.count(("field_values", 0)) == 1  # decided once per GPU
    assert fake.calls.count(("pcie_throughput", 0)) >= 4  # rx + tx, every reading


def test_a_field_value_error_falls_back_for_that_reading_only(monkeypatch, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="agent.samplers.gpu")
    failing = tmp_path / "failing"
    failing.touch()
    # Made-up counters: the capture's driver did not report field values.
    gpu = {**H100_LOAD, "pcie_bytes": (7_000_000_000, 3_000_000_000)}
    gpu["field_error_while"] = str(failing)
    stats = AgentStats()
    sampler, _ = start(FakeNvml([gpu]), monkeypatch, stats=stats)
    fields = fields_of(sampler.sample(NOW)[0])
    assert fields["pcie_rx_bytes_per_second"] == 6_498_304.0  # this reading: the fallback
    assert "pcie_rx_bytes" not in fields
    assert stats.gpus_failing == 1
    assert [r.getMessage() for r in caplog.records] == [
        "gpu 0 (GPU-00000000-0000-0000-0000-000000000000): nvmlDeviceGetFieldValues failed: "
        "Unknown Error; the field is left out (logged once)"
    ]
    failing.unlink()
    fields = fields_of(fresh(sampler)[0])  # an error is not "not supported": asked again
    assert fields["pcie_rx_bytes"] == 7_000_000_000
    assert "pcie_rx_bytes_per_second" not in fields


def test_utilization_is_the_mean_of_the_samples_since_the_last_reading(monkeypatch):
    # Made-up samples (microsecond timestamps): a burst of 100% between two gauges of 0%.
    gpu = {
        **H100_IDLE,
        "utilization_samples": [(1_000_000, 0), (1_166_000, 100), (1_333_000, 100)],
        "memory_utilization_samples": [(1_000_000, 10), (1_166_000, 20), (1_333_000, 30)],
    }
    sampler, fake = start(FakeNvml([gpu]), monkeypatch)
    fields = fields_of(sampler.sample(NOW)[0])
    assert fields["utilization_percent"] == pytest.approx(200 / 3)  # the gauge says 0
    assert fields["memory_utilization_percent"] == pytest.approx(20.0)
    # Two new samples; the reading takes only those newer than the last one it saw.
    fake.gpus[0]["utilization_samples"] += [(1_500_000, 40), (1_666_000, 60)]
    fake.gpus[0]["memory_utilization_samples"] += [(1_500_000, 0)]
    fields = fields_of(fresh(sampler)[0])
    assert fields["utilization_percent"] == pytest.approx(50.0)
    assert fields["memory_utilization_percent"] == pytest.approx(0.0)
    # No sample newer than the last: NVML answers NOT_FOUND, the 1 s gauge is used.
    fields = fields_of(fresh(sampler)[0])
    assert fields["utilization_percent"] == 0.0


def test_samples_mean_is_pure():
    assert samples_mean([(10, 50.0), (20, 70.0), (30, 90.0)], after_us=10) == (80.0, 30)
    assert samples_mean([(10, 50.0)], after_us=10) == (None, 10)
    assert samples_mean([], after_us=5) == (None, 5)
    # a first reading: the last second before the newest sample
    stale_then_idle = [(0, 100.0), (4_000_000, 100.0), (4_500_000, 0.0), (5_000_000, 0.0)]
    assert samples_mean(stale_then_idle, after_us=None) == (0.0, 5_000_000)
    assert samples_mean([], after_us=None) == (None, None)


def test_a_first_reading_leaves_out_what_nvml_sampled_before_the_last_second(monkeypatch):
    """NVML keeps its samples from before the agent started: on an idle H200 a first
    reading from 0 read 3 % where nvidia-smi read 0. Made-up samples: a training that ended
    2 s before the reading's last second, then idle."""
    gpu = {
        **H100_IDLE,
        "utilization_samples": [(1_000_000, 90), (2_000_000, 95), (3_200_000, 0), (3_700_000, 0)],
        "memory_utilization_samples": [(1_000_000, 40), (3_700_000, 0)],
        "processes": [(1001, 10_000 * MIB)],
        "process_samples": [(1001, 1_000_000, 90, 40), (1001, 3_500_000, 10, 2)],
    }
    sampler, fake = start(FakeNvml([gpu]), monkeypatch)
    points = sampler.sample(NOW)
    assert fields_of(points[0])["utilization_percent"] == 0.0
    assert fields_of(points[0])["memory_utilization_percent"] == 0.0
    process = next(p for p in points if p.measurement == "gpu_process")
    assert process.fields["sm_utilization_percent"] == 10.0
    assert process.fields["memory_utilization_percent"] == 2.0
    # the next reading takes every sample after the first reading's newest
    fake.gpus[0]["utilization_samples"] += [(3_900_000, 50), (4_100_000, 70)]
    assert fields_of(fresh(sampler)[0])["utilization_percent"] == pytest.approx(60.0)


def test_processes_tagged_by_pid_with_memory_and_utilization(monkeypatch):
    # Made-up processes: two ranks of a training on one GPU, sampled by NVML three times.
    gpu = {
        **H100_LOAD,
        "processes": [(1001, 10_000 * MIB), (1002, 9_000 * MIB)],
        "process_samples": [
            (1001, 1_000_000, 60, 10),
            (1002, 1_000_000, 30, 5),
            (1001, 1_166_000, 80, 20),
        ],
    }
    sampler, _ = start(FakeNvml([gpu]), monkeypatch)
    processes = [p for p in sampler.sample(NOW) if p.measurement == "gpu_process"]
    assert [(p.tags, p.fields) for p in processes] == [
        (
            {"gpu": "0", "uuid": "GPU-00000000-0000-0000-0000-000000000000", "pid": "1001"},
            {
                "memory_used_bytes": 10_000.0 * MIB,
                "sm_utilization_percent": 70.0,  # mean of 60 and 80
                "memory_utilization_percent": 15.0,
            },
        ),
        (
            {"gpu": "0", "uuid": "GPU-00000000-0000-0000-0000-000000000000", "pid": "1002"},
            {
                "memory_used_bytes": 9_000.0 * MIB,
                "sm_utilization_percent": 30.0,
                "memory_utilization_percent": 5.0,
            },
        ),
    ]
    # No new process sample: memory only (utilisation unknown, not 0).
    processes = [p for p in fresh(sampler) if p.measurement == "gpu_process"]
    assert [p.fields for p in processes] == [
        {"memory_used_bytes": 10_000.0 * MIB},
        {"memory_used_bytes": 9_000.0 * MIB},
    ]


def test_energy_counter_is_in_joules_and_u64_overflow_is_a_gap(monkeypatch):
    # Made-up energy values: no capture holds one.
    sampler, fake = start(FakeNvml([{**H100_LOAD, "energy_mj": 123_456_789_012}]), monkeypatch)
    fields = sampler.sample(NOW)[0].fields
    assert fields["energy_joules"] == 123_456_789.012  # NVML's millijoules / 1000
    fake.gpus[0]["energy_mj"] = 2**64 - 1  # does not fit a signed 64-bit integer
    assert "energy_joules" not in fresh(sampler)[0].fields


def test_throttle_reasons_fallback_on_older_driver(monkeypatch):
    sampler, _ = start(FakeNvml([{**H100_IDLE}], event_reasons_symbol=False), monkeypatch)
    assert sampler.sample(NOW)[0].fields["throttle_reasons"] == 1.0


def eight_slow_gpus(delay: float) -> list[dict]:
    """Eight H100s whose PCIe calls each take ``delay`` seconds (NVML's 20 ms window,
    stretched so that the difference is far above a loaded machine's noise)."""
    return [{**H100_LOAD, "uuid": f"GPU-{index}", "pcie_delay": delay} for index in range(8)]


def test_slow_gpus_never_hold_up_the_tick(monkeypatch):
    """Eight GPUs at 0.25 s per PCIe call: two such calls per GPU (field values are not
    supported, so the throughput calls are made) are 4 s per round read in the tick,
    0.5 s read in parallel threads, and the tick itself makes no NVML call at all."""
    sampler, fake = start(FakeNvml(eight_slow_gpus(0.25)), monkeypatch)
    calling_threads = set()
    original = fake._gpu

    def recording(handle, function=""):
        calling_threads.add(threading.current_thread().name)
        return original(handle, function)

    monkeypatch.setattr(fake, "_gpu", recording)
    assert len(sampler.sample(time.time_ns())) == 8  # the first readings, waited for once
    calling_threads.clear()
    durations = []
    for _ in range(5):
        time.sleep(1.0)  # one tick a second; each GPU's reading takes 0.5 s, in its thread
        started = time.monotonic()
        points = sampler.sample(time.time_ns())
        durations.append(time.monotonic() - started)
        assert [p.tags["gpu"] for p in points] == [str(i) for i in range(8)]
    assert threading.current_thread().name not in calling_threads
    assert calling_threads <= {f"gpu-{i}" for i in range(8)}
    assert max(durations) < 1.0  # generous: a tick that read the GPUs would take 4 s


def test_a_reading_is_sent_once(monkeypatch):
    """A tick with no new reading of a GPU sends nothing for it: a reading is never sent
    twice, nor under a time that is not its own."""
    sampler, _ = start(FakeNvml([H100_LOAD]), monkeypatch)
    reader = sampler.readers[0]
    [first] = sampler.sample(time.time_ns())  # asks for the next reading
    assert wait_until(lambda: reader.latest.time_ns > first.time_ns and not reader.busy)
    monkeypatch.setattr(reader, "request", lambda due: None)  # no reading after this one
    [second] = sampler.sample(time.time_ns())
    assert second.time_ns > first.time_ns
    assert sampler.sample(time.time_ns()) == []


def test_each_reading_says_how_old_it_is(monkeypatch):
    stats = AgentStats()
    sampler, _ = start(FakeNvml([H100_LOAD]), monkeypatch, stats=stats)
    sampler.sample(time.time_ns())
    time.sleep(0.3)  # no tick meanwhile: the reading made after the first one ages
    now = time.time_ns()
    [point] = sampler.sample(now)
    reading = sampler.readers[0].latest
    assert point.fields["reading_age_seconds"] == pytest.approx((now - reading.time_ns) / 1e9)
    assert point.fields["reading_age_seconds"] >= 0.2
    assert stats.gpu_reading_age_seconds == point.fields["reading_age_seconds"]
    assert (stats.gpus_hung, stats.gpus_failing, stats.gpus_lost) == (0, 0, 0)


def gpu_records(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "agent.samplers.gpu"]


def test_a_hanging_call_marks_its_gpu_hung_once_and_it_recovers(monkeypatch, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="agent.samplers.gpu")
    hang = tmp_path / "hang"
    gpus = [dict(H100_LOAD, uuid=f"GPU-{i}") for i in range(3)]
    gpus[1]["hang_while"] = str(hang)
    stats = AgentStats()
    sampler, _ = start(FakeNvml(gpus), monkeypatch, stats=stats, call_timeout_seconds=0.3)
    assert len(sampler.sample(time.time_ns())) == 3
    hang.touch()  # GPU 1's next call does not return
    assert wait_until(lambda: bool(sampler.sample(time.time_ns())) and stats.gpus_hung == 1)
    reported = []
    for _ in range(5):  # the others are read and reported meanwhile, GPU 1 never
        time.sleep(0.2)
        reported += [p.tags["gpu"] for p in sampler.sample(time.time_ns())]
    assert set(reported) == {"0", "2"}
    assert reported.count("0") >= 3
    # reported through the agent's own measurement too
    [agent_point] = AgentSampler(Roots(), stats).sample(0)
    assert agent_point.fields["gpus_hung"] == 1.0
    hung_lines = [m for m in gpu_records(caplog) if "hung" in m]
    assert len(hung_lines) == 1
    assert hung_lines[0].startswith("gpu 1 (GPU-1) hung: nvmlDevice")
    hang.unlink()  # the call answers
    assert wait_until(lambda: len(sampler.sample(time.time_ns())) == 3 and stats.gpus_hung == 0)
    assert len([m for m in gpu_records(caplog) if "answers again" in m]) == 1
    assert len([m for m in gpu_records(caplog) if "hung" in m]) == 1


def test_a_lost_gpu_is_reported_once_and_the_others_go_on(monkeypatch, caplog):
    stats = AgentStats()
    sampler, fake = start(FakeNvml([H100_LOAD, A100_MIG]), monkeypatch, stats=stats)
    assert len(sampler.sample(NOW)) == 2
    caplog.set_level(logging.WARNING, logger="agent.samplers.gpu")
    fake.gpus[1]["lost"] = True  # the A100 fell off the bus (Xid 79)
    for _ in range(3):
        points = fresh(sampler)
        assert [p.tags["gpu"] for p in points] == ["0"]
        assert fields_of(points[0]) == H100_LOAD_FIELDS
    assert stats.gpus_lost == 1
    assert len(caplog.records) == 1
    assert "gpu 1 (GPU-513536b6-7d19-9063-b049-1e69664bb298) lost" in caplog.records[0].getMessage()


def test_an_erroring_call_leaves_its_field_out_and_is_logged_once(monkeypatch, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="agent.samplers.gpu")
    failing = tmp_path / "failing"
    failing.touch()
    stats = AgentStats()
    sampler, _ = start(
        FakeNvml([H100_LOAD, {**H100_IDLE, "error_while": str(failing)}]),
        monkeypatch,
        stats=stats,
    )
    for _ in range(3):
        points = fresh(sampler)
        assert "power_watts" not in points[1].fields  # NVML_ERROR_UNKNOWN: left out
        assert points[1].fields["temperature_celsius"] == 41.0  # the rest is there
        assert stats.gpus_failing == 1
    messages = gpu_records(caplog)
    assert len(messages) == 1
    assert messages[0].startswith("gpu 1 (GPU-00000000-0000-0000-0000-000000000000): ")
    assert "nvmlDeviceGetPowerUsage failed" in messages[0]
    failing.unlink()
    points = fresh(sampler)
    assert points[1].fields["power_watts"] == 69.85
    assert stats.gpus_failing == 0
    assert gpu_records(caplog)[1:] == [
        "gpu 1 (GPU-00000000-0000-0000-0000-000000000000) reads without errors again"
    ]


def test_an_answer_the_sampler_cannot_read_is_logged_once_and_counted(monkeypatch, caplog):
    """An NVML answer of an unexpected shape (a binding that changed): the GPU's reading
    fails, its thread goes on, the GPU counts as failing; the other GPU is unaffected."""
    caplog.set_level(logging.INFO, logger="agent.samplers.gpu")
    stats = AgentStats()
    sampler, fake = start(FakeNvml([H100_LOAD, H100_IDLE]), monkeypatch, stats=stats)
    original = fake.nvmlDeviceGetMemoryInfo
    monkeypatch.setattr(
        fake.nvml,
        "nvmlDeviceGetMemoryInfo",
        lambda h, version=None: 42 if h == 1 else original(h, version),
    )
    for _ in range(3):
        points = fresh(sampler)
        assert [p.tags["gpu"] for p in points] == ["0"]
        assert stats.gpus_failing == 1
    assert [r.getMessage() for r in caplog.records] == ["reading gpu 1 failed"]
    monkeypatch.setattr(fake.nvml, "nvmlDeviceGetMemoryInfo", original)
    assert [p.tags["gpu"] for p in fresh(sampler)] == ["0", "1"]
    assert stats.gpus_failing == 0
    assert caplog.records[-1].getMessage() == (
        "gpu 1 (GPU-00000000-0000-0000-0000-000000000000) reads without errors again"
    )


def test_nvml_initialised_once_and_shut_down_on_close(monkeypatch):
    sampler, fake = start(FakeNvml([H100_LOAD]), monkeypatch)
    assert sampler.available()  # asked again: no second nvmlInit
    sampler.sample(NOW)
    sampler.sample(NOW)
    assert fake.init_calls == 1
    threads = [reader.thread for reader in sampler.readers]
    sampler.close()
    sampler.close()
    assert fake.shutdown_calls == 1
    assert not any(thread.is_alive() for thread in threads)
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
    # utilisation samples win over the gauge; a u64 PCIe counter past 2**63 is a gap
    readings = GpuReadings(
        utilization=SimpleNamespace(gpu=0, memory=0),
        utilization_samples_percent=55.5,
        pcie_rx_bytes=2**64 - 1,
        pcie_tx_bytes=12,
    )
    assert gpu_fields(readings) == {
        "utilization_percent": 55.5,
        "memory_utilization_percent": 0.0,
        "pcie_tx_bytes": 12,
    }


def test_not_supported_marker_is_what_the_fake_raises():
    with pytest.raises(pynvml.NVMLError_NotSupported):
        FakeNvml([])._answer(NOT_SUPPORTED)
