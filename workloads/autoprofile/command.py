"""``workloads profile -- COMMAND``: profile a user's own, unmodified training.

COMMAND runs as the user would run it (``python train.py``, ``torchrun ...``,
``horovodrun ...``), with ``workloads/autoprofile/site`` first on its ``PYTHONPATH`` and
the run described in ``EPOCHSCOPE_PROFILE_RUN``: every Python process it starts is
instrumented (``workloads.autoprofile``); other programs are left alone. Without
``--collector`` a collector and an agent run beside it exactly as for ``workloads run
--profile`` (``workloads.launch.local_stack``), and the per-epoch table and findings are
printed at the end. The exit status is the command's (128 + N when a signal N ended it).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import socket
import sys
from pathlib import Path

from contract.schema import Event, RunState
from netserve import tokens
from workloads.autoprofile.config import RUN_ENV, ProfileConfig, site_dir
from workloads.launch.local_stack import EmbeddedProfile, ProfileError, child_env
from workloads.launch.node_samples import add_samples_wait
from workloads.launch.preflight import collector_url
from workloads.record.events import AGENT_PORT_ENV
from workloads.record.spec import TOKEN_ENV, TOKEN_FILE_ENV, run_id_arg, run_spool_root

NOT_FOUND_STATUS = 127  # as a shell says it
NOT_EXECUTABLE_STATUS = 126
NO_LOOP_HINT = (
    "nothing in it was recognised as training (no PyTorch DataLoader followed by optimizer "
    "steps, no Keras Model.fit): name its epochs and steps with workloads.track "
    "(see workloads/track.py)"
)


def add_parser(commands: argparse._SubParsersAction) -> None:
    profile = commands.add_parser(
        "profile", help="profile your own training: workloads profile [options] -- COMMAND",
        description=__doc__.splitlines()[0],
    )  # fmt: skip
    profile.add_argument("--collector", type=collector_url,
                         help="collector URL (default: one started here)")  # fmt: skip
    profile.add_argument("--token-file", type=Path, help="file holding the collector token")
    add_samples_wait(profile)
    profile.add_argument("--run-id", type=run_id_arg, help="default: profile-<UTC time>")
    profile.add_argument("--runs-dir", type=Path, default=Path("runs"), help="default ./runs")
    profile.add_argument("--data-dir", type=Path,
                         help="the data set the script reads (size, --drop-caches)")  # fmt: skip
    profile.add_argument("--drop-caches", action="store_true",
                         help="drop --data-dir from the page cache first")  # fmt: skip
    profile.add_argument(
        "--step-every", type=int, default=10, help="a step event every K, and each epoch's first"
    )
    profile.add_argument("--target-top1", type=float,
                         help="top-1 the run aims for (its time to reach it is compared "
                              "across a scaling group's runs)")  # fmt: skip
    profile.add_argument("--agent-port", type=int, default=9711, help="agent /metrics port")
    profile.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]")


# what `workloads profile` imports beyond the base install, the `profile` extra's modules
# (pyproject.toml): the collector it starts beside the command parses line protocol
EXTRA = "profile"
EXTRA_MODULES = ("numpy", "PIL", "rich", "tqdm")
COLLECTOR_MODULES = ("line_protocol_parser",)  # only for the collector started here


class UsageError(ValueError):
    pass


def missing_modules(own_collector: bool) -> list[str]:
    """The modules of the ``profile`` extra this run needs and cannot import (looked up,
    not imported: numpy and rich take a while)."""
    names = EXTRA_MODULES + (COLLECTOR_MODULES if own_collector else ())
    return [name for name in names if importlib.util.find_spec(name) is None]


def missing_extra_message(missing: list[str]) -> str:
    return (
        f"workloads profile needs the `{EXTRA}` extra, which this environment lacks (no "
        f"{', '.join(missing)}): pip install 'epochscope[{EXTRA}]' (or `pip install "
        f"'/path/to/epochscope[{EXTRA}]'` from a checkout)"
    )


def command_of(args: argparse.Namespace) -> list[str]:
    command = list(args.argv)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("no command to profile: workloads profile [options] -- COMMAND [ARGS]")
    return command


def collector_refusal(url: str, token_file: Path | None) -> str | None:
    """Why the collector at ``url`` cannot take this run's events with the token in
    ``token_file`` (down, not a collector, the token missing or refused), from one empty
    write as `workloads run --collector` sends; None when it can."""
    from workloads.launch.preflight import CollectorUnusable, check_collector

    token = token_file.read_text().strip() if token_file is not None else None
    source = f"--token-file {token_file}" if token_file is not None else ""
    try:
        check_collector(url, token, source, socket.gethostname())
    except CollectorUnusable as error:
        return str(error)
    return None


def warn_of_agent_elsewhere(agent_port: int, collector_url: str) -> bool:
    """Say once when this node's agent pushes elsewhere (or nowhere): its node samples
    will not reach ``collector_url``, so the report does not wait for them. True when
    they will (or no agent was found to say otherwise)."""
    from workloads.launch.agent_target import push_warning

    warning = push_warning(agent_port, collector_url)
    if warning is None:
        return True
    print(f"workloads: warning: {warning}; the report will not wait for its samples",
          file=sys.stderr)  # fmt: skip
    return False


def read_token_file(path: Path | None) -> Path | None:
    """``path`` resolved once its token is known to be usable (``netserve.tokens``)."""
    if path is None:
        return None
    try:
        tokens.read_token_file(path, "--token-file")
    except tokens.TokenFileError as error:
        raise UsageError(str(error)) from None
    return path.resolve()


def command_env(
    config: ProfileConfig, token_file: Path | None, agent_port: int | None = None
) -> dict[str, str]:
    """The command's environment: instrumentation first on PYTHONPATH, the run, the token
    file's path (never the token), the agent port the ranks ask for edge samples."""
    env = child_env()
    if agent_port is not None:
        env[AGENT_PORT_ENV] = str(agent_port)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site_dir()), env.get("PYTHONPATH")]))
    env[RUN_ENV] = config.encode()
    env.pop(TOKEN_ENV, None)
    env.pop(TOKEN_FILE_ENV, None)
    if token_file is not None:
        env[TOKEN_FILE_ENV] = str(token_file)
    return env


def exit_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def started_ranks(profile: EmbeddedProfile, run_id: str) -> int:
    from collector.store import SqliteStore

    store = SqliteStore(profile.db)
    try:
        return len(store.events(run_id, kinds=(Event.RUN_START,)))
    finally:
        store.close()


def run(args: argparse.Namespace) -> int:
    missing = missing_modules(own_collector=not args.collector)
    if missing:  # before anything starts, and before this imports them itself
        print(f"workloads: {missing_extra_message(missing)}", file=sys.stderr)
        return 2
    from workloads.launch.launcher import Plan, close_unended_ranks, new_run_id, run_tool
    from workloads.launch.processes import Interrupted, become_subreaper, raise_on_signals
    from workloads.record.spec import RunSpec
    from workloads.train.datasets import DatasetError, describe

    try:
        command = command_of(args)
        token_file = read_token_file(args.token_file)
        if args.drop_caches and args.data_dir is None:
            raise UsageError("--drop-caches drops the data set from the page cache: "
                             "give it with --data-dir")  # fmt: skip
        if args.step_every < 1:
            raise UsageError(f"--step-every must be >= 1 (got {args.step_every})")
        dataset = describe(args.data_dir.resolve()) if args.data_dir is not None else None
    except (UsageError, DatasetError) as error:
        print(f"workloads: {error}", file=sys.stderr)
        return 2
    agent_pushes_here = True
    if args.collector:
        refused = collector_refusal(args.collector, token_file)
        if refused is not None:  # before the command runs: seconds, not its whole run
            print(f"workloads: {refused}", file=sys.stderr)
            return 2
        agent_pushes_here = warn_of_agent_elsewhere(args.agent_port, args.collector)
    run_id = args.run_id or new_run_id("profile")
    runs_dir = args.runs_dir.resolve()
    shown = shlex.join(command)
    print(f"profile {run_id}: {shown}", flush=True)
    raise_on_signals()
    become_subreaper()
    profile: EmbeddedProfile | None = None
    status, launched, interrupted = 1, False, None
    try:
        from workloads.launch.hosts import prepare_local

        paths = dataset.paths("train") + dataset.paths("val") if dataset else None
        report = prepare_local(paths, args.drop_caches, args.agent_port)
        report.agent_embedded = not args.collector
        print(f"host {report.describe()}", flush=True)
        if not args.collector:
            profile = EmbeddedProfile(run_id, runs_dir).start()
        config = ProfileConfig(
            run_id=run_id,
            collector_url=args.collector or profile.url,
            spool_root=str(run_spool_root(runs_dir, run_id)),
            step_every=args.step_every,
            data_format=dataset.format if dataset else None,
            dataset_images=dataset.train.images if dataset else None,
            dataset_bytes=dataset.train.bytes if dataset else None,
            data_dir=str(dataset.root) if dataset else None,
            target_top1=args.target_top1,
        )
        launched = True
        try:
            status = exit_status(
                run_tool(
                    command,
                    command_env(
                        config, token_file, profile.agent_port if profile else args.agent_port
                    ),
                    profile.pids() if profile else (),
                )
            )
        except FileNotFoundError:
            print(f"workloads: {command[0]}: command not found", file=sys.stderr)
            status = NOT_FOUND_STATUS
        except PermissionError:
            print(f"workloads: {command[0]}: permission denied", file=sys.stderr)
            status = NOT_EXECUTABLE_STATUS
    except ProfileError as error:
        print(f"workloads: {error}", file=sys.stderr)
        return 2
    except Interrupted as error:
        interrupted, status = error, error.exit_status
        print(f"workloads: {error}: the command's processes are stopped", file=sys.stderr)
    finally:
        if launched and status != 0 and profile is not None and profile.running():
            close_unended_ranks(
                Plan(RunSpec(run_id, "pytorch"), [], 0, None, runs_dir),
                profile,
                RunState.INTERRUPTED if interrupted is not None else RunState.FAILED,
            )
        if profile is not None:
            profile.stop()
    ranks = None
    if profile is not None:
        ranks = started_ranks(profile, run_id)
        if ranks:
            profile.report()
            print(f"open the dashboard on this run: {profile.dashboard_command()}")
    else:  # the ranks delivered their events before they exited
        from workloads.launch.launcher import print_collector_report

        token = token_file.read_text().strip() if token_file else None
        plan = Plan(RunSpec(run_id, "pytorch"), [], 0, token, runs_dir)
        print_collector_report(plan, args, node_samples=agent_pushes_here)
    # a command that failed before any training says nothing of whether it would have trained
    failed_early = interrupted is None and status != 0 and ranks == 0
    if ranks == 0 and not failed_early:
        print(f"workloads: no training was seen in `{shown}`: {NO_LOOP_HINT}", file=sys.stderr)
    if interrupted is not None:
        print(f"profile {run_id} stopped by {interrupted}: marked interrupted", flush=True)
    elif failed_early:
        print(f"workloads: `{shown}` failed: it exited with status {status} before any "
              "training was seen", file=sys.stderr)  # fmt: skip
    elif status != 0:
        print(f"workloads: `{shown}` exited with status {status}", file=sys.stderr)
    return status
