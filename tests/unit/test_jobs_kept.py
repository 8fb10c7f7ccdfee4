"""`collector jobs` keeps finished jobs: a job's samples are read once per store while its
series stay the same (collector.analysis.jobs.job_nodes, KeptNodes; the read API and the
dashboard keep one per store, collector.views.jobs.kept_nodes). Timings are in
bench/jobs/; these tests check that the answers do not change."""

from __future__ import annotations

from collector.analysis.jobs import FINISHED_AFTER_INTERVALS, KeptNodes, job_reports
from collector.views.jobs import job_row, jobs_rows, kept_nodes
from tests.support.run_builder import RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture


def jobs_on_one_node() -> RunBuilder:
    # job 201 ends at 10 s; job 202 runs on to 30 s, far more than 3 intervals (1 s) after
    run = RunBuilder("run-k", hosts=("n1",), ranks_per_host=1)
    run.epoch(30, 640)
    run.job("201", seconds=10, cpus=4, cpus_busy=2.0)
    run.job("202", start_s=5, seconds=25, cpus=2, cpus_busy=1.0, gpus=("0",), gpu_processes=("0",))
    return run


def rows(reports) -> list[dict]:
    return [job_row(report) for report in reports]


def test_a_finished_job_is_read_once_and_answers_the_same(make_store):
    run = jobs_on_one_node()
    store = make_store(run.job_points())
    everything = rows(job_reports(store))
    kept = KeptNodes()
    assert rows(job_reports(store, kept)) == everything
    assert (kept.read, kept.reused) == (2, 0)
    assert list(kept.nodes) == [("n1", "201")]  # 202 is the host's newest: not finished
    assert FINISHED_AFTER_INTERVALS == 3
    assert rows(job_reports(store, kept)) == everything
    assert (kept.read, kept.reused) == (3, 1)  # 202 read again, 201 kept
    assert [r["job_id"] for r in everything] == ["202", "201"]
    assert everything[1]["cpu_seconds"] == 20.0 and everything[1]["elapsed_seconds"] == 11.0


def test_a_kept_job_whose_series_change_is_read_again(make_store):
    run = jobs_on_one_node()
    later = RunBuilder("run-k", hosts=("n2",), ranks_per_host=1)
    later.job("201", hosts=("n2",), seconds=10, cpus=4, cpus_busy=2.0)  # 201 on n2 too
    store = make_store(run.job_points())
    kept = KeptNodes()
    job_reports(store, kept)
    assert ("n1", "201") in kept.nodes
    # a second store with more series for job 201 (on n1: a gpus label seen late)
    relabelled = RunBuilder("run-k", hosts=("n1",), ranks_per_host=1)
    relabelled.job("201", seconds=10, cpus=4, cpus_busy=2.0, gpus=("1",))
    grown = make_store(run.job_points() + relabelled.job_points() + later.job_points())
    answer = rows(job_reports(grown, kept))
    assert answer == rows(job_reports(grown))
    one = next(r for r in answer if r["job_id"] == "201")
    assert one["gpus"] == ["1"] and one["nodes"] == ["n1", "n2"]


def test_the_views_keep_one_per_store(make_store):
    store = make_store(jobs_on_one_node().job_points())
    first = jobs_rows(store)
    kept = kept_nodes(store)
    assert kept is not None and kept is kept_nodes(store)
    assert jobs_rows(store) == first
    assert kept.reused == 1
