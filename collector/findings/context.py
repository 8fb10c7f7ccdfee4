"""What the rules read: a run, its events and its per-epoch report, built once and
shared by every rule (``RunContext``), and the other runs' reports for the rules that
compare runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from collector.analysis.epochs import (
    EpochAmounts,
    EpochReport,
    EpochRow,
    build_report,
    report_of,
)
from collector.analysis.run import RunModel, read_run
from collector.analysis.scaling import GroupKey, RunFacts, run_facts
from collector.store.api import ReadStore, RunInfo, StepTable
from contract.markers import ALL_HOSTS
from contract.schema import RunState


@dataclass
class RunContext:
    """What the rules read. ``model`` (the run's events, read once) and ``report`` (made
    from it) are shared by every rule."""

    store: ReadStore
    run: RunInfo
    model: RunModel  # the run's events and its ranks' epochs (steps are read on demand)
    report: EpochReport
    # another run's report, for the rules that compare runs: the caller's kept ones
    # (collector.queries.query) or, by default, built here
    reports: Callable[[str], EpochReport] | None = None

    @property
    def config(self) -> dict[str, Any]:
        return self.run.config

    def group_facts(self) -> dict[str, RunFacts]:
        """The facts of every run of this run's scaling group that did not fail, this run
        included (its own from its events, read already), by run id."""
        key = GroupKey.of(self.run)
        group_runs = [
            r for r in self.store.runs() if r.state != RunState.FAILED and GroupKey.of(r) == key
        ]
        if self.run.run_id not in {r.run_id for r in group_runs}:
            group_runs.append(self.run)
        return {
            r.run_id: run_facts(self.store, r, self.model if r.run_id == self.run.run_id else None)
            for r in group_runs
        }

    def report_of(self, run_id: str) -> EpochReport:
        """The per-epoch report of ``run_id`` (this run's own, or a compared run's)."""
        if run_id == self.run.run_id:
            return self.report
        if self.reports is not None:
            return self.reports(run_id)
        return build_report(self.store, run_id)

    def steps(self, since_ns: int | None = None) -> StepTable:
        """The run's steps (after ``since_ns``); ``step_epochs`` finds their epochs from
        ``model``."""
        return self.store.steps(self.run.run_id, since_ns)

    def totals(self) -> list[EpochRow]:
        """``*`` rows of complete epochs, in epoch order."""
        complete = self._complete_epochs()
        return [r for r in self.report.total_rows() if r.epoch in complete]

    def hosts_rows(self) -> list[tuple[EpochRow, EpochAmounts]]:
        complete = self._complete_epochs()
        return [
            (row, amounts)
            for row, amounts in zip(self.report.rows, self.report.amounts, strict=True)
            if row.host != ALL_HOSTS and row.epoch in complete
        ]

    def _complete_epochs(self) -> set[int]:
        return complete_epochs(self.report)


def complete_epochs(report: EpochReport) -> set[int]:
    incomplete = {w.epoch for w in report.windows if not w.complete}
    return {w.epoch for w in report.windows} - incomplete


def run_context(
    store: ReadStore,
    run_id: str,
    report: EpochReport | None = None,
    reports: Callable[[str], EpochReport] | None = None,
) -> RunContext:
    """What the rules read of ``run_id``: ``report``'s model when a report is given, else
    the run's events read here once and its report made from them."""
    run = store.run(run_id)
    if run is None:
        raise KeyError(run_id)
    model = report.model if report is not None else read_run(store, run)
    return RunContext(
        store=store,
        run=run,
        model=model,
        report=report if report is not None else report_of(store, model),
        reports=reports,
    )
