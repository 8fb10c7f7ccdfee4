"""Read into the page cache every package and mapped library that importing some modules
loads, as a process of its own: ``python -m tests.support.page_in MODULE...``.

The scenarios call it (``tests.scenarios.conftest.cache_code``) before a run inside a read
throttle, so that the run's code is not read through the throttle as its epoch-1 reads.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable
from pathlib import Path


def read_files(paths: Iterable[Path | str]) -> None:
    """``cat`` each file to /dev/null: its pages are in the page cache after (a file that
    cannot be read is skipped)."""
    for path in paths:
        try:
            with open(path, "rb") as handle:
                while handle.read(1 << 22):
                    pass
        except OSError:
            continue


def loaded_files() -> set[str]:
    """Every file of each package this process imported from (whole packages: a run imports
    more of them later), its single-file modules, and the files it maps (shared libraries)."""
    packages: set[str] = set()
    files: set[str] = set()
    for module in list(sys.modules.values()):
        top = sys.modules.get(module.__name__.partition(".")[0])
        if getattr(top, "__path__", None):
            packages.update(top.__path__)
        elif getattr(module, "__file__", None):
            files.add(module.__file__)
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) > 5 and fields[5].startswith("/"):
                files.add(fields[5])
    for package in packages:
        for folder, _, names in os.walk(package):
            files.update(os.path.join(folder, name) for name in names)
    return files


def main(modules: list[str]) -> None:
    for name in modules:
        importlib.import_module(name)
    read_files(sorted(loaded_files()))


if __name__ == "__main__":
    main(sys.argv[1:])
