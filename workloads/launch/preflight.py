"""Checks of the collector before any training starts, and what to print when events wait.

``check_collector`` sends an empty write (``POST /api/v2/write`` with no lines) with the
token the ranks will use: the collector authorizes it exactly as it would authorize their
events, and an empty body stores nothing. So a collector that is down, a URL that is not
a write API and a missing or wrong token are found in a second, before training, rather
than as 401s after it. ``workloads run`` runs it on the launching host and, over SSH with
``workloads check-collector``, on every other host of the run (what one host reaches,
another may not).
"""

from __future__ import annotations

import argparse
import urllib.error
import urllib.request
from http import HTTPStatus

from netserve.tls import client_context
from workloads.record.delivery import UNDELIVERED_EXIT as UNDELIVERED_EXIT
from workloads.record.delivery import resend_command as resend_command
from workloads.record.events import DEFAULT_BUCKET, DEFAULT_ORG

CHECK_TIMEOUT_SECONDS = 10.0


class CollectorUnusable(RuntimeError):
    """The collector cannot take the run's events; the message says how to fix it."""


class CollectorUnreachable(CollectorUnusable):
    """Nothing answered at the URL (down, starting, or the wrong address)."""


def collector_url(text: str) -> str:
    """``--collector`` (an argparse type): an http(s) URL with a host and a valid port,
    refused before anything starts (``notaurl``, ``http://``, ``http://:8086``, ``h:99999``)."""
    from agent.config import url_problem

    problem = url_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(
            f"{problem}; give the collector's URL, e.g. http://HEAD:8086"
        )
    return text


def check_collector(
    url: str, token: str | None, token_source: str = "", host: str = "this host"
) -> None:
    """Raise CollectorUnusable unless ``url`` takes writes with ``token`` from here.

    ``token_source`` says where the token came from (``--token-file F``), for the message.
    """
    address = f"{url.rstrip('/')}/api/v2/write?org={DEFAULT_ORG}&bucket={DEFAULT_BUCKET}"
    request = urllib.request.Request(address, data=b"", method="POST")
    request.add_header("Content-Type", "text/plain; charset=utf-8")
    if token:
        request.add_header("Authorization", f"Token {token}")
    # https: the collector verified against $EPOCHSCOPE_CA_FILE, as the rank's pushes are
    tls = client_context() if address.startswith("https://") else None
    try:
        with urllib.request.urlopen(request, timeout=CHECK_TIMEOUT_SECONDS, context=tls):
            return
    except urllib.error.HTTPError as error:
        status = error.code
        if status in (HTTPStatus.UNAUTHORIZED, HTTPStatus.FORBIDDEN):
            if token is None:
                raise CollectorUnusable(
                    f"the collector at {url} wants a token and the run has none (from "
                    f"{host}): give --token-file FILE, the file `collector serve "
                    f"--token-file` reads"
                ) from None
            raise CollectorUnusable(
                f"the collector at {url} refused the token from {token_source or 'the run'} "
                f"(from {host}): use the token of `collector serve --token-file`"
            ) from None
        if status == HTTPStatus.BAD_REQUEST:
            return  # authorized; an InfluxDB that refuses an empty body still took the token
        if status == HTTPStatus.NOT_FOUND:
            raise CollectorUnusable(
                f"{url} has no InfluxDB write API (/api/v2/write answered 404, from {host}): "
                "give the collector's base URL, e.g. http://HEAD:8086"
            ) from None
        raise CollectorUnusable(
            f"the collector at {url} answered {status} to a test write (from {host})"
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as error:  # ValueError: not a URL
        reason = getattr(error, "reason", error)
        raise CollectorUnreachable(
            f"cannot reach the collector at {url} from {host} ({reason}): start it "
            "(`collector serve --listen HOST:PORT`) or give the right --collector URL"
        ) from None
