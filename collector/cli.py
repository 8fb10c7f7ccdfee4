"""``collector`` command line: serve, report, runs, scaling, inference, jobs, job, hosts.

Each subcommand lives in its own module with a ``run(args) -> int`` function; this file only
dispatches (the arguments are ``collector.arguments``), so ``collector runs`` never imports
the HTTP server.
"""

from __future__ import annotations

import importlib
import sys

from collector.arguments import build_parser
from contract.commandline import quiet_broken_pipe

# subcommand -> module whose run(args) handles it (tests/unit/test_layering.py reads these
# names as imports)
HANDLERS = {
    "serve": "collector.ingest.server",
    "report": "collector.commands",
    "runs": "collector.commands",
    "scaling": "collector.commands",
    "inference": "collector.commands",
    "jobs": "collector.commands",
    "job": "collector.commands",
    "hosts": "collector.commands",
    "token": "collector.ingest.tokens_command",
    "forecast": "collector.views.forecast",
    "compare": "collector.views.forecast",
}


def main(argv: list[str] | None = None) -> int:
    """The command's exit status; quiet when its reader goes away (``... | head``)."""
    return quiet_broken_pipe(lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    handler = importlib.import_module(HANDLERS[args.command])
    try:
        return int(handler.run(args) or 0)
    except RuntimeError as error:
        # (imported here: a StoreError means the store is loaded; `scaling` may not load it)
        from collector.store.database import StoreError

        if isinstance(error, StoreError):
            # a store file that cannot be used: one line, no traceback
            print(f"collector {args.command}: {error}", file=sys.stderr)
            return 2
        if type(error).__name__ == "BackendError":  # --backend down or refusing: one line
            print(f"collector {args.command}: {error}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
