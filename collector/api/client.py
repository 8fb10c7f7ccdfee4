"""The collector's read API, both ends (the server side is ``collector.api.server``).

Server side (``collector serve`` routes ``GET /api/v1/<view>`` here, token-protected like
writes)::

    GET /api/v1/runs?format=json
    GET /api/v1/report?run_id=RUN&format=json&findings=true
    GET /api/v1/scaling?format=json
    GET /api/v1/inference?run_id=RUN&format=json   (run_id optional: the newest)
    GET /api/v1/jobs?format=json
    GET /api/v1/job?job_id=JOBID&format=json&summary=true
    GET /api/v1/dashboard/<question>?run_id=RUN...  (``dashboard serve --collector URL``:
                                                     collector.queries.questions)
    GET /api/v1/hosts?format=json                   (the hosts with samples or runs)

A query parameter is the long option of the command line without its dashes (``true``
for a flag); ``format`` defaults to ``json``. The answer is what ``collector VIEW ...``
prints locally, made by the same function (``collector.views.printers.render``) from the
collector's own store, so the JSON is identical by construction and tables match too. 404
for a run that is not there, 400 for an option the command does not take (or a value
that starts with '-': no value becomes an option). A CSV report's findings, which the
command prints on stderr, are not in the CSV answer: the client asks for them as JSON.

Client side: ``collector report|runs|scaling|jobs|job --collector URL [--token-file F]`` (and
``workloads run --collector URL`` after training) call ``fetch_view`` and print the answer.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from http import HTTPStatus

from collector.api.routes import LOCAL_ONLY, PREFIX
from netserve.tls import TlsConfigError, client_context
from netserve.tokens import TokenFileError, read_token_file

TIMEOUT_SECONDS = 120.0


class RemoteError(Exception):
    """``status``: the command's exit status; ``http_status``: the collector's answer, when
    it answered (401 and 403: the token may not read)."""

    def __init__(self, message: str, status: int = 1, http_status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.http_status = http_status


def query_of(args: argparse.Namespace) -> dict[str, str]:
    """The query parameters for a parsed ``collector report|runs|scaling`` command line."""
    query: dict[str, str] = {}
    for name, value in sorted(vars(args).items()):
        if name in LOCAL_ONLY or value is None or value is False:
            continue
        query[name] = "true" if value is True else str(value)
    return query


def fetch_view(
    url: str,
    view: str,
    query: dict[str, str],
    token: str | None,
    tls: ssl.SSLContext | None = None,
) -> str:
    """What ``GET URL/api/v1/VIEW?query`` answers, as text; RemoteError with the fix. An
    https collector is verified against ``tls`` (default: ``$EPOCHSCOPE_CA_FILE``, else the
    system's CAs; ``netserve.tls.client_context``)."""
    address = f"{url.rstrip('/')}{PREFIX}{view}?{urllib.parse.urlencode(query)}"
    request = urllib.request.Request(address, headers={"Accept": "application/json"})
    if token:
        request.add_header("Authorization", f"Token {token}")
    if tls is None and address.startswith("https://"):
        tls = tls_of(None)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS, context=tls) as response:
            return response.read().decode("utf-8")
    except urllib.error.HTTPError as problem:
        message = _message(problem.read())
        if problem.code == HTTPStatus.UNAUTHORIZED:
            fix = "give --token-file FILE" if not token else "check --token-file"
            raise RemoteError(f"{url} refused the token ({message}): {fix}",
                              http_status=problem.code) from None  # fmt: skip
        if problem.code == HTTPStatus.NOT_FOUND and not message:
            raise RemoteError(f"{url} has no read API (is it an epochscope collector?)") from None
        raise RemoteError(message or f"{url} answered {problem.code}",
                          2 if problem.code == HTTPStatus.BAD_REQUEST else 1,
                          http_status=problem.code) from None  # fmt: skip
    except (urllib.error.URLError, OSError) as problem:
        reason = getattr(problem, "reason", problem)
        raise RemoteError(f"cannot reach the collector at {url}: {reason}") from None


def _message(body: bytes) -> str:
    try:
        return str(json.loads(body).get("message", ""))
    except (ValueError, AttributeError):
        return body.decode("utf-8", "replace").strip()[:200]


def token_of(path: str | None) -> str | None:
    """The token of ``--token-file``, or None without one (``netserve.tokens``)."""
    if path is None:
        return None
    try:
        return read_token_file(path)
    except TokenFileError as problem:
        raise RemoteError(f"--token-file: {problem}", 2) from None


def tls_of(ca_file: str | None) -> ssl.SSLContext:
    """The client context verifying against ``--ca-file`` (``netserve.tls``)."""
    try:
        return client_context(ca_file)
    except TlsConfigError as problem:
        raise RemoteError(f"--ca-file: {problem}", 2) from None


def run_remote(args: argparse.Namespace, out, err=None) -> int:
    """``collector VIEW --collector URL``: print what the collector's read API answers."""
    token = token_of(getattr(args, "token_file", None))
    tls = tls_of(args.ca_file) if args.collector.startswith("https://") else None
    query = query_of(args)
    if args.command == "report" and args.format == "csv" and args.findings:
        # locally the findings go to stderr beside the CSV; an answer has one body, so
        # they are asked for apart, as JSON, and written as the local command writes them
        from collector.findings.base import Finding
        from collector.views.output import write_findings

        query.pop("findings")
        out.write(fetch_view(args.collector, "report", query, token, tls))
        asked = {"run_id": args.run_id, "format": "json", "findings": "true"}
        document = json.loads(fetch_view(args.collector, "report", asked, token, tls))
        findings = [Finding(**finding) for finding in document["findings"]]
        write_findings(findings, sys.stderr if err is None else err)
        return 0
    out.write(fetch_view(args.collector, args.command, query, token, tls))
    return 0
