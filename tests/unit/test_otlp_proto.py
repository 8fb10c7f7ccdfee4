"""The OTLP JSON the agent and the collector send, parsed by the official protobuf classes
(``opentelemetry-proto``: not a dependency of the project; skipped where it is not
installed). ``json_format.Parse`` refuses any field name the proto does not have, so this
holds the JSON mapping to the specification."""

from __future__ import annotations

import json

import pytest

json_format = pytest.importorskip("google.protobuf.json_format")
metrics_service = pytest.importorskip(
    "opentelemetry.proto.collector.metrics.v1.metrics_service_pb2"
)
logs_service = pytest.importorskip("opentelemetry.proto.collector.logs.v1.logs_service_pb2")

# after the skips: where opentelemetry-proto is missing nothing else needs to import
from agent.otlp import metrics_request  # noqa: E402
from collector.export.otlp import logs_request  # noqa: E402
from collector.findings.base import Finding  # noqa: E402
from contract.point import Point  # noqa: E402

T = 1_700_000_000_000_000_000


def test_metrics_parse_as_an_export_metrics_service_request() -> None:
    points = [
        Point("disk", {"host": "n1", "device": "sda", "kind": "disk"},
              {"read_bytes": 4096, "in_flight": 2}, T),
        Point("cpu", {"host": "n1"}, {"user_seconds": 1.5}, T),
    ]  # fmt: skip
    request = json_format.Parse(
        json.dumps(metrics_request(points, T - 5)),
        metrics_service.ExportMetricsServiceRequest(),
    )
    (resource_metrics,) = request.resource_metrics
    host = {a.key: a.value.string_value for a in resource_metrics.resource.attributes}
    assert host["host.name"] == "n1"
    metrics = {m.name: m for m in resource_metrics.scope_metrics[0].metrics}
    read = metrics["epochscope_disk_read_bytes"]
    assert read.sum.is_monotonic and read.sum.aggregation_temporality == 2
    assert read.sum.data_points[0].as_int == 4096
    assert read.sum.data_points[0].start_time_unix_nano == T - 5
    assert metrics["epochscope_disk_in_flight"].gauge.data_points[0].as_int == 2
    assert metrics["epochscope_cpu_seconds"].sum.data_points[0].as_double == 1.5


def test_findings_parse_as_an_export_logs_service_request() -> None:
    finding = Finding("straggler", "warning", "Straggler: rank 1 on n2", "why", {"host": "n2"})
    request = json_format.Parse(
        json.dumps(logs_request([finding], "run-1", T, T + 1)),
        logs_service.ExportLogsServiceRequest(),
    )
    (record,) = request.resource_logs[0].scope_logs[0].log_records
    assert record.body.string_value == "Straggler: rank 1 on n2"
    assert record.severity_number == 13 and record.time_unix_nano == T
    attributes = {a.key: a.value.string_value for a in record.attributes}
    assert attributes["host.name"] == "n2" and attributes["epochscope.run_id"] == "run-1"
