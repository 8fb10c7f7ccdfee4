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
