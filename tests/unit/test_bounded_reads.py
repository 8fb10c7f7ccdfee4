"""Every time-series read is bounded (issue 44, item 3): a ``bucket_ns`` finer than a
sample or a span cut into more than ``MAX_BUCKETS`` buckets is a clear 400 from the read
API (``QuestionError``) instead of gigabytes, a ``since`` before the run reads from the
run's start, and the dashboard answers an altered page state by drawing the run afresh."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from collector.queries import query
from collector.queries.questions import QuestionError, answer
from collector.queries.timeseries import MAX_BUCKETS, TooManyBuckets, check_buckets
from dashboard.source import DataSource
from tests.support.run_builder import NS, T0_NS, RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

MB = 1_000_000


@pytest.fixture
def long_run(make_store):
    run = RunBuilder("long", sample_interval_s=10.0, write_samples=True)
    run.epoch(3 * 3600, 100_000, disk_read=10 * MB)
    return make_store(run.points())


def test_a_bucket_finer_than_a_sample_is_refused(long_run):
    with pytest.raises(QuestionError, match="bucket_ns=1: at least 1000000000"):
        answer(long_run, "timeseries", {"run_id": "long", "bucket_ns": "1"})


def test_a_span_of_too_many_buckets_says_what_to_ask_instead():
    with pytest.raises(TooManyBuckets, match=r"ask for bucket_ns >= 2000000000"):
        check_buckets(0, 2 * MAX_BUCKETS * NS, NS)
    check_buckets(0, MAX_BUCKETS * NS, NS)  # exactly the most an answer holds


def test_a_since_years_before_the_run_reads_from_its_start(long_run):
    since = json.dumps({"node1": T0_NS - 3 * 365 * 86_400 * NS})
    tracemalloc.start()
    found = answer(
        long_run, "timeseries", {"run_id": "long", "since": since, "bucket_ns": str(22 * NS)}
    )
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(found["node1"]["times_ns"]) == 491  # the run's 10,800 s in 22 s buckets
    assert peak < 50 * MB  # it asked numpy for 80 GiB before


def test_the_dashboard_redraws_a_run_whose_page_state_was_altered(long_run):
    source = DataSource(long_run)
    update = source.timeseries_since("long", {"node1": T0_NS}, 1)
    assert update.hosts == {}  # nothing to add: the page draws the run afresh
    fine = query.run_timeseries(long_run, "long", bucket_ns=22 * NS)
    assert len(fine["node1"].times_ns) == 491
