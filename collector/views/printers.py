"""Which function prints each ``collector`` view, imported only when that view is asked
for: ``collector report`` never loads the jobs views, nor ``collector jobs`` the report's
(each import is start-up time of a command people run in loops and pipes)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

PRINTERS: dict[str, tuple[str, str]] = {
    "report": ("collector.views.reports", "print_report"),
    "runs": ("collector.views.reports", "print_runs"),
    "scaling": ("collector.views.reports", "print_stored_scaling"),
    "hosts": ("collector.views.reports", "print_hosts"),
    "inference": ("collector.views.inference", "print_inference"),
    "jobs": ("collector.views.jobs", "print_jobs"),
    "job": ("collector.views.jobs", "print_job"),
}


def printer(view: str) -> Callable[..., Any]:
    """The function that prints ``view``: ``printer(view)(store, args, out)``."""
    module, name = PRINTERS[view]
    return getattr(importlib.import_module(module), name)
