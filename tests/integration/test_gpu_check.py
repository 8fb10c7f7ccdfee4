"""bench/gpu_check/compare.py: the script a session with a GPU runs to compare the agent's
gpu sampler with nvidia-smi.

Its parsers are checked against a real H100's nvidia-smi output (the capture in
/work/shared/fixtures/gpu/). This machine has no GPU, so the end-to-end runs use the fake
NVML (tests/support/fake_nvml.py) and a stand-in ``nvidia-smi`` that prints what the fake GPU holds,
in nvidia-smi's format: mocked, and said so.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agent.samplers import gpu as gpu_module
from tests.conftest import SHARED
from tests.support.fake_nvml import H100_LOAD, MIB, fake_nvml_env

REPO_ROOT = Path(__file__).resolve().parents[2]
CAPTURE = SHARED / "fixtures" / "gpu" / "h100-80gb-hbm3.capture.txt"
SCRIPT = REPO_ROOT / "bench" / "gpu_check" / "compare.py"

_spec = importlib.util.spec_from_file_location("gpu_check_compare", SCRIPT)
compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare)


def capture_section(title: str) -> str:
    """The output under ``# <title>`` in the capture (after its command and rule lines)."""
    if not CAPTURE.is_file():
        pytest.fail(f"capture {CAPTURE} is missing: ../shared must sit beside the repo")
    text = CAPTURE.read_text()
    start = text.index(f"# {title}\n")
    body = text[start:].split("#" * 80 + "\n", 2)[1]
    return body.split("\n\n", 1)[0]


def test_query_csv_of_a_real_h100_under_load():
    [row] = compare.parse_query_csv(
        capture_section("load :: query-gpu (csv, what the exporter parses)")
    )
    smi = compare.smi_by_uuid([row])["GPU-00000000-0000-0000-0000-000000000000"]
    # the values the fake NVML's H100_LOAD was read from, by hand, in the -q section
    assert smi["utilization.gpu"] == 100.0
    assert smi["memory.used"] == 19818.0  # MiB
    assert smi["memory.total"] == 81559.0
    assert smi["temperature.gpu"] == 59.0
    assert smi["clocks.current.sm"] == 1980.0  # the name nvidia-smi writes for clocks.sm
    assert smi["index"] == 0.0
    assert smi["pcie.link.gen.max"] == 5.0
    assert row["name"] == "NVIDIA H100 80GB HBM3"


def test_dmon_of_a_real_h100_under_load():
    rows = compare.parse_dmon(
        capture_section("load :: dmon (per-device monitor, incl. PCIe rx/tx)")
    )
    assert len(rows) == 5
    assert rows[0] == {
        "gpu": 0.0,
        "pwr": 631.0,
        "gtemp": 63.0,
        "mtemp": 57.0,
        "sm": 100.0,
        "mem": 10.0,
        "enc": 0.0,
        "dec": 0.0,
        "jpg": 0.0,
        "ofa": 0.0,
        "mclk": 2619.0,
        "pclk": 1980.0,
    }


def test_every_nvml_function_the_sampler_calls_is_in_a_real_driver():
    """The capture lists the symbols of driver 590.48.01's libnvidia-ml.so.1; pynvml calls
    the newest version of each (``_v2``, ``_v3``)."""
    symbols = set(capture_section("capabilities :: nvml-symbols").split())
    source = Path(gpu_module.__file__).read_text()
    named = set(re.findall(r'"(nvml(?:Device)?[A-Z]\w+)"', source))
    called = {name for name in named if not name.startswith("nvmlMemory_")}  # struct versions
    assert "nvmlDeviceGetFieldValues" in called and "nvmlDeviceGetSamples" in called
    missing = [name for name in called if not {name, f"{name}_v2", f"{name}_v3"} & symbols]
    assert missing == []
    assert "nvmlDeviceGetMemoryInfo_v2" in symbols  # what nvmlMemory_v2 makes pynvml call


def test_metrics_points_reads_the_agents_page():
    page = (
        "# HELP epochscope_gpu_power_watts Power draw\n"
        "# TYPE epochscope_gpu_power_watts gauge\n"
        'epochscope_gpu_power_watts{host="n1",gpu="0",uuid="GPU-a",name="NVIDIA H100 80GB HBM3"}'
        " 629.45 1700000000000\n"
        'epochscope_gpu_energy_joules_total{host="n1",gpu="0",uuid="GPU-a",'
        'name="NVIDIA H100 80GB HBM3"} 1234.5 1700000000000\n'
        'epochscope_agent_gpus_hung{host="n1"} 1.0 1700000000000\n'
    )
    assert compare.metrics_points(page) == [
        {
            "measurement": "gpu",
            "tags": {"gpu": "0", "uuid": "GPU-a", "name": "NVIDIA H100 80GB HBM3"},
            "fields": {"power_watts": 629.45, "energy_joules": 1234.5},
        },
        {"measurement": "agent", "tags": {}, "fields": {"gpus_hung": 1.0}},
    ]


FAKE_NVIDIA_SMI = f'''#!{sys.executable}
"""A stand-in nvidia-smi (this machine has none): H100_LOAD's values in its formats."""
import sys
args = sys.argv[1:]
if args and args[0] == "dmon":
    print("# gpu    pwr  gtemp  mtemp     sm    mem  rxpci  txpci")
    print("# Idx      W      C      C      %      %   MB/s   MB/s")
    print("    0    629     59     50    100     11      6      3")
    sys.exit(0)
query = [a for a in args if a.startswith("--query-gpu=")][0].split("=", 1)[1].split(",")
units = {{"utilization.gpu": "%", "utilization.memory": "%", "memory.used": "MiB",
          "memory.total": "MiB", "power.draw": "W", "clocks.sm": "MHz"}}
values = {{"index": "0", "uuid": "GPU-00000000-0000-0000-0000-000000000000",
          "name": "NVIDIA H100 80GB HBM3", "utilization.gpu": "100 %",
          "utilization.memory": "11 %", "memory.used": "19818 MiB",
          "memory.total": "81559 MiB", "power.draw": "629.45 W", "temperature.gpu": "59",
          "clocks.sm": "1980 MHz"}}
print(", ".join(f"{{q}} [{{units[q]}}]" if q in units else q for q in query))
print(", ".join(values[q] for q in query))
'''


@pytest.fixture
def gpu_machine(tmp_path, repo_env) -> dict[str, str]:
    """The environment of a machine with one H100 and a process on it: fake NVML, stand-in
    nvidia-smi. The process's own ``gpu`` point carries the GPU's uuid too (on a real H200
    the bench compared it in place of the GPU's, and every loaded second read "-")."""
    training = {**H100_LOAD, "processes": [(4100, 19_000 * MIB)]}
    env = fake_nvml_env(tmp_path, [training], repo_env)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_NVIDIA_SMI)
    smi.chmod(0o755)
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    return env


def test_once_agrees_with_nvidia_smi_on_the_fake_h100(gpu_machine, tmp_path):
    out = tmp_path / "once.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--once", "--out", str(out)],
        env=gpu_machine,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    rows = json.loads(out.read_text())["rows"]
    by_field = {row["field"]: (row["agent"], row["nvidia_smi"]) for row in rows}
    assert by_field["memory_used_bytes"] == (19818.0, 19818.0)  # both in MiB
    assert by_field["power_watts"] == (629.45, 629.45)
    assert by_field["utilization_percent"] == (100.0, 100.0)
    assert by_field["sm_clock_mhz"] == (1980.0, 1980.0)
    assert "power_watts" in result.stdout


@pytest.mark.slow
def test_run_mode_summarises_seconds_of_agent_run(gpu_machine, tmp_path):
    out = tmp_path / "run.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--seconds", "3", "--out", str(out)],
        env=gpu_machine,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(out.read_text())["summary"]
    power = summary["fields"]["0/power_watts"]
    assert power["agent_mean"] == power["nvidia_smi_mean"] == 629.45
    assert power["max_abs_difference"] == power["median_abs_difference"] == 0.0
    assert summary["fields"]["0/memory_used_bytes"]["agent_mean"] == 19818.0  # the GPU's
    assert summary["max_gpus_hung"] == 0.0
    assert summary["reading_age_seconds"]["max"] is not None
    assert json.loads(out.read_text())["dmon"][0]["rxpci"] == 6.0
