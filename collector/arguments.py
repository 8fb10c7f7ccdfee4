"""``collector`` command line: serve, report, runs, scaling, inference, jobs, job, hosts.

The arguments of every subcommand (``build_parser``), apart from their dispatch
(``collector.cli``): the read API reads a query as the same command's arguments, so it
imports this module, never the dispatcher that imports every server.
"""

from __future__ import annotations

import argparse
import math

from collector.store.database import DEFAULT_DB
from contract.commandline import Parser
from netserve.limits import ConnectionLimits
from netserve.tls import add_client_arguments, add_server_arguments

DEFAULT_LISTEN = "127.0.0.1:8086"


BACKEND_HELP = {
    "serve": "victoriametrics=URL: forward the samples to VictoriaMetrics (events stay in "
    "--db). prometheus=URL: forward nothing, as Prometheus scrapes the agents' /metrics "
    "itself; what is pushed here is stored in --db as usual, events too",
    "read": "read the samples from VictoriaMetrics (victoriametrics=URL) or from a "
    "Prometheus that scrapes the agents (prometheus=URL); runs and events still come "
    "from --db",
}


def retention_days(text: str) -> float:
    """``--retention-days``: a positive number of days (0 or less would delete samples as
    soon as they are written)."""
    try:
        days = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of days") from None
    if not math.isfinite(days) or days <= 0:
        raise argparse.ArgumentTypeError(
            f"must be a positive number of days, not {text!r}: samples older than it are"
            " deleted, so 0 or less would delete them as they arrive (leave it out to keep"
            " everything)"
        )
    return days


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {text!r}")
    return value


def positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text!r}")
    return seconds


def _add_store_arguments(parser: argparse.ArgumentParser, backend_help: str) -> None:
    parser.add_argument("--db", default=DEFAULT_DB, help=f"SQLite file (default {DEFAULT_DB})")
    parser.add_argument("--backend", metavar="{victoriametrics,prometheus}=URL", help=backend_help)
    parser.add_argument(
        "--backend-auth-file",
        metavar="FILE",
        help="credentials for --backend: one line, USER:PASSWORD (Basic auth) or a bearer "
        "token; never logged (a URL with credentials in it is refused)",
    )


def _add_remote_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--collector",
        metavar="URL",
        help="ask the collector at URL (its read API) instead of reading --db here",
    )
    parser.add_argument("--token-file", help="file holding the collector's token (--collector)")
    add_client_arguments(parser)


def _add_token_arguments(sub: argparse._SubParsersAction) -> None:
    token = sub.add_parser("token", help="mint, list and revoke the collector's scoped tokens")
    actions = token.add_subparsers(dest="token_action", required=True)
    add = actions.add_parser("add", help="mint a token; it is printed once, only its hash kept")
    add.add_argument("--scope", required=True, choices=("node", "run", "admin"))
    add.add_argument("--subject", required=True, help="the node's host name, or the user")
    listing = actions.add_parser("list", help="the tokens' scopes and subjects (no secrets)")
    listing.add_argument("--format", choices=("table", "json"), default="table")
    revoke = actions.add_parser("revoke", help="remove a subject's tokens")
    revoke.add_argument("--subject", required=True)
    revoke.add_argument("--scope", choices=("node", "run", "admin"))
    for action in (add, listing, revoke):
        action.add_argument("--tokens-file", required=True, help="the collector's --tokens-file")


def build_parser(parser_class: type[argparse.ArgumentParser] = Parser) -> argparse.ArgumentParser:
    """The command line; ``parser_class`` for every parser (the read API's never prints)."""
    parser = parser_class(prog="collector", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="InfluxDB-compatible write API over the store")
    _add_store_arguments(serve, BACKEND_HELP["serve"])
    serve.add_argument("--listen", default=DEFAULT_LISTEN, help="HOST:PORT (default %(default)s)")
    serve.add_argument(
        "--token-file",
        help="file holding one token that may write and read everything (an admin token; "
        "prefer --tokens-file)",
    )
    serve.add_argument(
        "--tokens-file",
        help="scoped tokens (`collector token add`): node tokens write their host's samples, "
        "run tokens the events of their own runs, admin tokens everything",
    )
    serve.add_argument(
        "--read-concurrency",
        type=positive_int,
        default=2,
        help="read-API requests built at once (default %(default)s): the rest wait, so "
        "that writes keep their CPU",
    )
    serve.add_argument(
        "--read-queue",
        type=positive_int,
        default=8,
        help="read-API requests that may wait for their turn (default %(default)s); beyond "
        "it a read gets 503 with Retry-After",
    )
    add_server_arguments(serve, "the write and read API")
    serve.add_argument(
        "--retention-days",
        type=retention_days,
        default=None,
        help="delete samples older than this many days (> 0; default: keep everything)",
    )
    serve.add_argument(
        "--max-body-bytes", type=int, default=64 * 1024 * 1024, help="larger bodies get 413"
    )
    limits = ConnectionLimits()
    serve.add_argument(
        "--workers",
        "--parse-workers",
        dest="workers",
        type=positive_int,
        default=None,
        help="processes that parse the write bodies, beside the one that stores them "
        "(default: one per core, at most 8); 1 parses every body in the server (a "
        "collector for one run: `workloads run --profile`)",
    )
    serve.add_argument(
        "--max-connections",
        type=positive_int,
        default=limits.max_connections,
        help="open connections at most (default %(default)s, and never more than the "
        "open-file limit allows); beyond it the longest-waiting idle or slow connection is "
        "closed, or, when all are busy, the new one gets 503 with Retry-After",
    )
    serve.add_argument(
        "--header-timeout",
        type=positive_seconds,
        default=limits.header_timeout,
        help="seconds for a request's head to arrive (default %(default)s); then 408 or close",
    )
    serve.add_argument(
        "--idle-timeout",
        type=positive_seconds,
        default=limits.idle_timeout,
        help="seconds a kept-alive connection may wait for its next request (default %(default)s)",
    )
    serve.add_argument(
        "--body-timeout",
        type=positive_seconds,
        default=limits.body_timeout,
        help="the window of the minimum body rate: each this many seconds of a body must "
        "bring --body-min-rate bytes a second, or 408 (default %(default)s)",
    )
    serve.add_argument(
        "--body-min-rate",
        type=positive_int,
        default=limits.body_min_rate,
        help="bytes a second a body must average over each --body-timeout window "
        "(default %(default)s)",
    )
    serve.add_argument(
        "--body-memory-bytes",
        type=positive_int,
        default=limits.body_memory_bytes,
        help="memory for the bodies of all connections together (default %(default)s, at "
        "least --max-body-bytes); beyond it a body gets 503 with Retry-After",
    )

    report = sub.add_parser("report", help="per-epoch, per-host table of a run")
    report.add_argument("run_id")
    _add_store_arguments(report, BACKEND_HELP["read"])
    report.add_argument("--format", choices=("table", "csv", "json"), default="table")
    report.add_argument("--findings", action="store_true", help="also print the findings")
    report.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        help="also send the run's findings as OTLP/HTTP JSON log records to URL (an "
        "OpenTelemetry Collector's http://HOST:4318/v1/logs; no path: /v1/logs); needs --db, "
        "not --collector (docs/otlp.md)",
    )
    report.add_argument(
        "--otlp-headers-file",
        metavar="FILE",
        help="'Name: value' lines sent with --otlp-endpoint (auth); keep it 0600",
    )
    report.add_argument(
        "--columns",
        default=None,
        help="the table's and the CSV's columns: default (the readable set, leaving out what "
        "no host measured), all, or a comma list of groups (epoch, storage, nfs, fabric, "
        "memory, cpu, gpu, steps, training_io) and column names; without it the table shows "
        "the default set and the CSV every column; JSON always carries every column",
    )
    _add_remote_arguments(report)

    runs = sub.add_parser("runs", help="list runs, newest first")
    _add_store_arguments(runs, BACKEND_HELP["read"])
    runs.add_argument("--format", choices=("table", "json"), default="table")
    _add_remote_arguments(runs)

    scaling = sub.add_parser("scaling", help="scaling table over runs, or over given numbers")
    _add_store_arguments(scaling, BACKEND_HELP["read"])
    scaling.add_argument(
        "--throughput",
        metavar="GPUS:IMG_S,...",
        help="e.g. 1:283,4:1099,8:2075 instead of stored runs",
    )
    scaling.add_argument("--gpus-per-node", type=int, default=None)
    scaling.add_argument("--format", choices=("table", "json", "csv"), default="table")
    _add_remote_arguments(scaling)

    inference = sub.add_parser(
        "inference", help="FP32 vs INT8 inference per batch size (`workloads infer` runs)"
    )
    inference.add_argument("run_id", nargs="?", help="default: the newest inference run")
    _add_store_arguments(inference, BACKEND_HELP["read"])
    inference.add_argument("--format", choices=("table", "json"), default="table")
    _add_remote_arguments(inference)

    jobs = sub.add_parser("jobs", help="Slurm jobs the agents saw, newest first")
    _add_store_arguments(jobs, BACKEND_HELP["read"])
    jobs.add_argument("--format", choices=("table", "csv", "json"), default="table")
    _add_remote_arguments(jobs)

    job = sub.add_parser(
        "job", help="one Slurm job per node, its findings, its runs with their per-epoch tables"
    )
    job.add_argument("job_id")
    _add_store_arguments(job, BACKEND_HELP["read"])
    job.add_argument("--format", choices=("table", "csv", "json"), default="table")
    job.add_argument(
        "--summary",
        action="store_true",
        help="print the job in a few KB of JSON (what a Slurm epilog keeps in AdminComment)",
    )
    _add_remote_arguments(job)
    _add_token_arguments(sub)
    hosts = sub.add_parser("hosts", help="the hosts the store holds samples or runs of")
    _add_store_arguments(hosts, BACKEND_HELP["read"])
    hosts.add_argument("--format", choices=("table", "json"), default="table")
    _add_remote_arguments(hosts)
    _add_forecast_arguments(sub)
    return parser


def _add_forecast_arguments(sub: argparse._SubParsersAction) -> None:
    """``forecast`` and ``compare`` (issue 43; docs/forecast.md)."""
    forecast = sub.add_parser(
        "forecast", help="forecast a run's images/s, efficiency and needs at other sizes"
    )
    forecast.add_argument("run_id")
    _add_store_arguments(forecast, BACKEND_HELP["read"])
    forecast.add_argument(
        "--nodes", default="2,4,8,16", help="sizes to forecast, e.g. 2,4,8,16 (nodes)"
    )
    forecast.add_argument(
        "--gpus-per-node", type=positive_int, default=None, help="default: the run's ranks per node"
    )
    link = forecast.add_mutually_exclusive_group()
    link.add_argument("--link-gbps", type=positive_seconds, help="the fabric's rate per node, Gb/s")
    link.add_argument(
        "--link-from-ceilings", action="store_true", help="the fabric ceiling the agents measured"
    )
    storage = forecast.add_mutually_exclusive_group()
    storage.add_argument(
        "--storage-mbps", type=positive_seconds, help="the shared storage's read rate, MB/s"
    )
    storage.add_argument(
        "--storage-from-ceilings",
        action="store_true",
        help="the storage ceiling the agents measured",
    )
    forecast.add_argument(
        "--gradient-mb",
        type=positive_seconds,
        help="gradient bytes per step in MB (default: from the run's fabric bytes per step)",
    )
    forecast.add_argument("--format", choices=("table", "json", "csv"), default="table")
    _add_remote_arguments(forecast)

    compare = sub.add_parser("compare", help="two runs side by side; B against A")
    compare.add_argument("run_a")
    compare.add_argument("run_b")
    _add_store_arguments(compare, BACKEND_HELP["read"])
    compare.add_argument(
        "--db-b", metavar="FILE", help="the SQLite file holding RUN_B (default: --db)"
    )
    compare.add_argument(
        "--fail-if-slower",
        type=positive_seconds,
        metavar="PERCENT",
        help="exit 1 when B is slower than A by more than PERCENT (a CI regression gate)",
    )
    compare.add_argument("--format", choices=("table", "json"), default="table")
    _add_remote_arguments(compare)
