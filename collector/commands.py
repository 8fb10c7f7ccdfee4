"""``collector report|runs|scaling|inference|jobs|job|hosts``: read the store here (``--db``,
``--backend``) or ask a collector elsewhere (``--collector URL``), print the view."""

from __future__ import annotations

import argparse
import sys

from collector.api.client import RemoteError, run_remote
from collector.views.errors import CliError
from collector.views.inference import print_inference
from collector.views.jobs import print_job, print_jobs
from collector.views.reports import (
    open_store,
    print_hosts,
    print_report,
    print_runs,
    print_stored_scaling,
    print_throughput_scaling,
)


def run(args: argparse.Namespace) -> int:
    out = sys.stdout
    try:
        if args.command == "scaling" and args.throughput:
            return print_throughput_scaling(args, out)
        if getattr(args, "collector", None):
            return _remote(args, out)
        store = open_store(args)
        if args.command == "report":
            return print_report(store, args, out)
        if args.command == "runs":
            return print_runs(store, args, out)
        if args.command == "scaling":
            return print_stored_scaling(store, args, out)
        if args.command == "inference":
            return print_inference(store, args, out)
        if args.command == "jobs":
            return print_jobs(store, args, out)
        if args.command == "job":
            return print_job(store, args, out)
        if args.command == "hosts":
            return print_hosts(store, args, out)
        raise CliError(f"unknown command {args.command}", 2)
    except CliError as error:
        print(f"collector {args.command}: {error}", file=sys.stderr)
        return error.status


def _remote(args: argparse.Namespace, out) -> int:
    """The same view, made by the collector at ``--collector`` (collector.api.client)."""
    try:
        return run_remote(args, out)
    except RemoteError as error:
        raise CliError(str(error), error.status) from None
