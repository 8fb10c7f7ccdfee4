"""Shared test helpers: where the captured host trees are."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# ../shared beside the checkout holds the real captured host trees (never edit them).
SHARED = Path(os.environ.get("EPOCHSCOPE_SHARED", REPO_ROOT.parent / "shared"))
FIXTURE_ROOTS = SHARED / "fixtures" / "roots"


def fixture_root(name: str) -> Path:
    root = FIXTURE_ROOTS / name
    if not root.is_dir():
        pytest.fail(f"captured host tree {root} is missing: ../shared must sit beside the repo")
    return root


@pytest.fixture
def repo_env() -> dict[str, str]:
    """Environment for subprocesses that must import this checkout's packages."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


# The suite's tiers, one folder each; a test's marker comes from its folder, so
# `pytest -m unit` and `make check` select by tier without a marker on every file.
TIERS = ("unit", "integration", "system", "scenarios")


def pytest_collection_modifyitems(items) -> None:
    for item in items:
        parts = Path(str(item.fspath)).relative_to(REPO_ROOT).parts
        if len(parts) > 2 and parts[0] == "tests" and parts[1] in TIERS:
            item.add_marker(parts[1])
