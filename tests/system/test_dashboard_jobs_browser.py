"""The Jobs pages in real headless Chromium, over a SQLite store holding two Slurm jobs
(``tests/unit/test_jobs.py``'s ``two_jobs``: the numbers asserted are worked out there).

The list shows both jobs with their numbers, opening a job shows its nodes, the job
beside it, its findings and its run, and the run's link opens the run page. No page may
log a browser console error.
"""

from __future__ import annotations

import pytest

from tests.support.browser import chromium_available, dash_browser

pytest.importorskip("collector.store", reason="the SQLite store is not in this tree")
if not chromium_available():
    pytest.skip("needs Debian's chromium and chromium-driver", allow_module_level=True)


from collector.store import SqliteStore
from dashboard import ids
from dashboard.app import create_app
from dashboard.source import DataSource
from tests.system.test_dashboard_browser import open_page, table_rows, text_of, wait_for
from tests.unit.test_jobs import two_jobs


@pytest.fixture(scope="module")
def dash_duo(tmp_path_factory):
    store = SqliteStore(tmp_path_factory.mktemp("store") / "epochscope.sqlite")
    store.write_points(two_jobs().points())
    app = create_app(DataSource(store), poll_seconds=0.5)
    with dash_browser(app, str(tmp_path_factory.mktemp("downloads"))) as duo:
        yield duo
    store.close()


def test_jobs_page_lists_both_jobs_with_their_numbers(dash_duo):
    open_page(dash_duo, "/jobs", f"#{ids.JOBS_LIST}")
    rows = {row[0]: row for row in table_rows(dash_duo, f"#{ids.JOBS_LIST}")}
    assert list(rows) == ["102", "101"]  # newest first
    # job, user, account, partition, nodes, start, elapsed, CPUs, CPU s, CPU eff., mem
    # peak, mem limit, mem use, read, written, refaults, GPUs, GPU %, GPU mem, own SM %, runs
    assert rows["101"] == ["101", "alice", "proj", "gpu", "n1, n2", "2023-11-14T22:13:20.000Z",
                           "21s", "16", "80.0", "23.8%", "2.0 GB", "16.0 GB", "12.5%",
                           "40.0 MB", "0 B", "20.0 MB", "4", "78.0", "2.0 GB", "–",
                           "run-a"]  # fmt: skip
    assert rows["102"][:4] == ["102", "bob", "–", "cpu"]
    assert rows["102"][6:10] == ["11s", "2", "15.0", "68.2%"]
    assert rows["102"][-3:] == ["–", "–", "–"]  # no GPU, no run
    assert dash_duo.get_logs() == []


def test_a_job_page_shows_nodes_neighbour_findings_and_links_to_its_run(dash_duo):
    open_page(dash_duo, "/jobs", f"#{ids.JOBS_LIST}")
    dash_duo.find_element("a[href='/jobs/101']").click()
    dash_duo.wait_for_element(f"#{ids.JOB_HEADER}", timeout=60)
    assert "Job 101" in text_of(dash_duo, f"#{ids.JOB_HEADER}")
    nodes = table_rows(dash_duo, f"#{ids.JOB_NODES} + p + div .table")
    assert [row[0] for row in nodes] == ["n1", "n2", "all nodes"]
    assert nodes[0][3:7] == ["21s", "8", "40.0", "23.8%"]
    assert nodes[2][3:7] == ["21s", "16", "80.0", "23.8%"]
    neighbours = text_of(dash_duo, f"#{ids.JOB_NEIGHBOURS}")
    assert neighbours == "job 102 (bob) on n1 for 10s: 15.0 CPU seconds meanwhile"
    for rule in ("job_gpus_idle", "job_cpus_unused", "job_memory_overrequested"):
        assert dash_duo.find_element(f"#{ids.finding(rule)}")
    assert "2 of 4 allocated GPUs ran no process" in text_of(
        dash_duo, f"#{ids.finding('job_gpus_idle')}"
    )
    assert dash_duo.get_logs() == []

    dash_duo.find_element(f"#{ids.JOB_RUNS} + ul a[href='/runs/run-a']").click()
    wait_for(lambda: dash_duo.driver.current_url.endswith("/runs/run-a"), what="the run page")
    dash_duo.wait_for_element(f"#{ids.RUN_HEADER}", timeout=60)
    assert "Run run-a" in text_of(dash_duo, f"#{ids.RUN_HEADER}")
    assert dash_duo.get_logs() == []


def test_an_unknown_job_says_so(dash_duo):
    open_page(dash_duo, "/jobs/424242", "h2")
    assert "No job '424242' seen by the agents." in text_of(dash_duo, "#" + ids.PAGE)
    assert dash_duo.get_logs() == []
