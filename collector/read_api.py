"""The collector's read API: ``collector report|runs|scaling`` over HTTP, both ends.

Server side (``collector serve`` routes ``GET /api/v1/<view>`` here, token-protected like
writes)::

    GET /api/v1/runs?format=json
    GET /api/v1/report?run_id=RUN&format=json&findings=true
    GET /api/v1/scaling?format=json
    GET /api/v1/inference?run_id=RUN&format=json   (run_id optional: the newest)

A query parameter is the long option of the command line without its dashes (``true``
for a flag); ``format`` defaults to ``json``. The answer is what ``collector VIEW ...``
prints locally, made by the same function (``reports_cli.render``) from the collector's own
store, so the JSON is identical by construction and tables match too. 404 for a run that is
not there, 400 for an option the command does not take.

Client side: ``collector report|runs|scaling --collector URL [--token-file F]`` (and
``workloads run --collector URL`` after training) call ``fetch_view`` and print the answer.
"""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from http import HTTPStatus

PREFIX = "/api/v1/"
VIEWS = ("runs", "report", "scaling", "inference")
# options of the local commands that name the local store or the remote one: never sent
LOCAL_ONLY = frozenset({"command", "db", "backend", "collector", "token_file", "throughput"})
CONTENT_TYPES = {"json": "application/json; charset=utf-8", "csv": "text/csv; charset=utf-8"}
TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    content_type: str


def view_of(path: str) -> str | None:
    """The view a request path names (``/api/v1/report`` -> ``report``), else None."""
    if not path.startswith(PREFIX):
        return None
    view = path[len(PREFIX) :].strip("/")
    return view if view in VIEWS else None


def command_argv(view: str, query: dict[str, list[str]]) -> list[str]:
    """The ``collector`` arguments a query stands for; ValueError for one it cannot."""
    argv = [view]
    options = {name: values[-1] for name, values in query.items()}
    if view == "report":
        run_id = options.pop("run_id", "")
        if not run_id:
            raise ValueError("report needs ?run_id=RUN")
        argv.append(run_id)
    if view == "inference" and options.get("run_id"):  # optional: the newest run without
        argv.append(options.pop("run_id"))
    options.setdefault("format", "json")
    for name, value in sorted(options.items()):
        if name in LOCAL_ONLY or name == "run_id" or not name.replace("_", "").isalnum():
            raise ValueError(f"{name!r} is not an option of `collector {view}` here")
        flag = "--" + name.replace("_", "-")
        argv += [flag] if value == "true" else [flag, value]
    return argv


def answer(view: str, query: dict[str, list[str]], store) -> Answer:
    """Render ``view`` from ``store`` exactly as the local command prints it."""
    from collector.cli import build_parser
    from collector.reports_cli import CliError, render

    def error(status: int, message: str) -> Answer:
        body = json.dumps({"code": HTTPStatus(status).phrase.lower(), "message": message})
        return Answer(status, body.encode("utf-8"), CONTENT_TYPES["json"])

    try:
        argv = command_argv(view, query)
    except ValueError as problem:
        return error(HTTPStatus.BAD_REQUEST, str(problem))
    try:
        args = build_parser().parse_args(argv)
    except SystemExit:  # argparse has said why on the server's stderr
        return error(HTTPStatus.BAD_REQUEST, f"bad options for `collector {view}`: {argv[1:]}")
    try:
        text = render(args, store)
    except CliError as problem:
        status = HTTPStatus.NOT_FOUND if problem.status == 1 else HTTPStatus.BAD_REQUEST
        return error(status, str(problem))
    content_type = CONTENT_TYPES.get(args.format, "text/plain; charset=utf-8")
    return Answer(HTTPStatus.OK, text.encode("utf-8"), content_type)


# ------------------------------------------------------------------------------ client


class RemoteError(Exception):
    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def query_of(args: argparse.Namespace) -> dict[str, str]:
    """The query parameters for a parsed ``collector report|runs|scaling`` command line."""
    query: dict[str, str] = {}
    for name, value in sorted(vars(args).items()):
        if name in LOCAL_ONLY or value is None or value is False:
            continue
        query[name] = "true" if value is True else str(value)
    return query


def fetch_view(url: str, view: str, query: dict[str, str], token: str | None) -> str:
    """What ``GET URL/api/v1/VIEW?query`` answers, as text; RemoteError with the fix."""
    address = f"{url.rstrip('/')}{PREFIX}{view}?{urllib.parse.urlencode(query)}"
    request = urllib.request.Request(address, headers={"Accept": "application/json"})
    if token:
        request.add_header("Authorization", f"Token {token}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
            return response.read().decode("utf-8")
    except urllib.error.HTTPError as problem:
        message = _message(problem.read())
        if problem.code == HTTPStatus.UNAUTHORIZED:
            fix = "give --token-file FILE" if not token else "check --token-file"
            raise RemoteError(f"{url} refused the token ({message}): {fix}") from None
        if problem.code == HTTPStatus.NOT_FOUND and not message:
            raise RemoteError(f"{url} has no read API (is it an epochscope collector?)") from None
        raise RemoteError(message or f"{url} answered {problem.code}",
                          2 if problem.code == HTTPStatus.BAD_REQUEST else 1) from None  # fmt: skip
    except (urllib.error.URLError, OSError) as problem:
        reason = getattr(problem, "reason", problem)
        raise RemoteError(f"cannot reach the collector at {url}: {reason}") from None


def _message(body: bytes) -> str:
    try:
        return str(json.loads(body).get("message", ""))
    except (ValueError, AttributeError):
        return body.decode("utf-8", "replace").strip()[:200]


def read_token_file(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip() or None
    except OSError as problem:
        raise RemoteError(f"--token-file {path}: {problem.strerror}", 2) from None


def run_remote(args: argparse.Namespace, out) -> int:
    """``collector VIEW --collector URL``: print what the collector's read API answers."""
    token = read_token_file(getattr(args, "token_file", None))
    out.write(fetch_view(args.collector, args.command, query_of(args), token))
    return 0
