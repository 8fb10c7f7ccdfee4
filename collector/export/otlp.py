"""A run's findings as OpenTelemetry log records (OTel's events), over OTLP/HTTP JSON.

``collector report RUN --otlp-endpoint http://127.0.0.1:4318/v1/logs`` sends each finding
of the run as one log record, so that a site's OpenTelemetry Collector puts them where its
people already look (Loki, Elasticsearch, an alert pipeline) beside the agent's metrics
(``agent.otlp``). A URL with no path gets ``/v1/logs``, the OTLP/HTTP logs path.

A record (``logs_request``):

- body: the finding's title; ``severityText`` its severity and ``severityNumber`` the OTel
  number (info 9 INFO, warning 13 WARN, critical 17 ERROR);
- attributes: ``event.name = epochscope.finding``, ``epochscope.run_id``,
  ``epochscope.finding.rule``, ``.severity``, ``.explanation``, ``.chart`` (where it has one),
  ``.evidence`` (the evidence as JSON text) and ``host.name`` where the finding is about one
  host;
- time: the run's end (its start while it is live); observed time: now;
- resource: ``service.name = epochscope-collector``.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from collector.findings.base import Finding
from netserve.otlp import PostOutcome, post_json, string_attributes

SERVICE_NAME = "epochscope-collector"
SCOPE_NAME = "epochscope.collector.findings"
EVENT_NAME = "epochscope.finding"
LOGS_PATH = "/v1/logs"
# opentelemetry.proto.logs.v1.SeverityNumber
SEVERITY_NUMBERS = {"info": 9, "warning": 13, "critical": 17}


def logs_url(endpoint: str) -> str:
    """``endpoint`` with ``/v1/logs`` where it names no path."""
    parts = urllib.parse.urlsplit(endpoint)
    if parts.path in ("", "/"):
        return urllib.parse.urlunsplit(parts._replace(path=LOGS_PATH))
    return endpoint


def finding_host(evidence: Mapping[str, Any]) -> str | None:
    """The one host a finding is about: its evidence's ``host``, or the one host of all its
    per-epoch entries (a straggler seen on one host); None for a run-wide finding."""
    host = evidence.get("host")
    if isinstance(host, str):
        return host
    epochs = evidence.get("epochs")
    if isinstance(epochs, list):
        hosts = {entry.get("host") for entry in epochs if isinstance(entry, dict)}
        if len(hosts) == 1 and isinstance(next(iter(hosts)), str):
            return next(iter(hosts))
    return None


def log_record(finding: Finding, run_id: str, time_ns: int, observed_ns: int) -> dict[str, Any]:
    attributes = [
        ("event.name", EVENT_NAME),
        ("epochscope.run_id", run_id),
        ("epochscope.finding.rule", finding.rule),
        ("epochscope.finding.severity", finding.severity),
        ("epochscope.finding.explanation", finding.explanation),
        *([("epochscope.finding.chart", finding.chart)] if finding.chart else []),
        ("epochscope.finding.evidence", json.dumps(finding.evidence, sort_keys=True)),
    ]
    host = finding_host(finding.evidence)
    if host is not None:
        attributes.append(("host.name", host))
    return {
        "timeUnixNano": str(time_ns),
        "observedTimeUnixNano": str(observed_ns),
        "severityNumber": SEVERITY_NUMBERS[finding.severity],
        "severityText": finding.severity.upper(),
        "body": {"stringValue": finding.title},
        "attributes": string_attributes(attributes),
    }


def logs_request(
    findings: Sequence[Finding], run_id: str, time_ns: int, observed_ns: int
) -> dict[str, Any]:
    """The ``ExportLogsServiceRequest`` (OTLP JSON mapping) of a run's findings."""
    return {
        "resourceLogs": [
            {
                "resource": {"attributes": string_attributes([("service.name", SERVICE_NAME)])},
                "scopeLogs": [
                    {
                        "scope": {"name": SCOPE_NAME},
                        "logRecords": [
                            log_record(finding, run_id, time_ns, observed_ns)
                            for finding in findings
                        ],
                    }
                ],
            }
        ]
    }


def send_findings(
    endpoint: str,
    findings: Sequence[Finding],
    run_id: str,
    time_ns: int,
    headers: Mapping[str, str] | None = None,
) -> PostOutcome:
    body = json.dumps(logs_request(findings, run_id, time_ns, time.time_ns())).encode()
    return post_json(logs_url(endpoint), body, headers or {})
