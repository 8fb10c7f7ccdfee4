"""The read API's server side: ``collector serve`` routes ``GET /api/v1/<view>`` here
(token-protected like writes) and answers what ``collector VIEW ...`` prints locally, made by
the same function (``collector.views.printers.render``) from the collector's own store."""

from __future__ import annotations

import argparse
import io
import json
from dataclasses import dataclass
from http import HTTPStatus
from typing import NoReturn

from collector.api.routes import CONTENT_TYPES, DASHBOARD, LOCAL_ONLY, PREFIX, VIEWS
from contract.commandline import Parser


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    content_type: str


class QuietParser(Parser):
    """The command line's parser that never prints (it would print into the collector's
    log) nor exits (it would stop a request thread): every complaint is a ValueError,
    answered as a 400."""

    def error(self, message: str) -> NoReturn:
        raise ValueError(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise ValueError((message or f"`{self.prog}` exited with {status}").strip())

    def _print_message(self, message: str, file: object = None) -> None:
        raise ValueError("the read API prints no help or usage")


def view_of(path: str) -> str | None:
    """The view a request path names (``/api/v1/report`` -> ``report``, and
    ``/api/v1/dashboard/epochs`` -> ``dashboard/epochs``), else None."""
    if not path.startswith(PREFIX):
        return None
    view = path[len(PREFIX) :].strip("/")
    if view.startswith(DASHBOARD):
        return view
    return view if view in VIEWS else None


def answer_question(question: str, query: dict[str, list[str]], store) -> Answer:
    """``GET /api/v1/dashboard/<question>``: what ``dashboard serve --collector URL`` asks
    (``collector.queries.questions``), as JSON; 400 for a question or parameter it cannot
    take."""
    from collector.queries.questions import QuestionError
    from collector.queries.questions import answer as answer_of

    params = {name: values[-1] for name, values in query.items()}
    try:
        found = answer_of(store, question, params)
    except QuestionError as problem:
        body = json.dumps({"code": "bad request", "message": f"dashboard/{question}: {problem}"})
        return Answer(HTTPStatus.BAD_REQUEST, body.encode("utf-8"), CONTENT_TYPES["json"])
    body = json.dumps(found, separators=(",", ":"), default=str)
    return Answer(HTTPStatus.OK, body.encode("utf-8"), CONTENT_TYPES["json"])


def view_options(view: str) -> dict[str, argparse.Action]:
    """The options of ``collector VIEW`` a query may carry, by query name (the long option
    without its dashes): not help, nor those naming a store (``routes.LOCAL_ONLY``)."""
    from collector.arguments import build_parser

    [commands] = [a for a in build_parser(QuietParser)._actions if a.dest == "command"]
    parser = commands.choices[view]  # type: ignore[index]
    return {
        action.dest: action
        for action in parser._actions
        if action.option_strings and action.dest not in LOCAL_ONLY and action.dest != "help"
    }


def _value(name: str, value: str) -> str:
    """A query value as one argument that argparse can only read as a value."""
    if value.startswith("-"):
        raise ValueError(f"{name}={value!r}: a value may not start with '-'")
    return value


def command_argv(view: str, query: dict[str, list[str]]) -> list[str]:
    """The ``collector`` arguments a query stands for; ValueError for one it cannot. No
    value can become an option: names are the view's own options only, values go as
    ``--option=value`` and never start with '-', flags are ``true`` or ``false``."""
    argv = [view]
    options = {name: values[-1] for name, values in query.items()}
    if view == "report":
        run_id = options.pop("run_id", "")
        if not run_id:
            raise ValueError("report needs ?run_id=RUN")
        argv.append(_value("run_id", run_id))
    if view == "job":
        job_id = options.pop("job_id", "")
        if not job_id or not job_id.replace("_", "").replace(".", "").isalnum():
            raise ValueError("job needs ?job_id=JOBID (letters, digits, '_' and '.')")
        argv.append(_value("job_id", job_id))
    if view == "inference" and options.get("run_id"):  # optional: the newest run without
        argv.append(_value("run_id", options.pop("run_id")))
    options.setdefault("format", "json")
    known = view_options(view)
    for name, value in sorted(options.items()):
        action = known.get(name)
        if action is None:
            raise ValueError(f"{name!r} is not an option of `collector {view}` here")
        flag = next(o for o in action.option_strings if o.startswith("--"))
        if action.nargs == 0:  # a flag
            if value not in ("true", "false"):
                raise ValueError(f"{name}={value!r}: a flag is true or false")
            argv += [flag] if value == "true" else []
        else:
            argv.append(f"{flag}={_value(name, value)}")
    return argv


def answer(view: str, query: dict[str, list[str]], store) -> Answer:
    """Render ``view`` from ``store`` exactly as the local command prints it on stdout
    (what it would print on stderr, a CSV report's findings, is left out: ask for JSON)."""
    from collector.arguments import build_parser
    from collector.views.errors import CliError
    from collector.views.printers import render

    def error(status: int, message: str) -> Answer:
        body = json.dumps({"code": HTTPStatus(status).phrase.lower(), "message": message})
        return Answer(status, body.encode("utf-8"), CONTENT_TYPES["json"])

    if view.startswith(DASHBOARD):
        return answer_question(view[len(DASHBOARD) :], query, store)
    try:
        argv = command_argv(view, query)
        args = build_parser(QuietParser).parse_args(argv)
    except ValueError as problem:
        return error(HTTPStatus.BAD_REQUEST, f"`collector {view}`: {problem}")
    try:
        text = render(args, store, err=io.StringIO())  # nothing into the collector's log
    except CliError as problem:
        status = HTTPStatus.NOT_FOUND if problem.status == 1 else HTTPStatus.BAD_REQUEST
        return error(status, str(problem))
    content_type = CONTENT_TYPES.get(args.format, "text/plain; charset=utf-8")
    return Answer(HTTPStatus.OK, text.encode("utf-8"), content_type)
