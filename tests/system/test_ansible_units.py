"""The pieces of the Ansible roles that run without SSH: epochscope-servicectl (with real
processes), the rendered agent.toml (parsed back with tomllib) and the systemd units
(rendered by ansible-playbook from the roles, then `systemd-analyze verify`; systemd is not
PID 1 here, so starting them is out of reach and that path is checked this far only)."""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from test_ansible_harness import ANSIBLE_DIR, ANSIBLE_PLAYBOOK, BUILD_WHEEL, REPO_ROOT, pid_alive

SERVICECTL = ANSIBLE_DIR / "roles" / "epochscope_package" / "files" / "servicectl.py"
SLEEPER = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: (print('got SIGTERM', flush=True), sys.exit(0)))\n"
    "print('up', flush=True)\n"
    "time.sleep(600)\n"
)


def ctl(spec_path: Path, action: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SERVICECTL), str(spec_path), action],
        capture_output=True,
        text=True,
        timeout=60,
    )


def write_spec(tmp_path: Path, argv: list[str], **extra) -> Path:
    spec = {
        "name": "sleeper",
        "argv": argv,
        "pidfile": str(tmp_path / "run" / "sleeper.pid"),
        "logfile": str(tmp_path / "log" / "sleeper.log"),
        "stop_timeout": 10,
        **extra,
    }
    path = tmp_path / "sleeper.json"
    path.write_text(json.dumps(spec))
    return path


def pid_of(result: subprocess.CompletedProcess) -> int:
    return int(result.stdout.split()[-1])


@pytest.fixture
def sleeper_spec(tmp_path):
    spec = write_spec(tmp_path, [sys.executable, "-c", SLEEPER])
    yield spec
    ctl(spec, "stop")


def test_servicectl_start_stop_restart_status_are_idempotent(sleeper_spec, tmp_path):
    assert ctl(sleeper_spec, "status").returncode == 3
    first = ctl(sleeper_spec, "start")
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("started pid ")
    pid = pid_of(first)
    assert pid_alive(pid)

    again = ctl(sleeper_spec, "start")
    assert again.stdout.strip() == f"already running pid {pid}"
    status = ctl(sleeper_spec, "status")
    assert (status.returncode, status.stdout.strip()) == (0, f"running pid {pid}")

    restarted = ctl(sleeper_spec, "restart")
    assert restarted.stdout.startswith("restarted pid ")
    new_pid = pid_of(restarted)
    assert new_pid != pid and not pid_alive(pid) and pid_alive(new_pid)

    stopped = ctl(sleeper_spec, "stop")
    assert stopped.stdout.strip() == f"stopped pid {new_pid}"
    assert not pid_alive(new_pid)
    assert ctl(sleeper_spec, "stop").stdout.strip() == "not running"
    assert not (tmp_path / "run" / "sleeper.pid").exists()
    # Both runs logged, and both got SIGTERM (not SIGKILL): the daemon could flush.
    log = (tmp_path / "log" / "sleeper.log").read_text()
    assert log.count("up\n") == 2 and log.count("got SIGTERM\n") == 2


def test_servicectl_never_signals_a_reused_pid(sleeper_spec, tmp_path):
    # A stale pidfile naming a live process that is not the daemon (this test's own pid).
    pidfile = tmp_path / "run" / "sleeper.pid"
    pidfile.parent.mkdir()
    argv = json.loads(sleeper_spec.read_text())["argv"]
    pidfile.write_text(f"{os.getpid()}\n{json.dumps(argv)}\n")
    assert ctl(sleeper_spec, "stop").stdout.strip() == "not running"
    started = ctl(sleeper_spec, "start")
    assert started.stdout.startswith("started pid ")
    assert pid_of(started) != os.getpid()


def test_servicectl_stops_a_daemon_started_from_an_older_spec(sleeper_spec):
    pid = pid_of(ctl(sleeper_spec, "start"))
    spec = json.loads(sleeper_spec.read_text())
    spec["argv"] = [*spec["argv"], "--new-option"]
    sleeper_spec.write_text(json.dumps(spec))
    assert ctl(sleeper_spec, "stop").stdout.strip() == f"stopped pid {pid}"
    assert not pid_alive(pid)


def test_servicectl_reports_a_daemon_that_dies_at_once(tmp_path):
    spec = write_spec(tmp_path, [sys.executable, "-c", "print('bad config: no [push]'); exit(2)"])
    result = ctl(spec, "start")
    assert result.returncode == 1
    assert "exited right after starting" in result.stderr
    assert "bad config: no [push]" in result.stderr
    assert not (tmp_path / "run" / "sleeper.pid").exists()


def test_servicectl_reports_a_missing_program(tmp_path):
    spec = write_spec(tmp_path, [str(tmp_path / "no-such-venv" / "bin" / "python")])
    result = ctl(spec, "start")
    assert result.returncode == 1
    assert "could not start" in result.stderr and "No such file" in result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="switching accounts needs root")
def test_servicectl_runs_the_daemon_as_the_configured_account(tmp_path):
    nobody = pwd.getpwnam("nobody")
    tmp_path.chmod(0o755)
    # The system interpreter: the test venv's resolves under /root (0700), out of nobody's reach.
    spec = write_spec(tmp_path, ["/usr/bin/python3", "-c", SLEEPER], user="nobody", group="nogroup")
    try:
        pid = pid_of(ctl(spec, "start"))
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        uid = next(line for line in status if line.startswith("Uid:")).split()[1:]
        assert uid == [str(nobody.pw_uid)] * 4
        assert (tmp_path / "log" / "sleeper.log").stat().st_uid == nobody.pw_uid
    finally:
        ctl(spec, "stop")


SERVICECTL_PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: {roles}/epochscope_package
        tasks_from: servicectl.yml
      vars:
        epochscope_package_prefix: {prefix}
"""


def test_installed_servicectl_runs_as_the_docs_show_it(tmp_path):
    """docs/deploy.md has admins run /opt/epochscope/bin/epochscope-servicectl SPEC status
    from their shell: the role's copy must start with a line naming the venv's Python and be
    executable, not need `python` in front of it."""
    prefix = tmp_path / "opt" / "epochscope"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").symlink_to(sys.executable)
    playbook = tmp_path / "servicectl.yml"
    playbook.write_text(SERVICECTL_PLAYBOOK.format(roles=ANSIBLE_DIR / "roles", prefix=prefix))
    run_local_playbook(tmp_path, playbook, {})
    installed = prefix / "bin" / "epochscope-servicectl"
    assert installed.read_text().splitlines()[0] == f"#!{prefix}/bin/python"
    assert installed.stat().st_mode & 0o777 == 0o755
    # The rest is the script itself, its own first line (for running it from the checkout)
    # replaced.
    source = SERVICECTL.read_text().splitlines()
    assert source[0].startswith("#!")
    assert installed.read_text().splitlines()[1:] == source[1:]
    spec = write_spec(tmp_path, [sys.executable, "-c", SLEEPER])
    # As typed at a bash prompt: the program, the spec, the action (no interpreter before).
    as_typed = ["bash", "-c", '"$0" "$1" "$2"', str(installed), str(spec)]
    try:
        assert subprocess.run([*as_typed, "status"], capture_output=True).returncode == 3
        started = subprocess.run([*as_typed, "start"], capture_output=True, text=True, timeout=60)
        assert started.returncode == 0, started.stderr
        assert started.stdout.startswith("started pid ")
        status = subprocess.run([*as_typed, "status"], capture_output=True, text=True)
        assert (status.returncode, status.stdout.strip()) == (0, f"running pid {pid_of(started)}")
    finally:
        subprocess.run([*as_typed, "stop"], capture_output=True, timeout=60)


# --- templates rendered by Ansible itself, from the roles' defaults ---

RENDER_PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars_files:
    - {roles}/epochscope_agent/defaults/main.yml
    - {roles}/epochscope_agent/vars/main.yml
  tasks:
    - ansible.builtin.template:
        src: {roles}/epochscope_agent/templates/agent.toml.j2
        dest: {out}/agent.toml
        mode: "0600"
    - ansible.builtin.template:
        src: {roles}/epochscope_agent/templates/epochscope-agent.service.j2
        dest: {out}/epochscope-agent.service
        mode: "0644"

- hosts: localhost
  gather_facts: false
  vars_files:
    - {roles}/epochscope_collector/defaults/main.yml
    - {roles}/epochscope_collector/vars/main.yml
  tasks:
    - ansible.builtin.template:
        src: {roles}/epochscope_collector/templates/server.service.j2
        dest: "{out}/{{{{ item.name }}}}.service"
        mode: "0644"
      loop: "{{{{ epochscope_collector_services }}}}"
"""


def render(tmp_path: Path, extra_vars: dict) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    playbook = tmp_path / "render.yml"
    playbook.write_text(RENDER_PLAYBOOK.format(roles=ANSIBLE_DIR / "roles", out=out))
    run_local_playbook(tmp_path, playbook, extra_vars)
    return out


def run_local_playbook(tmp_path: Path, playbook: Path, extra_vars: dict) -> None:
    """ansible-playbook on this machine (connection local), with extra_vars."""
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(json.dumps(extra_vars))
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0")
    env["ANSIBLE_LOCAL_TEMP"] = str(tmp_path / "ansible-tmp")
    result = subprocess.run(
        [
            str(ANSIBLE_PLAYBOOK),
            "-i",
            "localhost,",
            "-c",
            "local",
            str(playbook),
            "-e",
            f"@{vars_file}",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("render")
    prefix = tmp_path / "opt" / "epochscope"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").symlink_to(sys.executable)
    server = tmp_path / "opt" / "epochscope-server"
    (server / "bin").mkdir(parents=True)
    (server / "bin" / "python").symlink_to(sys.executable)
    extra = {
        "epochscope_prefix": str(prefix),
        "epochscope_collector_prefix": str(server),
        "epochscope_host_tag": "gpu07",
        # Quotes, a backslash and non-ASCII must survive TOML quoting.
        "epochscope_token": 'a"b\\c é',
        "epochscope_push_url": "http://head01:8086",
        "epochscope_samplers": ["cpu", "net", "gpu"],
        "epochscope_interval_seconds": 5,
        "epochscope_spool_max_bytes": 1048576,
        "epochscope_collector_retention_days": 30,
        "epochscope_dashboard_auth": "admin:secret",
    }
    return render(tmp_path, extra), prefix


def test_agent_toml_holds_exactly_the_inventory_values(rendered):
    out, _ = rendered
    config = tomllib.loads((out / "agent.toml").read_text())
    assert config == {
        "host": "gpu07",
        "interval_seconds": 5,
        "proc_root": "/proc",
        "sys_root": "/sys",
        "samplers": ["cpu", "net", "gpu"],
        "gpu_call_timeout_seconds": 5.0,
        "ceilings_file": "/var/lib/epochscope/ceilings.json",  # agent ceilings keeps them
        "push": {
            "url": "http://head01:8086",
            "token": 'a"b\\c é',
            "bucket": "epochscope",
            "org": "epochscope",
            "spool_dir": "/var/lib/epochscope/spool",
            "spool_max_bytes": 1048576,
            "batch_seconds": 5,
            "spool_sync": "segment",
        },
        "metrics": {"listen": "127.0.0.1:9711"},
    }
    assert (out / "agent.toml").stat().st_mode & 0o777 == 0o600


def test_agent_unit_is_hardened_but_keeps_gpu_proc_and_sys(rendered):
    out, prefix = rendered
    unit = (out / "epochscope-agent.service").read_text()
    settings = [line for line in unit.splitlines() if "=" in line and not line.startswith("#")]
    assert (
        f"ExecStart={prefix}/bin/python -m agent run --config /etc/epochscope/agent.toml"
        in settings
    )
    for line in (
        "Restart=always",
        "User=epochscope",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "ReadWritePaths=/var/lib/epochscope/spool",
        "DevicePolicy=closed",
        "DeviceAllow=char-nvidia* rw",
        "CapabilityBoundingSet=",
        "LimitNOFILE=65536",
    ):
        assert line in settings
    assert not any(
        line.startswith(("PrivateDevices", "ProtectProc", "InaccessiblePaths")) for line in settings
    )


def test_collector_units_run_serve_and_dashboard(rendered):
    out, _ = rendered
    collector = (out / "epochscope-collector.service").read_text()
    assert "-m collector serve --db /var/lib/epochscope-collector/epochscope.sqlite" in collector
    assert "--listen 0.0.0.0:8086 --token-file /etc/epochscope/collector.token" in collector
    assert "--retention-days 30" in collector
    assert "ReadWritePaths=/var/lib/epochscope-collector" in collector
    dashboard = (out / "epochscope-dashboard.service").read_text()
    assert "-m dashboard serve --db /var/lib/epochscope-collector/epochscope.sqlite" in dashboard
    assert "--host 127.0.0.1 --port 8050" in dashboard
    # The password comes from a 0600 environment file, never the command line.
    assert "EnvironmentFile=/etc/epochscope/epochscope-dashboard.env" in dashboard
    assert "secret" not in dashboard
    assert "EnvironmentFile" not in collector
    # every client connection is a descriptor: far above the default soft limit of 1024
    for unit in (collector, dashboard):
        assert "LimitNOFILE=65536" in unit.splitlines()


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)
@pytest.mark.parametrize(
    "unit",
    ["epochscope-agent.service", "epochscope-collector.service", "epochscope-dashboard.service"],
)
def test_units_pass_systemd_analyze_verify(rendered, unit):
    out, _ = rendered
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(out / unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Only complaints about this unit count (the host's other units may have their own).
    complaints = [line for line in (result.stdout + result.stderr).splitlines() if unit in line]
    assert result.returncode == 0 and complaints == [], result.stdout + result.stderr


def readme_env() -> dict[str, str]:
    """The environment of an admin who typed the README's command: no ANSIBLE_CONFIG."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    return env | {"ANSIBLE_NOCOLOR": "1"}


def test_every_yaml_file_parses_and_the_playbooks_pass_syntax_check(tmp_path):
    import yaml

    for path in ANSIBLE_DIR.rglob("*.yml"):
        yaml.safe_load(path.read_text())
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("[epochscope_agents]\nnode1\n[epochscope_collector]\nhead\n")
    for playbook in ("site.yml", "deploy-agents.yml", "deploy-collector.yml"):
        # As the README runs them: from the repository root, the playbook's relative path.
        result = subprocess.run(
            [str(ANSIBLE_PLAYBOOK), "-i", str(inventory), "--syntax-check", f"ansible/{playbook}"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO_ROOT,
            env=readme_env(),
        )
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("cwd", [REPO_ROOT, ANSIBLE_DIR], ids=["repository root", "ansible/"])
def test_the_readme_command_reads_the_playbooks_settings(cwd):
    """The README runs ansible-playbook from the repository root: ansible/ansible.cfg's
    settings (forks, pipelining...) must apply there as well as from ansible/."""
    version = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "--version"],
        capture_output=True, text=True, timeout=120, cwd=cwd, env=readme_env(),
    )  # fmt: skip
    assert version.returncode == 0, version.stderr
    assert f"config file = {cwd / 'ansible.cfg'}" in version.stdout, version.stdout
    dump = subprocess.run(
        [str(ANSIBLE_PLAYBOOK.with_name("ansible-config")), "dump", "--only-changed"],
        capture_output=True, text=True, timeout=120, cwd=cwd, env=readme_env(),
    )  # fmt: skip
    assert dump.returncode == 0, dump.stderr
    settings = {
        line.split("(", 1)[0]: line.rsplit(" = ", 1)[1]
        for line in dump.stdout.splitlines()
        if " = " in line
    }
    assert settings["ANSIBLE_PIPELINING"] == "True"
    assert settings["DEFAULT_FORKS"] == "32"
    assert settings["ANY_ERRORS_FATAL"] == "False"
    assert settings["INTERPRETER_PYTHON"] == "auto_silent"
    # One file: the root's ansible.cfg is ansible/ansible.cfg.
    assert (REPO_ROOT / "ansible.cfg").resolve() == (ANSIBLE_DIR / "ansible.cfg").resolve()


def test_check_mode_on_a_fresh_systemd_node_changes_nothing(tmp_path):
    """deploy-agents.yml --check --diff with the default service manager on a node that has
    nothing yet: the unit is not written, so the play must not ask systemd about it (on a
    real node the module fails on a missing unit; here, where systemd is not PID 1, any
    question to systemd fails, so the test is stricter). The node is this machine, reached
    with connection=local; the wheel is a stand-in (check mode installs nothing)."""
    wheel = fake_wheel(tmp_path / "dist", "epochscope", "0.1.0", [])
    root = tmp_path / "node"
    service = "epochscope-agent-test-" + os.urandom(4).hex()
    account = "estest" + os.urandom(4).hex()
    unit = Path("/etc/systemd/system") / f"{service}.service"
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        "[epochscope_agents]\n"
        "node1 ansible_connection=local ansible_python_interpreter=/usr/bin/python3\n"
    )
    variables = {
        "epochscope_become": False,
        "epochscope_python": "/usr/bin/python3",
        "epochscope_wheel": str(wheel),
        "epochscope_service_manager": "systemd",
        "epochscope_service_name": service,
        "epochscope_user": account,
        "epochscope_prefix": str(root / "opt" / "epochscope"),
        "epochscope_config_dir": str(root / "etc" / "epochscope"),
        "epochscope_state_dir": str(root / "var" / "lib" / "epochscope"),
        "epochscope_push_url": "http://127.0.0.1:9",
        "epochscope_token": "tok-check-mode-secret",
    }
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(json.dumps(variables))
    env = readme_env() | {"ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp")}
    result = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(inventory), "ansible/deploy-agents.yml",
         "--check", "--diff", "-e", f"@{vars_file}"],
        capture_output=True, text=True, timeout=300, cwd=REPO_ROOT, env=env,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert re.search(r"node1\s+: ok=\d+\s+changed=[1-9]", output), output
    assert "ExecStart=" in output  # --diff: the unit a real run would write
    assert "tok-check-mode-secret" not in output
    assert not unit.exists()
    assert not root.exists()
    with pytest.raises(KeyError):
        pwd.getpwnam(account)


# --- build_wheel.py: the one tar every node gets ---


def fake_wheel(directory: Path, name: str, version: str, requires: list[str]) -> Path:
    """A wheel file with just the METADATA the bundle reads (pip never sees these)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-{version}-py3-none-any.whl"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}-{version}.dist-info/METADATA", metadata)
    return path


def bundle(out_dir: Path, *args: str) -> dict:
    out_dir.mkdir(parents=True)
    result = subprocess.run(
        [sys.executable, str(BUILD_WHEEL), "bundle", str(out_dir), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def members(tar_path: str) -> list[str]:
    with tarfile.open(tar_path) as tar:
        return tar.getnames()


def test_bundle_is_the_same_bytes_for_the_same_wheels_and_carries_one_epochscope(tmp_path):
    wheel = fake_wheel(tmp_path / "dist", "epochscope", "0.1.0", ["psutil>=5.9"])
    wheelhouse = tmp_path / "wheelhouse"
    fake_wheel(wheelhouse, "psutil", "7.0.0", [])
    # `pip download dist/epochscope-...whl` leaves a copy of the requested wheel in the
    # wheelhouse; an older one must not travel along with the new.
    fake_wheel(wheelhouse, "epochscope", "0.0.9", [])
    first = bundle(tmp_path / "a", "--wheel", str(wheel), "--wheelhouse", str(wheelhouse))
    second = bundle(tmp_path / "b", "--wheel", str(wheel), "--wheelhouse", str(wheelhouse))
    assert first["sha256"] == second["sha256"]
    assert Path(first["bundle"]).read_bytes() == Path(second["bundle"]).read_bytes()
    assert members(first["bundle"]) == [
        "epochscope-0.1.0-py3-none-any.whl",
        "psutil-7.0.0-py3-none-any.whl",
    ]
    assert first["wheel"] == "epochscope-0.1.0-py3-none-any.whl"
    assert first["offline"] is True

    alone = bundle(tmp_path / "c", "--wheel", str(wheel))
    assert members(alone["bundle"]) == ["epochscope-0.1.0-py3-none-any.whl"]
    assert alone["offline"] is False
    assert alone["sha256"] != first["sha256"]


def load_build_wheel():
    spec = importlib.util.spec_from_file_location("build_wheel", BUILD_WHEEL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_downloaded_wheelhouse_is_reused_from_the_cache_by_what_it_holds(tmp_path):
    build_wheel = load_build_wheel()
    wheel = fake_wheel(tmp_path / "dist", "epochscope", "0.1.0", ["psutil>=5.9"])
    cache = tmp_path / "cache"
    key = build_wheel.wheelhouse_key(wheel, ["server"], [])
    # Another extra, another Python argument or other requirements: another wheelhouse.
    assert key != build_wheel.wheelhouse_key(wheel, [], [])
    assert key != build_wheel.wheelhouse_key(wheel, ["server"], ["--python-version", "3.12"])
    newer = fake_wheel(tmp_path / "dist2", "epochscope", "0.2.0", ["psutil>=6"])
    assert key != build_wheel.wheelhouse_key(newer, ["server"], [])
    # A complete wheelhouse under that key is used as it is, without pip (which would fetch
    # a real psutil wheel, not this fake 7.0.0 one).
    fake_wheel(cache / f"wheelhouse-{key}", "psutil", "7.0.0", [])
    made = bundle(
        tmp_path / "out", "--wheel", str(wheel), "--download", str(cache), "--extras", "server"
    )
    assert made["offline"] is True
    assert members(made["bundle"]) == [
        "epochscope-0.1.0-py3-none-any.whl",
        "psutil-7.0.0-py3-none-any.whl",
    ]
    assert [p.name for p in cache.iterdir()] == [f"wheelhouse-{key}"]


@pytest.mark.slow
def test_building_from_the_same_checkout_twice_gives_the_same_tar(tmp_path):
    # What makes a second playbook run report changed=0 when it builds the wheel itself
    # (no epochscope_wheel): the same sources must give the same bytes.
    repo = ANSIBLE_DIR.parent
    first = bundle(tmp_path / "a", "--source", str(repo))
    second = bundle(tmp_path / "b", "--source", str(repo))
    assert first["sha256"] == second["sha256"]
    assert members(first["bundle"]) == [first["wheel"]]
