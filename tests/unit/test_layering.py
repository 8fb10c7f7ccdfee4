"""The layout's picture is true: who may import whom, and no import circles.

Every module of the project is read as text (``ast``); its imports are the edges, those
under ``if TYPE_CHECKING:`` left out (they never run). The rules are the layout's:

- ``contract`` imports nothing of the project; ``netserve`` only ``contract``;
- ``agent`` only ``contract`` and ``netserve`` (a compute node needs nothing else);
- the collector never imports ``agent``, ``dashboard`` or ``workloads``;
- inside it, ``analysis`` never imports findings, views, ingest, api or the command line;
  ``findings`` never views, ingest, api or the command line; ``store`` none of those nor
  analysis (the line protocol both ingest and store read is ``collector.lineprotocol``);
  ``queries`` (what the dashboard and read API ask) never views, ingest, api or the
  command line;
- the dashboard never imports ``agent`` or ``workloads``, and reaches the collector only
  through its doors: ``source.py`` (and ``remote.py``, the same door onto a remote
  collector; ``cli.py``, which opens the store);
- in ``workloads``, ``record`` (the rank side: events, timing, the stop and delivery
  protocols) never imports ``train``, ``launch``, ``autoprofile`` or ``infer``, and
  ``train`` never ``launch`` or ``autoprofile``;
- no two modules import each other, however long the way round.

A string that names a module of the project (``"collector.ingest.server"`` in a table of
handlers that ``importlib`` loads) counts as an import of it, so registries are held to
the same rules.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

PACKAGES = ("contract", "netserve", "agent", "collector", "dashboard", "workloads")

# importer prefix -> prefixes it must never import
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "contract": ("netserve", "agent", "collector", "dashboard", "workloads"),
    "netserve": ("agent", "collector", "dashboard", "workloads"),
    "agent": ("collector", "dashboard", "workloads"),
    "collector": ("agent", "dashboard", "workloads"),
    "collector.analysis": (
        "collector.findings",
        "collector.queries",
        "collector.views",
        "collector.ingest",
        "collector.api",
        "collector.cli",
        "collector.commands",
    ),
    "collector.findings": (
        "collector.queries",
        "collector.views",
        "collector.ingest",
        "collector.api",
        "collector.cli",
        "collector.commands",
    ),
    "collector.store": (
        "collector.ingest",
        "collector.queries",
        "collector.analysis",
        "collector.findings",
        "collector.views",
        "collector.api",
        "collector.cli",
        "collector.commands",
    ),
    "collector.queries": (
        "collector.views",
        "collector.ingest",
        "collector.api",
        "collector.cli",
        "collector.commands",
    ),
    "dashboard": ("agent", "workloads"),
    # the rank side never reaches up into the launcher
    "workloads.record": (
        "workloads.train",
        "workloads.launch",
        "workloads.autoprofile",
        "workloads.infer",
    ),
    "workloads.train": ("workloads.launch", "workloads.autoprofile"),
}

# the dashboard's only doors to the collector
DASHBOARD_DOORS = ("dashboard.source", "dashboard.remote", "dashboard.cli")


def module_files() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    return modules


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _names_a_logger(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    function = node.func
    name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
    return name == "getLogger"


def imported_names(path: Path, module: str) -> set[str]:
    """Dotted names a module imports at run time (absolute or relative), and the project's
    module names it holds as strings (what ``importlib`` is handed)."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking_only(node):
            return
        if _names_a_logger(node):  # getLogger("collector.ingest.server") imports nothing
            return
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith(tuple(f"{p}." for p in PACKAGES))
            and " " not in node.value
        ):
            names.add(node.value)
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".")
                if path.name != "__init__.py":
                    parent = parent[:-1]
                parent = parent[: len(parent) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return names


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = module_files()

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = defaultdict(set)
    for module, path in modules.items():
        for name in imported_names(path, module):
            target = resolve(name)
            if target and target != module and not module.startswith(target + "."):
                edges[module].add(target)
    return dict(edges)


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_every_import_follows_the_layers(graph):
    broken = []
    for importer, targets in graph.items():
        for prefix, forbidden in FORBIDDEN.items():
            if not _within(importer, prefix):
                continue
            broken += [
                f"{importer} -> {target}"
                for target in sorted(targets)
                if any(_within(target, bad) for bad in forbidden)
            ]
    assert broken == []


def test_the_dashboard_reaches_the_collector_through_its_doors(graph):
    reaching = [
        f"{importer} -> {target}"
        for importer, targets in graph.items()
        if _within(importer, "dashboard") and importer not in DASHBOARD_DOORS
        for target in sorted(targets)
        if _within(target, "collector")
    ]
    assert reaching == []


def test_no_import_circles(graph):
    """Tarjan's strongly connected components: every one must be a single module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    assert circles == []


def test_the_graph_sees_the_known_edges(graph):
    """The reader itself works: edges the code certainly has are found."""
    assert "contract.schema" in graph["collector.analysis.epochs"]
    assert "collector.store.api" in graph["collector.findings.context"]
    assert "collector.analysis.inference" in graph["collector.views.inference"]
    assert graph.get("contract.schema", set()) == set()
    assert "collector.ingest.server" in graph["collector.cli"]  # a handler named as a string
