"""What one agent edge sample (``POST /edge``, ``workloads.record.events.AgentEdges.sample``)
costs the training process and the agent, against a real embedded agent and collector
started as ``workloads profile`` starts them (``workloads.launch.local_stack.EmbeddedProfile``).

    flock /work/bench.lock nice -n -10 .venv/bin/python bench/profile_overhead/edge_cost.py \\
        --out bench/profile_overhead/results-edge-cost.json

Rounds alternate (``bench/side_by_side.py`` ``interleaved``) between ``idle`` (the agent
only ticks, 1 Hz, for ``--seconds``), ``kept`` (the same time, with an edge sample asked
every ``--every`` seconds from this process's main thread, as a rank's training thread
asks, on the one kept connection ``AgentEdges`` holds) and ``fresh`` (the same, with a new
connection per request, as ``AgentEdges`` did before it kept one). The rank's time budget
is lifted (every request is made). Per request: the wall time the calling thread was
blocked in ``sample()`` and its own CPU time (``time.thread_time``); per round: the agent's
and the collector's CPU seconds (``/proc/<pid>/stat`` utime + stime). The agent's (and
collector's) CPU per edge sample is (CPU of a round with requests - CPU of the ``idle``
round beside it) / requests, the ticks' own CPU cancelling out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.side_by_side import interleaved, load_average, spread, take_priority  # noqa: E402
from contract import procfs  # noqa: E402 (the one /proc parser)
from workloads.launch.local_stack import EmbeddedProfile  # noqa: E402
from workloads.record.events import AgentEdges  # noqa: E402

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    return procfs.parse_stat(Path(f"/proc/{pid}/stat").read_text()).ticks / TICKS_PER_SECOND


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def one_round(profile: EmbeddedProfile, variant: str, seconds: float, every: float) -> dict:
    edges = AgentEdges(profile.agent_port, budget_share=1.0, budget_allowance=float("inf"))
    asking = variant != "idle"
    agent_pid, collector_pid = profile.agent.pid, profile.collector.pid
    agent_cpu, collector_cpu = cpu_seconds(agent_pid), cpu_seconds(collector_pid)
    blocked, thread_cpu, answered = [], [], 0
    began = time.perf_counter()
    next_at = began
    while time.perf_counter() - began < seconds:
        if asking:
            wall, cpu = time.perf_counter(), time.thread_time()
            answered += edges.sample() is not None
            if variant == "fresh":
                edges._close()  # the next request connects anew
            thread_cpu.append(time.thread_time() - cpu)
            blocked.append(time.perf_counter() - wall)
        next_at += every
        time.sleep(max(0.0, next_at - time.perf_counter()))
    return {
        "requests": len(blocked),
        "answered": answered,
        "blocked_ms": [round(b * 1e3, 4) for b in blocked],
        "client_cpu_ms": [round(c * 1e3, 4) for c in thread_cpu],
        "agent_cpu_s": cpu_seconds(agent_pid) - agent_cpu,
        "collector_cpu_s": cpu_seconds(collector_pid) - collector_cpu,
        "wall_s": time.perf_counter() - began,
    }


def summarise(asked: list[dict], idle: list[dict]) -> dict:
    blocked = [b for r in asked for b in r["blocked_ms"]]
    client_cpu = [c for r in asked for c in r["client_cpu_ms"]]

    def per_edge(process: str) -> list[float]:
        return [
            (a[f"{process}_cpu_s"] - i[f"{process}_cpu_s"]) / a["requests"] * 1e3
            for a, i in zip(asked, idle, strict=True)
        ]

    return {
        "requests": len(blocked),
        "answered": sum(r["answered"] for r in asked),
        "blocked_ms": {
            "median": statistics.median(blocked),
            "p90": percentile(blocked, 0.9),
            "p99": percentile(blocked, 0.99),
            "max": max(blocked),
        },
        "client_cpu_ms_median": statistics.median(client_cpu),
        "agent_cpu_ms_per_edge": spread(per_edge("agent")),
        "collector_cpu_ms_per_edge": spread(per_edge("collector")),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--every", type=float, default=0.02)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    priority = take_priority()
    loads = [load_average()]
    rounds: dict[str, list[dict]] = {"idle": [], "kept": [], "fresh": []}
    with tempfile.TemporaryDirectory(dir=Path.home()) as scratch:
        profile = EmbeddedProfile("edge-cost", Path(scratch)).start()
        try:
            time.sleep(2.0)  # the agent's first ticks
            for _, variant in interleaved(args.rounds, list(rounds)):
                rounds[variant].append(one_round(profile, variant, args.seconds, args.every))
                loads.append(load_average())
            agent_log = (profile.workdir / "agent.log").read_text(errors="replace")
        finally:
            profile.stop()
    summary = {variant: summarise(rounds[variant], rounds["idle"]) for variant in ("kept", "fresh")}
    summary["agent_cpu_s_per_idle_round"] = spread([r["agent_cpu_s"] for r in rounds["idle"]])
    summary["load_average_range"] = spread(loads)
    print(json.dumps(summary, indent=2))
    if args.out:
        result = {
            "bench": "edge_cost",
            "args": {k: str(v) for k, v in vars(args).items()},
            "priority": priority,
            "load_average": loads,
            "summary": summary,
            "rounds": rounds,
            "agent_log_tail": agent_log[-2000:],
        }
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
