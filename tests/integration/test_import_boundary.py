"""Agent, collector and dashboard never import a heavy framework (they run on every node
and on the head node, where no ML framework need be installed): every one of their modules
is imported in a fresh interpreter and no framework may appear in ``sys.modules``."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO_ROOT

HEAVY = ("torch", "tensorflow", "mxnet", "horovod", "onnx", "onnxruntime", "onnxscript")
LIGHT_PACKAGES = ("contract", "netserve", "agent", "collector", "dashboard")

PROBE = """
import importlib, json, pkgutil, sys
names = []
for package in {packages!r}:
    module = importlib.import_module(package)
    names.append(package)
    for info in pkgutil.walk_packages(module.__path__, package + "."):
        if info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)
        names.append(info.name)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
print(json.dumps({{"imported": names, "heavy": heavy}}))
"""


def test_agent_collector_and_dashboard_import_no_framework(repo_env):
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(packages=LIGHT_PACKAGES, heavy=HEAVY)],
        capture_output=True, text=True, env=repo_env, cwd=REPO_ROOT, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert "collector.analysis.inference" in answer["imported"]  # the inference views are covered
    assert answer["heavy"] == []


def test_the_collector_command_line_loads_no_server_event_loop(repo_env):
    """`collector report|runs|scaling` start without the server's asyncio front (~70 ms of
    imports on every report); only `collector serve` needs it."""
    probe = "import sys, collector.cli; print('asyncio' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True, text=True, env=repo_env, cwd=REPO_ROOT, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "False"
