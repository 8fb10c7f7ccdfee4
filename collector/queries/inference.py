"""An inference run's report with its findings: what every view of an inference run shows
(``collector inference``, the read API, the dashboard's inference page)."""

from __future__ import annotations

from dataclasses import replace

from collector.analysis.inference import InferenceReport, build_report, is_inference_run
from collector.findings.inference import inference_findings
from collector.store.api import ReadStore
from contract.schema import Event


def inference_report(store: ReadStore, run_id: str) -> InferenceReport | None:
    """The run's report with its findings; None for a run that is not an inference run."""
    run = store.run(run_id)
    if run is None or not is_inference_run(run):
        return None
    events = store.events(run_id, kinds=(Event.RUN_START, Event.INFERENCE, Event.RUN_END))
    report = build_report(run, events)
    return replace(report, findings=tuple(inference_findings(report)))
