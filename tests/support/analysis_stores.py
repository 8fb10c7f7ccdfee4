"""The ``make_store`` fixture for the analysis tests: points in, a ``ReadStore`` out.

Each test using it runs against every store that exists in this checkout: the in-memory
one always, and the real SQLite store (collector.store.SqliteStore) once it is there.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import pytest

from collector.store.api import ReadStore
from contract.point import Point
from tests.support.memory_store import MemoryStore

HAVE_SQLITE_STORE = importlib.util.find_spec("collector.store") is not None
STORE_KINDS = ["memory", "sqlite"] if HAVE_SQLITE_STORE else ["memory"]


def sqlite_store_with(points: list[Point], path) -> ReadStore:
    from collector.store import SqliteStore

    store = SqliteStore(path)
    store.write_points(points)
    return store


@pytest.fixture(params=STORE_KINDS)
def make_store(request, tmp_path) -> Callable[[list[Point]], ReadStore]:
    def build(points: list[Point]) -> ReadStore:
        if request.param == "memory":
            store = MemoryStore()
            store.write(points)
            return store
        store = sqlite_store_with(points, tmp_path / f"epochscope-{len(opened)}.sqlite")
        opened.append(store)
        return store

    opened: list = []
    request.addfinalizer(lambda: [store.close() for store in opened])

    return build
