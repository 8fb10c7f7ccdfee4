"""What the agent's gpu sampler reads, against nvidia-smi at the same moments, on a real GPU.

For a session that has a GPU machine (this project's development machine has none). Only
the standard library and this checkout's ``agent`` are needed (plus ``nvidia-ml-py`` and
the NVIDIA driver, which such a machine has):

    python3 bench/gpu_check/compare.py --once                 # one sample, one table
    python3 bench/gpu_check/compare.py --seconds 30           # agent run, 30 s, every second
    python3 bench/gpu_check/compare.py --seconds 30 --out bench/gpu_check/results/h100.json

``--once`` runs ``python -m agent sample --once --format json --samplers gpu,agent`` and
``nvidia-smi --query-gpu=... --format=csv`` at the same time and prints, per GPU, each
field as the agent read it (in nvidia-smi's unit) beside nvidia-smi's value.
``--seconds N`` runs ``agent run`` (1 s interval, /metrics on a loopback port, no push)
for N seconds, scrapes /metrics and runs nvidia-smi every second, and runs
``nvidia-smi dmon -s pt`` alongside for PCIe MB/s; it prints, per GPU and field, the mean
of each side and the largest difference, the energy counter's rate against the mean
power draw, the readings' age, and the agent's self metrics (hung, failing, lost GPUs).
Run a load on the GPUs meanwhile (a training, gpu-burn) for numbers worth comparing.

The parsers are pure functions over nvidia-smi's text (tested against a real H100
capture in tests/integration/test_gpu_check.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
MIB = 2**20
AGENT = [sys.executable, "-m", "agent"]

# agent field -> (nvidia-smi --query-gpu field, factor from the agent's unit to smi's)
FIELDS: dict[str, tuple[str, float]] = {
    "utilization_percent": ("utilization.gpu", 1.0),
    "memory_utilization_percent": ("utilization.memory", 1.0),
    "memory_used_bytes": ("memory.used", 1 / MIB),
    "memory_total_bytes": ("memory.total", 1 / MIB),
    "power_watts": ("power.draw", 1.0),
    "temperature_celsius": ("temperature.gpu", 1.0),
    "sm_clock_mhz": ("clocks.sm", 1.0),
}
QUERY = ["index", "uuid", "name", *dict.fromkeys(smi for smi, _ in FIELDS.values())]


def _number(text: str) -> float | None:
    """``"19818 MiB"`` -> 19818.0; ``"[N/A]"``, ``"N/A"``, ``"Not Active"`` -> None."""
    head = text.strip().split(" ")[0] if text.strip() else ""
    try:
        return float(head)
    except ValueError:
        return None


def parse_query_csv(text: str, fields: list[str] | None = None) -> list[dict[str, str]]:
    """Rows of ``nvidia-smi --query-*=... --format=csv`` as {field: value text}.

    Keys are ``fields`` (the names queried, in order: nvidia-smi writes its own name for an
    alias, ``clocks.current.sm`` for ``clocks.sm``), else the header's names without their
    units (``memory.used [MiB]`` -> ``memory.used``). Values are split at ", " as
    nvidia-smi writes them.
    """
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    if not lines:
        return []
    header = fields or [name.split(" [")[0].strip() for name in lines[0].split(", ")]
    return [dict(zip(header, line.split(", "), strict=False)) for line in lines[1:]]


def parse_dmon(text: str) -> list[dict[str, float | None]]:
    """Rows of ``nvidia-smi dmon`` (``# gpu pwr ... rxpci txpci`` header, unit line)."""
    columns: list[str] = []
    rows = []
    for line in text.splitlines():
        if line.startswith("#"):
            words = line[1:].split()
            if words and words[0] == "gpu":
                columns = words
            continue
        values = line.split()
        if columns and len(values) == len(columns):
            rows.append({name: _number(value) for name, value in zip(columns, values, strict=True)})
    return rows


def smi_by_uuid(rows: list[dict[str, str]]) -> dict[str, dict[str, float | None]]:
    return {row["uuid"].strip(): {k: _number(v) for k, v in row.items()} for row in rows}


def agent_gpus(points: list[dict]) -> dict[str, dict]:
    """The agent's ``gpu`` points of whole GPUs, by uuid: not MIG devices, and not the
    per-process points (tag ``pid``), which carry the same uuid while a process runs."""
    return {
        p["tags"]["uuid"]: p
        for p in points
        if p["measurement"] == "gpu" and not p["tags"].get("mig") and "pid" not in p["tags"]
    }


def compare(points: list[dict], smi_rows: list[dict[str, str]]) -> list[dict]:
    """One row per (GPU, field): the agent's value in nvidia-smi's unit and nvidia-smi's."""
    smi = smi_by_uuid(smi_rows)
    rows = []
    for uuid, point in sorted(agent_gpus(points).items(), key=lambda kv: kv[1]["tags"]["gpu"]):
        theirs = smi.get(uuid, {})
        for field, (smi_field, factor) in FIELDS.items():
            ours = point["fields"].get(field)
            rows.append(
                {
                    "gpu": point["tags"]["gpu"],
                    "uuid": uuid,
                    "field": field,
                    "smi_field": smi_field,
                    "agent": None if ours is None else ours * factor,
                    "nvidia_smi": theirs.get(smi_field),
                }
            )
    return rows


def print_table(rows: list[dict]) -> None:
    print(f"{'gpu':>3}  {'field':<28} {'agent':>12} {'nvidia-smi':>12}")
    for row in rows:
        ours = "-" if row["agent"] is None else f"{row['agent']:.2f}"
        theirs = "-" if row["nvidia_smi"] is None else f"{row['nvidia_smi']:.2f}"
        print(f"{row['gpu']:>3}  {row['field']:<28} {ours:>12} {theirs:>12}")


def nvidia_smi_query() -> str:
    return subprocess.run(
        ["nvidia-smi", f"--query-gpu={','.join(QUERY)}", "--format=csv"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout


def agent_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def once() -> dict:
    """``agent sample --once`` and ``nvidia-smi --query-gpu`` started at the same time."""
    agent = subprocess.Popen(
        [*AGENT, "sample", "--once", "--format", "json", "--samplers", "gpu,agent"],
        stdout=subprocess.PIPE,
        env=agent_env(),
        text=True,
    )
    smi_text = nvidia_smi_query()
    out, _ = agent.communicate(timeout=60)
    points = json.loads(out)
    rows = compare(points, parse_query_csv(smi_text, QUERY))
    print_table(rows)
    return {"mode": "once", "points": points, "nvidia_smi": smi_text, "rows": rows}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


SAMPLE_LINE = re.compile(r"^(\w+)(?:\{(.*)\})? (\S+)(?: \S+)?$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metrics_points(text: str) -> list[dict]:
    """The ``epochscope_gpu_*`` and ``epochscope_agent_*`` samples of a /metrics page as
    points shaped like ``agent sample --format json``'s, one per label set."""
    points: dict[tuple, dict] = {}
    for line in text.splitlines():
        match = SAMPLE_LINE.match(line)
        if not match or not match[1].startswith(("epochscope_gpu_", "epochscope_agent_")):
            continue
        name, labels_text, value = match[1], match[2] or "", match[3]
        measurement = "gpu" if name.startswith("epochscope_gpu_") else "agent"
        field = name.removeprefix(f"epochscope_{measurement}_").removesuffix("_total")
        tags = {k: v for k, v in LABEL.findall(labels_text) if k != "host"}
        key = (measurement, tuple(sorted(tags.items())))
        point = points.setdefault(key, {"measurement": measurement, "tags": tags, "fields": {}})
        point["fields"][field] = float(value)
    return list(points.values())


def run(seconds: float) -> dict:
    """``agent run`` for ``seconds``, scraped and compared with nvidia-smi every second."""
    port = free_port()
    with tempfile.TemporaryDirectory() as temp:
        config = Path(temp) / "agent.toml"
        config.write_text(
            f'interval_seconds = 1\nsamplers = ["gpu", "agent"]\n'
            f'[metrics]\nlisten = "127.0.0.1:{port}"\n'
        )
        log = open(Path(temp) / "agent.log", "w")  # noqa: SIM115 (closed below)
        agent = subprocess.Popen(
            [*AGENT, "run", "--config", str(config)],
            env=agent_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        dmon_text: list[str] = []
        dmon = subprocess.Popen(
            ["nvidia-smi", "dmon", "-s", "pt", "-d", "1", "-c", str(int(seconds) + 3)],
            stdout=subprocess.PIPE,
            text=True,
        )
        reader = threading.Thread(target=lambda: dmon_text.append(dmon.stdout.read()), daemon=True)
        reader.start()
        samples = []
        try:
            time.sleep(3)  # imports and the first readings
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                started = time.monotonic()
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    page = r.read().decode()
                smi_text = nvidia_smi_query()
                points = metrics_points(page)
                samples.append(
                    {
                        "time": time.time(),
                        "points": points,
                        "rows": compare(points, parse_query_csv(smi_text, QUERY)),
                    }
                )
                time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
        finally:
            agent.terminate()
            agent.wait(30)
            dmon.terminate()
            log.close()
        reader.join(5)
        agent_log = (Path(temp) / "agent.log").read_text()
    summary = summarise(samples)
    print_summary(summary)
    return {
        "mode": "run",
        "seconds": seconds,
        "samples": samples,
        "summary": summary,
        "dmon": parse_dmon("".join(dmon_text)),
        "agent_log": agent_log,
    }


def summarise(samples: list[dict]) -> dict:
    """Per (gpu, field): means of both sides, the median and largest difference; energy rate.

    The median is the figure to judge by: /metrics holds the agent's last reading, up to
    one interval older than nvidia-smi's, so when the load starts or stops the two read
    either side of it (on an H200: 0 % against 94 %, 151 W against 591 W) and set the max.
    """
    by_key: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for sample in samples:
        for row in sample["rows"]:
            if row["agent"] is not None and row["nvidia_smi"] is not None:
                by_key.setdefault((row["gpu"], row["field"]), []).append(
                    (row["agent"], row["nvidia_smi"])
                )
    fields = {
        f"{gpu}/{field}": {
            "agent_mean": statistics.fmean(a for a, _ in pairs),
            "nvidia_smi_mean": statistics.fmean(s for _, s in pairs),
            "median_abs_difference": statistics.median(abs(a - s) for a, s in pairs),
            "max_abs_difference": max(abs(a - s) for a, s in pairs),
            "pairs": len(pairs),
        }
        for (gpu, field), pairs in sorted(by_key.items())
    }
    energy: dict[str, dict] = {}
    ages: list[float] = []
    for gpu in sorted({gpu for gpu, _ in by_key}):
        readings = [
            (s["time"], p["fields"])
            for s in samples
            for p in s["points"]
            if p["measurement"] == "gpu"
            and p["tags"].get("gpu") == gpu
            and not p["tags"].get("mig")
        ]
        joules = [(t, f["energy_joules"]) for t, f in readings if "energy_joules" in f]
        if len(joules) >= 2 and joules[-1][0] > joules[0][0]:
            watts = [f["power_watts"] for _, f in readings if "power_watts" in f]
            energy[gpu] = {
                "energy_rate_watts": (joules[-1][1] - joules[0][1])
                / (joules[-1][0] - joules[0][0]),
                "mean_power_watts": statistics.fmean(watts) if watts else None,
            }
        ages += [f["reading_age_seconds"] for _, f in readings if "reading_age_seconds" in f]
    agent_self = [p["fields"] for s in samples for p in s["points"] if p["measurement"] == "agent"]
    return {
        "fields": fields,
        "energy": energy,
        "reading_age_seconds": {
            "median": statistics.median(ages) if ages else None,
            "max": max(ages) if ages else None,
        },
        "max_gpus_hung": max((a.get("gpus_hung", 0) for a in agent_self), default=None),
        "max_gpus_failing": max((a.get("gpus_failing", 0) for a in agent_self), default=None),
        "max_gpus_lost": max((a.get("gpus_lost", 0) for a in agent_self), default=None),
        "max_sample_duration_seconds": max(
            (a.get("sample_duration_seconds", 0.0) for a in agent_self), default=None
        ),
    }


def print_summary(summary: dict) -> None:
    print(
        f"{'gpu/field':<34} {'agent mean':>12} {'smi mean':>12} {'median |diff|':>14}"
        f" {'max |diff|':>12} {'n':>4}"
    )
    for key, row in summary["fields"].items():
        print(
            f"{key:<34} {row['agent_mean']:>12.2f} {row['nvidia_smi_mean']:>12.2f}"
            f" {row['median_abs_difference']:>14.2f} {row['max_abs_difference']:>12.2f}"
            f" {row['pairs']:>4}"
        )
    for gpu, row in summary["energy"].items():
        print(
            f"gpu {gpu}: energy counter rate {row['energy_rate_watts']:.1f} W, "
            f"mean power.draw {row['mean_power_watts']} W"
        )
    print(f"reading age: {summary['reading_age_seconds']}")
    print(
        f"max gpus hung/failing/lost: {summary['max_gpus_hung']}/"
        f"{summary['max_gpus_failing']}/{summary['max_gpus_lost']}; "
        f"max sample duration {summary['max_sample_duration_seconds']} s"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--once", action="store_true", help="one agent sample against nvidia-smi")
    mode.add_argument("--seconds", type=float, help="agent run for this long, every second")
    parser.add_argument("--out", type=Path, help="write everything as JSON here")
    args = parser.parse_args(argv)
    result = once() if args.once else run(args.seconds)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
        print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
