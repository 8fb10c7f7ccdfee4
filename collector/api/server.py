"""The read API's server side: ``collector serve`` routes ``GET /api/v1/<view>`` here
(token-protected like writes) and answers what ``collector VIEW ...`` prints locally, made by
the same function (``collector.views.reports.render``) from the collector's own store."""

from __future__ import annotations

import json
from dataclasses import dataclass
from http import HTTPStatus

from collector.api.routes import CONTENT_TYPES, LOCAL_ONLY, PREFIX, VIEWS


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
    if view == "job":
        job_id = options.pop("job_id", "")
        if not job_id or not job_id.replace("_", "").replace(".", "").isalnum():
            raise ValueError("job needs ?job_id=JOBID (letters, digits, '_' and '.')")
        argv.append(job_id)
    if view == "inference" and options.get("run_id"):  # optional: the newest run without
        argv.append(options.pop("run_id"))
    options.setdefault("format", "json")
    for name, value in sorted(options.items()):
        positional = name in ("run_id", "job_id")
        if name in LOCAL_ONLY or positional or not name.replace("_", "").isalnum():
            raise ValueError(f"{name!r} is not an option of `collector {view}` here")
        flag = "--" + name.replace("_", "-")
        argv += [flag] if value == "true" else [flag, value]
    return argv


def answer(view: str, query: dict[str, list[str]], store) -> Answer:
    """Render ``view`` from ``store`` exactly as the local command prints it."""
    from collector.cli import build_parser
    from collector.views.errors import CliError
    from collector.views.reports import render

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
