"""The agent's configuration: TOML, environment overrides, refusals with the key named."""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agent import config
from agent.config import ConfigError, MetricsListen, Secret


def write(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_defaults_without_a_file():
    loaded = config.load(None, environ={})
    assert loaded.host == socket.gethostname()
    assert loaded.interval_seconds == 1.0
    assert loaded.proc_root == Path("/proc") and loaded.sys_root == Path("/sys")
    assert loaded.samplers is None  # every sampler that finds its data
    assert loaded.push is None
    assert loaded.metrics == MetricsListen("127.0.0.1", 9711)


def test_full_file(tmp_path):
    path = write(
        tmp_path,
        """
host = "gpu-node-07"
interval_seconds = 2
proc_root = "/host/proc"
sys_root = "/host/sys"
samplers = ["cpu", "disk", "cpu"]

[push]
url = "http://head:8086/"
token = "abc"
bucket = "cluster"
org = "lab"
spool_dir = "/tmp/spool"
spool_max_bytes = 1048576
batch_seconds = 0

[metrics]
listen = ""
""",
    )
    loaded = config.load(path, environ={})
    assert loaded.host == "gpu-node-07"
    assert loaded.interval_seconds == 2.0
    assert loaded.proc_root == Path("/host/proc") and loaded.sys_root == Path("/host/sys")
    assert loaded.samplers == ("cpu", "disk")  # order kept, repeat dropped
    assert loaded.push is not None
    assert loaded.push.url == "http://head:8086"
    assert loaded.push.token == Secret("abc")
    assert (loaded.push.bucket, loaded.push.org) == ("cluster", "lab")
    assert loaded.push.spool_dir == Path("/tmp/spool")
    assert loaded.push.spool_max_bytes == 1048576
    assert loaded.push.batch_seconds == 0
    assert loaded.metrics is None  # "" turns /metrics off


def test_push_defaults(tmp_path):
    loaded = config.load(write(tmp_path, '[push]\nurl = "http://h:1"\n'), environ={})
    assert loaded.push == config.PushConfig(
        url="http://h:1",
        token=None,
        bucket="epochscope",
        org="epochscope",
        spool_dir=Path("/var/lib/epochscope/spool"),
        spool_max_bytes=512 * 2**20,
        batch_seconds=5.0,
    )


def test_environment_overrides_file(tmp_path):
    path = write(tmp_path, 'interval_seconds = 5\n[push]\nurl = "http://h:1"\ntoken = "file"\n')
    loaded = config.load(
        path,
        environ={
            "EPOCHSCOPE_INTERVAL_SECONDS": "0.5",
            "EPOCHSCOPE_PUSH_TOKEN": "from-env",
            "EPOCHSCOPE_PUSH_SPOOL_MAX_BYTES": "4096",
            "EPOCHSCOPE_SAMPLERS": "net, memory",
            "EPOCHSCOPE_METRICS_LISTEN": "[::1]:9100",
            "EPOCHSCOPE_HOST": "envhost",
            "EPOCHSCOPE_SHARED": "/elsewhere",  # not a config key: ignored
        },
    )
    assert loaded.interval_seconds == 0.5
    assert loaded.push.token == Secret("from-env")
    assert loaded.push.spool_max_bytes == 4096
    assert loaded.samplers == ("net", "memory")
    assert loaded.metrics == MetricsListen("::1", 9100)
    assert loaded.host == "envhost"


def test_gpu_call_timeout_from_the_file_and_the_environment(tmp_path):
    assert config.load(None, environ={}).gpu_call_timeout_seconds == 5.0
    path = tmp_path / "agent.toml"
    path.write_text("gpu_call_timeout_seconds = 2.5\n")
    assert config.load(path, environ={}).gpu_call_timeout_seconds == 2.5
    environ = {"EPOCHSCOPE_GPU_CALL_TIMEOUT_SECONDS": "0.5"}
    assert config.load(path, environ=environ).gpu_call_timeout_seconds == 0.5


def test_metrics_limits_from_the_file_and_the_environment(tmp_path):
    defaults = config.load(None, environ={}).metrics
    assert defaults is not None
    assert (defaults.limits.max_connections, defaults.limits.header_timeout) == (64, 10.0)
    assert defaults.limits.idle_timeout == 75.0
    path = write(tmp_path, "[metrics]\nmax_connections = 8\nheader_timeout_seconds = 2.5\n")
    environ = {"EPOCHSCOPE_METRICS_IDLE_TIMEOUT_SECONDS": "30"}
    limits = config.load(path, environ=environ).metrics.limits
    assert (limits.max_connections, limits.header_timeout, limits.idle_timeout) == (8, 2.5, 30.0)


def test_push_can_come_from_the_environment_alone():
    loaded = config.load(
        None, environ={"EPOCHSCOPE_PUSH_URL": "https://c:8086", "EPOCHSCOPE_PUSH_ORG": "x"}
    )
    assert loaded.push.url == "https://c:8086" and loaded.push.org == "x"


@pytest.mark.parametrize(
    ("text", "environ", "key", "reason"),
    [
        ("colour = 1", {}, "colour", "unknown key"),
        ("[push]\nurll = 'x'", {}, "push.urll", "unknown key"),
        ("[gpu]\nx = 1", {}, "gpu", "unknown key"),
        ("interval_seconds = 'fast'", {}, "interval_seconds", "must be a number (got str)"),
        ("interval_seconds = true", {}, "interval_seconds", "must be a number"),
        ("interval_seconds = 0.05", {}, "interval_seconds", "must be >= 0.1"),
        ("interval_seconds = nan", {}, "interval_seconds", "must be >= 0.1"),
        ("interval_seconds = 1e9", {}, "interval_seconds", "<= 3600"),
        ("interval_seconds = inf", {}, "interval_seconds", "<= 3600"),
        ("gpu_call_timeout_seconds = 0", {}, "gpu_call_timeout_seconds", "must be >= 0.01"),
        ("gpu_call_timeout_seconds = nan", {}, "gpu_call_timeout_seconds", "must be >= 0.01"),
        ("", {"EPOCHSCOPE_GPU_CALL_TIMEOUT_SECONDS": "x"}, "gpu_call_timeout_seconds", "number"),
        ("host = 'node\\\\'", {}, "host", "backslash"),
        ('host = "a\\tb"', {}, "host", "control characters"),
        ("host = ' '", {}, "host", "blank"),
        ("[push]\nurl = 'http://'", {}, "push.url", "names no host"),
        ("[push]\nurl = 'https://:8086'", {}, "push.url", "names no host"),
        ("[push]\nurl = 'http://h:99999'", {}, "push.url", "0..65535"),
        ("[push]\nurl = 'http://h:x'", {}, "push.url", "0..65535"),
        ("[push]\nurl = 'http://h 1'", {}, "push.url", "spaces"),
        ("", {"EPOCHSCOPE_HOST": "n1\\"}, "host", "backslash"),
        ("samplers = 'cpu'", {}, "samplers", "must be a list of strings"),
        ("samplers = ['cpu', 'tpu']", {}, "samplers", "unknown sampler 'tpu'"),
        ("[push]\nurl = 'h:1'", {}, "push.url", "must start with http://"),
        ("[push]\nurl = 'http://h'\nspool_max_bytes = 0", {}, "push.spool_max_bytes", "> 0"),
        ("[push]\nurl = 'http://h'\nspool_max_bytes = 1.5", {}, "push.spool_max_bytes", "integer"),
        ("[push]\nurl = 'http://h'\ntoken = 'a'\ntoken_file = 'b'", {}, "push.token", "not both"),
        ("[push]\nurl = 'http://h'\nbucket = ''", {}, "push.bucket", "must not be empty"),
        ("[push]\nurl = 'http://h'\nbatch_seconds = -1", {}, "push.batch_seconds", "0..3600"),
        ("[push]\nurl = 'http://h'\nspool_sync = 'always'", {}, "push.spool_sync", '"batch"'),
        ("push = 1", {}, "push", "must be a table"),
        ("[metrics]\nlisten = '127.0.0.1'", {}, "metrics.listen", "ADDRESS:PORT"),
        ("[metrics]\nlisten = '127.0.0.1:70000'", {}, "metrics.listen", "0..65535"),
        ("[metrics]\nmax_connections = 0", {}, "metrics.max_connections", "at least 1"),
        ("[metrics]\nmax_connections = 2.5", {}, "metrics.max_connections", "integer"),
        ("[metrics]\nheader_timeout_seconds = 0", {}, "metrics.header_timeout_seconds", "> 0"),
        ("[metrics]\nidle_timeout_seconds = nan", {}, "metrics.idle_timeout_seconds", "> 0"),
        ("", {"EPOCHSCOPE_INTERVAL_SECONDS": "soon"}, "interval_seconds", "from the environment"),
        ("", {"EPOCHSCOPE_PUSH_SPOOL_MAX_BYTES": "1e3"}, "push.spool_max_bytes", "integer"),
    ],
)
def test_bad_config_names_the_key_and_the_reason(tmp_path, text, environ, key, reason):
    with pytest.raises(ConfigError) as raised:
        config.load(write(tmp_path, text), environ=environ)
    assert raised.value.key == key
    assert reason in raised.value.reason


def test_invalid_toml_gives_the_line(tmp_path):
    with pytest.raises(ConfigError, match=r"invalid TOML: .*line 2"):
        config.load(write(tmp_path, 'host = "a"\nthis is not toml\n'), environ={})


def test_token_file_and_its_permissions(tmp_path, caplog):
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    token_file.chmod(0o644)
    path = write(tmp_path, f'[push]\nurl = "http://h:1"\ntoken_file = "{token_file}"\n')
    with caplog.at_level(logging.WARNING):
        loaded = config.load(path, environ={})
    assert loaded.push.token == Secret("from-file")
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "readable by group/others (mode 644)" in warnings[0]
    assert "from-file" not in warnings[0]

    token_file.chmod(0o600)
    caplog.clear()
    config.load(path, environ={})
    assert caplog.records == []

    with pytest.raises(ConfigError, match=r"push\.token_file: cannot read"):
        config.load(
            write(tmp_path, f'[push]\nurl = "http://h"\ntoken_file = "{tmp_path}/none"\n'),
            environ={},
        )


def test_config_file_with_token_readable_by_others_warns_once_without_the_token(tmp_path, caplog):
    path = write(tmp_path, '[push]\nurl = "http://h:1"\ntoken = "hunter2"\n', mode=0o640)
    with caplog.at_level(logging.WARNING):
        config.load(path, environ={})
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert "config file with a push token" in messages[0] and "mode 640" in messages[0]
    assert "hunter2" not in messages[0]

    caplog.clear()
    path.chmod(0o600)
    config.load(path, environ={})
    assert caplog.records == []
    # No token in the file: its mode does not matter.
    path.write_text('[push]\nurl = "http://h:1"\n')
    path.chmod(0o644)
    config.load(path, environ={})
    assert caplog.records == []


def test_secret_never_shows_itself():
    secret = Secret("hunter2")
    loaded = config.build({"push": {"url": "http://h", "token": "hunter2"}})
    for text in (repr(secret), str(secret), repr(loaded), str(loaded), f"{loaded.push}"):
        assert "hunter2" not in text
    assert secret.reveal() == "hunter2"


def test_agent_run_refuses_a_bad_config_with_exit_2(tmp_path, repo_env):
    path = write(tmp_path, '[push]\nurl = "http://h:1"\ntoken = "hunter2"\nspool_max_bytes = -5\n')
    result = subprocess.run(
        [sys.executable, "-m", "agent", "run", "--config", str(path)],
        capture_output=True,
        text=True,
        env=repo_env,
        timeout=30,
    )
    assert result.returncode == 2
    assert "push.spool_max_bytes: must be > 0 (got -5)" in result.stderr
    assert "hunter2" not in result.stderr + result.stdout


def test_agent_run_refuses_an_unknown_key_from_the_environment_value(tmp_path, repo_env):
    env = dict(repo_env, EPOCHSCOPE_SAMPLERS="cpu,quantum")
    result = subprocess.run(
        [sys.executable, "-m", "agent", "run"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert result.returncode == 2
    assert "samplers: unknown sampler 'quantum'" in result.stderr


def test_agent_run_refuses_a_spool_smaller_than_one_tick(tmp_path, repo_env):
    path = write(
        tmp_path,
        f'samplers = ["cpu", "memory"]\n[push]\nurl = "http://127.0.0.1:9"\n'
        f'spool_dir = "{tmp_path / "spool"}"\nspool_max_bytes = 100\n'
        '[metrics]\nlisten = ""\n',
    )
    result = subprocess.run(
        [sys.executable, "-m", "agent", "run", "--config", str(path)],
        capture_output=True,
        text=True,
        env=repo_env,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "push.spool_max_bytes: must hold at least one tick" in result.stderr
    assert "(got 100)" in result.stderr
    assert "Traceback" not in result.stderr


def test_agent_sample_into_a_pipe_closed_early_ends_without_a_traceback(repo_env):
    """`agent sample --once --format json | head -c 100`: the reader is gone before the
    sample is written."""
    process = subprocess.Popen(
        [sys.executable, "-m", "agent", "sample", "--once", "--format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=repo_env,
    )
    process.stdout.close()  # before the agent has sampled anything, so its writes fail
    _, stderr = process.communicate(timeout=60)
    assert "Traceback" not in stderr.decode(), stderr.decode()
    assert process.returncode == 128 + signal.SIGPIPE


def test_cgroup_root_defaults_under_sys_root_and_can_be_set(tmp_path):
    from agent.samplers.base import Roots

    loaded = config.load(None, environ={})
    assert loaded.cgroup_root is None
    assert Roots(loaded.proc_root, loaded.sys_root).cgroup_root == Path("/sys/fs/cgroup")
    assert Roots(sys=Path("/host/sys")).cgroup_root == Path("/host/sys/fs/cgroup")
    path = write(tmp_path, 'cgroup_root = "/host/cgroup"\nsamplers = ["jobs"]\n')
    loaded = config.load(path, environ={})
    assert loaded.cgroup_root == Path("/host/cgroup") and loaded.samplers == ("jobs",)
    from_env = config.load(None, environ={"EPOCHSCOPE_CGROUP_ROOT": "/c"})
    assert from_env.cgroup_root == Path("/c")


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        (f'host = "{"n" * 100_000}"\n', "host", "100,000 characters long"),
        ('host = "*"\n', "host", "reserved"),
        ('host = "all hosts"\n', "host", "reserved"),
        ('host = "n1\\u202e"\n', "host", "U+202E"),
        ('[push]\nurl = "http://h:1"\nspool_dir = "/proc/self"\n', "push.spool_dir", "on a disk"),
        ('[push]\nurl = "http://h:1"\nspool_dir = "/dev/shm/x"\n', "push.spool_dir", "on a disk"),
        ('[push]\nurl = "http://user:pw@h:1"\n', "push.url", "user or password"),
        ('[push]\nurl = "http://h:1"\ntoken = "a\\r\\nX-Evil: 1"\n', "push.token", "line break"),
    ],
)
def test_a_configuration_that_cannot_work_is_refused_before_the_agent_starts(
    tmp_path, text, key, reason
):
    """The hardening report's configs that were accepted and could not work."""
    with pytest.raises(ConfigError) as refused:
        config.load(write(tmp_path, text), environ={})
    assert refused.value.key == key and reason in str(refused.value)
    assert "pw" not in str(refused.value) and "X-Evil" not in str(refused.value)


def test_a_spool_dir_that_is_a_file_is_refused(tmp_path):
    taken = tmp_path / "spool"
    taken.write_text("not a directory")
    text = f'[push]\nurl = "http://h:1"\nspool_dir = "{taken}"\n'
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        config.load(write(tmp_path, text), environ={})
