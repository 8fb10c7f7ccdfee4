"""``dashboard serve --collector URL --token-file F``: the dashboard over a remote, real,
token-protected ``collector serve`` on loopback, through its read API
(``GET /api/v1/dashboard/<question>``, collector/queries/questions.py).

- every question the pages ask is answered as the local store answers it (the run's
  per-epoch rows, its charts, boundaries, shares, findings, the runs and scaling);
- the run page's data over HTTP (the Dash routing callback of ``/runs/RUN``) is the same
  from ``dashboard serve --collector URL`` as from ``dashboard serve --db`` on the
  collector's own file, and one real Chromium draws it;
- without the token, or with a wrong one, the command says so at start (the token is never
  in its output); the read API refuses a question it cannot take, with 400.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from bench.reliability import harness
from collector.store import SqliteStore
from dashboard import ids
from dashboard.remote import RemoteSource
from dashboard.source import DataSource
from tests.support.browser import chrome_driver, chromium_available, figure_data
from tests.support.loopback import free_port
from tests.unit.test_dashboard_runs import PAPER_RUN, build_store

pytestmark = pytest.mark.timeout(600)
TOKEN = "dash-remote-TOKEN-7c41"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("dash-remote")
    db = workdir / "c.sqlite"
    build_store(db).close()  # a stored run (tests/support/run_builder.py) and scaling runs
    _, token_file = harness.write_token_file(workdir, TOKEN)
    collector = harness.Collector(db=db, token_file=token_file, log=workdir / "collector.log")
    collector.start()
    yield collector, token_file
    collector.stop()


def test_every_question_is_answered_as_the_local_store_answers_it(served):
    collector, _ = served
    remote = RemoteSource(collector.url, TOKEN)
    with SqliteStore(collector.db) as store:
        local = DataSource(store)
        assert remote.runs() == local.runs()
        assert remote.run(PAPER_RUN) == local.run(PAPER_RUN)
        assert remote.run("no-such-run") is None and remote.run_info("no-such-run") is None
        assert remote.run_info(PAPER_RUN) == local.run_info(PAPER_RUN)
        assert remote.run_state(PAPER_RUN) == "finished"
        assert remote.epochs(PAPER_RUN) == local.epochs(PAPER_RUN)
        assert len(remote.epochs(PAPER_RUN)) == 9  # 3 epochs x (2 hosts + the * row)
        assert remote.boundaries(PAPER_RUN) == local.boundaries(PAPER_RUN)
        charts = remote.timeseries(PAPER_RUN, live=False)
        assert charts == local.timeseries(PAPER_RUN, live=False)
        assert charts.points == 280 and sorted(charts.hosts) == ["node1", "node2"]
        assert remote.step_shares(PAPER_RUN) == local.step_shares(PAPER_RUN)
        assert remote.rank_parts(PAPER_RUN) == local.rank_parts(PAPER_RUN)
        assert remote.steps_after(PAPER_RUN, None) == local.steps_after(PAPER_RUN, None) > 0
        # (as the browser gets them either way: JSON, whose keys are strings)
        assert remote.findings(PAPER_RUN) == json.loads(json.dumps(local.findings(PAPER_RUN)))
        # the collector kept them: the run's page comes with them
        assert remote.kept_findings(PAPER_RUN) == remote.findings(PAPER_RUN)
        assert remote.kept_findings("no-such-run") is None
        assert remote.scaling() == local.scaling()
        # the scaling page's forecast section (issue 43)
        assert remote.forecast(PAPER_RUN) == json.loads(json.dumps(local.forecast(PAPER_RUN)))
        assert remote.forecast("no-such-run") is None
        assert remote.inference_runs() == local.inference_runs() == []
        since = {host: series["times_ns"][100] for host, series in charts.hosts.items()}
        later = remote.timeseries_since(PAPER_RUN, since, charts.bucket_ns)
        assert later == local.timeseries_since(PAPER_RUN, since, charts.bucket_ns)


def read_api(url: str, path: str, token: str | None = TOKEN) -> tuple[int, dict]:
    request = urllib.request.Request(url + path)
    if token:
        request.add_header("Authorization", f"Token {token}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def test_the_read_api_bounds_its_questions_and_wants_the_token(served):
    collector, _ = served
    url = collector.url
    status, _ = read_api(url, f"/api/v1/dashboard/epochs?run_id={PAPER_RUN}", token=None)
    assert status == 401
    status, answer = read_api(url, "/api/v1/dashboard/samples?run_id=x")
    assert status == 400 and "no question 'samples'" in answer["message"]
    path = f"/api/v1/dashboard/timeseries?run_id={PAPER_RUN}&max_points=1000000"
    status, answer = read_api(url, path)
    assert status == 400 and "max_points=1000000: from 10 to 5000" in answer["message"]
    status, answer = read_api(url, f"/api/v1/dashboard/timeseries?run_id={PAPER_RUN}&since=[1]")
    assert status == 400 and "since" in answer["message"]
    status, answer = read_api(url, "/api/v1/dashboard/epochs")
    assert status == 400 and "run_id" in answer["message"]
    status, rows = read_api(url, f"/api/v1/dashboard/epochs?run_id={PAPER_RUN}")
    assert status == 200 and {row["epoch"] for row in rows} == {1, 2, 3}


@contextmanager
def dashboard(*argv: str, log: Path):
    """``dashboard serve ARGV`` on a free loopback port, until it answers."""
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "dashboard", "serve", "--port", str(port),
             "--prepare-runs", "0", *argv],
            env=harness.repo_env(), stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, log.read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5):
                    break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.3)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(30)


def post(url: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def run_page(url: str) -> dict:
    """What the browser gets for ``/runs/PAPER_RUN``: the page-routing callback's answer."""
    with urllib.request.urlopen(url + "/_dash-dependencies", timeout=60) as response:
        dependencies = json.loads(response.read())
    routing = next(
        d
        for d in dependencies
        if [(i["id"], i["property"]) for i in d["inputs"]]
        == [(ids.URL, "pathname"), (ids.URL, "search")]
    )
    outputs = [
        dict(zip(("id", "property"), name.rsplit(".", 1), strict=True))
        for name in routing["output"].strip(".").split("...")
    ]
    body = {
        "output": routing["output"],
        "outputs": outputs,
        "inputs": [
            {"id": ids.URL, "property": "pathname", "value": f"/runs/{PAPER_RUN}"},
            {"id": ids.URL, "property": "search", "value": ""},
        ],
        "changedPropIds": [f"{ids.URL}.pathname"],
        "state": [],
    }
    return post(url, "/_dash-update-component", body)["response"]


def test_the_run_page_from_a_remote_collector_is_the_page_from_its_store(served, tmp_path):
    collector, token_file = served
    remote_argv = ("--collector", collector.url, "--token-file", str(token_file))
    with dashboard(*remote_argv, log=tmp_path / "remote.log") as url:
        # a finished run's page comes with its findings once they are computed: the
        # collector computes them when first asked, the local dashboard while the browser
        # draws its first page; compare the pages once both have them
        RemoteSource(collector.url, TOKEN).findings(PAPER_RUN)
        remote = run_page(url)
        with dashboard("--db", str(collector.db), log=tmp_path / "local.log") as local_url:
            local = run_page(local_url)
            deadline = time.monotonic() + 120
            while '"in_page": false' in json.dumps(local):
                assert time.monotonic() < deadline, "the local findings were never computed"
                time.sleep(0.5)
                local = run_page(local_url)
        assert '"in_page": true' in json.dumps(remote)
        assert remote == local
        text = json.dumps(remote)
        assert PAPER_RUN in text and "node1" in text and "node2" in text
        if chromium_available():  # one real browser on the remote page
            driver = chrome_driver()
            try:
                driver.get(f"{url}/runs/{PAPER_RUN}")
                deadline = time.monotonic() + 120
                while not figure_data(driver, ids.TIMESERIES_GRAPH):
                    assert time.monotonic() < deadline, "the run page drew no chart"
                    time.sleep(0.3)
                traces = figure_data(driver, ids.TIMESERIES_GRAPH)
                ib = next(t for t in traces if t["name"] == "node1 IB receive")
                assert len(ib["y"]) == 280 and ib["y"][10] == pytest.approx(400.0)
                rows = driver.execute_script(
                    "return document.querySelectorAll(arguments[0] + ' tbody tr td').length",
                    f"#{ids.EPOCH_TABLE_CONTAINER}",
                )
                assert rows > 0
            finally:
                driver.quit()
    output = (tmp_path / "remote.log").read_text()
    assert "over the collector at " + collector.url in output
    assert TOKEN not in output and TOKEN not in collector.log.read_text()


def test_without_the_token_or_with_a_wrong_one_it_says_so_at_start(served, tmp_path):
    collector, _ = served
    command = [sys.executable, "-m", "dashboard", "serve", "--port", "0",
               "--collector", collector.url]  # fmt: skip
    missing = subprocess.run(command, env=harness.repo_env(), capture_output=True, text=True,
                             timeout=120)  # fmt: skip
    assert missing.returncode == 1
    assert "refused the token" in missing.stderr and "give --token-file FILE" in missing.stderr
    wrong = tmp_path / "wrong"
    wrong.write_text("not-it\n")
    refused = subprocess.run([*command, "--token-file", str(wrong)], env=harness.repo_env(),
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert refused.returncode == 1 and "check --token-file" in refused.stderr
    assert "not-it" not in refused.stderr and TOKEN not in refused.stderr
