"""Per-epoch GPU columns with several GPUs per host and a GPU in MIG mode.

No GPU exists on this machine: the ``gpu`` points stand in for what the agent's gpu sampler
writes (tags ``gpu``, ``uuid``, ``mig`` as in agent/samplers/gpu.py) and go through the real
stores' write path (memory and SQLite) and the collector's per-epoch report.

Host n1: two H100s at 80% and 40% utilisation, 300 and 100 W, PCIe counters; one A100 in
MIG mode (no utilisation under MIG, 50 W) with two MIG devices. The MIG devices' points
carry utilisation and energy here as a driver might one day report them: they are part of
their parent GPU and must not be counted a second time. Host n2: one H100 at 90%, 200 W.
"""

from __future__ import annotations

import numpy as np
import pytest

from agent.ceilings import pcie_bytes_per_second
from collector.analysis.epochs import epoch_rows
from contract.columns import BY_NAME, format_cell
from contract.point import Point
from contract.schema import Ceiling, Gpu, Tag
from tests.support.run_builder import NS, RunBuilder
from tests.support.views import assert_views_agree
from workloads.launch.summary import format_profile_table

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

SECONDS = 100.0

# (host, gpu, uuid, mig, utilisation %, watts, PCIe rx B/s, PCIe tx B/s)
GPUS = [
    ("n1", "0", "GPU-a", "", 80.0, 300.0, 2e9, 1e9),
    ("n1", "1", "GPU-b", "", 40.0, 100.0, 1e9, 5e8),
    ("n1", "2", "GPU-mig", "", None, 50.0, None, None),
    ("n1", "2", "MIG-1", "1/0", 100.0, 25.0, None, None),
    ("n1", "2", "MIG-2", "2/0", 100.0, 25.0, None, None),
    ("n2", "0", "GPU-c", "", 90.0, 200.0, 4e9, 2e9),
]


def gpu_points(run: RunBuilder) -> list[Point]:
    points = []
    for host, index, uuid, mig, util, watts, rx, tx in GPUS:
        tags = {Tag.HOST: host, Tag.GPU: index, Tag.UUID: uuid, Tag.NAME: "NVIDIA H100"}
        if mig:
            tags[Tag.MIG] = mig
        times = run.sample_times(host)
        elapsed = (times - times[0]) / NS
        for time_ns, seconds in zip(times.tolist(), elapsed.tolist(), strict=True):
            fields: dict[str, int | float] = {Gpu.ENERGY_JOULES: 1e6 + watts * seconds}
            if util is not None:
                fields[Gpu.UTILIZATION_PERCENT] = util
            if rx is not None:
                fields[Gpu.PCIE_RX_BYTES] = int(rx * seconds)
                fields[Gpu.PCIE_TX_BYTES] = int(tx * seconds)
            points.append(Point(Gpu.NAME, dict(tags), fields, time_ns))
    return points


def test_gpu_columns_mean_utilisation_over_gpus_and_sum_energy_and_pcie(make_store):
    run = RunBuilder("r-gpus", hosts=("n1", "n2"), ranks_per_host=2, gpus=False)
    run.epoch(SECONDS, 6400)
    store = make_store(run.points() + gpu_points(run))
    rows = {row["host"]: row for row in epoch_rows(store, "r-gpus")}

    n1 = rows["n1"]
    # the two H100s; the A100 in MIG mode has no utilisation, its MIG devices are not GPUs
    assert n1["gpu_util_percent"] == pytest.approx(60.0)  # (80 + 40) / 2
    # 300 + 100 + 50 W over 100 s; the MIG devices' 2 x 25 W are in the A100's 50 W
    assert n1["gpu_energy_joules"] == pytest.approx(45_000.0)
    assert n1["gpu_pcie_rx_bytes"] == 300_000_000_000  # (2 + 1) GB/s x 100 s
    assert n1["gpu_pcie_tx_bytes"] == 150_000_000_000

    n2 = rows["n2"]
    assert n2["gpu_util_percent"] == pytest.approx(90.0)
    assert n2["gpu_energy_joules"] == pytest.approx(20_000.0)
    assert n2["gpu_pcie_rx_bytes"] == 400_000_000_000

    everyone = rows["*"]
    # every GPU counts once: (80 + 40 + 90) / 3, not the mean of the hosts' means (75)
    assert everyone["gpu_util_percent"] == pytest.approx(70.0)
    assert everyone["gpu_energy_joules"] == pytest.approx(65_000.0)
    assert everyone["gpu_pcie_rx_bytes"] == 700_000_000_000
    assert everyone["gpu_pcie_tx_bytes"] == 350_000_000_000


def test_gpus_without_counters_give_none_not_zero(make_store):
    """A driver without PCIe field values and a GPU before Volta (no energy counter)."""
    run = RunBuilder("r-old", hosts=("n1",), ranks_per_host=1, gpus=False)
    run.epoch(SECONDS, 640)
    times = run.sample_times("n1")
    points = [
        Point(
            Gpu.NAME,
            {Tag.HOST: "n1", Tag.GPU: "0", Tag.UUID: "GPU-p100", Tag.NAME: "Tesla P100"},
            {Gpu.UTILIZATION_PERCENT: 50.0, Gpu.PCIE_RX_BYTES_PER_SECOND: 1e9},
            time_ns,
        )
        for time_ns in np.asarray(times).tolist()
    ]
    [row, _] = epoch_rows(make_store(run.points() + points), "r-old")
    assert row["gpu_util_percent"] == pytest.approx(50.0)
    assert (row["gpu_energy_joules"], row["gpu_pcie_rx_bytes"], row["gpu_pcie_tx_bytes"]) == (
        None,
        None,
        None,
    )


def pcie_ceiling_points(run: RunBuilder, links: dict[str, list[float]]) -> list[Point]:
    """``agent ceilings``' PCIe entries (kind ``gpu``, one per GPU, bytes/s one direction)."""
    return [
        Point(
            Ceiling.NAME,
            {Tag.HOST: host, Tag.DEVICE: str(index), Tag.KIND: "gpu", Tag.METHOD: "nvml"},
            {str(Ceiling.PCIE): rate, str(Ceiling.MEASURED_AT): 1.0},
            time_ns,
        )
        for host, rates in links.items()
        for index, rate in enumerate(rates)
        for time_ns in run.sample_times(host).tolist()[::5]
    ]


def pcie_run(run_id: str, generation: int) -> tuple[RunBuilder, float, dict[str, list[float]]]:
    """The GPUs' run (n1: two GPUs, n2: one), each GPU on a x16 link of ``generation``."""
    run = RunBuilder(run_id, hosts=("n1", "n2"), ranks_per_host=2, gpus=False)
    run.epoch(SECONDS, 6400)
    link = pcie_bytes_per_second(generation, 16)
    return run, link, {"n1": [link, link], "n2": [link]}


def test_the_pcie_share_is_the_busier_direction_over_the_gpus_links(make_store):
    run, gen4_x16, links = pcie_run("r-pcie", 4)
    store = make_store(run.points() + gpu_points(run) + pcie_ceiling_points(run, links))
    rows = {row["host"]: row for row in epoch_rows(store, "r-pcie")}
    # received is the busier direction: (2 + 1) GB/s over two Gen4 x16 links
    assert rows["n1"]["gpu_pcie_ceiling_percent"] == pytest.approx(
        100 * 3e9 / (2 * gen4_x16), rel=0.01
    )
    assert rows["n2"]["gpu_pcie_ceiling_percent"] == pytest.approx(100 * 4e9 / gen4_x16, rel=0.01)
    assert rows["*"]["gpu_pcie_ceiling_percent"] == pytest.approx(
        100 * 7e9 / (3 * gen4_x16), rel=0.01
    )
    without = make_store(run.points() + gpu_points(run))
    assert {row["gpu_pcie_ceiling_percent"] for row in epoch_rows(without, "r-pcie")} == {None}


def test_the_pcie_share_prints_the_same_in_the_table_json_and_dashboard(make_store):
    run, gen3_x16, links = pcie_run("r-pcieviews", 3)
    store = make_store(run.points() + gpu_points(run) + pcie_ceiling_points(run, links))
    shown = assert_views_agree(store, "r-pcieviews", ["gpu_pcie_ceiling_percent"])
    assert shown["gpu_pcie_ceiling_percent"] == pytest.approx(100 * 7e9 / (3 * gen3_x16), rel=0.01)


def test_the_table_printed_after_a_run_shows_the_gpus_utilisation_on_gpu_hosts(make_store):
    """The table ``workloads run --profile`` and ``workloads profile`` print: on a real
    H200 it showed AU (99.9 %) but not the GPU's own utilisation (77-93 %), which only
    ``collector report`` had. The column is there where the hosts have GPUs, and is
    ``collector report``'s value."""
    run = RunBuilder("r-table", hosts=("n1", "n2"), ranks_per_host=2, gpus=False)
    run.epoch(SECONDS, 6400)
    rows = epoch_rows(make_store(run.points() + gpu_points(run)), "r-table")
    table = format_profile_table(rows)
    header, n1 = table.splitlines()[:2]
    assert "GPU %" in header
    assert format_cell(BY_NAME["gpu_util_percent"], 60.0) in n1.split()
    store = make_store(run.points() + gpu_points(run))
    shown = assert_views_agree(store, "r-table", ["gpu_util_percent"])
    assert shown == {"gpu_util_percent": pytest.approx(70.0)}
    cpu_only = epoch_rows(make_store(run.points()), "r-table")
    assert "GPU %" not in format_profile_table(cpu_only)
