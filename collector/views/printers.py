"""Which function prints each ``collector`` view, imported only when that view is asked
for: ``collector report`` never loads the jobs views, nor ``collector jobs`` the report's
(each import is start-up time of a command people run in loops and pipes); and ``render``,
any view printed into a string (tests, the dashboard's export, the read API)."""

from __future__ import annotations

import argparse
import importlib
import io
from collections.abc import Callable
from typing import Any

from collector.store.api import ReadStore

PRINTERS: dict[str, tuple[str, str]] = {
    "report": ("collector.views.reports", "print_report"),
    "runs": ("collector.views.reports", "print_runs"),
    "scaling": ("collector.views.reports", "print_stored_scaling"),
    "hosts": ("collector.views.reports", "print_hosts"),
    "inference": ("collector.views.inference", "print_inference"),
    "forecast": ("collector.views.forecast", "write_forecast"),
    "compare": ("collector.views.forecast", "write_compare"),
    "jobs": ("collector.views.jobs", "print_jobs"),
    "job": ("collector.views.jobs", "print_job"),
}


def printer(view: str) -> Callable[..., Any]:
    """The function that prints ``view``: ``printer(view)(store, args, out)``."""
    module, name = PRINTERS[view]
    return getattr(importlib.import_module(module), name)


def render(args: argparse.Namespace, store: ReadStore | None = None, err=None) -> str:
    """Run a subcommand against a given store and return what it printed (for tests, the
    dashboard's export and the read API); what the command would print on stderr beside
    it (a CSV report's findings) goes to ``err``, stderr unless given."""
    from collector.views.reports import open_store, print_report, print_throughput_scaling

    buffer = io.StringIO()
    if args.command == "scaling" and args.throughput:
        print_throughput_scaling(args, buffer)
    elif args.command == "report":
        print_report(store if store is not None else open_store(args), args, buffer, err)
    else:
        store = store if store is not None else open_store(args)
        printer(args.command)(store, args, buffer)
    return buffer.getvalue()
