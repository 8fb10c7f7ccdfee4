"""The escaped series prefix of a tagged point is computed once and found again.

Issue 46: the cache key was overwritten by a tag name inside the loop that built the
prefix, so every tagged point (every job, disk, interface...) was escaped anew each tick.
"""

from __future__ import annotations

from contract import point as point_module
from contract.point import Point, encode_line


def test_a_tagged_series_is_cached_under_its_measurement_and_tags() -> None:
    point = Point("job", {"job_id": "4242", "host": "n1"}, {"cpu_seconds": 1.5}, 7)
    assert encode_line(point) == "job,host=n1,job_id=4242 cpu_seconds=1.5 7"
    key = ("job", ("job_id", "4242"), ("host", "n1"))
    assert point_module._series_prefixes[key] == "job,host=n1,job_id=4242"
    assert "job_id" not in point_module._series_prefixes  # not under a tag name


def test_the_cache_tells_tag_values_apart() -> None:
    first = Point("job", {"job_id": "1", "host": "n1"}, {"cpu_seconds": 1.0}, 1)
    second = Point("job", {"job_id": "2", "host": "n1"}, {"cpu_seconds": 1.0}, 1)
    for _ in range(2):
        assert encode_line(first).startswith("job,host=n1,job_id=1 ")
        assert encode_line(second).startswith("job,host=n1,job_id=2 ")
