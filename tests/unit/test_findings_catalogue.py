"""docs/findings.md's table of every rule is the one the code generates
(collector.findings.catalogue), and it names every rule the engines run."""

from __future__ import annotations

from collector.findings.catalogue import DOC, END, START, catalogue, table
from collector.findings.engine import all_rules
from collector.findings.inference import INFERENCE_DETECTORS
from collector.findings.jobs import JOB_DETECTORS


def test_the_documented_table_is_the_generated_one():
    document = DOC.read_text(encoding="utf-8")
    documented = document.partition(START)[2].partition(END)[0].strip("\n")
    assert documented == table(catalogue()).strip("\n"), (
        "docs/findings.md is out of date: python -m collector.findings.catalogue --write"
    )


def test_every_rule_is_in_the_catalogue_once():
    names = [entry.name for entry in catalogue()]
    expected = [r.__name__ for r in all_rules()] + [*JOB_DETECTORS] + [*INFERENCE_DETECTORS]
    assert sorted(names) == sorted(expected)
    assert len(names) == len(set(names)) == 27


def test_each_entry_says_what_it_decides_and_what_it_cannot_see():
    for entry in catalogue():
        assert entry.decides, entry.name
        assert entry.cannot_see, entry.name
        assert entry.severities, entry.name


def test_thresholds_are_read_from_the_code():
    storage_bound = next(e for e in catalogue() if e.name == "storage_bound")
    assert ("INPUT_WAIT_SHARE", "0.2") in storage_bound.thresholds
    straggler = next(e for e in catalogue() if e.name == "straggler")
    assert dict(straggler.thresholds)["STRAGGLER_PART_SHARE"] == "0.15"
