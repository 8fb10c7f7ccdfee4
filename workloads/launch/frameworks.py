"""Which frameworks and Horovod extensions are installed, found without importing them.

Importing TensorFlow takes seconds and hundreds of MB; the launcher only needs to know
whether it could, so it asks importlib for the module spec and looks for Horovod's
compiled extension of each framework (``horovod/<framework>/mpi_lib*.so``).
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

MODULES = {"tensorflow": "tensorflow", "mxnet": "mxnet", "pytorch": "torch"}
DISPLAY_NAMES = {"tensorflow": "TensorFlow", "mxnet": "MXNet", "pytorch": "PyTorch"}
HOROVOD_EXTENSIONS = {"tensorflow": "tensorflow", "mxnet": "mxnet", "pytorch": "torch"}
# Frameworks whose multi-process runs go through Horovod (PyTorch uses torch.distributed).
USES_HOROVOD = ("tensorflow", "mxnet")


class FrameworkError(RuntimeError):
    """A framework or launcher the run needs is missing; the message says how to get it."""


def install_hint(framework: str) -> str:
    return f"pip install 'epochscope[{framework}]'  (or `make frameworks` in a checkout)"


def is_installed(framework: str) -> bool:
    return importlib.util.find_spec(MODULES[framework]) is not None


def horovod_dir() -> Path | None:
    spec = importlib.util.find_spec("horovod")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def horovod_supports(framework: str) -> bool:
    """Horovod is installed and was built with this framework's extension."""
    root = horovod_dir()
    if root is None:
        return False
    return any((root / HOROVOD_EXTENSIONS[framework]).glob("mpi_lib*.so"))


def horovodrun() -> str | None:
    beside = Path(sys.executable).parent / "horovodrun"
    if beside.is_file():
        return str(beside)
    return shutil.which("horovodrun")


def check(framework: str, processes: int) -> None:
    """Raise FrameworkError when this run cannot start here, saying what to install."""
    if not is_installed(framework):
        raise FrameworkError(
            f"{framework} is not installed in {sys.prefix}: {install_hint(framework)}"
        )
    if framework not in USES_HOROVOD or processes <= 1:
        return
    if horovod_dir() is None:
        raise FrameworkError(
            f"horovod is not installed: multi-process {framework} runs need it; "
            "`make frameworks` builds it (HOROVOD_WITH_TENSORFLOW/MXNET=1, gloo)"
        )
    if not horovod_supports(framework):
        raise FrameworkError(
            f"horovod built without {DISPLAY_NAMES[framework]} ({horovod_dir()}):"
            f" rebuild it with HOROVOD_WITH_"
            f"{HOROVOD_EXTENSIONS[framework].upper()}=1, or run with --np 1"
        )
    if horovodrun() is None:
        raise FrameworkError("horovodrun is not on PATH: reinstall horovod")
