"""Collector outage: every point sampled while the collector is down is stored exactly once.

Starts one real ``collector serve`` (token required) and ``--agents`` real ``agent run``
processes (distinct host tags, 1 Hz, each with its own disk spool), lets them push for
``--warmup-seconds``, stops the collector (SIGTERM) for ``--outage-seconds``, starts it
again on the same database and port, and waits until every agent has delivered its spool.
Then the agents are stopped (SIGTERM: they flush) and the store is checked point by point.

Accounting (what "sent", "stored", "lost" mean):

- sent, from the agents' side: each agent's tick count (its own "agent stopped after N
  samples" log line) x the points one tick makes (counted in the spool: every point of a
  tick carries the tick's time; all ticks make the same number because the agents sample
  a captured host tree).
- outage points: the complete lines in the agents' spool files just before the collector
  restarts (the points sampled while it was down, plus the ones that were waiting for the
  next batch when it went down).
- stored: distinct (host, measurement, tags, time) points a reader of the store sees.
- exactly once: every outage point is stored with the same field values; every tag set
  of a host has the same tick times as its ``agent`` self-sampler series, those ticks are
  one interval apart with none missing, and there are as many as the agent counted. The
  raw blocks are also counted: a point delivered twice is two copies until compaction
  merges them (readers see one either way; "raw copies" shows whether it happened).
- catch-up: from the restart until the store holds every outage point of every host
  (polled every 0.5 s; per host as well).

    python bench/reliability/outage.py --agents 8 --outage-seconds 600

Writes ``bench/reliability/results/outage.json`` and ``docs/figures/reliability-outage.png``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import itertools

from bench.reliability import harness
from bench.reliability.harness import Agent, Collector
from contract.schema import AgentSelf

RESULTS = harness.REPO_ROOT / "bench" / "reliability" / "results"
FIGURES = harness.REPO_ROOT / "docs" / "figures"


class Timeline:
    """Once-a-second samples of every agent's spool and the machine's load."""

    def __init__(self, agents: list[Agent], started: float) -> None:
        self.agents = agents
        self.started = started
        self.rows: list[dict] = []

    def sample(self, phase: str) -> dict:
        spool = {}
        dropped = {}
        for agent in self.agents:
            metrics = agent.scrape()
            spool[agent.host] = metrics.get("epochscope_agent_spool_points", float("nan"))
            dropped[agent.host] = metrics.get("epochscope_agent_points_dropped_total", float("nan"))
        row = {
            "t": round(time.monotonic() - self.started, 3),
            "phase": phase,
            "spool_points": spool,
            "points_dropped": dropped,
            "load1": harness.load_average()[0],
        }
        self.rows.append(row)
        return row

    def run_for(self, seconds: float, phase: str, progress=None, task=None) -> None:
        end = time.monotonic() + seconds
        while (remaining := end - time.monotonic()) > 0:
            self.sample(phase)
            if progress is not None:
                progress.update(task, completed=seconds - remaining)
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))


def _progress():
    try:
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        return Progress(
            TextColumn("{task.description}"), BarColumn(), TimeRemainingColumn(), transient=True
        )
    except ImportError:  # the bench still runs without rich, just without a bar
        return None


def run(
    agents: int = 8,
    outage_seconds: float = 600.0,
    warmup_seconds: float = 20.0,
    after_seconds: float = 10.0,
    batch_seconds: float = 5.0,
    workdir: Path | None = None,
    show_progress: bool = True,
    catch_up_timeout: float = 300.0,
    kill: bool = False,
) -> dict:
    """Run the experiment; returns the results (see the module docstring)."""
    owned = None
    if workdir is None:
        owned = tempfile.TemporaryDirectory(prefix="epochscope-outage-")
        workdir = Path(owned.name)
    workdir.mkdir(parents=True, exist_ok=True)
    token, token_file = harness.write_token_file(workdir)
    collector = Collector(
        db=workdir / "collector.sqlite",
        token_file=token_file,
        log=workdir / "collector.log",
        port=harness.free_port(),
    )
    fleet = [
        Agent(
            host=f"node{i + 1:02d}",
            workdir=workdir / f"agent{i + 1:02d}",
            push_url="",
            token=token,
            batch_seconds=batch_seconds,
        )
        for i in range(agents)
    ]
    started_wall = datetime.now(UTC)
    started = time.monotonic()
    timeline = Timeline(fleet, started)
    progress = _progress() if show_progress else None
    load_before = harness.load_average()
    try:
        collector.start()
        for agent in fleet:
            agent.push_url = collector.url
            agent.start()

        # Warm-up: every agent has delivered a few ticks.
        def all_delivering() -> bool:
            return all(len(harness.agent_tick_times(collector.db, a.host)) >= 3 for a in fleet)

        if not harness.wait_until(all_delivering, 120, 0.5):
            raise RuntimeError("the agents did not start delivering within 120 s")
        timeline.run_for(warmup_seconds, "warmup")

        if kill:
            collector.kill()  # kill -9: requests in flight are cut, nothing is flushed
        else:
            collector.stop()
        stopped_at = time.monotonic()
        if progress is not None:
            with progress:
                task = progress.add_task(
                    f"collector down ({agents} agents spooling)", total=outage_seconds
                )
                timeline.run_for(outage_seconds, "outage", progress, task)
        else:
            timeline.run_for(outage_seconds, "outage")

        # What the agents hold now: the points sampled during the outage. The files are
        # read now and parsed after the run, so that the outage lasts what was asked.
        spooled: dict[str, list[str]] = {}
        for agent in fleet:
            spooled[agent.host] = agent.spooled_lines()
        outage_ticks: dict[str, set[int]] = {a.host: set() for a in fleet}
        prefix = AgentSelf.NAME + ","
        for host, lines in spooled.items():
            for line in lines:
                if line.startswith(prefix):
                    outage_ticks[host].add(int(line.rsplit(" ", 1)[1]))

        collector.start()
        restarted_at = time.monotonic()
        caught_up: dict[str, float] = {}
        while len(caught_up) < len(fleet):
            now = time.monotonic()
            if now - restarted_at > catch_up_timeout:
                break
            for agent in fleet:
                if agent.host in caught_up:
                    continue
                if outage_ticks[agent.host] <= set(
                    harness.agent_tick_times(collector.db, agent.host)
                ):
                    caught_up[agent.host] = now - restarted_at
            if len(timeline.rows) == 0 or now - started - timeline.rows[-1]["t"] >= 1:
                timeline.sample("catch-up")
            time.sleep(0.5)
        timeline.run_for(after_seconds, "after")
        exit_codes = {agent.host: agent.stop() for agent in fleet}
        timeline.sample("stopped")
        collector_exit = collector.stop()
    finally:
        for agent in fleet:
            if agent.process is not None and agent.process.poll() is None:
                agent.kill()
        collector.kill()
    load_after = harness.load_average()

    outage_points: dict[harness.PointKey, dict[str, float]] = {}
    for lines in spooled.values():
        for line in lines:
            key, values = harness.point_key(line)
            outage_points[key] = values
    stored = harness.stored_points(collector.db)
    copies, distinct = harness.raw_copies(collector.db)
    per_host = {}
    for agent in fleet:
        host = agent.host
        host_points = {key: values for key, values in stored.items() if key[0] == host}
        ticks_by_tagset: dict[tuple, set[int]] = {}
        for _, measurement, tags, time_ns in host_points:
            ticks_by_tagset.setdefault((measurement, tags), set()).add(time_ns)
        agent_ticks = sorted(ticks_by_tagset.get((AgentSelf.NAME, ()), set()))
        # Ticks are sampled just after each whole second: one per second, none skipped.
        slots = [t // 1_000_000_000 for t in agent_ticks]
        steps_list = [b - a for a, b in itertools.pairwise(slots)]
        steps = set(steps_list)
        tick_sizes = harness.lines_per_tick(spooled[host])
        per_tick = max(tick_sizes, key=tick_sizes.get) if tick_sizes else 0
        ticks = agent.ticks_reported[-1] if agent.ticks_reported else None
        sent = ticks * per_tick if ticks is not None else None
        host_outage = {k: v for k, v in outage_points.items() if k[0] == host}
        missing_outage = [k for k in host_outage if k not in host_points]
        differing = [k for k, v in host_outage.items() if k in host_points and host_points[k] != v]
        per_host[host] = {
            "ticks_reported_by_agent": ticks,
            "points_per_tick": per_tick,
            "tick_sizes_seen": dict(tick_sizes),  # lines per tick -> ticks, in the spool
            "sent": sent,
            "stored": len(host_points),
            "lost": (sent - len(host_points)) if sent is not None else None,
            "stored_ticks": len(agent_ticks),
            "tick_slot_steps": sorted(steps),
            # seconds with no tick at all: the agent skipped them (its loop was late)
            "ticks_skipped": sum(step - 1 for step in steps_list),
            "tagsets": len(ticks_by_tagset),
            "tagsets_with_other_ticks": sum(
                1 for times in ticks_by_tagset.values() if times != set(agent_ticks)
            ),
            "outage_points": len(host_outage),
            "outage_ticks": len(outage_ticks[host]),
            "outage_points_missing": len(missing_outage),
            "outage_points_with_other_values": len(differing),
            "catch_up_seconds": caught_up.get(host),
            "agent_exit_code": exit_codes[host],
        }
    sent_total = sum(h["sent"] or 0 for h in per_host.values())
    stored_total = sum(h["stored"] for h in per_host.values())
    results = {
        "experiment": "outage",
        "date": started_wall.isoformat(timespec="seconds"),
        "machine": harness.machine(),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "agents": agents,
        "interval_seconds": 1.0,
        "batch_seconds": batch_seconds,
        "outage_seconds_planned": outage_seconds,
        "stopped_with": "SIGKILL" if kill else "SIGTERM",
        "outage_seconds": restarted_at - stopped_at,
        "sent": sent_total,
        "stored": stored_total,
        "lost": sent_total - stored_total,
        "outage_points": len(outage_points),
        "outage_points_missing": sum(h["outage_points_missing"] for h in per_host.values()),
        "outage_points_with_other_values": sum(
            h["outage_points_with_other_values"] for h in per_host.values()
        ),
        "raw_copies": copies,
        "raw_distinct": distinct,
        "catch_up_seconds": max(caught_up.values()) if len(caught_up) == len(fleet) else None,
        "collector_exit_code": collector_exit,
        "collector_starts": collector.starts,
        "per_host": per_host,
        "timeline": timeline.rows,
        "marks": {
            "stopped": stopped_at - started,
            "restarted": restarted_at - started,
        },
    }
    results["exactly_once"] = exactly_once(results)
    if owned is not None:
        owned.cleanup()
    return results


def exactly_once(results: dict) -> bool:
    """Every sent point is stored, once, with the values the agent sampled."""
    for host in results["per_host"].values():
        if host["sent"] is None or host["lost"] != 0:
            return False
        if host["tagsets_with_other_ticks"] or min(host["tick_slot_steps"], default=0) != 1:
            return False  # a tag set missing a tick, or two ticks in one second
        if host["stored_ticks"] != host["ticks_reported_by_agent"]:
            return False
        if len(host["tick_sizes_seen"]) > 1:
            return False
    return (
        results["outage_points_missing"] == 0
        and results["outage_points_with_other_values"] == 0
        and results["outage_points"] > 0
    )


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["timeline"]
    times = [row["t"] for row in rows]
    hosts = sorted(results["per_host"])
    fig, (spool_ax, load_ax) = plt.subplots(
        2, 1, figsize=(9, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    for host in hosts:
        spool_ax.plot(times, [row["spool_points"].get(host) for row in rows], lw=1, label=host)
    stopped, restarted = results["marks"]["stopped"], results["marks"]["restarted"]
    for ax in (spool_ax, load_ax):
        ax.axvspan(stopped, restarted, color="0.9", zorder=0)
    if results["catch_up_seconds"] is not None:
        spool_ax.axvline(restarted + results["catch_up_seconds"], color="k", ls="--", lw=0.8)
    spool_ax.set_ylabel("points waiting in the spool\n(agent /metrics)")
    spool_ax.set_title(
        f"Collector outage of {results['outage_seconds']:.0f} s, {results['agents']} agents at"
        f" 1 Hz: sent {results['sent']}, stored {results['stored']}, lost {results['lost']};"
        f" catch-up {results['catch_up_seconds'] or float('nan'):.1f} s",
        fontsize=9,
    )
    spool_ax.legend(fontsize=7, ncol=4, loc="upper left")
    load_ax.plot(times, [row["load1"] for row in rows], color="tab:gray")
    load_ax.set_ylabel("load avg (1 min)")
    load_ax.set_xlabel("seconds since start (grey: collector down; dashed: all caught up)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summary(results: dict) -> str:
    lines = [
        f"{results['date']}  {results['machine']}",
        f"agents {results['agents']}, outage {results['outage_seconds']:.1f} s"
        f" (collector stopped with {results['stopped_with']}),"
        f" load average before {results['load_average_before'][0]:.2f}"
        f" after {results['load_average_after'][0]:.2f}",
        f"sent {results['sent']}  stored {results['stored']}  lost {results['lost']}"
        f"  (outage points {results['outage_points']}, missing"
        f" {results['outage_points_missing']}, other values"
        f" {results['outage_points_with_other_values']})",
        f"raw copies {results['raw_copies']} for {results['raw_distinct']} distinct points",
        f"catch-up {results['catch_up_seconds']} s; per host "
        + ", ".join(
            f"{host} {info['catch_up_seconds']:.1f}"
            for host, info in results["per_host"].items()
            if info["catch_up_seconds"] is not None
        ),
        "ticks skipped by the agents (never sampled): "
        + ", ".join(f"{h} {i['ticks_skipped']}" for h, i in results["per_host"].items()),
        f"exactly once: {results['exactly_once']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--outage-seconds", type=float, default=600.0)
    parser.add_argument("--warmup-seconds", type=float, default=20.0)
    parser.add_argument("--after-seconds", type=float, default=10.0)
    parser.add_argument(
        "--batch-seconds", type=float, default=5.0, help="agents' push.batch_seconds"
    )
    parser.add_argument("--kill", action="store_true", help="kill -9 the collector, not SIGTERM")
    parser.add_argument("--workdir", type=Path, help="keep databases, spools and logs here")
    parser.add_argument("--results", type=Path, default=RESULTS / "outage.json")
    parser.add_argument("--figure", type=Path, default=FIGURES / "reliability-outage.png")
    args = parser.parse_args(argv)
    results = run(
        agents=args.agents,
        outage_seconds=args.outage_seconds,
        warmup_seconds=args.warmup_seconds,
        after_seconds=args.after_seconds,
        batch_seconds=args.batch_seconds,
        workdir=args.workdir,
        kill=args.kill,
    )
    harness.save_results(results, args.results, args.figure, plot, summary)
    return 0 if results["exactly_once"] else 1


if __name__ == "__main__":
    sys.exit(main())
