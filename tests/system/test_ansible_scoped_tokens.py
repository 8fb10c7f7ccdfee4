"""The roles hand out scoped tokens (issue 44, item 1): each agent host's
``epochscope_node_token`` becomes a node token for its host tag in the collector's tokens
file (hashes only, 0600), the collector unit reads it with ``--tokens-file``, and the agent
sends its own token and tags its samples with the token's subject. Rendered by
``ansible-playbook`` on this machine (connection local), as test_ansible_units.py does."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from test_ansible_harness import ANSIBLE_DIR, ANSIBLE_PLAYBOOK

from netserve.tokens import read_tokens_file, token_digest

ROLES = ANSIBLE_DIR / "roles"
INVENTORY = """
[epochscope_collector]
head01

[epochscope_agents]
gpu01 epochscope_node_token=node-token-gpu01
gpu02 epochscope_node_token=node-token-gpu02 epochscope_host_tag=node02
gpu03

[all:vars]
ansible_connection=local
ansible_python_interpreter={python}
"""
PLAYBOOK = """
- hosts: epochscope_collector
  gather_facts: false
  vars_files:
    - {roles}/epochscope_collector/defaults/main.yml
    - {roles}/epochscope_collector/vars/main.yml
  tasks:
    - ansible.builtin.template:
        src: {roles}/epochscope_collector/templates/tokens.json.j2
        dest: "{{{{ epochscope_collector_tokens_file }}}}"
        mode: "0600"
    - ansible.builtin.template:
        src: {roles}/epochscope_collector/templates/server.service.j2
        dest: "{out}/{{{{ item.name }}}}.service"
        mode: "0644"
      loop: "{{{{ epochscope_collector_services }}}}"

- hosts: gpu01,gpu03
  gather_facts: false
  vars_files:
    - {roles}/epochscope_agent/vars/main.yml
  tasks:
    # the role's defaults, below the inventory's values (vars_files would override them)
    - ansible.builtin.set_fact:
        epochscope_host_tag: "{{{{ epochscope_host_tag | default('') }}}}"
        epochscope_node_token: "{{{{ epochscope_node_token | default('') }}}}"
    - ansible.builtin.set_fact:
        agent:
          token: "{{{{ epochscope_agent_write_token }}}}"
          host: "{{{{ epochscope_agent_host_tag | trim }}}}"
    - ansible.builtin.copy:
        content: "{{{{ agent | to_json }}}}"
        dest: "{out}/agent-{{{{ inventory_hostname }}}}.json"
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("scoped")
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "inventory.ini").write_text(INVENTORY.format(python=sys.executable))
    (tmp_path / "play.yml").write_text(PLAYBOOK.format(roles=ROLES, out=out))
    extra = {  # extra vars: above the roles' defaults, read here as vars_files
        "epochscope_collector_config_dir": str(out),
        "epochscope_collector_prefix": "/opt/epochscope-server",
        "epochscope_collector_run_tokens": [{"user": "alice", "token": "run-token-alice"}],
        "epochscope_collector_admin_tokens": [{"name": "epilog", "token": "admin-token-epilog"}],
        "epochscope_token": "admin-token-shared",
    }
    (tmp_path / "extra.json").write_text(json.dumps(extra))
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    result = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(tmp_path / "inventory.ini"), str(tmp_path / "play.yml"),
         "-e", f"@{tmp_path / 'extra.json'}"],
        capture_output=True, text=True, env=env, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_the_tokens_file_holds_each_hosts_node_token_by_hash(rendered):
    path = rendered / "tokens.json"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert "token-" not in path.read_text()
    entries = {(e.scope, e.subject): e.digest for e in read_tokens_file(path)}
    assert entries == {
        ("node", "gpu01"): token_digest("node-token-gpu01"),
        ("node", "node02"): token_digest("node-token-gpu02"),  # its host tag
        ("run", "alice"): token_digest("run-token-alice"),
        ("admin", "epilog"): token_digest("admin-token-epilog"),
    }


def test_the_collector_unit_reads_the_tokens_file(rendered):
    unit = (rendered / "epochscope-collector.service").read_text()
    assert f"--tokens-file {rendered}/tokens.json" in unit


def test_an_agent_sends_its_own_token_for_its_own_host_tag(rendered):
    gpu01 = json.loads((rendered / "agent-gpu01.json").read_text())
    gpu03 = json.loads((rendered / "agent-gpu03.json").read_text())
    assert gpu01 == {"token": "node-token-gpu01", "host": "gpu01"}
    assert gpu03 == {"token": "admin-token-shared", "host": ""}  # no node token: as before
