"""The findings of what is running now, as Prometheus gauges on the collector's ``GET
/metrics``, so that a site's Prometheus and Alertmanager page on them with the other alerts
(``ansible/files/epochscope-alerts.yml``):

    epochscope_finding{run="...",rule="input_bound",severity="warning"} 1
    epochscope_job_finding{job="...",user="...",rule="job_gpus_idle",severity="warning"} 1

One series per finding of a live run (state ``live``) and of a Slurm job whose agents
sampled it within ``LIVE_JOB_SECONDS``; a finding that no longer holds, or of a run or job
that ended, is simply absent (Prometheus ends the series, the alert resolves). The findings
are those ``collector report --findings`` and ``collector job`` print (the same rules, run
here), computed at most once per ``RECOMPUTE_SECONDS`` whatever the scrape interval: a
scrape in between gets the last answer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from contract.schema import RunState

LIVE_JOB_SECONDS = 120.0  # a job sampled this recently is still running (agents: every 5 s)
RECOMPUTE_SECONDS = 30.0
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

HEADER = (
    "# HELP epochscope_finding A finding that holds for a live training run (1 while it does)\n"
    "# TYPE epochscope_finding gauge\n"
    "# HELP epochscope_job_finding A finding that holds for a running Slurm job\n"
    "# TYPE epochscope_job_finding gauge\n"
)


def label_value(text: str) -> str:
    """A label value as the exposition format writes it: backslash, quote and newline
    escaped (a run id or a user name is the writer's text)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def series(name: str, labels: dict[str, str]) -> str:
    inside = ",".join(f'{key}="{label_value(value)}"' for key, value in labels.items())
    return f"{name}{{{inside}}} 1\n"


def exposition(
    run_findings: Iterable[tuple[str, str, str]],
    job_findings: Iterable[tuple[str, str, str, str]],
) -> str:
    """The page from (run, rule, severity) and (job, user, rule, severity), sorted."""
    lines = [
        series("epochscope_finding", {"run": run, "rule": rule, "severity": severity})
        for run, rule, severity in sorted(set(run_findings))
    ]
    lines += [
        series(
            "epochscope_job_finding",
            {"job": job, "user": user, "rule": rule, "severity": severity},
        )
        for job, user, rule, severity in sorted(set(job_findings))
    ]
    return HEADER + "".join(lines)


def current_findings(store, now_ns: int) -> str:
    """The findings of the live runs and the running jobs in ``store``, as the page."""
    from collector.analysis.jobs import job_reports
    from collector.findings.engine import run_findings
    from collector.findings.jobs import job_findings
    from collector.queries.query import runs_summary
    from collector.views.jobs import kept_nodes

    runs = [
        (summary.run_id, finding.rule, finding.severity)
        for summary in runs_summary(store)
        if summary.state == RunState.LIVE
        for finding in run_findings(store, summary.run_id)
    ]
    since_ns = now_ns - int(LIVE_JOB_SECONDS * 1e9)
    jobs = [
        (report.job_id, report.user or "", finding.rule, finding.severity)
        for report in job_reports(store, kept_nodes(store))
        if report.last_ns is not None and report.last_ns >= since_ns
        for finding in job_findings(report)
    ]
    return exposition(runs, jobs)


class FindingsPage:
    """``GET /metrics``'s answer, recomputed at most every ``RECOMPUTE_SECONDS``; one
    computation at a time (scrapes that arrive during it wait for it and share it)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._page: str | None = None
        self._computed_at = float("-inf")

    def page(self, store) -> str:
        with self._lock:
            now = self._clock()
            if self._page is None or now - self._computed_at >= RECOMPUTE_SECONDS:
                self._page = current_findings(store, int(now * 1e9))
                self._computed_at = now
            return self._page
