"""/metrics: schema names, kinds and help; the latest sample only; a real HTTP scrape."""

from __future__ import annotations

import urllib.request

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agent.exposition import LatestSample, MetricsServer, metric_families
from agent.point import Point


def families_by_name(text: str) -> dict:
    return {family.name: family for family in text_string_to_metric_families(text)}


SAMPLE = [
    Point(
        "disk",
        {"host": "n1", "device": "sda", "kind": "disk"},
        {"read_bytes": 4096, "in_flight": 3, "reads": 2},
        1,
    ),
    Point(
        "disk",
        {"host": "n1", "device": "sda1", "kind": "partition"},
        {"read_bytes": 1024, "in_flight": 0, "reads": 1},
        1,
    ),
    Point(
        "infiniband",
        {"host": "n1", "device": "mlx5_0", "port": "1"},
        {"rcv_bytes": 400, "hw_out_of_buffer": 7, "state": 4},
        1,
    ),
    Point(
        "nfs",
        {"host": "n1", "mountpoint": "/a", "server": "s", "duplicate_of": ""},
        {"app_read_bytes": 10},
        1,
    ),
    Point(
        "nfs",
        {"host": "n1", "mountpoint": "/b", "server": "s", "duplicate_of": "/a"},
        {"app_read_bytes": 10},
        1,
    ),
    Point("workload", {"host": "n1"}, {"event": "epoch_end", "epoch": 3}, 1),
    Point("disk", {"host": "n1", "device": "sdb", "kind": "disk"}, {"nonsense": 1}, 1),
]


def render(points) -> str:
    latest = LatestSample()
    latest.publish(points)
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    registry.register(latest)
    return generate_latest(registry).decode()


def test_counters_gauges_help_and_labels():
    text = render(SAMPLE)
    families = families_by_name(text)
    read = families["epochscope_disk_read_bytes"]  # the parser strips _total
    assert read.type == "counter"
    assert read.documentation == "Bytes read (sectors x 512)"
    assert [(s.name, s.labels, s.value) for s in read.samples] == [
        ("epochscope_disk_read_bytes_total", {"host": "n1", "device": "sda", "kind": "disk"}, 4096),
        (
            "epochscope_disk_read_bytes_total",
            {"host": "n1", "device": "sda1", "kind": "partition"},
            1024,
        ),
    ]
    in_flight = families["epochscope_disk_in_flight"]
    assert in_flight.type == "gauge" and in_flight.documentation == "I/Os currently in progress"
    assert [s.value for s in in_flight.samples] == [3, 0]
    assert "# TYPE epochscope_disk_read_bytes_total counter" in text
    assert 'epochscope_disk_read_bytes_total{device="sda",host="n1",kind="disk"} 4096.0' in text


def test_hw_counters_empty_tags_text_and_unknown_fields():
    families = families_by_name(render(SAMPLE))
    hw = families["epochscope_infiniband_hw_out_of_buffer"]
    assert hw.type == "counter" and hw.samples[0].value == 7
    assert hw.documentation == "Driver hardware counter out_of_buffer"
    assert families["epochscope_infiniband_state"].type == "gauge"
    nfs = families["epochscope_nfs_app_read_bytes"]
    # An empty tag is no label (as in line protocol), a set one is.
    assert [s.labels for s in nfs.samples] == [
        {"host": "n1", "mountpoint": "/a", "server": "s"},
        {"host": "n1", "mountpoint": "/b", "server": "s", "duplicate_of": "/a"},
    ]
    # Text fields are not exposed; numeric workload fields are gauges.
    assert "epochscope_workload_event" not in families
    assert families["epochscope_workload_epoch"].samples[0].value == 3
    # A field the schema does not know is left out.
    assert not [name for name in families if "nonsense" in name]


def test_empty_sample_is_an_empty_page():
    assert metric_families([]) == []
    assert render([]) == ""


def test_scrape_over_http_serves_the_latest_published_sample():
    server = MetricsServer("127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        server.publish(SAMPLE[:1])
        first = urllib.request.urlopen(url, timeout=5).read().decode()
        assert families_by_name(first)["epochscope_disk_reads"].samples[0].value == 2
        # Scraping again without a new sample gives the same page: nothing is re-read.
        assert urllib.request.urlopen(url, timeout=5).read().decode() == first
        server.publish(
            [Point("disk", {"host": "n1", "device": "sda", "kind": "disk"}, {"reads": 9}, 2)]
        )
        second = families_by_name(urllib.request.urlopen(url, timeout=5).read().decode())
        assert second["epochscope_disk_reads"].samples[0].value == 9
        # Only our families: no python_gc_* / process_* from the client library.
        assert list(second) == ["epochscope_disk_reads"]
    finally:
        server.close()
