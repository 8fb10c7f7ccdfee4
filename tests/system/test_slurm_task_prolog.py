"""The Slurm TaskProlog and Epilog (``workloads.autoprofile.slurm``) without Slurm: which
jobs opt in, what a task gets and in what form, the scripts the site installs, the
sitecustomize finding epochscope beside itself, the epilog without ``collector job``.

The real thing (slurmd running the TaskProlog, a PyTorch job profiled, the Epilog) is
``tests/system/test_slurm_zerotouch.py``.
"""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from workloads.autoprofile.config import RUN_ENV, ProfileConfig, site_dir
from workloads.autoprofile.slurm import (
    JobUser,
    NotProfiled,
    SiteConfigError,
    SlurmSite,
    hook_script,
    opted_in,
    python_path,
    run_id_of,
    store_summary,
    task_prolog_lines,
)

SITE = str(site_dir())
JOB = {"SLURM_JOB_ID": "4242", "SLURM_JOB_PARTITION": "cpu", "SLURM_JOB_USER": "alice"}


def never_asked(job_id: str) -> str | None:
    raise AssertionError("the comment was asked though something else decided")


@pytest.fixture
def user(tmp_path) -> JobUser:
    return JobUser("alice", os.getuid(), str(tmp_path / "home"))


@pytest.fixture
def site(tmp_path) -> SlurmSite:
    token = tmp_path / "tokens" / "alice"
    token.parent.mkdir()
    token.write_text("s3cret-token\n")
    token.chmod(0o600)
    return SlurmSite(
        collector_url="http://head01:8086",
        token_file=str(tmp_path / "tokens" / "{user}"),
        spool_root=str(tmp_path / "spool" / "{uid}"),
        partitions=("gpu", "a100"),
    )


# --- who opts in --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("extra", "comment", "why"),
    [
        ({"EPOCHSCOPE_PROFILE": "1"}, None, "EPOCHSCOPE_PROFILE=1"),
        ({"EPOCHSCOPE_PROFILE": "yes"}, None, "EPOCHSCOPE_PROFILE=yes"),
        ({"SLURM_JOB_PARTITION": "gpu"}, None, "partition gpu"),
        ({"SLURM_JOB_PARTITION": "gpu", "EPOCHSCOPE_PROFILE": "0"}, "epochscope", None),
        ({}, "epochscope", "comment epochscope"),
        ({}, "resnet sweep, epochscope", "comment epochscope"),
        ({}, "epochscopes", None),
        ({}, None, None),
        ({"SLURM_JOB_COMMENT": "epochscope"}, None, "comment epochscope"),  # newer Slurm
    ],
)
def test_who_opts_in(site, extra, comment, why):
    asked = []

    def comment_of(job_id: str) -> str | None:
        asked.append(job_id)
        return comment

    environ = {**JOB, **extra}
    assert opted_in(site, environ, comment_of) == why
    decided_before = "EPOCHSCOPE_PROFILE" in extra or extra.get("SLURM_JOB_PARTITION") == "gpu"
    assert asked == ([] if decided_before or "SLURM_JOB_COMMENT" in extra else ["4242"])


def test_no_comment_word_means_no_question_to_slurmctld(site):
    quiet = SlurmSite(collector_url="http://c:1", comment="")
    assert opted_in(quiet, JOB, never_asked) is None
    assert opted_in(site, {**JOB, "EPOCHSCOPE_PROFILE": "1"}, never_asked) is not None


def test_a_job_that_did_not_opt_in_gets_nothing(site, user):
    assert task_prolog_lines(site, JOB, user, lambda job: None) == []


# --- what a task gets -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("step", "run_id"),
    [(None, "slurm-4242"), ("0", "slurm-4242.0"), ("3", "slurm-4242.3"),
     ("4294967294", "slurm-4242"), ("batch", "slurm-4242")],
)  # fmt: skip
def test_run_named_by_job_and_step(step, run_id):
    environ = dict(JOB) if step is None else {**JOB, "SLURM_STEP_ID": step}
    assert run_id_of(environ) == run_id


@pytest.mark.parametrize("job", ["", "42;rm -rf /", "../x", "4 2"])
def test_a_job_id_that_cannot_name_a_run_is_not_profiled(job):
    with pytest.raises(NotProfiled):
        run_id_of({"SLURM_JOB_ID": job})


def test_python_path_puts_the_site_first_and_keeps_the_users_once():
    assert python_path({}) == SITE
    assert python_path({"PYTHONPATH": "/u/lib:/v"}) == f"{SITE}:/u/lib:/v"
    assert python_path({"PYTHONPATH": f"{SITE}:/u/lib"}) == f"{SITE}:/u/lib"  # a step's


def parse(lines: list[str]) -> dict[str, str]:
    """The lines as Slurm reads them: ``export NAME=value``, the value taken literally."""
    out = {}
    for line in lines:
        assert line.startswith("export ")
        name, value = line[len("export ") :].split("=", 1)
        assert shlex.split(value) == [value]  # a shell would read the same value
        out[name] = value
    return out


def test_an_opted_in_task_gets_the_run_the_token_file_and_the_site_first(site, user, tmp_path):
    environ = {**JOB, "SLURM_STEP_ID": "0", "EPOCHSCOPE_PROFILE": "1", "PYTHONPATH": "/u/lib"}
    lines = task_prolog_lines(site, environ, user, never_asked)
    assert "s3cret-token" not in "\n".join(lines)
    got = parse(lines)
    assert got["PYTHONPATH"] == f"{SITE}:/u/lib"
    assert got["EPOCHSCOPE_WORKLOAD_TOKEN_FILE"] == str(tmp_path / "tokens" / "alice")
    assert "EPOCHSCOPE_WORKLOAD_TOKEN" not in got and "EPOCHSCOPE_AGENT_PORT" not in got
    config = ProfileConfig.from_env({RUN_ENV: got[RUN_ENV]})
    spool = tmp_path / "spool" / str(os.getuid())
    assert config == ProfileConfig("slurm-4242.0", "http://head01:8086", str(spool), 10)
    assert spool.is_dir() and stat.S_IMODE(spool.stat().st_mode) == 0o700


def test_the_agent_port_and_step_every_come_from_the_site(site, user):
    site = SlurmSite(**{**site.__dict__, "agent_port": 0, "step_every": 1})
    got = parse(task_prolog_lines(site, {**JOB, "EPOCHSCOPE_PROFILE": "1"}, user, never_asked))
    assert got["EPOCHSCOPE_AGENT_PORT"] == "0"
    assert ProfileConfig.from_env({RUN_ENV: got[RUN_ENV]}).step_every == 1


def test_an_unreadable_token_file_or_a_value_needing_quotes_leaves_the_task_alone(site, user):
    environ = {**JOB, "EPOCHSCOPE_PROFILE": "1"}
    other = JobUser("bob", user.uid, user.home)  # no token file for bob
    with pytest.raises(NotProfiled, match="bob cannot read the token file"):
        task_prolog_lines(site, environ, other, never_asked)
    # Slurm would keep the quotes in the value: the task is not profiled at all
    for path in ("/home/a b/lib", "/x'y", "/x\ny", "/x$HOME"):
        with pytest.raises(NotProfiled, match="PYTHONPATH needs shell quoting"):
            task_prolog_lines(site, {**environ, "PYTHONPATH": path}, user, never_asked)


def test_the_json_form_of_the_run_still_reads():
    config = ProfileConfig("r", "http://c:1", "/s", 3)
    assert ProfileConfig.from_env({RUN_ENV: config.encode()}) == config
    assert ProfileConfig.from_env({RUN_ENV: config.encode_safe()}) == config
    assert shlex.quote(config.encode_safe()) == config.encode_safe()


# --- the site's file ------------------------------------------------------------------------
def test_the_site_file(tmp_path):
    path = tmp_path / "slurm.toml"
    path.write_text('collector_url = "http://c:1"\npartitions = ["gpu"]\nagent_port = 9711\n')
    loaded = SlurmSite.load(path)
    assert loaded.partitions == ("gpu",) and loaded.agent_port == 9711
    assert loaded.comment == "epochscope" and loaded.token_file is None
    for text, message in (
        ('collector_url = "http://c:1"\ncolector = 1\n', "unknown keys colector"),
        ("partitions = []\n", "collector_url"),
        ('collector_url = "http://c:1"\npartitions = "gpu"\n', "list of strings"),
        ('collector_url = "http://c:1"\nstep_every = 0\n', "step_every"),
        ("collector_url = ", "slurm.toml"),
    ):
        path.write_text(text)
        with pytest.raises(SiteConfigError, match=message):
            SlurmSite.load(path)


def run_prolog(
    tmp_path, environ: dict[str, str], config: Path, repo_env
) -> subprocess.CompletedProcess:
    env = {**repo_env, **environ}
    env.pop("EPOCHSCOPE_PROFILE", None)
    env.update(environ)
    return subprocess.run(
        [sys.executable, "-m", "workloads", "slurm", "task-prolog", "--config", str(config)],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip


def test_the_command_prints_exports_and_exits_0_whatever_happens(tmp_path, repo_env):
    config = tmp_path / "slurm.toml"
    config.write_text(
        f'collector_url = "http://c:1"\nspool_root = "{tmp_path}/spool"\ncomment = ""\n'
    )
    opted = run_prolog(tmp_path, {**JOB, "EPOCHSCOPE_PROFILE": "1"}, config, repo_env)
    assert opted.returncode == 0 and opted.stderr == ""
    assert set(parse(opted.stdout.splitlines())) == {"PYTHONPATH", RUN_ENV}
    plain = run_prolog(tmp_path, JOB, config, repo_env)
    assert (plain.returncode, plain.stdout, plain.stderr) == (0, "", "")
    config.write_text("not toml at all")
    broken = run_prolog(tmp_path, {**JOB, "EPOCHSCOPE_PROFILE": "1"}, config, repo_env)
    assert broken.returncode == 0 and broken.stdout == ""
    assert "job 4242 is not profiled" in broken.stderr


# --- the installed scripts ----------------------------------------------------------------
def test_hook_scripts_run_isolated_and_exit_0(tmp_path, repo_env):
    config = tmp_path / "slurm.toml"
    config.write_text(f'collector_url = "http://c:1"\nspool_root = "{tmp_path}/spool"\n')
    script = tmp_path / "epochscope-task-prolog"
    script.write_text(hook_script("task-prolog", sys.executable, str(config), str(REPO_ROOT)))
    script.chmod(0o755)
    assert script.read_text().startswith(f"#!{sys.executable} -I\n")
    env = {"PATH": os.environ["PATH"], **JOB, "EPOCHSCOPE_PROFILE": "1"}
    env["PYTHONPATH"] = str(tmp_path / "hijack")  # -I: the job's PYTHONPATH is not read
    (tmp_path / "hijack").mkdir()
    (tmp_path / "hijack" / "workloads.py").write_text("raise SystemExit(9)\n")
    result = subprocess.run([str(script)], capture_output=True, text=True, env=env,
                            cwd=tmp_path / "hijack", timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert parse(result.stdout.splitlines())["PYTHONPATH"].startswith(SITE + ":")
    with pytest.raises(ValueError):
        hook_script("task-prolog", "python3", str(config))
    with pytest.raises(ValueError):
        hook_script("prolog", sys.executable, str(config))


# --- the Epilog -----------------------------------------------------------------------------
def test_epilog_stores_the_summary_0600(tmp_path):
    fake = tmp_path / "fake_collector.py"
    fake.write_text("import sys\nprint('summary of', sys.argv[1:])\n")
    site = SlurmSite(collector_url="http://c:1", summary_dir=str(tmp_path / "jobs"),
                     collector_command=(sys.executable, str(fake)))  # fmt: skip
    said = store_summary(site, "4242")
    target = tmp_path / "jobs" / "job_4242.summary"
    assert said == f"job 4242: summary stored in {target}"
    assert target.read_text() == "summary of ['job', '4242', '--summary']\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert "no usable SLURM_JOB_ID" in store_summary(site, "../../etc")


def test_epilog_without_the_collector_job_command_says_so(tmp_path, repo_env):
    missing = SlurmSite(collector_url="http://c:1", summary_dir=str(tmp_path / "jobs"),
                        collector_command=("/no/such/python", "-m", "collector"))  # fmt: skip
    assert "is not installed" in store_summary(missing, "7")
    config = tmp_path / "slurm.toml"  # today's collector: no `job` command
    config.write_text(f'collector_url = "http://c:1"\nsummary_dir = "{tmp_path}/jobs"\n'
                      f'collector_command = ["{sys.executable}", "-m", "collector"]\n')  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "workloads", "slurm", "epilog", "--config", str(config)],
        capture_output=True, text=True, timeout=120, env={**repo_env, "SLURM_JOB_ID": "7"},
    )  # fmt: skip
    assert result.returncode == 0
    has_job = "invalid choice" not in subprocess.run(
        [sys.executable, "-m", "collector", "job", "--help"], capture_output=True, text=True,
        env=repo_env, timeout=120,
    ).stderr  # fmt: skip
    if not has_job:
        assert "no `collector job` command" in result.stderr
        assert not (tmp_path / "jobs").exists()


# --- the sitecustomize in a Python without epochscope ----------------------------------------
SYSTEM_PYTHON = Path("/usr/bin/python3")
PROBE = (
    "import sys, workloads, contract; "
    "print(workloads.__file__); "
    "print(any(type(f).__name__ == 'PostImportFinder' for f in sys.meta_path)); "
    "import agent; print(agent.__file__)"
)


@pytest.mark.skipif(not SYSTEM_PYTHON.is_file(), reason="no /usr/bin/python3")
def test_sitecustomize_finds_epochscope_beside_itself_and_user_modules_win(tmp_path):
    users = tmp_path / "users"
    users.mkdir()
    (users / "agent.py").write_text("")  # an RL script's own `agent` module
    config = ProfileConfig("r", "http://127.0.0.1:9", str(tmp_path))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{SITE}:{users}", RUN_ENV: config.encode()}
    result = subprocess.run([str(SYSTEM_PYTHON), "-c", PROBE], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=60)  # fmt: skip
    if "No module named" in result.stderr and "workloads" not in result.stderr:
        pytest.skip(f"the system Python lacks a module epochscope needs: {result.stderr}")
    assert result.returncode == 0, result.stderr
    workloads_file, finder, agent_file = result.stdout.split("\n")[:3]
    assert workloads_file == str(REPO_ROOT / "workloads" / "__init__.py")
    assert finder == "True"
    assert agent_file == str(users / "agent.py")
    # outside a profile nothing is added
    del env[RUN_ENV]
    plain = subprocess.run([str(SYSTEM_PYTHON), "-c", "import workloads"], capture_output=True,
                           text=True, env=env, cwd=tmp_path, timeout=60)  # fmt: skip
    assert "No module named 'workloads'" in plain.stderr
