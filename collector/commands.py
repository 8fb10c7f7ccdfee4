"""``collector report|runs|scaling|inference|jobs|job|hosts``: read the store here (``--db``,
``--backend``) or ask a collector elsewhere (``--collector URL``), print the view."""

from __future__ import annotations

import argparse
import sys

from collector.views.errors import CliError
from collector.views.printers import PRINTERS, printer
from collector.views.reports import open_store, print_throughput_scaling


def run(args: argparse.Namespace) -> int:
    out = sys.stdout
    try:
        if args.command == "scaling" and args.throughput:
            return print_throughput_scaling(args, out)
        if getattr(args, "collector", None):
            if getattr(args, "otlp_endpoint", None):
                raise CliError(
                    "--otlp-endpoint sends the findings computed here: give --db (the "
                    "store's file), not --collector",
                    2,
                )
            return _remote(args, out)
        if args.command not in PRINTERS:
            raise CliError(f"unknown command {args.command}", 2)
        return printer(args.command)(open_store(args), args, out)
    except CliError as error:
        print(f"collector {args.command}: {error}", file=sys.stderr)
        return error.status


def _remote(args: argparse.Namespace, out) -> int:
    """The same view, made by the collector at ``--collector`` (collector.api.client:
    imported here, as HTTP's modules are start-up time a local report does not need)."""
    from collector.api.client import RemoteError, run_remote

    try:
        return run_remote(args, out)
    except RemoteError as error:
        raise CliError(str(error), error.status) from None
