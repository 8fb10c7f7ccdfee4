"""``agent sample --once`` and ``agent run``: the node agent's command line.

``agent sample --once`` prints one sample of every sampler that finds its data (or of
``--samplers``) as JSON (a list of ``{"measurement", "tags", "fields", "time"}``, time in
ns) or InfluxDB line protocol. ``agent run`` is the daemon: it samples every
``interval_seconds``, serves /metrics and pushes to ``[push] url`` through a disk spool;
SIGTERM or SIGINT flushes (for at most a few seconds) and exits 0.

Exit codes: 0 fine, 2 bad configuration or arguments (the message names the key), 1
anything else.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent import config as agent_config
from agent.ceilings import FILE_ENV as CEILINGS_FILE_ENV
from agent.config import AgentConfig, ConfigError
from agent.samplers import SAMPLER_NAMES, Roots
from agent.samplers.base import read_text
from contract.point import encode_line, encode_lines
from netserve.listen import cannot_listen
from netserve.tls import ServerTls, TlsConfigError, client_context
from netserve.tokens import WatchedToken

log = logging.getLogger("agent")

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE  # as a shell reports a command killed by SIGPIPE
FLUSH_SECONDS_AT_STOP = 5.0
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


class RedactingFormatter(logging.Formatter):
    """Formats as usual, then replaces every secret (the push token) with ``***``."""

    def __init__(self, fmt: str, secrets: Sequence[str] = ()) -> None:
        super().__init__(fmt)
        self.secrets = [secret for secret in secrets if secret]

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text


def setup_logging(level: str, secrets: Sequence[str] = ()) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s", secrets)
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def _sampler_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in SAMPLER_NAMES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown sampler {', '.join(unknown)} (known: {', '.join(SAMPLER_NAMES)})"
        )
    return names


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent", description="epochscope node agent: sample, serve /metrics, push"
    )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    commands = parser.add_subparsers(dest="command", required=True)

    sample = commands.add_parser("sample", help="print one sample and exit")
    sample.add_argument("--once", action="store_true", help="one sample (the only mode)")
    sample.add_argument("--format", choices=["json", "line"], default="json")
    sample.add_argument("--samplers", type=_sampler_list, help="comma-separated sampler names")
    sample.add_argument("--host", help="the host tag (default: this machine's hostname)")

    limits = agent_config.METRICS_LIMITS
    run = commands.add_parser(
        "run",
        help="the daemon: sample, serve /metrics, push",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"""/metrics limits against slow or many clients ([metrics] keys of --config):
  max_connections = {limits.max_connections}
      connections open at once; at the cap a new one closes the connection that has
      waited longest for a request (503 + Retry-After if it had sent part of one); when
      every one has a request in hand, the new one gets 503 + Retry-After
  header_timeout_seconds = {limits.header_timeout:g}
      a request's whole head must arrive within it (from the accept, or from the first
      byte of a later request): nothing sent: closed; part of a head: 408
  idle_timeout_seconds = {limits.idle_timeout:g}
      a kept-alive connection with no new request is closed
Refusals are logged once a minute per kind and client (docs/reliability.md).""",
    )
    run.add_argument("--config", type=Path, help="TOML configuration file")

    ceilings = commands.add_parser(
        "ceilings",
        help="measure this node's ceilings once (disk, links, PCIe, JPEG decode) and keep them",
        description="Measures what this node's hardware delivers at most and writes it to "
        "the ceilings file, which the running agent's ceilings sampler reports at every tick "
        "(docs/ceilings.md). Run it again to measure again.",
    )
    ceilings.add_argument(
        "--data-dir", type=Path, default=Path("."),
        help="a directory on the disk that holds the training data (a scratch file is "
        "written and read there, then removed; default: the current directory)",
    )  # fmt: skip
    ceilings.add_argument("--disk-mib", type=_positive_int, default=256,
                          help="scratch file size (default 256)")  # fmt: skip
    ceilings.add_argument("--disk-seconds", type=float, default=5.0,
                          help="at most this long per disk pass (default 5)")  # fmt: skip
    ceilings.add_argument("--cpu-seconds", type=float, default=2.0,
                          help="JPEG decoding time (default 2)")  # fmt: skip
    ceilings.add_argument("--out", type=Path,
                          help="the ceilings file (default $EPOCHSCOPE_CEILINGS_FILE or "
                          "/var/lib/epochscope/ceilings.json)")  # fmt: skip
    nfs = ceilings.add_argument_group(
        "NFS mounts",
        "each NFS mount in /proc/self/mountstats (one per server file system): 1 MiB reads "
        "in order of a file on it with O_DIRECT; a mount that cannot be read is logged",
    )
    nfs.add_argument("--nfs-file", type=Path, action="append", default=[],
                     help="a file to read on the mount holding it, e.g. one of the data "
                     "set's (repeatable); elsewhere a scratch file is written in --data-dir "
                     "when it is on that mount, else at the mount point, and removed")  # fmt: skip
    nfs.add_argument("--nfs-mib", type=_positive_int, default=128,
                     help="at most this many MiB read per mount (default 128)")  # fmt: skip
    nfs.add_argument("--nfs-seconds", type=float, default=5.0,
                     help="at most this long reading per mount (default 5)")  # fmt: skip
    nfs.add_argument("--no-nfs", action="store_true", help="measure no NFS mount")
    peer = ceilings.add_argument_group(
        "peer throughput",
        "TCP throughput to another node, which runs `agent ceilings --serve-peer` meanwhile",
    )
    peer.add_argument("--peer", metavar="HOST[:PORT]", type=_peer_address,
                      help="measure the throughput to that node's receiver (port 5291 unless "
                      "given) and keep it beside the links' rates")  # fmt: skip
    peer.add_argument("--peer-seconds", type=_send_seconds, default=5.0,
                      help="sending time (default 5, at most 30)")  # fmt: skip
    peer.add_argument("--peer-only", action="store_true",
                      help="measure the peer only; the file's other ceilings are kept")  # fmt: skip
    peer.add_argument("--serve-peer", action="store_true",
                      help="be the receiver another node's --peer measures against "
                      "(until --serve-seconds)")  # fmt: skip
    peer.add_argument("--bind", default="127.0.0.1",
                      help="the receiver's address (default 127.0.0.1: name the address "
                      "the peer reaches, e.g. the fabric's)")  # fmt: skip
    peer.add_argument("--port", type=int, default=5291, help="the receiver's port (default 5291)")
    peer.add_argument("--serve-senders", type=_positive_int, metavar="N",
                      help="the receiver exits once it has measured N senders (default: "
                      "only --serve-seconds ends it)")  # fmt: skip
    peer.add_argument("--serve-seconds", type=float, default=600.0,
                      help="the receiver exits after this long (default 600); each sender is "
                      "bounded to 60 s and 64 GiB")  # fmt: skip

    for command in (sample, run, ceilings):
        command.add_argument("--proc-root", type=Path, help="procfs root (default /proc)")
        command.add_argument("--sys-root", type=Path, help="sysfs root (default /sys)")
        command.add_argument(
            "--cgroup-root", type=Path, help="cgroup root (default <sys-root>/fs/cgroup)"
        )
    return parser


def cmd_sample(args: argparse.Namespace) -> int:
    from agent.daemon import SampleRound, build_samplers
    from agent.samplers.agent import AgentStats

    config = AgentConfig() if args.host is None else AgentConfig(host=args.host)
    roots = Roots(args.proc_root or Roots.proc, args.sys_root or Roots.sys, args.cgroup_root)
    # One AgentStats for all: the agent sampler reports what the gpu sampler saw.
    samplers = build_samplers(roots, args.samplers, AgentStats())
    sample_round = SampleRound(samplers, config.host)
    now_ns = _now_ns()
    points = sample_round(now_ns)
    if sample_round.reports_samplers:
        points.extend(sample_round.sampler_points(now_ns))
    if args.format == "json":
        json.dump([point.to_json() for point in points], sys.stdout, indent=1)
    else:
        sys.stdout.write(encode_lines(points))
    sys.stdout.write("\n")
    return EXIT_OK


def _now_ns() -> int:
    import time

    return time.time_ns()


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _peer_address(text: str) -> tuple[str, int]:
    from agent.peer import parse_peer

    try:
        return parse_peer(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _send_seconds(text: str) -> float:
    value = float(text)
    if not 0 < value <= 30:
        raise argparse.ArgumentTypeError(f"must be in (0, 30], got {value:g}")
    return value


def cmd_serve_peer(args: argparse.Namespace) -> int:
    from agent import peer

    def ready(address: str, port: int) -> None:
        print(f"receiving on {address}:{port} for {args.serve_seconds:g} s", flush=True)

    try:
        count = peer.serve(
            args.bind, args.port, args.serve_seconds, ready=ready, max_transfers=args.serve_senders
        )
    except OSError as error:
        log.error("%s", cannot_listen(args.bind, args.port, error, fix="--bind/--port"))
        return EXIT_ERROR
    print(f"measured {count} sender{'' if count == 1 else 's'}")
    return EXIT_OK


def cmd_ceilings(args: argparse.Namespace) -> int:
    from agent import ceilings

    if args.serve_peer:
        return cmd_serve_peer(args)
    if args.peer_only and args.peer is None:
        log.error("--peer-only needs --peer HOST[:PORT]")
        return EXIT_USAGE
    out = args.out or ceilings.ceilings_file()
    unwritable = ceilings.unwritable_reason(out)
    if unwritable:
        log.error("%s", unwritable)
        return EXIT_ERROR
    found: list[ceilings.Measured] = []
    if args.peer_only:
        if out.is_file():
            try:
                found = ceilings.from_json(out.read_text())
            except ValueError as error:
                log.error("%s: %s (measure everything again without --peer-only)", out, error)
                return EXIT_ERROR
    else:
        if not args.data_dir.is_dir():
            log.error("--data-dir %s is not a directory", args.data_dir)
            return EXIT_USAGE
        missing = [str(f) for f in args.nfs_file if not f.is_file()]
        if missing:
            log.error("--nfs-file %s: not a file", ", ".join(missing))
            return EXIT_USAGE
        nfs = None
        if not args.no_nfs:
            mountstats = (args.proc_root or Roots.proc) / "self" / "mountstats"
            nfs = ceilings.NfsPlan(
                read_text(mountstats) or "", tuple(args.nfs_file), args.nfs_mib,
                args.nfs_seconds,
            )  # fmt: skip
        found = ceilings.measure(
            args.data_dir, args.disk_mib, args.disk_seconds, args.cpu_seconds,
            args.sys_root or Roots.sys, nfs,
        )  # fmt: skip
    status = EXIT_OK
    if args.peer is not None:
        host, port = args.peer
        try:
            found = ceilings.with_peer(
                found, ceilings.peer_ceiling(host, port, args.peer_seconds, time.time())
            )
        except OSError as error:
            log.error("peer %s:%d: %s (is `agent ceilings --serve-peer` running there, "
                      "bound to an address this node reaches?)", host, port, error)  # fmt: skip
            status = EXIT_ERROR
            if args.peer_only:
                return status
    found, refused = ceilings.usable(found)
    for problem in refused:  # outside physical bounds: a fault, not the node's limit
        log.error("%s", problem)
        status = EXIT_ERROR
    for measured in found:
        print(ceilings.describe(measured))
    print(ceilings.allowed_cpus_text())
    try:
        ceilings.keep(found, out)
    except OSError as error:
        log.error("%s", error.strerror)
        return EXIT_ERROR
    print(f"kept in {out}: the agent reports them from its next tick")
    return status


def _load_config(args: argparse.Namespace) -> AgentConfig:
    config = agent_config.load(args.config)
    overrides = {}
    if args.proc_root is not None:
        overrides["proc_root"] = args.proc_root
    if args.sys_root is not None:
        overrides["sys_root"] = args.sys_root
    if args.cgroup_root is not None:
        overrides["cgroup_root"] = args.cgroup_root
    return dataclasses.replace(config, **overrides)


def wait_for_stop_signal(seconds: float) -> bool:
    """Sleep up to ``seconds``; True as soon as SIGTERM or SIGINT arrives.

    The stop signals are blocked in every thread and taken here synchronously, so a
    signal can never land in the middle of a spool write or a lock.
    """
    info = signal.sigtimedwait(STOP_SIGNALS, seconds)
    if info is None:
        return False
    log.info("%s: flushing and stopping", signal.Signals(info.si_signo).name)
    return True


def check_spool_holds_a_tick(samplers: Sequence[Any], spool_max_bytes: int) -> None:
    """Refuse a spool that cannot hold one tick of this host's points: every batch
    would be dropped. Samples twice (rate samplers give points from their second read)."""
    size = 0
    for _ in range(2):
        now = _now_ns()
        size = 0
        for sampler in samplers:
            try:
                size += sum(len(encode_line(point)) + 1 for point in sampler.sample(now))
            except Exception:  # a sampler that fails here fails, logged, in the loop too
                continue
        time.sleep(0.05)
    if size > spool_max_bytes:
        raise ConfigError(
            "push.spool_max_bytes",
            f"must hold at least one tick of this host's points: a tick is {size} bytes, "
            f"give at least {4 * size} (got {spool_max_bytes})",
        )


def push_tls(push: agent_config.PushConfig) -> Any:
    """What makes the shipper's client context for an https push url (None for http),
    tried once here so that unusable files are said at start."""
    if not push.url.startswith("https://"):
        return None
    make = functools.partial(client_context, push.ca_file, push.cert_file, push.key_file)
    try:
        make()
    except TlsConfigError as error:
        raise ConfigError("push.ca_file", str(error)) from None
    return make


def metrics_tls(metrics: agent_config.MetricsListen) -> ServerTls | None:
    if metrics.tls is None:
        return None
    try:
        return ServerTls(metrics.tls)
    except TlsConfigError as error:
        raise ConfigError("metrics.tls_cert_file", str(error)) from None


def cmd_run(args: argparse.Namespace) -> int:
    from agent.daemon import Daemon, build_samplers
    from agent.samplers.agent import AgentStats

    config = _load_config(args)
    if config.ceilings_file is not None:  # where the ceilings sampler finds them
        os.environ[CEILINGS_FILE_ENV] = str(config.ceilings_file)
    if config.push is not None and config.push.token is not None:
        # From here on the token cannot reach the log, whatever prints it.
        setup_logging(args.log_level, [config.push.token.reveal()])
    # Blocked before any thread starts, so every thread inherits the mask.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)

    stats = AgentStats()
    samplers = build_samplers(
        Roots(config.proc_root, config.sys_root, config.cgroup_root), config.samplers, stats
    )
    for sampler in samplers:
        if hasattr(sampler, "call_timeout_seconds"):  # the gpu sampler
            sampler.call_timeout_seconds = config.gpu_call_timeout_seconds  # type: ignore[attr-defined]
    if not samplers:
        log.warning("no sampler can run on this host: only the loop runs")

    publishers, submitters, closers = [], [], []
    shipper = None
    if config.push is not None:
        from agent.shipper import Shipper

        push = config.push
        check_spool_holds_a_tick(samplers, push.spool_max_bytes)
        try:
            shipper = Shipper(
                push.url,
                push.token.reveal() if push.token else None,
                push.org,
                push.bucket,
                push.spool_dir,
                push.spool_max_bytes,
                stats,
                batch_seconds=push.batch_seconds,
                tls=push_tls(push),
                sync_each_batch=push.spool_sync == "batch",
            )
        except OSError as error:
            raise ConfigError(
                "push.spool_dir", f"cannot use {push.spool_dir}: {error.strerror}"
            ) from None
        shipper.start()
        submitters.append(shipper)
    otlp_exporter = None
    if config.otlp is not None:
        from agent.otlp import OtlpExporter
        from netserve.otlp import OtlpHeadersError, read_headers_file

        headers: dict[str, str] = {}
        if config.otlp.headers_file is not None:
            try:
                headers = read_headers_file(config.otlp.headers_file)
            except OtlpHeadersError as error:
                raise ConfigError("otlp.headers_file", str(error)) from None
        otlp_exporter = OtlpExporter(
            config.otlp.endpoint,
            headers,
            batch_seconds=config.otlp.batch_seconds,
            max_queued_points=config.otlp.max_queued_points,
            stats=stats,
        )
        otlp_exporter.start()
        submitters.append(otlp_exporter)
    metrics_server = None
    if config.metrics is not None:
        from agent.exposition import MetricsServer

        try:
            metrics_server = MetricsServer(
                config.metrics.address,
                config.metrics.port,
                config.metrics.limits,
                metrics_tls(config.metrics),
                WatchedToken(config.metrics.bearer_token_file, "metrics bearer token file")
                if config.metrics.bearer_token_file
                else None,
            )
        except OSError as error:
            message = cannot_listen(
                config.metrics.address, config.metrics.port, error, fix="[metrics] listen"
            )
            raise ConfigError("metrics.listen", message) from None
        publishers.append(metrics_server)
        closers.append(metrics_server.close)

    log.info(
        "agent started: host=%s interval=%ss samplers=%s push=%s otlp=%s metrics=%s",
        config.host,
        config.interval_seconds,
        ",".join(sampler.name for sampler in samplers) or "none",
        config.push.url if config.push else "off",
        config.otlp.endpoint if config.otlp else "off",
        f"{'https' if config.metrics and config.metrics.tls else 'http'}://"
        f"{metrics_server.address}:{metrics_server.port}/metrics"
        if metrics_server
        else "off",
    )
    daemon = Daemon(config, samplers, stats, publishers, submitters)
    if metrics_server is not None:
        metrics_server.serve_edge_samples(daemon.edge_sample)
    daemon.run(wait_for_stop_signal)

    if shipper is not None:
        shipper.close(FLUSH_SECONDS_AT_STOP)
    if otlp_exporter is not None:
        otlp_exporter.close(FLUSH_SECONDS_AT_STOP)
    for close in closers:
        close()
    log.info("agent stopped after %d samples", daemon.ticks)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    try:
        if args.command == "sample":
            return cmd_sample(args)
        if args.command == "ceilings":
            return cmd_ceilings(args)
        return cmd_run(args)
    except BrokenPipeError:
        # `agent sample ... | head`: the reader left; no traceback, and nothing more written
        # to the closed pipe when Python flushes stdout at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except ConfigError as error:
        log.error("bad configuration: %s", error)
        return EXIT_USAGE
