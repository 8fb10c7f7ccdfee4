"""Where the agent's CPU goes: ``agent run`` under cProfile, every thread, for N ticks.

Starts the real ``agent run`` (1 Hz, default samplers, /metrics on, pushing to the same
loopback write endpoint as ``run.py``) in a child process whose threads each run under
their own ``cProfile.Profile`` (the sampling loop, the shipper, the /metrics server and
its request threads), scrapes it once a second (``--scraped``) or leaves it alone, and
stops it with SIGTERM after ``--ticks`` ticks. Prints the process's CPU time, the
profiled time per part of the agent, per tick, the top functions by own time, and the
agent's own per-sampler split (``sampler_wall_ms_per_tick``: the mean wall time of each
sampler's ``sample()`` from the ``agent_sampler`` points it pushed, unprofiled ticks
not told apart; the profiler inflates these too).

    python bench/agent_overhead/profile_agent.py --ticks 300 --scraped
    python bench/agent_overhead/profile_agent.py --ticks 300            # push only

Times are each thread's CPU time (``time.thread_time``), not wall time. Deterministic
profiling adds a cost per Python call, so the absolute times are inflated
(the ``process CPU`` line says by how much against the unprofiled ``run.py`` figures);
the shares between parts are what this is for.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import (  # noqa: E402
    REPO_ROOT,
    Scraper,
    WriteEndpoint,
    cpu_seconds,
    free_port,
    print_sampler_split,
    wait_for,
)

# Parts of the agent, by the function whose cumulative time is the part's cost.
# (file suffix, function name) -> label; a part's time is the cumulative time of the
# first matching entry of each thread (no double counting: these do not nest).
PARTS: list[tuple[str, str, str]] = [
    ("samplers/cpu.py", "sample", "sample: cpu"),
    ("samplers/memory.py", "sample", "sample: memory"),
    ("samplers/disk.py", "sample", "sample: disk"),
    ("samplers/net.py", "sample", "sample: net"),
    ("samplers/infiniband.py", "sample", "sample: infiniband"),
    ("samplers/nfs.py", "sample", "sample: nfs"),
    ("samplers/jobs.py", "sample", "sample: jobs"),
    ("samplers/processes.py", "sample", "sample: processes"),
    ("samplers/gpu.py", "sample", "sample: gpu"),
    ("samplers/ceilings.py", "sample", "sample: ceilings"),
    ("samplers/agent.py", "sample", "sample: agent (self)"),
    ("agent/exposition.py", "publish", "/metrics: publish (per tick)"),
    ("agent/exposition.py", "render", "/metrics: render (per tick)"),
    ("socketserver.py", "process_request_thread", "/metrics: serve scrapes (HTTP thread)"),
    ("agent/shipper.py", "submit", "push: encode + spool append (per tick)"),
    ("agent/shipper.py", "_send", "push: HTTP write (per batch)"),
]


PROFILE_HOST = "agent-profile"


def child(config: Path, stats_out: Path) -> int:
    """Run ``agent run`` with a profiler in every thread; write the merged stats."""
    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()
    original_run = threading.Thread.run

    def profiled_run(self: threading.Thread) -> None:
        profile = cProfile.Profile(time.thread_time)
        with lock:
            profiles.append(profile)
        profile.enable()
        try:
            original_run(self)
        finally:
            profile.disable()

    threading.Thread.run = profiled_run  # type: ignore[method-assign]
    sys.path.insert(0, str(REPO_ROOT))
    # Imports are start-up, not the per-tick cost: do them before profiling starts.
    import agent.daemon
    import agent.exposition
    import agent.samplers
    import agent.shipper
    from agent.cli import main

    for name in agent.samplers.SAMPLER_NAMES:
        with contextlib.suppress(ImportError):
            __import__(f"agent.samplers.{name}")
    main_profile = cProfile.Profile(time.thread_time)
    main_profile.enable()
    try:
        code = main(["run", "--config", str(config)])
    finally:
        main_profile.disable()
        with lock:
            everything = [main_profile, *profiles]
        merged = pstats.Stats(everything[0])
        for profile in everything[1:]:
            # TypeError: a thread that never ran any Python under its profiler
            with contextlib.suppress(TypeError):
                merged.add(profile)
        merged.dump_stats(str(stats_out))
    return code


def summarise(stats_file: Path, ticks: int, scrapes: int) -> dict:
    stats = pstats.Stats(str(stats_file))
    entries = stats.stats  # type: ignore[attr-defined]
    parts: dict[str, float] = {}
    for (filename, _line, function), (_cc, _nc, _tt, cumulative, _callers) in entries.items():
        for suffix, name, label in PARTS:
            if function == name and filename.endswith(suffix):
                parts[label] = parts.get(label, 0.0) + cumulative
    loop = sum(
        cumulative
        for (filename, _line, function), (_cc, _nc, _tt, cumulative, _c) in entries.items()
        if function == "tick" and filename.endswith("agent/daemon.py")
    )
    top = sorted(
        (
            (tottime, f"{Path(filename).name}:{line} {function}", calls)
            for (filename, line, function), (_cc, calls, tottime, _cum, _c) in entries.items()
        ),
        reverse=True,
    )[:25]
    return {
        "ticks": ticks,
        "scrapes": scrapes,
        "loop_tick_ms": round(loop / ticks * 1000, 3),
        "parts_ms_per_tick": {
            label: round(seconds / ticks * 1000, 3)
            for label, seconds in sorted(parts.items(), key=lambda item: -item[1])
        },
        "top_own_time_ms_per_tick": [
            {
                "function": name,
                "calls_per_tick": round(calls / ticks, 1),
                "ms": round(t / ticks * 1000, 4),
            }
            for t, name, calls in top
        ],
    }


def parent(ticks: int, scraped: bool, out: Path | None) -> dict:
    endpoint = WriteEndpoint()
    workdir = Path(tempfile.mkdtemp(prefix="agent-profile-"))
    port = free_port()
    config = workdir / "agent.toml"
    config.write_text(
        f'host = "{PROFILE_HOST}"\n'
        "interval_seconds = 1\n"
        "[push]\n"
        f'url = "http://127.0.0.1:{endpoint.port}"\n'
        'token = "bench-token"\n'
        f'spool_dir = "{workdir / "spool"}"\n'
        "[metrics]\n"
        f'listen = "127.0.0.1:{port}"\n'
    )
    config.chmod(0o600)
    stats_file = workdir / "agent.prof"
    log = (workdir / "agent.log").open("w")
    process = subprocess.Popen(
        [sys.executable, __file__, "--child", str(config), str(stats_file)],
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    url = f"http://127.0.0.1:{port}/metrics"
    scrapes = 0
    try:
        wait_for(url)
        time.sleep(3)  # past start-up
        scrape = Scraper(url, "prometheus")  # as run.py scrapes
        cpu_start = cpu_seconds(process.pid)
        load_start = os.getloadavg()[0]
        started = time.monotonic()
        while time.monotonic() - started < ticks:
            if scraped:
                scrape()
                scrapes += 1
            time.sleep(max(0.0, started + scrapes + 1 - time.monotonic()) if scraped else 1.0)
        cpu = cpu_seconds(process.pid) - cpu_start
        load_end = os.getloadavg()[0]
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(60)
        endpoint.close()
    if code != 0:
        sys.exit(f"the profiled agent exited {code}; see {workdir / 'agent.log'}")
    # The profile covers start-up and the stop too; per-tick figures divide by all ticks.
    all_ticks = int((workdir / "agent.log").read_text().rsplit("after ", 1)[1].split()[0])
    summary = summarise(stats_file, all_ticks, scrapes)
    summary["case"] = "scraped + pushing" if scraped else "push only"
    summary["process_cpu_ms_per_tick_in_window"] = round(cpu / ticks * 1000, 3)
    summary["load_average"] = [round(load_start, 2), round(load_end, 2)]
    summary["profile"] = str(stats_file)
    summary["sampler_wall_ms_per_tick"] = endpoint.sampler_split(PROFILE_HOST, 0, 2**63)
    text = json.dumps(summary, indent=1)
    print(text)
    print_sampler_split("agent", summary["sampler_wall_ms_per_tick"])
    if out is not None:
        out.write_text(text + "\n")
    return summary


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        sys.exit(child(Path(sys.argv[2]), Path(sys.argv[3])))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ticks", type=int, default=300)
    parser.add_argument("--scraped", action="store_true", help="scrape /metrics once a second")
    parser.add_argument("--out", type=Path, help="write the summary as JSON here")
    args = parser.parse_args()
    parent(args.ticks, args.scraped, args.out)


if __name__ == "__main__":
    main()
