"""The dashboard's questions about a store, answered as JSON-ready values.

``dashboard serve --collector URL`` draws a remote ``collector serve``: its pages ask the
collector's read API (``GET /api/v1/dashboard/<question>?...``, ``collector.api.server``)
what they ask the query layer (``collector.queries.query``) when the store is local, and the
answer is made here, by the same functions, from the collector's own store (whose
``RunCache`` keeps finished runs' answers).

Every answer is bounded: one run's per-epoch rows, boundaries, findings and step parts; its
charts down-sampled to at most ``MAX_POINTS_LIMIT`` buckets per host; the runs' summaries.
No raw samples, events or steps leave the collector.

==================  ===============================  =======================================
question            parameters                       answer
==================  ===============================  =======================================
runs                                                 ``query.runs_summary`` as dicts
run                 run_id                           one run's summary, or null
run_info            run_id                           the store's ``RunInfo`` as a dict, or null
timeseries          run_id, [max_points],            ``{host: HostSeries.to_dict()}``
                    [bucket_ns], [since] (JSON
                    ``{host: ns}``)
boundaries          run_id                           ``query.epoch_boundaries``
epochs              run_id                           ``query.epoch_table`` (the per-epoch rows)
rank_parts          run_id                           ``query.rank_step_parts``
step_shares         run_id, [max_points]             ``query.step_shares``
steps_after         run_id, [since_ns]               how many step events came after
findings            run_id                           ``query.findings``
kept_findings       run_id                           the same when kept already, or null
scaling                                              ``query.scaling_table``
inference_runs                                       ``[{"run_id", "state"}]``
inference           run_id                           the inference report's JSON, or null
forecast            run_id                           ``forecast.dashboard_forecast``: the run
                                                     at 2, 4, 8, 16 nodes (labelled FORECAST,
                                                     with its validated error), or null
node_samples        run_id                           ``{host: {"run_end_ns",
                                                     "latest_sample_ns"}}`` (``node_samples``),
                                                     or null
==================  ===============================  =======================================
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from collector.queries import query
from collector.queries.forecast import dashboard_forecast
from collector.queries.timeseries import DEFAULT_MAX_POINTS, MIN_BUCKET_NS, TooManyBuckets
from collector.store.api import ReadStore, RunInfo
from contract.schema import Cpu, Event

MAX_POINTS_LIMIT = 5000  # buckets per host and chart one answer may carry
MIN_POINTS = 10
MAX_HOSTS = 1024  # hosts in a ``since`` parameter
MAX_RUN_ID = 128  # as at ingest


class QuestionError(ValueError):
    """A question the read API answers with 400."""


def run_info_dict(info: RunInfo) -> dict[str, Any]:
    return {**asdict(info), "hosts": list(info.hosts)}


def run_info_of(data: dict[str, Any]) -> RunInfo:
    """The inverse of ``run_info_dict``."""
    return RunInfo(**{**data, "hosts": tuple(data["hosts"])})


def _run_id(params: dict[str, str]) -> str:
    run_id = params.get("run_id", "")
    if not run_id or len(run_id) > MAX_RUN_ID:
        raise QuestionError(f"run_id: 1 to {MAX_RUN_ID} characters")
    return run_id


def _int(params: dict[str, str], name: str, low: int, high: int | None = None) -> int | None:
    text = params.get(name)
    if text is None or text == "":
        return None
    try:
        value = int(text)
    except ValueError:
        raise QuestionError(f"{name}={text!r}: a whole number") from None
    if value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise QuestionError(f"{name}={value}: {bound}")
    return value


def _max_points(params: dict[str, str]) -> int:
    found = _int(params, "max_points", MIN_POINTS, MAX_POINTS_LIMIT)
    return DEFAULT_MAX_POINTS if found is None else found


def _since(params: dict[str, str]) -> dict[str, int] | None:
    text = params.get("since")
    if not text:
        return None
    try:
        since = json.loads(text)
    except ValueError:
        raise QuestionError("since: a JSON object of host to nanoseconds") from None
    if (
        not isinstance(since, dict)
        or len(since) > MAX_HOSTS
        or not all(
            isinstance(host, str) and isinstance(ns, int) and not isinstance(ns, bool)
            for host, ns in since.items()
        )
    ):
        raise QuestionError(f"since: a JSON object of at most {MAX_HOSTS} hosts to nanoseconds")
    return since


def _run(store: ReadStore, params: dict[str, str]) -> dict[str, Any] | None:
    run_id = _run_id(params)
    if store.run(run_id) is None:
        return None
    found = [s for s in query.runs_summary(store) if s.run_id == run_id]
    return found[0].to_dict() if found else None


def _run_info(store: ReadStore, params: dict[str, str]) -> dict[str, Any] | None:
    info = store.run(_run_id(params))
    return None if info is None else run_info_dict(info)


def _timeseries(store: ReadStore, params: dict[str, str]) -> dict[str, Any]:
    try:
        series = query.run_timeseries(
            store,
            _run_id(params),
            max_points=_max_points(params),
            since_ns=_since(params),
            bucket_ns=_int(params, "bucket_ns", MIN_BUCKET_NS),
        )
    except TooManyBuckets as problem:
        raise QuestionError(f"timeseries: {problem}") from None
    return {host: s.to_dict() for host, s in series.items()}


def node_samples(store: ReadStore, run_id: str) -> dict[str, dict[str, int | None]] | None:
    """Per host of the run: its ranks' last ``run_end`` (the run's end for a host whose
    ranks wrote none) and the latest node sample (its agent's CPU sample) the store holds
    around it: the first at or after that end when one arrived, else the last before it;
    None for none. A host's samples are all in when ``latest_sample_ns >= run_end_ns``:
    what ``workloads run --collector`` waits for before printing its per-epoch table."""
    run = store.run(run_id)
    if run is None:
        return None
    ends: dict[str, int] = {}
    for event in store.events(run_id, kinds=(Event.RUN_END,)):
        ends[event.host] = max(ends.get(event.host, event.time_ns), event.time_ns)
    answer: dict[str, dict[str, int | None]] = {}
    for host in run.hosts:
        end = ends.get(host, run.end_ns)
        latest = None
        series = store.list_series(Cpu.NAME, Cpu.USER_SECONDS, host)
        if series and end is not None:
            times = [int(t) for data in store.read_series(series, end, end) for t in data.times_ns]
            latest = max(times, default=None)
        answer[host] = {"run_end_ns": end, "latest_sample_ns": latest}
    return answer


def _inference_runs(store: ReadStore, params: dict[str, str]) -> list[dict[str, Any]]:
    from collector.analysis.inference import inference_runs

    return [{"run_id": run.run_id, "state": run.state} for run in inference_runs(store)]


def _inference(store: ReadStore, params: dict[str, str]) -> dict[str, Any] | None:
    from collector.queries.inference import inference_report

    report = inference_report(store, _run_id(params))
    return None if report is None else report.to_json()


ANSWERS: dict[str, Callable[[ReadStore, dict[str, str]], Any]] = {
    "runs": lambda store, params: [s.to_dict() for s in query.runs_summary(store)],
    "run": _run,
    "run_info": _run_info,
    "timeseries": _timeseries,
    "boundaries": lambda store, params: query.epoch_boundaries(store, _run_id(params)),
    "epochs": lambda store, params: query.epoch_table(store, _run_id(params)),
    "rank_parts": lambda store, params: query.rank_step_parts(store, _run_id(params)),
    "step_shares": lambda store, params: query.step_shares(
        store, _run_id(params), _max_points(params)
    ),
    "steps_after": lambda store, params: len(
        store.steps(_run_id(params), _int(params, "since_ns", 0))
    ),
    "findings": lambda store, params: query.findings(store, _run_id(params)),
    "kept_findings": lambda store, params: query.kept_findings(store, _run_id(params)),
    "scaling": lambda store, params: query.scaling_table(store),
    "inference_runs": _inference_runs,
    "inference": _inference,
    "forecast": lambda store, params: dashboard_forecast(store, _run_id(params)),
    "node_samples": lambda store, params: node_samples(store, _run_id(params)),
}
QUESTIONS = tuple(ANSWERS)


def answer(store: ReadStore, question: str, params: dict[str, str]) -> Any:
    """The JSON-ready answer; ``QuestionError`` for a question or parameter it cannot take."""
    found = ANSWERS.get(question)
    if found is None:
        raise QuestionError(f"no question {question!r} (questions: {', '.join(QUESTIONS)})")
    return found(store, params)
