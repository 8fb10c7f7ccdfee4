"""agent.otlp's OTLP JSON mapping of points and netserve.otlp's headers file."""

from __future__ import annotations

import pytest

from agent.otlp import AGGREGATION_TEMPORALITY_CUMULATIVE, metrics_request
from contract.point import Point
from netserve.otlp import OtlpHeadersError, parse_headers
from tests.support.otlp_receiver import attributes, metrics_by_name

T = 1_700_000_000_000_000_000


def test_counters_are_cumulative_monotonic_sums_and_gauges_gauges() -> None:
    points = [
        Point(
            "disk",
            {"host": "node01", "device": "nvme0n1", "kind": "disk"},
            {"read_bytes": 4096, "in_flight": 3, "busy_fraction": float("nan")},
            T,
        ),
        Point("cpu", {"host": "node01"}, {"user_seconds": 12.5, "system_seconds": 2.0}, T),
    ]
    metrics = metrics_by_name(metrics_request(points, start_time_ns=T - 10))
    resource, read_bytes = metrics["epochscope_disk_read_bytes"]
    assert resource == {"service.name": "epochscope-agent", "host.name": "node01"}
    assert read_bytes["unit"] == "By"
    assert read_bytes["sum"]["isMonotonic"] is True
    assert read_bytes["sum"]["aggregationTemporality"] == AGGREGATION_TEMPORALITY_CUMULATIVE
    (point,) = read_bytes["sum"]["dataPoints"]
    assert point["asInt"] == "4096"
    assert point["timeUnixNano"] == str(T) and point["startTimeUnixNano"] == str(T - 10)
    assert attributes(point["attributes"]) == {"device": "nvme0n1", "kind": "disk"}
    (in_flight,) = metrics["epochscope_disk_in_flight"][1]["gauge"]["dataPoints"]
    assert in_flight["asInt"] == "3" and "startTimeUnixNano" not in in_flight
    # NaN is not a value: left out, as in line protocol
    assert "epochscope_disk_busy_fraction" not in metrics
    # a CPU mode is one sample of the shared family, told apart by its label
    user, system = metrics["epochscope_cpu_seconds"][1]["sum"]["dataPoints"]
    assert user["asDouble"] == 12.5 and attributes(user["attributes"]) == {"mode": "user"}
    assert system["asDouble"] == 2.0 and attributes(system["attributes"]) == {"mode": "system"}


def test_several_ticks_of_a_series_are_data_points_of_one_metric() -> None:
    points = [
        Point("disk", {"host": "n", "device": "sda", "kind": "disk"}, {"read_bytes": v}, T + v)
        for v in (1, 2, 3)
    ]
    (resource_metrics,) = metrics_request(points, T)["resourceMetrics"]
    (metric,) = resource_metrics["scopeMetrics"][0]["metrics"]
    assert [p["asInt"] for p in metric["sum"]["dataPoints"]] == ["1", "2", "3"]


def test_text_fields_and_unknown_names_are_not_metrics() -> None:
    points = [
        Point("disk", {"host": "n"}, {"not_in_schema": 1}, T),
        Point("no_such_measurement", {"host": "n"}, {"x": 1}, T),
    ]
    assert metrics_request(points, T)["resourceMetrics"][0]["scopeMetrics"][0]["metrics"] == []


def test_headers_file_lines() -> None:
    text = (
        "# auth for the site's collector\n\nAuthorization: Bearer abc:def\nX-Scope-OrgID: team1\n"
    )
    assert parse_headers(text) == {"Authorization": "Bearer abc:def", "X-Scope-OrgID": "team1"}


def test_a_bad_headers_line_names_its_number_not_its_text() -> None:
    with pytest.raises(OtlpHeadersError, match="line 2: must be 'Name: value'") as caught:
        parse_headers("A: b\nsecret-token-without-colon\n", "headers")
    assert "secret-token" not in str(caught.value)
