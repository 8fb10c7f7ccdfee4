"""``python -m bench.findings rescore [--out DIR]``: every finished run under ``DIR`` reported
again by the current code, from the store the run left, so that ``report`` scores the rules
as they are now without running the trainings again.

One public ``collector report RUN --db STORE --format json --findings`` a run, one at a time,
under ``nice -n 19``. The report written at run time is kept once as ``report.run.json``;
``report.json`` is then the current code's."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.real_runs import repo_env

RUN_REPORT = "report.run.json"  # the report written when the run finished, kept once
NETNS_STORE = Path("netns") / "collector.sqlite"  # bench/findings/netns_cases.py's collector


@dataclass(frozen=True)
class Target:
    """Where a run's store is and the run id in it."""

    store: Path
    run_id: str


def target(work: Path) -> Target | None:
    """The store and run id of the run in ``work`` (``DIR/<case>/r<N>/``), or None when the
    run left no store. An ordinary run's store is ``runs/<case>-r<N>.sqlite``; the all-reduce
    cases' (two hosts in network namespaces) is their collector's, ``netns/collector.sqlite``,
    which holds the 1-host reference ``<case>-r<N>-one`` beside the scored ``<case>-r<N>``."""
    run_id = f"{work.parent.name}-{work.name}"
    for store in (work / "runs" / f"{run_id}.sqlite", work / NETNS_STORE):
        if store.is_file():
            return Target(store, run_id)
    return None


def report_again(found: Target, timeout: float = 300.0) -> dict:
    command = ["nice", "-n", "19", sys.executable, "-m", "collector", "report", found.run_id,
               "--db", str(found.store), "--format", "json", "--findings"]  # fmt: skip
    completed = subprocess.run(command, capture_output=True, text=True, env=repo_env(),
                               timeout=timeout, check=False)  # fmt: skip
    if completed.returncode != 0:
        raise RuntimeError(completed.stderr[-2000:])
    return json.loads(completed.stdout)


def rescore(out: Path) -> list[str]:
    """Report every finished (``ok``) run under ``out`` again; a line per run saying what
    was done."""
    lines = []
    for result in sorted(out.glob("*/r*/result.json")):
        work = result.parent
        name = f"{work.parent.name} {work.name}"
        if json.loads(result.read_text()).get("status") != "ok":
            lines.append(f"{name}: not ok, left as is")
            continue
        found = target(work)
        if found is None:
            lines.append(f"{name}: no store kept, its report left as is")
            continue
        try:
            report = report_again(found)
        except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as error:
            lines.append(f"{name}: collector report failed, left as is: {error}")
            continue
        current = work / "report.json"
        if current.exists() and not (work / RUN_REPORT).exists():
            shutil.copy2(current, work / RUN_REPORT)
        current.write_text(json.dumps(report, indent=1))
        rules = sorted({f.get("rule", "?") for f in report.get("findings", [])})
        lines.append(f"{name}: rescored from {found.store.name}: {', '.join(rules) or 'none'}")
    return lines
