"""bench/findings/rescore.py: which store and run id each run of the matrix is reported again
from (an ordinary run's own store, the all-reduce cases' collector), and that the run-time
report is kept once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.findings import rescore as rescore_module
from bench.findings.rescore import RUN_REPORT, Target, rescore, target


def _run(out: Path, case: str, repeat: int, status: str = "ok") -> Path:
    work = out / case / f"r{repeat}"
    (work / "runs").mkdir(parents=True)
    (work / "result.json").write_text(json.dumps({"status": status}))
    (work / "report.json").write_text(json.dumps({"findings": [{"rule": "old"}]}))
    return work


def test_an_ordinary_run_is_reported_from_its_own_store(tmp_path):
    work = _run(tmp_path, "cold-throttled-loop", 2)
    store = work / "runs" / "cold-throttled-loop-r2.sqlite"
    store.write_bytes(b"")
    assert target(work) == Target(store, "cold-throttled-loop-r2")


def test_an_all_reduce_run_is_reported_from_its_collector(tmp_path):
    work = _run(tmp_path, "allreduce-limited-link", 1)
    (work / "netns").mkdir()
    (work / "netns" / "collector.sqlite").write_bytes(b"")
    found = target(work)
    assert found == Target(work / "netns" / "collector.sqlite", "allreduce-limited-link-r1")


def test_no_store_no_target(tmp_path):
    assert target(_run(tmp_path, "control-script", 1)) is None


def test_rescore_keeps_the_run_time_report_once(tmp_path, monkeypatch: pytest.MonkeyPatch):
    work = _run(tmp_path, "slow-loader", 1)
    (work / "runs" / "slow-loader-r1.sqlite").write_bytes(b"")
    _run(tmp_path, "control-script", 1)  # no store
    _run(tmp_path, "decode-quota", 1, status="failed")
    calls = []

    def again(found: Target) -> dict:
        calls.append(found.run_id)
        return {"findings": [{"rule": f"new{len(calls)}"}]}

    monkeypatch.setattr(rescore_module, "report_again", again)
    lines = rescore(tmp_path)
    lines = rescore(tmp_path)
    assert calls == ["slow-loader-r1", "slow-loader-r1"]
    assert json.loads((work / RUN_REPORT).read_text()) == {"findings": [{"rule": "old"}]}
    assert json.loads((work / "report.json").read_text()) == {"findings": [{"rule": "new2"}]}
    assert lines == [
        "control-script r1: no store kept, its report left as is",
        "decode-quota r1: not ok, left as is",
        "slow-loader r1: rescored from slow-loader-r1.sqlite: new2",
    ]
