"""``python -m bench.findings run [--cases PATTERN] [--repeat N] [--out DIR] [--timeout S]``
runs the labelled matrix (resumable); ``python -m bench.findings report [--out DIR]`` scores
it per rule, fit and held-out apart, into bench/findings/results/<date>-<cpu>.md and .json;
``python -m bench.findings rescore [--out DIR]`` reports every run under DIR again with the
current code from the store it left (bench/findings/rescore.py), for ``report`` to score."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.findings.evaluate import (
    FALSE_ALARM_GOAL,
    RECALL_GOAL,
    RIGHT_CAUSE_GOAL,
    markdown_table,
    score,
    scores_json,
)
from bench.findings.matrix import CASES, HELD_OUT, split_of
from bench.findings.rescore import rescore
from bench.findings.runner import DEFAULT_OUT, DEFAULT_TIMEOUT, read_results, run_matrix, selected

RESULTS = Path(__file__).resolve().parent / "results"
SESSIONS = "sessions.json"  # under --out: each `run`'s machine and load at start and end


def cpu_model() -> str:
    """The CPU's model name with its family and model numbers (a virtual machine's name may
    say only "AMD EPYC"; family 25 is Zen 3, 26 Zen 5)."""
    fields: dict[str, str] = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
    name = fields.get("model name", "unknown CPU")
    if "cpu family" in fields:
        name += f" (family {fields['cpu family']}, model {fields.get('model', '?')})"
    return name


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def run_command(args: argparse.Namespace) -> None:
    out = Path(args.out).resolve()  # the runs start in their own folders
    out.mkdir(parents=True, exist_ok=True)
    session = {"started": datetime.now(UTC).isoformat(timespec="seconds"), "cpu": cpu_model(),
               "cores": len(os.sched_getaffinity(0)), "load_start": load_average(),
               "cases": args.cases, "repeat": args.repeat}  # fmt: skip
    started = time.monotonic()
    try:
        run_matrix(selected(args.cases), args.repeat, out, args.timeout)
    finally:
        session.update(load_end=load_average(), seconds=round(time.monotonic() - started))
        path = out / SESSIONS
        sessions = json.loads(path.read_text()) if path.exists() else []
        path.write_text(json.dumps([*sessions, session], indent=1))


def rescore_command(args: argparse.Namespace) -> None:
    for line in rescore(Path(args.out)):
        print(line, flush=True)


def report_command(args: argparse.Namespace) -> None:
    out = Path(args.out)
    results = read_results(out)
    cases = {case.name: case for case in CASES}
    scores = score(results, cases)
    sessions = json.loads((out / SESSIONS).read_text()) if (out / SESSIONS).exists() else []
    ok = [r for r in results if r.status == "ok"]
    lines = [
        f"# Findings measured like a classifier: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"Machine: {cpu_model()}, {len(os.sched_getaffinity(0))} CPUs seen, "
        f"{_os_name()}, Python {sys.version.split()[0]}.",
        "Runs (load average 1/5/15 min at start -> end): "
        + ("; ".join(_session_line(s) for s in sessions) or "none"),
        "",
        f"{len(ok)} runs scored of {len(results)} ({_count(results, 'failed')} failed, "
        f"{_count(results, 'skipped')} skipped, {_count(results, 'not_injected')} whose "
        f"injection the kernel's counters say did not take), over {len({r.case for r in ok})} of "
        f"{len(CASES)} cases. Goals: recall >= {RECALL_GOAL}, false alarms <= "
        f"{FALSE_ALARM_GOAL:.0%} of runs, right cause >= {RIGHT_CAUSE_GOAL}.",
        f"Held out (no threshold fitted on them): {', '.join(sorted(HELD_OUT))}.",
    ]
    for split, title in (("fit", "Fit cases"), ("held_out", "Held-out cases"), ("all", "All")):
        lines += ["", f"## {title}", "", markdown_table(scores[split]) if scores[split] else "none"]
    lines += ["", "## Runs", "", "| case | split | run | status | fired |", "|---|---|---|---|---|"]
    for r in results:
        fired = ", ".join(sorted({f.rule for f in r.fired})) or r.error[-160:].replace("\n", " ")
        lines.append(f"| {r.case} | {split_of(r.case)} | r{r.repeat} | {r.status} | {fired} |")
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(exist_ok=True)
    cpu = re.sub(r"[^a-z0-9]+", "-", cpu_model().lower())
    stem = args.name or f"{datetime.now(UTC):%Y-%m-%d}-{cpu}".strip("-")
    (RESULTS / f"{stem}.md").write_text(text)
    runs = [json.loads(p.read_text()) for p in sorted(out.glob("*/r*/result.json"))]
    record = {"sessions": sessions, "scores": scores_json(scores), "runs": runs}
    (RESULTS / f"{stem}.json").write_text(json.dumps(record, indent=1))
    print(f"written: {RESULTS / stem}.md, .json")


def _os_name() -> str:
    release = Path("/etc/os-release")
    if release.exists():
        for line in release.read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.partition("=")[2].strip('"')
    return "an unknown OS"


def _session_line(session: dict) -> str:
    return (
        f"{session['started']} `{session['cases'] or '*'}` x{session['repeat']}: "
        f"{session['load_start']} -> {session['load_end']}, {session['seconds']} s"
    )


def _count(results, status: str) -> int:
    return sum(1 for r in results if r.status == status)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.findings")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the matrix's cases (resumable)")
    run.add_argument("--cases", help="a shell pattern over case names (default: all)")
    run.add_argument("--repeat", type=int, default=3, help="runs of each case (default 3)")
    run.add_argument("--out", default=str(DEFAULT_OUT))
    run.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds a run")
    run.set_defaults(handler=run_command)
    again = commands.add_parser(
        "rescore", help="report every run under --out again with the current code"
    )
    again.add_argument("--out", default=str(DEFAULT_OUT))
    again.set_defaults(handler=rescore_command)
    report = commands.add_parser("report", help="score the runs under --out per rule")
    report.add_argument("--out", default=str(DEFAULT_OUT))
    report.add_argument(
        "--name", help="the results files' name under results/ (default <date>-<cpu>)"
    )
    report.set_defaults(handler=report_command)
    args = parser.parse_args(argv)
    args.handler(args)


if __name__ == "__main__":
    main()
