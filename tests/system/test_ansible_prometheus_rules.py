"""The collector role's Prometheus rules (docs/deploy.md, "Alerts in Prometheus"): its
own tasks file run by ansible-playbook on localhost, as install.yml imports it. Nothing
is installed without ``epochscope_prometheus_rules_dir``; with it the rules file lands
there 0644, byte for byte, the reload command runs once when the file changed and not on
a second run."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from test_ansible_harness import ANSIBLE_DIR, ANSIBLE_PLAYBOOK

ROLE = ANSIBLE_DIR / "roles" / "epochscope_collector"
RULES = ANSIBLE_DIR / "files" / "epochscope-alerts.yml"
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars_files:
    - {role}/defaults/main.yml
  tasks:
    - name: The Prometheus rules tasks of install.yml
      ansible.builtin.import_tasks: {role}/tasks/prometheus_rules.yml
"""


def play(tmp_path: Path, extra: dict) -> subprocess.CompletedProcess:
    # the playbook beside ansible/'s own, so that playbook_dir/files is the shipped file
    playbook = ANSIBLE_DIR / f".test-prometheus-rules-{os.getpid()}.yml"
    playbook.write_text(PLAYBOOK.format(role=ROLE))
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(json.dumps(extra))
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0")
    env["ANSIBLE_LOCAL_TEMP"] = str(tmp_path / "ansible-tmp")
    try:
        result = subprocess.run(
            [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local", str(playbook),
             "-e", f"@{vars_file}", "-e", f"ansible_python_interpreter={sys.executable}"],
            capture_output=True, text=True, env=env, timeout=180,
        )  # fmt: skip
    finally:
        playbook.unlink()
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    return result


def test_the_rules_are_installed_only_where_asked_and_prometheus_reloaded_once(tmp_path):
    if not ANSIBLE_PLAYBOOK.exists():
        pytest.skip("ansible-playbook is not installed in this environment")
    off = play(tmp_path, {})
    assert "changed=0" in off.stdout

    rules_dir = tmp_path / "prometheus" / "rules"
    rules_dir.mkdir(parents=True)
    reloads = tmp_path / "reloads"
    asked = {
        "epochscope_prometheus_rules_dir": str(rules_dir),
        "epochscope_prometheus_reload_command": ["sh", "-c", f"echo reload >> {reloads}"],
    }
    first = play(tmp_path, asked)
    installed = rules_dir / "epochscope-alerts.yml"
    assert installed.read_bytes() == RULES.read_bytes()
    assert stat.S_IMODE(installed.stat().st_mode) == 0o644
    assert "changed=2" in first.stdout and reloads.read_text() == "reload\n"
    again = play(tmp_path, asked)
    assert "changed=0" in again.stdout and reloads.read_text() == "reload\n"
