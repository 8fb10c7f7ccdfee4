"""``workloads run``: check everything, prepare the hosts, launch the ranks, summarise.

Every check that can fail runs before any training starts: the data directory and its
format for the framework, the framework and Horovod's extension for it, ``--np`` against
the slots of ``--hosts``. Then the hosts are prepared (page cache, agent, RAM; over SSH
for remote hosts), an embedded collector and agent start for ``--profile`` without
``--collector``, and the ranks start: in this process for one local process, under
``horovodrun --gloo`` for TensorFlow and MXNet, under ``torchrun`` for PyTorch.

The collector token reaches ranks started by a tool as a file, never through the command
line or the environment (horovodrun spells every environment variable out on the rank's
command line): the launcher writes it, 0600, to one absolute path,
``<runs dir>/<run_id>/collector.token``, on every host of the run (the launching one too),
hands that path to the ranks in ``EPOCHSCOPE_WORKLOAD_TOKEN_FILE`` and removes it from every
host after the run.

SIGINT, SIGTERM or an exception stop the run: horovodrun or torchrun start in a session
of their own and ``processes.stop_descendants`` ends every rank and helper (see there);
ranks that started but were killed before their ``run_end`` are closed as failed by the
launcher where it can read the run's events back (the embedded collector of
``--profile``, or the events directory); then the embedded collector and agent stop.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path

from contract.schema import Event, RunState, Tag, Workload
from netserve.tokens import TokenFileError
from workloads.launch import frameworks
from workloads.launch.hosts import (
    HostError,
    HostReport,
    HostSlots,
    RemoteHost,
    RemoteProcess,
    check_slots,
    parse_hosts,
    placement,
    prepare_host,
    prepare_local,
    remote_python,
    remove_private,
    write_private,
)
from workloads.launch.local_stack import EmbeddedProfile, ProfileError, child_env, free_port
from workloads.launch.node_samples import (
    DEFAULT_SAMPLES_WAIT_SECONDS,
    provisional_line,
    wait_for_node_samples,
)
from workloads.launch.preflight import UNDELIVERED_EXIT, CollectorUnusable, check_collector
from workloads.launch.processes import (
    STOP_FILE_NAME,
    Interrupted,
    ask_to_stop,
    become_subreaper,
    raise_on_signals,
    stop_descendants,
)
from workloads.launch.processes import descendants as live_descendants
from workloads.launch.summary import print_epoch_table
from workloads.record.events import AGENT_PORT_ENV, DEFAULT_AGENT_PORT
from workloads.record.spec import TOKEN_ENV, TOKEN_FILE_ENV, RunSpec, run_spool_root
from workloads.record.spec import read_token as spec_read_token
from workloads.record.spec import token_source as spec_token_source
from workloads.train.datasets import (
    DatasetError,
    DatasetInfo,
    check_format_for,
    describe,
    verify_files,
)

DEFAULT_IMAGE_SIZE = 224
DEFAULT_WARMUP_STEPS = 10  # tf_cnn_benchmarks' num_warmup_batches
STEP_EVENTS_PER_EPOCH = 20  # what the default --step-every aims for
SYNTHETIC_STEPS_PER_EPOCH = 100  # worker.steps_per_epoch without a data set
DEFAULT_CLASSES = 1000
TOKEN_FILE_NAME = "collector.token"


class UsageError(ValueError):
    pass


@dataclass
class Plan:
    spec: RunSpec
    hosts: list[HostSlots]
    processes: int
    token: str | None
    runs_dir: Path
    dataset: DatasetInfo | None = None
    token_file: Path | None = None  # absolute, the same on every host; None: no file needed
    token_written_on: list[HostSlots] = field(default_factory=list)
    reports: list[HostReport] = field(default_factory=list)

    @property
    def multi_host(self) -> bool:
        return any(not host.is_local for host in self.hosts)

    @property
    def in_process(self) -> bool:
        return self.processes == 1 and not self.multi_host


def token_file_path(runs_dir: Path, run_id: str) -> Path:
    """Where every host of the run keeps the collector token for the ranks started there."""
    return runs_dir.resolve() / run_id / TOKEN_FILE_NAME


def new_run_id(framework: str) -> str:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    return f"{framework}-{stamp}-{secrets.token_hex(2)}"


def read_token(args: argparse.Namespace) -> str | None:
    try:
        return spec_read_token(args.token_file, args.token)
    except TokenFileError as error:
        raise UsageError(str(error)) from None


def token_source(args: argparse.Namespace) -> str:
    """Where the run's token comes from, as the user gave it (for messages)."""
    return spec_token_source(args.token_file, args.token)


def step_sampling(args: argparse.Namespace, dataset: DatasetInfo | None) -> tuple[int, int]:
    """(warm-up steps, step event every K) for this run's size; UsageError when no step
    of the run would be timed."""
    if args.steps_per_epoch:
        per_epoch = args.steps_per_epoch
    elif dataset is None:
        per_epoch = SYNTHETIC_STEPS_PER_EPOCH
    else:
        per_step = args.batch_size * args.np
        per_epoch = dataset.train.images // per_step
        if per_epoch == 0:
            raise UsageError(
                f"--batch-size {args.batch_size} x {args.np} process(es) = {per_step} images "
                f"per step, more than the data set's {dataset.train.images} training images: "
                f"give a smaller --batch-size or a larger data set"
            )
    total = per_epoch * args.epochs
    warmup = args.warmup_steps
    if warmup is None:
        warmup = min(DEFAULT_WARMUP_STEPS, total // 4)
    elif warmup >= total:
        raise UsageError(
            f"--warmup-steps {warmup} leaves no step timed: the run has {total} steps "
            f"({args.epochs} epoch(s) x {per_epoch}); give --warmup-steps {total // 4} "
            f"or more --epochs"
        )
    step_every = args.step_every or max(1, per_epoch // STEP_EVENTS_PER_EPOCH)
    if step_every > per_epoch:
        print(
            f"workloads: --step-every {step_every} is more than the {per_epoch} steps of an "
            "epoch: no per-step events, no per-step throughput line",
            file=sys.stderr,
        )
    return warmup, step_every


def check_precision(framework: str, precision: str) -> None:
    if framework == "mxnet" and precision == "bf16":
        raise UsageError("MXNet 1.9 Gluon has no bf16 training: use --precision fp32 or fp16")
    if framework == "mxnet" and precision == "fp16" and shutil.which("nvidia-smi") is None:
        raise UsageError("MXNet fp16 convolutions need a GPU (none here): use --precision fp32")


def plan_run(args: argparse.Namespace) -> Plan:
    """Every check that can refuse the run, before anything starts."""
    hosts = parse_hosts(args.hosts) if args.hosts else [HostSlots("localhost", args.np)]
    check_slots(hosts, args.np)
    dataset = None
    if args.data_dir is not None:
        dataset = describe(args.data_dir.resolve())
        check_format_for(args.framework, dataset)
        if not getattr(args, "skip_data_check", False):
            verify_files(dataset)  # a truncated or damaged file is named now, not mid-run
    frameworks.check(args.framework, args.np)
    check_precision(args.framework, args.precision)
    warmup_steps, step_every = step_sampling(args, dataset)
    if args.framework == "pytorch" and len(hosts) > 1:
        counts = {take for _, take in placement(hosts, args.np)}
        if len(counts) > 1:
            raise UsageError("torchrun runs the same number of processes on every host: "
                             "give --np a multiple of equal --hosts slots")  # fmt: skip
    if args.profile and not args.collector and any(not host.is_local for host in hosts):
        raise UsageError("--profile across hosts needs --collector URL: the embedded "
                         "collector listens on 127.0.0.1 only")  # fmt: skip
    run_id = args.run_id or new_run_id(args.framework)
    runs_dir = args.runs_dir.resolve()
    image_size = args.image_size or (dataset.image_size if dataset else None) or DEFAULT_IMAGE_SIZE
    spec = RunSpec(
        run_id=run_id,
        framework=args.framework,
        model=args.model,
        data_dir=str(dataset.root) if dataset else None,
        dataset=dataset.to_json() if dataset else None,
        batch_size=args.batch_size,
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        image_size=image_size,
        num_classes=args.num_classes or (dataset.classes if dataset else DEFAULT_CLASSES),
        precision=args.precision,
        warmup_steps=warmup_steps,
        step_every=step_every,
        target_top1=args.target_top1,
        learning_rate=args.learning_rate,
        collector_url=args.collector,
        loader_workers=args.loader_workers,
        seed=args.seed,
        validate=not args.no_validate,
        anatomy=not args.no_anatomy,
        resend_token_file=str(args.token_file.resolve()) if args.token_file else None,
        checkpoint_dir=str(runs_dir / run_id),
        spool_root=str(run_spool_root(runs_dir, run_id)),
    )
    if not args.collector and not args.profile:
        spec.events_dir = str(runs_dir / run_id / "events")
    plan = Plan(spec, hosts, args.np, read_token(args), runs_dir, dataset)
    if not plan.in_process:  # ranks of torchrun or horovodrun: told so when the user stops
        spec.stop_file = str(runs_dir / run_id / STOP_FILE_NAME)
    if plan.token and not plan.in_process:
        plan.token_file = token_file_path(runs_dir, run_id)
    return plan


def prepare(plan: Plan, args: argparse.Namespace) -> None:
    """Every host: RAM, CPUs, page cache, agent, the token file; with ``--collector`` the
    collector checked from it, and with ``--profile`` a warning when its agent pushes
    elsewhere (the run's node metrics come from the agent already on each node)."""
    agent_check = args.profile and args.collector
    data_paths = None
    if plan.dataset is not None:
        data_paths = plan.dataset.paths("train") + plan.dataset.paths("val")
    for host in plan.hosts:
        if host.is_local:
            report = prepare_local(data_paths, args.drop_caches, args.agent_port)
            if plan.token and plan.token_file:
                write_private(plan.token_file, plan.token)
                plan.token_written_on.append(host)
            if agent_check:
                from workloads.launch.agent_target import push_warning

                report.warnings += filter(None, [push_warning(args.agent_port, args.collector)])
        else:
            remote = RemoteHost(host.name, args.ssh_user, args.ssh_port, args.ssh_key)
            try:
                data_dir = Path(plan.dataset.root) if plan.dataset else None
                report = prepare_host(
                    remote, remote_python(), data_dir, args.drop_caches, args.agent_port
                )
                if plan.token and plan.token_file:
                    remote.put_private(plan.token, str(plan.token_file), remote_python())
                    plan.token_written_on.append(host)
                if args.collector:
                    agent_port = args.agent_port if agent_check else None
                    report.warnings += check_collector_on(remote, plan, args.collector, agent_port)
            finally:
                remote.close()
        report.agent_embedded = host.is_local and args.profile and not args.collector
        plan.reports.append(report)
        print(f"host {report.describe()}", flush=True)
        for warning in report.warnings:
            print(f"workloads: warning: {report.name}: {warning}", file=sys.stderr, flush=True)


def check_collector_on(
    remote: RemoteHost, plan: Plan, url: str, agent_port: int | None = None
) -> list[str]:
    """``workloads check-collector`` on a remote host, with the token file its ranks read;
    with ``agent_port``, also where the agent on that port there pushes. Returns the
    warnings it gave (the agent pushes elsewhere, or nowhere)."""
    from workloads.launch.agent_target import WARNING_PREFIX

    argv = [remote_python(), "-m", "workloads", "check-collector", "--collector", url]
    if plan.token_file is not None:
        argv += ["--token-file", str(plan.token_file)]
    if agent_port is not None:
        argv += ["--agent-port", str(agent_port)]
    status, _, err = remote.run(argv, timeout=60)
    if status != 0:
        raise HostError(f"{remote.name}: {err.strip().removeprefix('workloads: ')}")
    return [
        line.removeprefix(WARNING_PREFIX)
        for line in err.splitlines()
        if line.startswith(WARNING_PREFIX)
    ]


def remove_tokens(plan: Plan, args: argparse.Namespace) -> None:
    """Remove the token file from every host it was written to."""
    if plan.token_file is None:
        return
    for host in plan.token_written_on:
        if host.is_local:
            remove_private(plan.token_file)
            continue
        try:
            remote = RemoteHost(host.name, args.ssh_user, args.ssh_port, args.ssh_key)
        except HostError as error:
            print(f"workloads: token file {plan.token_file} left on {host.name}: {error}",
                  file=sys.stderr)  # fmt: skip
            continue
        try:
            remote.remove_private(str(plan.token_file), remote_python())
        except HostError as error:
            print(f"workloads: {error}", file=sys.stderr)
        finally:
            remote.close()
    plan.token_written_on.clear()


def worker_argv(spec: RunSpec) -> list[str]:
    return ["-m", "workloads", "worker", "--spec", spec.encode()]


def horovodrun_command(plan: Plan, ssh_port: int, ssh_key: Path | None = None) -> list[str]:
    host_list = ",".join(f"{host.name}:{host.slots}" for host in plan.hosts)
    command = [frameworks.horovodrun() or "horovodrun", "-np", str(plan.processes)]
    command += ["-H", host_list, "--gloo"]
    if plan.multi_host and ssh_port != 22:
        command += ["-p", str(ssh_port)]
    if plan.multi_host and ssh_key is not None:
        command += ["--ssh-identity-file", str(ssh_key)]
    return [*command, remote_python(), *worker_argv(plan.spec)]


def torchrun_command(
    plan: Plan, nodes: int, per_node: int, node_rank: int, master: str, port: int
) -> list[str]:
    command = [remote_python(), "-m", "torch.distributed.run"]
    if nodes == 1:
        command += ["--standalone", "--nnodes", "1"]
    else:
        command += ["--nnodes", str(nodes), "--node_rank", str(node_rank)]
        command += ["--master_addr", master, "--master_port", str(port)]
    command += ["--nproc_per_node", str(per_node), *worker_argv(plan.spec)]
    return command


def launch_env(plan: Plan) -> dict[str, str]:
    """The ranks' environment: the token file's path, never the token itself."""
    env = child_env()
    env.pop(TOKEN_ENV, None)
    env.pop(TOKEN_FILE_ENV, None)
    if plan.token_file is not None:
        env[TOKEN_FILE_ENV] = str(plan.token_file)
    return env


def launch(plan: Plan, args: argparse.Namespace, keep: tuple[int, ...] = ()) -> int:
    """Run the ranks; ``keep``: processes of ours that are not the run's (the embedded
    collector and agent), spared when the run's processes are stopped."""
    agent_port = getattr(args, "agent_port", DEFAULT_AGENT_PORT)  # edge samples (ranks)
    if plan.in_process:
        os.environ[AGENT_PORT_ENV] = str(agent_port)
        if plan.token:
            os.environ[TOKEN_ENV] = plan.token
        from workloads.train.worker import run_rank

        return run_rank(plan.spec)
    env = launch_env(plan)
    env[AGENT_PORT_ENV] = str(agent_port)
    stop_file = Path(plan.spec.stop_file) if plan.spec.stop_file else None
    if plan.spec.framework != "pytorch":
        command = horovodrun_command(plan, args.ssh_port, args.ssh_key)
        quiet = plan.runs_dir / plan.spec.run_id / "horovodrun-stop.log"
        return run_tool(command, env, keep, stop_log=quiet, stop_file=stop_file)
    share = placement(plan.hosts, plan.processes)
    if not plan.multi_host:
        command = torchrun_command(plan, 1, plan.processes, 0, "127.0.0.1", 0)
        return run_tool(command, env, keep, stop_file=stop_file)
    return _torchrun_over_ssh(plan, share, args)


class StopRelay:
    """Copies a tool's stderr to ours; once the run is being stopped, the tool's own lines
    (horovodrun's 20-line traceback about ranks that exited) go to ``log`` instead, while
    the ranks' lines (horovodrun prefixes them ``[N]<stderr>:``) still reach the user."""

    def __init__(self, stream, log: Path) -> None:
        import threading

        self.stream, self.log = stream, log
        self.stopping = False
        self.diverted = 0
        self._thread = threading.Thread(target=self._copy, name="tool-stderr", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        out = sys.stderr.buffer if hasattr(sys.stderr, "buffer") else None
        diverted = None
        for line in iter(self.stream.readline, b""):
            if self.stopping and not RANK_LINE.match(line):
                if diverted is None:
                    self.log.parent.mkdir(parents=True, exist_ok=True)
                    diverted = self.log.open("ab")
                diverted.write(line)
                self.diverted += 1
                continue
            if out is not None:
                out.write(line)
                out.flush()
            else:
                sys.stderr.write(line.decode(errors="replace"))
        if diverted is not None:
            diverted.close()

    def join(self, timeout: float = 10.0) -> None:
        self._thread.join(timeout)


RANK_LINE = re.compile(rb"^\[\d+\]<")


def run_tool(
    command: list[str],
    env: dict[str, str],
    keep: tuple[int, ...] = (),
    stop_log: Path | None = None,
    stop_file: Path | None = None,
) -> int:
    """horovodrun or torchrun in a session of its own, waited for; whatever interrupts the
    wait (SIGINT, SIGTERM, an exception) stops it and every process it started first.
    With ``stop_log``, what the tool itself writes to stderr while it is stopped goes
    there (``StopRelay``). With ``stop_file`` (the ranks' ``RunSpec.stop_file``), a stop
    by SIGINT or SIGTERM is written there first, so that the ranks end the run as
    interrupted rather than failed, and exit so that the tool exits quietly."""
    if stop_file is not None:
        stop_file.unlink(missing_ok=True)  # (a run id used before)
    stderr = subprocess.PIPE if stop_log is not None else None
    process = subprocess.Popen(command, env=env, start_new_session=True, stderr=stderr)
    relay = StopRelay(process.stderr, stop_log) if stop_log is not None else None
    try:
        status = process.wait()
    except BaseException as error:
        if relay is not None:
            relay.stopping = True
        if stop_file is not None and isinstance(error, Interrupted):
            ask_to_stop(stop_file, str(error))
        stop_descendants(process.pid, keep)
        process.wait()
        if relay is not None:
            relay.join()
            if relay.diverted:
                print(f"workloads: {Path(command[0]).name}'s own output while it was stopped "
                      f"({relay.diverted} lines) is in {stop_log}", file=sys.stderr)  # fmt: skip
        raise
    if relay is not None:
        relay.join()
    if live_descendants(keep):  # left behind by a rank or the tool: never outlive the run
        stop_descendants(None, keep)
    return status


def _torchrun_over_ssh(plan: Plan, share, args: argparse.Namespace) -> int:
    """torchrun on every host, started over SSH; the first host is the rendezvous. When
    the user stops the run, every host is told so first (the run's stop file written
    there: a rank on another machine cannot see ours), then each torchrun's ranks get
    SIGTERM, end the run as interrupted and exit, and torchrun exits quietly."""
    import threading

    master, port = share[0][0].name, free_port("0.0.0.0")
    statuses: dict[str, int] = {}
    started: list[RemoteProcess] = []

    def node(index: int, host: HostSlots, per_node: int) -> None:
        command = torchrun_command(plan, len(share), per_node, index, master, port)
        if plan.token_file is not None:
            command = ["env", f"{TOKEN_FILE_ENV}={plan.token_file}", *command]
        remote = RemoteHost(host.name, args.ssh_user, args.ssh_port, args.ssh_key)
        try:
            process = remote.start(command)
            started.append(process)
            statuses[host.name] = process.relay_and_wait()
        finally:
            remote.close()

    threads = [
        threading.Thread(target=node, args=(index, host, per_node), daemon=True)
        for index, (host, per_node) in enumerate(share)
    ]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except Interrupted as error:
        stop_log = plan.runs_dir / plan.spec.run_id / "torchrun-stop.log"
        for process in started:
            process.divert(stop_log)
        stop_remote_ranks(plan, list(started), str(error))
        for thread in threads:
            thread.join(timeout=STOP_GRACE_SECONDS)
        diverted = sum(process.diverted for process in started)
        if diverted:
            print(f"workloads: torchrun's own output while it was stopped ({diverted} lines) "
                  f"is in {stop_log}", file=sys.stderr)  # fmt: skip
        raise
    return max(statuses.values(), default=1)


STOP_GRACE_SECONDS = 30.0


def stop_remote_ranks(plan: Plan, processes: list[RemoteProcess], reason: str) -> None:
    """Write the run's stop file on every host of ``processes`` (in parallel), then send
    their ranks SIGTERM; a host that cannot be reached is left to its SSH session's end."""
    import threading

    def stop(process: RemoteProcess) -> None:
        if plan.spec.stop_file:
            with contextlib.suppress(Exception):
                process.host.put_private(f"{reason}\n", plan.spec.stop_file, remote_python())
        process.signal_children("TERM")

    threads = [threading.Thread(target=stop, args=(p,), daemon=True) for p in processes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=15)


def run(args: argparse.Namespace) -> int:
    try:
        plan = plan_run(args)
        if args.collector:  # reachable, and the token accepted, before anything starts
            check_collector(args.collector, plan.token, token_source(args), socket.gethostname())
    except (
        DatasetError,
        frameworks.FrameworkError,
        HostError,
        UsageError,
        CollectorUnusable,
    ) as error:
        print(f"workloads: {error}", file=sys.stderr)
        return 2
    print(f"run {plan.spec.run_id}: {plan.spec.framework} {plan.spec.model}, "
          f"{plan.processes} process(es), batch {plan.spec.batch_size}/rank, "
          f"{plan.spec.data_format} data, {plan.spec.warmup_steps} warm-up step(s), a step "
          f"event every {plan.spec.step_every}", flush=True)  # fmt: skip
    raise_on_signals()
    become_subreaper()
    profile = None
    status, interrupted, launched = 1, None, False
    try:
        prepare(plan, args)
        if args.profile and not args.collector:
            profile = EmbeddedProfile(plan.spec.run_id, plan.runs_dir)
            profile.start()
            plan.spec.collector_url = profile.url
            args.agent_port = profile.agent_port  # the ranks ask this agent for edge samples
        launched = True
        status = launch(plan, args, profile.pids() if profile else ())
    except (HostError, ProfileError) as error:
        print(f"workloads: {error}", file=sys.stderr)
        status = 2
        return status
    except Interrupted as error:
        interrupted, status = error, error.exit_status
        print(f"workloads: {error}: the run's processes are stopped", file=sys.stderr)
    finally:
        # every rank is gone by now: one that started and never ended was killed
        if launched and status != 0 and (profile is None or profile.running()):
            close_unended_ranks(
                plan, profile, RunState.INTERRUPTED if interrupted else RunState.FAILED
            )
        if profile is not None:
            profile.stop()
        remove_tokens(plan, args)
        if plan.spec.stop_file:
            Path(plan.spec.stop_file).unlink(missing_ok=True)
    _after(plan, profile, args)
    if interrupted is not None:
        print(f"run {plan.spec.run_id} stopped by {interrupted}: marked interrupted", flush=True)
    elif status == UNDELIVERED_EXIT or (status != 0 and plan.spec.collector_url):
        print(undelivered_line(plan, status), file=sys.stderr)
    return status


def undelivered_line(plan: Plan, status: int) -> str:
    """The launcher's last word on a run whose events did not all reach the collector:
    where they wait (``RunSpec.spool_dir``: beside the run's files, on each host)."""
    return (f"workloads: run {plan.spec.run_id} ended with status {status}; events that did "
            f"not reach {plan.spec.collector_url} wait in {plan.spec.spool_dir(0).parent}"
            "/rank<N> on their host (see the ranks' lines above)")  # fmt: skip


def unended_ranks(marks: list[tuple[str, str, str, str]]) -> list[tuple[str, str, str]]:
    """(host, rank, framework) of each rank with a run_start and no run_end;
    ``marks``: (event, host, rank, framework) of the run's events."""
    started: dict[tuple[str, str], str] = {}
    ended: set[tuple[str, str]] = set()
    for event, host, rank, framework in marks:
        if event == Event.RUN_START:
            started[(host, rank)] = framework
        elif event == Event.RUN_END:
            ended.add((host, rank))
    return [(host, rank, framework) for (host, rank), framework in sorted(started.items())
            if (host, rank) not in ended]  # fmt: skip


def close_unended_ranks(
    plan: Plan, profile: EmbeddedProfile | None, state: str = RunState.FAILED
) -> int:
    """Write run_end (``state``: failed, or interrupted when the user stopped the run) for
    the ranks killed before they could, where the launcher can read the run's events back;
    returns how many it closed."""
    from workloads.record.events import EventWriter, FileSink, ShipperSink

    run_id = plan.spec.run_id
    if profile is not None:
        from collector.store import SqliteStore

        store = SqliteStore(profile.db)
        try:
            events = store.events(run_id, kinds=(Event.RUN_START, Event.RUN_END))
        finally:
            store.close()
        marks = [(e.event, e.host, str(e.rank), e.framework) for e in events]
    elif plan.spec.events_dir and Path(plan.spec.events_dir).is_dir():
        from workloads.launch.summary import read_events_dir

        marks = [
            (p.fields.get(Workload.EVENT), p.tags[Tag.HOST], p.tags[Tag.RANK],
             p.tags[Tag.FRAMEWORK])
            for p in read_events_dir(Path(plan.spec.events_dir))
        ]  # fmt: skip
    else:
        return 0  # an external collector: the ranks' own run_end is all there is
    unended = unended_ranks(marks)
    if not unended:
        return 0
    shipper = None
    if profile is not None:
        shipper = ShipperSink(profile.url, None, plan.runs_dir / run_id / "launcher-spool")
    for host, rank, framework in unended:
        sink = shipper or FileSink(plan.spec.events_file(int(rank)))
        writer = EventWriter(sink, run_id, int(rank), framework, host)
        writer.emit(Event.RUN_END, {Workload.STATE: state})
        if shipper is None:
            sink.close(0)
    if shipper is not None and not shipper.close(30.0):
        print(f"workloads: run_end of killed ranks not delivered, kept in {shipper.spool_dir}",
              file=sys.stderr)  # fmt: skip
    print(f"ranks killed before their run_end, closed as {state}: "
          f"{', '.join(f'{host}/{rank}' for host, rank, _ in unended)}", flush=True)  # fmt: skip
    return len(unended)


def _after(plan: Plan, profile: EmbeddedProfile | None, args: argparse.Namespace) -> None:
    run_id = plan.spec.run_id
    if profile is not None:
        profile.report()
        print(f"open the dashboard on this run: {profile.dashboard_command()}")
    elif plan.spec.events_dir:
        print_epoch_table(Path(plan.spec.events_dir))
        print(f"events of run {run_id} are in {plan.spec.events_dir}; deliver them with "
              f"`workloads resend --events {plan.spec.events_dir} --collector URL`")  # fmt: skip
    else:  # the hosts' agents push node samples with --profile only
        print_collector_report(plan, args, node_samples=args.profile)


def print_collector_report(plan: Plan, args: argparse.Namespace, node_samples: bool = True) -> None:
    """The per-epoch table and findings of ``--profile``, from the collector's read API,
    once every host's node samples reach its run_end (``workloads.launch.node_samples``):
    at most ``--samples-wait`` seconds, else marked provisional (``node_samples``: whether
    the hosts' agents send any)."""
    from collector.api.client import RemoteError, fetch_view
    from workloads.launch.summary import format_findings, format_profile_table, format_run_rate

    run_id, url = plan.spec.run_id, args.collector
    again = f"collector report {run_id} --collector {url}"
    if args.token_file is not None:
        again += f" --token-file {args.token_file}"
    query = {"run_id": run_id, "format": "json", "findings": "true"}
    missing = None
    if node_samples:
        wait = getattr(args, "samples_wait", DEFAULT_SAMPLES_WAIT_SECONDS)
        missing = wait_for_node_samples(url, run_id, plan.token, wait)
    try:
        report = json.loads(fetch_view(url, "report", query, plan.token))
    except (RemoteError, ValueError) as error:
        refused = (HTTPStatus.UNAUTHORIZED, HTTPStatus.FORBIDDEN)
        if getattr(error, "http_status", None) in refused:
            # the token wrote the run's events but may not read (an agent's node token):
            # the same token file would be refused again
            again = (f"collector report {run_id} --collector {url} --token-file FILE, FILE "
                     "holding a run or admin token")  # fmt: skip
        print(f"workloads: no per-epoch table from {url}: {error}; later: {again}",
              file=sys.stderr)  # fmt: skip
        return
    if missing:
        print(provisional_line(missing, again), flush=True)
    print(f"run {run_id}: per epoch (MB = 10^6 bytes; disk, cache and CPU are the whole "
          "host's, from its agent)")  # fmt: skip
    print(format_profile_table(report["rows"]))
    print(format_run_rate(report.get("throughput", {}).get("images_per_second")))
    print()
    print(format_findings(report["findings"]))
    print(f"every column: {again}", flush=True)
