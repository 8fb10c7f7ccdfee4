"""Run by Python at start-up in every process of ``workloads profile -- COMMAND``.

Instruments this process (``workloads.autoprofile.hooks``), then runs the
``sitecustomize`` this one shadows on ``sys.path`` (a distribution's or the user's), so
putting this directory first changes nothing else. Never stops the process: a failure
to instrument is one line on stderr.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _instrument() -> None:
    if not os.environ.get("EPOCHSCOPE_PROFILE_RUN"):
        return
    try:
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
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_instrument()
_chain()
