"""The read API's server side: ``collector serve`` routes ``GET /api/v1/<view>`` here
(token-protected like writes) and answers what ``collector VIEW ...`` prints locally, made by
the same function (``collector.views.printers.render``) from the collector's own store."""

from __future__ import annotations

import argparse
import io
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
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


class ReadsBusy(Exception):
    """Every turn to build a read is taken and its queue full: answer 503 + Retry-After."""


class ReadGate:
    """At most ``concurrency`` read-API requests built at once, ``queue`` more waiting their
    turn (for at most ``wait_seconds``), the rest refused at once (``ReadsBusy``).

    Reads are CPU-bound Python: 40 at once on a store of 3,000 runs took every request
    thread and the interpreter, and held writes up to 36 s (issue 44, item 8). Bounded,
    they leave request threads and CPU to the writes, whose latency the agents' 10 s
    timeout depends on. ``RETRY_AFTER_SECONDS`` is what a refused reader is told."""

    RETRY_AFTER_SECONDS = 2

    def __init__(self, concurrency: int = 2, queue: int = 8, wait_seconds: float = 30.0) -> None:
        if concurrency < 1 or queue < 0:
            raise ValueError("a read gate needs at least one turn and no negative queue")
        self.concurrency = concurrency
        self.queue = queue
        self.wait_seconds = wait_seconds
        self._turns = threading.Semaphore(concurrency)
        self._admitted = threading.Semaphore(concurrency + queue)
        self._refused_lock = threading.Lock()
        self.refused = 0  # reads answered 503 since start

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Hold a turn for the block; ``ReadsBusy`` if none comes."""
        if not self._admitted.acquire(blocking=False):
            self._count_refusal()
            raise ReadsBusy(
                f"{self.concurrency} reads are being built and {self.queue} wait: try again shortly"
            )
        try:
            if not self._turns.acquire(timeout=self.wait_seconds):
                self._count_refusal()
                raise ReadsBusy(f"no turn to build this read came in {self.wait_seconds:g} s")
            try:
                yield
            finally:
                self._turns.release()
        finally:
            self._admitted.release()

    def _count_refusal(self) -> None:
        with self._refused_lock:
            self.refused += 1


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
    if view == "forecast":
        run_id = options.pop("run_id", "")
        if not run_id:
            raise ValueError("forecast needs ?run_id=RUN")
        argv.append(_value("run_id", run_id))
    if view == "compare":
        runs = [options.pop(name, "") for name in ("run_a", "run_b")]
        if not all(runs):
            raise ValueError("compare needs ?run_a=RUN&run_b=RUN")
        argv += [_value(name, run) for name, run in zip(("run_a", "run_b"), runs, strict=True)]
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
