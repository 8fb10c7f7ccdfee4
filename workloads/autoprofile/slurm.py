"""Zero-touch profiling in Slurm jobs: the TaskProlog and the Epilog epochscope ships.

A site that sets ``TaskProlog=`` to the script ``hook_script("task-prolog", ...)`` writes
(Ansible installs it: docs/slurm.md) profiles the Python trainings of every job that opts
in, with the users' commands unchanged. Slurm runs the TaskProlog as the job's user before
each task (the batch script, every task of every ``srun`` step) and reads its standard
output: each ``export NAME=value`` line sets a variable of the task. For a job that opted
in it exports what ``workloads profile`` gives its command (``command.command_env``):

- ``PYTHONPATH`` with ``workloads/autoprofile/site`` first, the user's own kept after it;
- ``EPOCHSCOPE_PROFILE_RUN``: the run (``ProfileConfig``), named ``slurm-<job>`` for the
  batch script and ``slurm-<job>.<step>`` for a step, with the site's collector URL;
- ``EPOCHSCOPE_WORKLOAD_TOKEN_FILE``: the path of the job user's token file, never the
  token (a file the user cannot read turns profiling off for the task);
- ``EPOCHSCOPE_AGENT_PORT`` when the site's file names one.

A job opts in with ``EPOCHSCOPE_PROFILE=1`` in its environment, with ``--comment`` holding
the site's word (``epochscope`` by default), or by running in one of the site's
partitions; ``EPOCHSCOPE_PROFILE=0`` opts out of all of these. A task of any other job
gets nothing: the TaskProlog prints nothing.

Slurm takes each value literally up to the end of the line: quotes are not removed (Slurm
22.05, checked on the test machine). Every value is written ``shlex.quote``d and must be
one ``shlex.quote`` leaves as it is, else the task is left unprofiled: a value that needs
quoting (a ``PYTHONPATH`` holding a space) would reach the task with the quotes in it.

The Epilog (root, on each node of the job, after it ends) stores the job's summary, the
output of ``collector job JOBID --summary``, in the site's ``summary_dir``; where that
command does not exist it says so on its standard error. Both always exit 0: a failing Epilog
drains the node, and a failing TaskProlog would fail the user's task.

This module imports only the standard library and ``workloads.autoprofile.config``: a
TaskProlog runs before every task of every job of the node.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shlex
import stat
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from workloads.autoprofile.config import RUN_ENV, ProfileConfig, site_dir

CONFIG_PATH = Path("/etc/epochscope/slurm.toml")
OPT_IN_ENV = "EPOCHSCOPE_PROFILE"  # 1: profile this job, 0: never
TOKEN_FILE_ENV = "EPOCHSCOPE_WORKLOAD_TOKEN_FILE"  # workloads.record.spec's, not imported
AGENT_PORT_ENV = "EPOCHSCOPE_AGENT_PORT"  # workloads.record.events's, not imported
YES = frozenset({"1", "yes", "true", "on"})
NO = frozenset({"0", "no", "false", "off"})
# Steps that are not a user's step: the batch script and the extern step (22.05 numbers).
NOT_A_STEP = frozenset({"4294967294", "4294967295", "batch", "extern"})
_ID = re.compile(r"[0-9A-Za-z_]{1,60}")
_COMMENT_WORDS = re.compile(r"[\s,;]+")


class SiteConfigError(ValueError):
    """The site's file cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class SlurmSite:
    """``/etc/epochscope/slurm.toml``: what the site profiles and where it sends it.

    ``token_file`` and ``spool_root`` may hold ``{user}``, ``{uid}`` and ``{home}`` (the
    job user's name, uid and home directory from the password database)."""

    collector_url: str
    token_file: str | None = None
    spool_root: str = "{home}/.cache/epochscope/spool/workloads"
    partitions: tuple[str, ...] = ()
    comment: str = "epochscope"  # "": the job comment does not opt in
    squeue: str = "squeue"  # asked for the job comment, as the job's user
    step_every: int = 10
    agent_port: int | None = None
    summary_dir: str = "/var/lib/epochscope/jobs"
    collector_command: tuple[str, ...] = field(default_factory=tuple)  # default: this Python
    summary_timeout_seconds: float = 30.0
    scontrol: str = "scontrol"  # asked where a profiled job's output file is
    append_to_output: bool = True  # a profiled job's summary also ends its output file

    @classmethod
    def load(cls, path: Path) -> SlurmSite:
        try:
            data = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
            raise SiteConfigError(f"{path}: {error}") from None
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise SiteConfigError(f"{path}: unknown keys {', '.join(unknown)}")
        if not isinstance(data.get("collector_url"), str) or not data["collector_url"]:
            raise SiteConfigError(f"{path}: collector_url (the collector's URL) is required")
        for key in ("partitions", "collector_command"):
            if key in data:
                value = data[key]
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise SiteConfigError(f"{path}: {key} must be a list of strings")
                data[key] = tuple(value)
        step_every = data.get("step_every", 10)
        if not isinstance(step_every, int) or step_every < 1:
            raise SiteConfigError(f"{path}: step_every must be an integer >= 1")
        port = data.get("agent_port")
        if port is not None and (not isinstance(port, int) or not 0 <= port < 65536):
            raise SiteConfigError(f"{path}: agent_port must be a port number (0: off)")
        try:
            return cls(**data)
        except TypeError as error:
            raise SiteConfigError(f"{path}: {error}") from None


@dataclass(frozen=True)
class JobUser:
    name: str
    uid: int
    home: str

    @classmethod
    def current(cls) -> JobUser:
        entry = pwd.getpwuid(os.getuid())
        return cls(entry.pw_name, entry.pw_uid, entry.pw_dir)

    def expand(self, template: str) -> str:
        return template.format(user=self.name, uid=self.uid, home=self.home)


def squeue_comment(site: SlurmSite, environ: Mapping[str, str]) -> Callable[[str], str | None]:
    """The job's comment, asked of slurmctld with ``squeue`` (Slurm 22.05 puts no comment in
    a TaskProlog's environment): one RPC, made only where nothing else decided."""

    def ask(job_id: str) -> str | None:
        import subprocess

        try:
            result = subprocess.run(
                [site.squeue, "--noheader", "--jobs", job_id, "--format=%k"],
                capture_output=True,
                text=True,
                timeout=10,
                env=dict(environ),
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return result.stdout.strip() if result.returncode == 0 else None

    return ask


def opted_in(
    site: SlurmSite, environ: Mapping[str, str], comment_of: Callable[[str], str | None]
) -> str | None:
    """Why this job is profiled, or None: ``EPOCHSCOPE_PROFILE`` first (1 in, 0 out), then
    the site's partitions, then the job comment (asked only if needed)."""
    flag = environ.get(OPT_IN_ENV, "").strip().lower()
    if flag in NO:
        return None
    if flag in YES:
        return f"{OPT_IN_ENV}={environ[OPT_IN_ENV].strip()}"
    partition = environ.get("SLURM_JOB_PARTITION", "")
    if partition and partition in site.partitions:
        return f"partition {partition}"
    job_id = environ.get("SLURM_JOB_ID", "")
    if site.comment and job_id:
        comment = environ.get("SLURM_JOB_COMMENT")
        if comment is None:
            comment = comment_of(job_id)
        if comment and site.comment in _COMMENT_WORDS.split(comment.strip()):
            return f"comment {site.comment}"
    return None


class NotProfiled(Exception):
    """This task is left alone; the message says why (on the TaskProlog's standard error)."""


def run_id_of(environ: Mapping[str, str]) -> str:
    """``slurm-<job>`` for the batch script, ``slurm-<job>.<step>`` for a step's tasks (one
    run: every task of the step is a rank of it)."""
    job = environ.get("SLURM_JOB_ID", "").strip()
    if not _ID.fullmatch(job):
        raise NotProfiled(f"no usable SLURM_JOB_ID ({job!r})")
    step = environ.get("SLURM_STEP_ID", "").strip()
    if not step or step in NOT_A_STEP:
        return f"slurm-{job}"
    if not _ID.fullmatch(step):
        raise NotProfiled(f"SLURM_STEP_ID {step!r} cannot name a run")
    return f"slurm-{job}.{step}"


def python_path(environ: Mapping[str, str]) -> str:
    """The site directory first, then the task's own ``PYTHONPATH`` (without the site
    directory again: a step inherits the batch script's exports)."""
    site = str(site_dir())
    own = [entry for entry in environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    return os.pathsep.join([site, *(entry for entry in own if entry != site)])


def exports(site: SlurmSite, environ: Mapping[str, str], user: JobUser) -> dict[str, str]:
    """The variables a task of a job that opted in gets; ``NotProfiled`` when it cannot."""
    run_id = run_id_of(environ)
    variables: dict[str, str] = {}
    if site.token_file:
        token_file = user.expand(site.token_file)
        if not os.access(token_file, os.R_OK):
            raise NotProfiled(f"{user.name} cannot read the token file {token_file}")
        variables[TOKEN_FILE_ENV] = token_file
    spool_root = user.expand(site.spool_root)
    try:
        os.makedirs(spool_root, mode=0o700, exist_ok=True)
    except OSError as error:
        raise NotProfiled(f"no spool directory {spool_root}: {error.strerror}") from None
    config = ProfileConfig(run_id, site.collector_url, spool_root, step_every=site.step_every)
    variables["PYTHONPATH"] = python_path(environ)
    variables[RUN_ENV] = config.encode_safe()
    if site.agent_port is not None:
        variables[AGENT_PORT_ENV] = str(site.agent_port)
    for name, value in variables.items():
        if shlex.quote(value) != value:
            raise NotProfiled(
                f"{name} needs shell quoting, which Slurm's TaskProlog protocol does not undo"
            )
    return variables


def task_prolog_lines(
    site: SlurmSite,
    environ: Mapping[str, str],
    user: JobUser,
    comment_of: Callable[[str], str | None] | None = None,
) -> list[str]:
    """What the TaskProlog prints: ``export NAME=value`` lines, none for a job that did not
    opt in (``NotProfiled`` for one that did but cannot be profiled)."""
    asked = comment_of if comment_of is not None else squeue_comment(site, environ)
    if opted_in(site, environ, asked) is None:
        return []
    variables = exports(site, environ, user)
    return [f"export {name}={shlex.quote(value)}" for name, value in variables.items()]


def task_prolog(config: Path, environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    try:
        site = SlurmSite.load(config)
        lines = task_prolog_lines(site, environ, JobUser.current())
    except (SiteConfigError, NotProfiled, KeyError) as error:
        job = environ.get("SLURM_JOB_ID", "?")
        print(f"epochscope: job {job} is not profiled: {error}", file=sys.stderr)
        return 0
    for line in lines:
        print(line)
    return 0


# --- the Epilog ------------------------------------------------------------------------
def summary_command(site: SlurmSite, job_id: str) -> list[str]:
    # -I: the Epilog runs as root in a directory a user may own; an isolated interpreter
    # imports no `collector` planted there, nor anything from PYTHONPATH or user site
    base = list(site.collector_command) or [sys.executable, "-I", "-m", "collector"]
    return [*base, "job", job_id, "--summary"]


def store_summary(site: SlurmSite, job_id: str) -> str:
    """Runs ``collector job JOBID --summary`` and writes its output to
    ``<summary_dir>/job_<JOBID>.summary`` (0600); what happened, in one line."""
    return _store_summary(site, job_id)[0]


def _store_summary(site: SlurmSite, job_id: str) -> tuple[str, str | None]:
    """(what happened, the summary when there is one)."""
    if not _ID.fullmatch(job_id):
        return f"no usable SLURM_JOB_ID ({job_id!r})", None
    import subprocess

    command = summary_command(site, job_id)
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=site.summary_timeout_seconds
        )
    except FileNotFoundError:
        return f"{command[0]} is not installed: no summary of job {job_id}", None
    except subprocess.TimeoutExpired:
        return f"`collector job` took over {site.summary_timeout_seconds:g} s: no summary", None
    except OSError as error:
        return f"cannot run {command[0]}: {error.strerror}", None
    if result.returncode != 0:
        if "invalid choice: 'job'" in result.stderr or "No module named" in result.stderr:
            return (
                f"this collector has no `collector job` command: no summary of job {job_id}",
                None,
            )
        last = (result.stderr.strip().splitlines() or ["no message"])[-1]
        return f"`collector job {job_id} --summary` exited {result.returncode}: {last}", None
    directory = Path(site.summary_dir)
    target = directory / f"job_{job_id}.summary"
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o750)
        partial = target.with_suffix(".partial")
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(result.stdout)
        partial.replace(target)
    except OSError as error:
        return f"cannot write {target}: {error.strerror}", result.stdout
    return f"job {job_id}: summary stored in {target}", result.stdout


def profiled_runs(summary: str) -> list[str]:
    """The runs ``collector job --summary`` (one JSON object) joined to the job: those the
    TaskProlog profiled (or any epochscope run inside it); [] when it says none."""
    try:
        document = json.loads(summary)
    except ValueError:
        return []
    runs = document.get("runs") if isinstance(document, dict) else None
    return [str(run.get("run_id")) for run in runs or [] if isinstance(run, dict)]


def output_file(scontrol_text: str) -> str | None:
    """The job's ``StdOut=`` path from ``scontrol show job --oneliner`` (Slurm expands
    %j and the rest there); None when it has none (an interactive ``srun``)."""
    found = re.search(r"(?:^|\s)StdOut=(\S+)", scontrol_text)
    return found.group(1) if found and found.group(1).startswith("/") else None


def append_summary(path: str, uid: int, summary: str, job_id: str) -> str:
    """Append the summary to the job's output file as root without trusting its path:
    never through a symbolic link, never to a FIFO or device, only to a regular file the
    job's own user owns (a hard link to anyone else's file is refused); one line says
    what happened."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
    try:
        descriptor = os.open(path, flags)
    except OSError as error:
        return f"cannot append to {path}: {error.strerror}"
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != uid or info.st_nlink != 1:
            return f"{path} is not a regular file of the job's user alone: summary not appended"
        text = f"\nepochscope: collector job {job_id} --summary\n{summary.rstrip()}\n"
        os.write(descriptor, text.encode())
    except OSError as error:
        return f"cannot append to {path}: {error.strerror}"
    finally:
        os.close(descriptor)
    return f"appended to {path}"


def summary_to_output(site: SlurmSite, job_id: str, summary: str, uid: str) -> str | None:
    """The summary at the end of the job's output file when the job was profiled; what
    happened in one line (None: not profiled, or turned off)."""
    if not site.append_to_output or not profiled_runs(summary):
        return None
    if not uid.isdigit():
        return f"no usable SLURM_JOB_UID ({uid!r}): summary not appended"
    import subprocess

    command = [site.scontrol, "show", "job", "--oneliner", job_id]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"cannot ask {site.scontrol} for job {job_id}'s output file: {error}"
    path = output_file(result.stdout) if result.returncode == 0 else None
    if path is None:
        return f"job {job_id} has no output file Slurm names: summary not appended"
    return append_summary(path, int(uid), summary, job_id)


def epilog(config: Path, environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    try:
        site = SlurmSite.load(config)
    except SiteConfigError as error:
        print(f"epochscope epilog: {error}", file=sys.stderr)
        return 0
    job_id = environ.get("SLURM_JOB_ID", "")
    said, summary = _store_summary(site, job_id)
    print(f"epochscope epilog: {said}", file=sys.stderr)
    if summary is not None:
        appended = summary_to_output(site, job_id, summary, environ.get("SLURM_JOB_UID", ""))
        if appended:
            print(f"epochscope epilog: {appended}", file=sys.stderr)
    return 0


# --- the installed scripts -------------------------------------------------------------
HOOKS = ("task-prolog", "epilog")


def hook_script(kind: str, python: str, config: str, package_root: str | None = None) -> str:
    """The executable Slurm runs (``TaskProlog=`` / ``Epilog=``): ``python -I`` (neither the
    job's ``PYTHONPATH`` nor its working directory can change what it imports), calling
    ``run_hook``; exits 0 whatever happens. The Ansible role's templates render the same text
    (``package_root`` None: the package is installed in ``python``'s environment)."""
    if kind not in HOOKS:
        raise ValueError(f"kind must be one of {', '.join(HOOKS)}")
    if not python.startswith("/") or any(ch.isspace() for ch in python):
        raise ValueError(f"{python!r}: an absolute path without spaces (it is the #! line)")
    # JSON string literals are Python ones, and what Ansible's to_json writes
    root = f"sys.path.insert(0, {json.dumps(package_root)})\n" if package_root else ""
    return (
        f"#!{python} -I\n"
        f'"""epochscope\'s Slurm {kind} (workloads.autoprofile.slurm). Always exits 0."""\n'
        "import sys\n"
        f"{root}"
        "try:\n"
        "    from workloads.autoprofile.slurm import run_hook\n"
        "except Exception as error:  # never fail the job's task, never drain the node\n"
        '    print(f"epochscope: {error!r}", file=sys.stderr)\n'
        "    raise SystemExit(0) from None\n"
        f"raise SystemExit(run_hook({json.dumps(kind)}, {json.dumps(config)}))\n"
    )


def run_hook(kind: str, config: str) -> int:
    """What the installed scripts call: no argument parsing to import before every task."""
    return task_prolog(Path(config)) if kind == "task-prolog" else epilog(Path(config))


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="workloads slurm", description="Slurm TaskProlog and Epilog of epochscope"
    )
    sub = parser.add_subparsers(dest="hook", required=True)
    for kind, text in (
        ("task-prolog", "print the exports a task of an opted-in job gets (TaskProlog=)"),
        ("epilog", "store the ended job's summary (Epilog=)"),
    ):
        hook = sub.add_parser(kind, help=text)
        hook.add_argument("--config", type=Path, default=CONFIG_PATH,
                          help=f"the site's file (default {CONFIG_PATH})")  # fmt: skip
    args = parser.parse_args(argv)
    if args.hook == "task-prolog":
        return task_prolog(args.config)
    return epilog(args.config)
