"""The Slurm TaskProlog, Epilog and their file as the epochscope_agent role installs them,
rendered by ansible-playbook from the role's own tasks (its Slurm part, on localhost, into
a temporary prefix): off by default; when asked, the hooks are exactly the text
``workloads.autoprofile.slurm.hook_script`` writes, the file parses back to the inventory's
values (no token in it), and the rendered TaskProlog prints the exports of an opted-in job.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from test_ansible_harness import ANSIBLE_DIR, ANSIBLE_PLAYBOOK

from tests.conftest import REPO_ROOT
from workloads.autoprofile.slurm import SlurmSite, hook_script

ROLE = ANSIBLE_DIR / "roles" / "epochscope_agent"
# The role's Slurm tasks alone (install.yml's whole play needs systemd and the package).
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars_files:
    - {role}/defaults/main.yml
    - {role}/vars/main.yml
  tasks:
    - name: The Slurm tasks of install.yml
      ansible.builtin.include_tasks: {out}/slurm_tasks.yml
"""


def slurm_tasks() -> str:
    """install.yml's tasks from its Slurm comment to the agent's restart, templates made
    absolute."""
    text = (ROLE / "tasks" / "install.yml").read_text()
    start = text.index("# Slurm's TaskProlog/Epilog")
    end = text.index("# A changed config, unit or package restarts")
    part = text[start:end]
    for name in ("slurm.toml.j2", "epochscope-slurm-hook.j2"):
        part = part.replace(f"src: {name}", f"src: {ROLE / 'templates' / name}")
    return part


def play(tmp_path: Path, extra: dict) -> subprocess.CompletedProcess:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    (out / "slurm_tasks.yml").write_text(slurm_tasks())
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK.format(role=ROLE, out=out))
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(json.dumps(extra))
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0")
    env["ANSIBLE_LOCAL_TEMP"] = str(tmp_path / "ansible-tmp")
    result = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local", str(playbook),
         "-e", f"@{vars_file}", "-e", f"ansible_python_interpreter={sys.executable}"],
        capture_output=True, text=True, env=env, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    if not ANSIBLE_PLAYBOOK.exists():
        pytest.skip("ansible-playbook is not installed in this environment")
    tmp_path = tmp_path_factory.mktemp("slurm-hooks")
    prefix = tmp_path / "opt" / "epochscope"
    (prefix / "bin").mkdir(parents=True)
    base = {
        "epochscope_prefix": str(prefix),
        "epochscope_config_dir": str(tmp_path / "etc"),
        "epochscope_state_dir": str(tmp_path / "state"),
        "epochscope_push_url": "http://head01:8086",
    }
    (tmp_path / "etc").mkdir()
    off = play(tmp_path, base)  # the default: nothing installed
    nothing = sorted(p.name for p in (prefix / "bin").iterdir())
    asked = {
        **base,
        "epochscope_slurm_task_prolog": True,
        "epochscope_slurm_epilog": True,
        "epochscope_slurm_token_file": "/etc/epochscope/tokens/{user}",
        "epochscope_slurm_partitions": ["gpu", "a100"],
        "epochscope_slurm_step_every": 5,
    }
    play(tmp_path, asked)
    return tmp_path, prefix, off, nothing


def test_off_by_default(installed):
    _, _, off, nothing = installed
    assert nothing == []
    assert "changed=0" in off.stdout


def test_the_hooks_are_hook_scripts_text(installed):
    tmp_path, prefix, _, _ = installed
    config = str(tmp_path / "etc" / "slurm.toml")
    for kind in ("task-prolog", "epilog"):
        path = prefix / "bin" / f"epochscope-{kind}"
        assert path.read_text() == hook_script(kind, f"{prefix}/bin/python", config)
        assert stat.S_IMODE(path.stat().st_mode) == 0o755
    assert (tmp_path / "state" / "jobs").is_dir()


def test_the_file_holds_the_inventory_values_and_no_token(installed):
    tmp_path, prefix, _, _ = installed
    path = tmp_path / "etc" / "slurm.toml"
    site = SlurmSite.load(path)
    assert site == SlurmSite(
        collector_url="http://head01:8086",
        token_file="/etc/epochscope/tokens/{user}",
        spool_root="{home}/.cache/epochscope/spool/workloads",
        partitions=("gpu", "a100"),
        comment="epochscope",
        step_every=5,
        agent_port=9711,  # the agent's /metrics port
        summary_dir=str(tmp_path / "state" / "jobs"),
        collector_command=(f"{prefix}/bin/python", "-I", "-m", "collector"),
        summary_timeout_seconds=30.0,
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_the_rendered_task_prolog_prints_an_opted_in_jobs_exports(installed, repo_env):
    tmp_path, prefix, _, _ = installed
    prolog = prefix / "bin" / "epochscope-task-prolog"
    # Its #! names the prefix's Python (absent here): run its text with this checkout's
    env = {**repo_env, "SLURM_JOB_ID": "77", "SLURM_JOB_PARTITION": "gpu", "HOME": str(tmp_path)}
    env.pop("EPOCHSCOPE_PROFILE", None)
    result = subprocess.run([sys.executable, str(prolog)], capture_output=True, text=True,
                            env=env, timeout=120)  # fmt: skip
    assert result.returncode == 0
    # the token file /etc/epochscope/tokens/<user> does not exist here: not profiled, said why
    assert result.stdout == "" and "cannot read the token file" in result.stderr
    token = tmp_path / "token"
    token.write_text("t0k3n\n")
    token.chmod(0o600)
    config = (tmp_path / "etc" / "slurm.toml").read_text()
    own = tmp_path / "own.toml"
    own.write_text(
        config.replace('"/etc/epochscope/tokens/{user}"', json.dumps(str(token))).replace(
            '"{home}/.cache', json.dumps(str(tmp_path))[:-1] + "/.cache"
        )
    )
    text = prolog.read_text().replace(str(tmp_path / "etc" / "slurm.toml"), str(own))
    (tmp_path / "prolog.py").write_text(text)
    result = subprocess.run([sys.executable, str(tmp_path / "prolog.py")], capture_output=True,
                            text=True, env=env, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = dict(line.removeprefix("export ").split("=", 1) for line in result.stdout.split("\n")
                 if line)  # fmt: skip
    assert set(lines) == {
        "EPOCHSCOPE_WORKLOAD_TOKEN_FILE", "PYTHONPATH", "EPOCHSCOPE_PROFILE_RUN",
        "EPOCHSCOPE_AGENT_PORT",
    }  # fmt: skip
    assert all(shlex.quote(value) == value for value in lines.values())
    assert "t0k3n" not in result.stdout + result.stderr
    assert lines["PYTHONPATH"].startswith(str(REPO_ROOT / "workloads" / "autoprofile" / "site"))
