"""``dashboard serve``: the Dash app over a store, read-only.

    dashboard serve [--db PATH [--backend KIND=URL] | --collector URL [--token-file F]]
                    [--host 127.0.0.1] [--port 8050]
                    [--auth USER:PASSWORD] [--poll-seconds 2] [--max-points 500]
                    [--prepare-runs 4] [--max-connections 128] [--header-timeout 10]

``--db`` is the collector's SQLite file (default: ``$EPOCHSCOPE_DB`` or
``runs/epochscope.sqlite``, as for ``collector``). ``--backend victoriametrics=URL`` or
``--backend prometheus=URL`` reads samples from the collector's ``--backend`` (the same
option as ``collector serve`` and ``collector report``: ``collector.store.backends``); the
runs and their events still come from the SQLite file (``--db``).
``--collector URL`` means what it means for ``collector report``: a remote ``collector
serve``, whose read API answers every question of the pages (``dashboard.remote``), with
its token from ``--token-file``; no store is opened here.
Listening on anything but loopback needs ``--auth`` (HTTP basic); the credentials can also
come from ``$EPOCHSCOPE_DASHBOARD_AUTH`` so that they stay out of the process list.
Slow or many clients are bounded by ``--max-connections`` and ``--header-timeout``
(``dashboard.server``; the collector's options of the same names mean the same).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path
from types import FrameType

from collector.store.api import ReadStore
from collector.store.database import DEFAULT_DB
from dashboard.auth import AuthError, Credentials, check_bind, parse_credentials
from dashboard.server import LIMITS
from dashboard.source import DEFAULT_MAX_POINTS
from netserve.limits import ConnectionLimits
from netserve.listen import ListenError, cannot_listen, check_port, shown
from netserve.tls import TlsConfigError, add_client_arguments, add_server_arguments, server_tls_of

AUTH_ENV = "EPOCHSCOPE_DASHBOARD_AUTH"
log = logging.getLogger("dashboard")


class CliError(Exception):
    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dashboard", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the dashboard over HTTP")
    serve.add_argument(
        "--db",
        help=f"collector SQLite file (default {DEFAULT_DB}); with --backend, its events",
    )
    serve.add_argument(
        "--backend",
        metavar="{victoriametrics,prometheus}=URL",
        help="read samples from the collector's --backend: victoriametrics=URL or "
        "prometheus=URL (the runs and events from --db)",
    )
    serve.add_argument(
        "--backend-auth-file",
        metavar="FILE",
        help="credentials for --backend: one line, USER:PASSWORD (Basic auth) or a bearer "
        "token; never logged (a URL with credentials in it is refused)",
    )
    serve.add_argument(
        "--collector",
        metavar="URL",
        help="show a remote `collector serve` through its read API (as `collector report "
        "--collector URL`); no --db",
    )
    serve.add_argument("--token-file", help="file holding the collector's token (--collector)")
    add_client_arguments(serve)
    add_server_arguments(serve, "the dashboard")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (%(default)s)")
    serve.add_argument("--port", type=int, default=8050, help="port (%(default)s)")
    serve.add_argument(
        "--auth",
        metavar="USER:PASSWORD",
        help=f"require HTTP basic auth (or set ${AUTH_ENV}); needed off loopback",
    )
    serve.add_argument(
        "--poll-seconds",
        type=float,
        default=2.0,
        help="how often live pages fetch new data (%(default)s)",
    )
    serve.add_argument(
        "--prepare-runs",
        type=int,
        default=4,
        metavar="N",
        help="keep the N newest finished runs computed in the background, so that they "
        "open at once (%(default)s; 0: off)",
    )
    serve.add_argument(
        "--max-connections",
        type=int,
        default=LIMITS.max_connections,
        metavar="N",
        help="connections (threads) open at once; at the cap a new one closes the connection "
        "that has waited longest for its request, or, when every one has a request in "
        "hand, gets 503 with Retry-After (%(default)s)",
    )
    serve.add_argument(
        "--header-timeout",
        type=float,
        default=LIMITS.header_timeout,
        metavar="SECONDS",
        help="a request's whole head must arrive within this many seconds of the accept; "
        "a client that sent part of one gets 408, one that sent nothing is closed "
        "(%(default)s)",
    )
    serve.add_argument(
        "--max-points",
        type=int,
        default=DEFAULT_MAX_POINTS,
        help="buckets per host and chart; the server down-samples to this (%(default)s)",
    )
    return parser


BACKEND_KINDS = ("victoriametrics=", "prometheus=")
MOVED = (
    "--collector now means a remote `collector serve` (its read API, as for `collector "
    "report --collector URL`); a VictoriaMetrics or Prometheus backend is --backend {spec}"
)


def check_options(args: argparse.Namespace) -> None:
    """One meaning per flag: ``--collector KIND=URL`` (the backend, before ``--backend``)
    is refused with the new flag; ``--collector`` takes no ``--db`` nor ``--backend``."""
    if args.collector and args.collector.startswith(BACKEND_KINDS):
        raise CliError(MOVED.format(spec=args.collector))
    if args.collector and args.backend:
        raise CliError("--collector (a remote collector) and --backend (beside --db) exclude "
                       "each other")  # fmt: skip
    if args.collector and args.db:  # an old `--db FILE --collector VM_URL`
        raise CliError(
            "--collector URL shows a remote collector alone, without --db; "
            + MOVED.format(spec=f"victoriametrics={args.collector}")
        )
    if args.token_file and not args.collector:
        raise CliError("--token-file goes with --collector URL (the remote collector's token)")
    if args.collector and not args.collector.startswith(("http://", "https://")):
        raise CliError(f"--collector must be an http(s) URL, not {args.collector!r}")


def open_remote(args: argparse.Namespace, max_points: int):
    """The remote collector's read API as the pages' source, checked with one question."""
    from collector.api.client import RemoteError, tls_of, token_of
    from dashboard.remote import RemoteSource, shown_url

    try:
        tls = tls_of(args.ca_file) if args.collector.startswith("https://") else None
        source = RemoteSource(args.collector, token_of(args.token_file), max_points, tls)
        source.check()
    except RemoteError as error:
        message = str(error)
        if "has no read API" in message:  # perhaps a VictoriaMetrics URL, as before
            message += "; " + MOVED.format(spec=f"victoriametrics={shown_url(args.collector)}")
        raise CliError(message, status=error.status) from None
    return source


def open_store(args: argparse.Namespace) -> ReadStore:
    path = Path(args.db or DEFAULT_DB)
    if not path.is_file():
        # the run files beside it first (`make demo` keeps each run in runs/RUN_ID.sqlite),
        # as `collector report` says; with none, start a collector or ask one elsewhere
        from collector.views.reports import missing_store_hint

        raise CliError(f"no store at {path} ({missing_store_hint(path, args)})", status=1)
    if args.backend:
        from collector.store.backends import (
            BackendSpecError,
            open_backend_store,
            parse_backend_spec,
        )

        try:
            spec = parse_backend_spec(
                args.backend, auth_file=getattr(args, "backend_auth_file", None)
            )
        except BackendSpecError as error:
            raise CliError(f"--backend {error}") from None
    from collector.store import SqliteStore, StoreError

    try:
        if args.backend:
            return open_backend_store(spec, events=path)
        store = SqliteStore(path)
        elsewhere = store.samples_backend()
        if elsewhere is not None:
            log.warning(
                "%s holds runs and events only: its collector keeps the node samples in %s; "
                "give --backend %s for the node columns and charts",
                path,
                elsewhere.partition("=")[0],
                elsewhere,
            )
        return store
    except StoreError as error:  # damaged, foreign or empty: one line, not a traceback
        raise CliError(str(error)) from None


def credentials_from(args: argparse.Namespace) -> Credentials | None:
    text = args.auth or os.environ.get(AUTH_ENV)
    return parse_credentials(text) if text else None


def serve(args: argparse.Namespace) -> int:
    try:
        credentials = credentials_from(args)
        check_bind(args.host, credentials)
    except AuthError as error:
        raise CliError(str(error)) from None
    if args.poll_seconds <= 0 or args.max_points < 10 or args.prepare_runs < 0:
        raise CliError("--poll-seconds must be > 0, --max-points at least 10, --prepare-runs >= 0")
    try:
        check_port(args.port)
    except ListenError as error:
        raise CliError(f"--port: {error}") from None
    if args.max_connections < 1 or not args.header_timeout > 0:
        raise CliError("--max-connections must be at least 1 and --header-timeout > 0")
    check_options(args)
    try:
        tls = server_tls_of(args)
    except TlsConfigError as error:
        raise CliError(str(error)) from None
    limits = ConnectionLimits(
        max_connections=args.max_connections,
        header_timeout=args.header_timeout,
        idle_timeout=LIMITS.idle_timeout,
        write_timeout=LIMITS.write_timeout,
    )

    from dashboard.app import create_app
    from dashboard.server import make_dashboard_server
    from dashboard.source import DataSource

    store: ReadStore | None = None
    if args.collector:
        source = open_remote(args, args.max_points)
    else:
        store = open_store(args)
        source = DataSource(store, max_points=args.max_points)
    app = create_app(source, poll_seconds=args.poll_seconds, credentials=credentials)
    try:
        server = make_dashboard_server(args.host, args.port, app.server, limits, tls)
    except OSError as error:
        message = cannot_listen(args.host, args.port, error, fix="--host and --port")
        raise CliError(message, status=1) from None

    def stop(signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    preparing = source.start_preparing(args.prepare_runs) if args.prepare_runs > 0 else None
    who = f", basic auth as {credentials.user}" if credentials else ""
    if args.collector:
        from dashboard.remote import shown_url

        who += f", over the collector at {shown_url(args.collector)}"
    scheme = "https" if tls else "http"
    log.info("dashboard on %s://%s/%s", scheme, shown(args.host, server.server_port), who)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        if preparing is not None:
            preparing.set()
        server.server_close()
        close = getattr(store, "close", None)
        if callable(close):
            close()
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    args = build_parser().parse_args(argv)
    try:
        return serve(args)
    except CliError as error:
        print(f"dashboard: error: {error}", file=sys.stderr)
        return error.status


if __name__ == "__main__":
    sys.exit(main())
