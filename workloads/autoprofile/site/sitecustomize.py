"""Run by Python at start-up in every process of ``workloads profile -- COMMAND``.

Instruments this process (``workloads.autoprofile.hooks``), then runs the
``sitecustomize`` this one shadows on ``sys.path`` (a distribution's or the user's), so
putting this directory first changes nothing else. Never stops the process: a failure
to instrument is one line on stderr.

Where the process's Python has no epochscope of its own (a user's environment inside a
Slurm job profiled by the site's TaskProlog, ``workloads.autoprofile.slurm``), epochscope's
packages are found beside this file: a finder placed last on ``sys.meta_path`` serves
only those names, only when nothing before it found them, so the user's own modules and
installed packages always win and nothing else of epochscope's environment is seen.
"""

import importlib.machinery
import os
import sys

# Top-level packages an instrumented process imports (``hooks`` to the event shipper).
_OWN_PACKAGES = frozenset({"workloads", "contract", "netserve", "agent"})


class _OwnPackages:
    """Finds epochscope's own top-level packages in ``root``, where nothing else did."""

    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, name, path=None, target=None):
        if path is not None or name not in _OWN_PACKAGES:
            return None
        return importlib.machinery.PathFinder.find_spec(name, [self.root])


def _fall_back_to_own_packages() -> None:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    root = os.path.abspath(root)
    if any(os.path.abspath(entry or os.curdir) == root for entry in sys.path):
        return  # an ordinary entry: the usual order applies
    sys.meta_path.append(_OwnPackages(root))


def _instrument() -> None:
    if not os.environ.get("EPOCHSCOPE_PROFILE_RUN"):
        return
    try:
        _fall_back_to_own_packages()
        from workloads.autoprofile import hooks

        hooks.install()
    except Exception as error:  # the user's script runs whatever happens here
        print(f"epochscope: this process is not profiled: {error!r}", file=sys.stderr)


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    path = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    try:  # importlib.util's own, without the ~10 ms import of importlib.util
        from importlib._bootstrap import module_from_spec
    except ImportError:
        from importlib.util import module_from_spec
    module = module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_instrument()
_chain()
