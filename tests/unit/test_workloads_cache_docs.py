"""``workloads cache`` as docs/usage.md shows it (issue 45, item 9: it was undocumented):
the documented commands run on a real data set written by ``workloads dataset make``, and
every workloads subcommand a user can type is in the user docs (docs/, workloads/README.md)."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from tests.conftest import REPO_ROOT
from workloads import cli

USAGE = (REPO_ROOT / "docs" / "usage.md").read_text()
USER_DOCS = "".join(
    path.read_text()
    for path in [*(REPO_ROOT / "docs").glob("*.md"), REPO_ROOT / "workloads" / "README.md"]
)


def test_every_user_subcommand_is_in_the_user_docs():
    parser = cli.build_parser()
    choices = next(
        action.choices
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    internal = {"worker"}  # started by workloads run, never typed
    missing = [
        name for name in choices if name not in internal and f"workloads {name}" not in USER_DOCS
    ]
    assert missing == []
    assert "#### workloads cache" in USAGE


def test_the_documented_cache_commands_answer_as_shown(tmp_path, capsys):
    pytest.importorskip("tqdm")  # the data set maker's progress bar: the workloads extra
    pytest.importorskip("PIL")
    data = tmp_path / "synth"
    assert cli.main(["dataset", "make", "--format", "jpeg", "--images", "8", "--classes", "2",
                     "--image-size", "32", "--out", str(data)]) == 0  # fmt: skip
    capsys.readouterr()
    assert cli.main(["cache", "report", str(data)]) == 0
    line = capsys.readouterr().out
    assert re.fullmatch(
        r"before: \d\.\d{3} of \d\.\d{3} GiB \(\d+\.\d%\) of \d+ files in the page cache\n", line
    )
    assert cli.main(["cache", "drop", str(data)]) == 0
    dropped = capsys.readouterr().out.splitlines()[1]  # 8 training + 1 validation pictures
    assert dropped.startswith("data set evicted (posix_fadvise DONTNEED on 9 files")
    assert dropped.endswith("after: 0.000 of 0.000 GiB (0.0%) of 9 files in the page cache")
    assert cli.main(["cache", "report", "--json", str(data)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["before_resident_bytes"] == 0 and report["total_bytes"] > 0
    assert cli.main(["cache", "report", str(tmp_path / "none")]) == 2
