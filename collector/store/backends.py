"""Scale-out sample stores named on the command line: ``KIND=URL``.

``victoriametrics=URL``
    VictoriaMetrics. ``collector serve`` forwards the samples it receives to its InfluxDB
    endpoint; reads use its export API (``collector.store.victoriametrics``).
``prometheus=URL``
    Prometheus (or anything that answers the Prometheus query API) fed by scraping the
    agents' ``/metrics``. ``collector serve`` forwards nothing: Prometheus scrapes the
    agents itself, and what is pushed to the collector is stored in its SQLite file as
    without a backend. Reads use range-vector instant queries (``collector.store.prometheus``).

Either way the runs and their workload events come from the collector's SQLite file
(``--db``), where ``collector serve`` keeps them.

Credentials: an authenticated VictoriaMetrics or Prometheus (behind vmauth or a proxy) is
given with ``--backend-auth-file FILE``, one line: ``USER:PASSWORD`` (HTTP Basic auth) or a
token without a colon (``Authorization: Bearer``); read by ``netserve.tokens``, never
logged, never in a ``repr``. A URL with credentials in it (``https://user:pw@vm:8428``) is
refused with a message naming that option: a password on the command line is in every
``ps`` listing and shell history, and the URL is logged.

``collector --backend`` and ``dashboard serve --backend`` both parse with
:func:`parse_backend_spec` (``dashboard serve --collector URL`` is a remote collector's read
API, as for ``collector report``).
"""

from __future__ import annotations

import base64
import os
import sys
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from collector.store.api import ReadStore
from netserve.tokens import TokenFileError, read_token_file

VICTORIAMETRICS = "victoriametrics"
PROMETHEUS = "prometheus"
KINDS = (VICTORIAMETRICS, PROMETHEUS)
SPEC_FORMS = " or ".join(f"{kind}=URL" for kind in KINDS)


AUTH_OPTION = "--backend-auth-file"


class BackendSpecError(ValueError):
    """A backend spec that is not ``victoriametrics=URL`` or ``prometheus=URL``, has
    credentials in its URL, or names an auth file that cannot be used."""


@dataclass(frozen=True)
class BackendSpec:
    kind: str  # VICTORIAMETRICS or PROMETHEUS
    url: str  # http(s)://HOST:PORT[/PREFIX], no trailing slash, no credentials
    # the Authorization header's value, from --backend-auth-file: never shown
    authorization: str | None = field(default=None, repr=False, compare=False)

    @property
    def label(self) -> str:
        """What logs and messages say: ``victoriametrics=URL`` (no credentials)."""
        return f"{self.kind}={self.url}"

    @property
    def forwards_writes(self) -> bool:
        """Whether ``collector serve`` sends the samples it receives to this store."""
        return self.kind == VICTORIAMETRICS


def parse_backend_spec(
    text: str, bare_url_kind: str | None = None, auth_file: str | os.PathLike[str] | None = None
) -> BackendSpec:
    """``KIND=URL`` as a :class:`BackendSpec`; a bare URL only when ``bare_url_kind`` says
    what it is; its Authorization from ``auth_file`` (``--backend-auth-file``). Raises
    :class:`BackendSpecError` with a message naming the accepted forms (and never quoting
    a password)."""
    kind, sep, url = text.partition("=")
    if not sep and bare_url_kind is not None and text.startswith(("http://", "https://")):
        kind, url = bare_url_kind, text
    if kind not in KINDS or not url.startswith(("http://", "https://")):
        shown = text if "@" not in text else "a URL with credentials"
        raise BackendSpecError(f"must be {SPEC_FORMS} (URL: http://HOST:PORT), not {shown!r}")
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        host = parts.hostname or "HOST"
        port = f":{parts.port}" if parts.port else ""
        raise BackendSpecError(
            f"{kind}={parts.scheme}://{host}{port}: credentials in the URL are not taken "
            f"(they would show in ps and in logs): put USER:PASSWORD (or a bearer token) "
            f"in a file only you can read and give {AUTH_OPTION} FILE"
        )
    authorization = authorization_of(auth_file) if auth_file else None
    return BackendSpec(kind, url.rstrip("/"), authorization)


def authorization_of(path: str | os.PathLike[str]) -> str:
    """The ``Authorization`` header value for the credentials in ``path``: ``USER:PASSWORD``
    is Basic auth, anything without a colon a Bearer token."""
    try:
        secret = read_token_file(path, what="backend auth file")
    except TokenFileError as error:
        raise BackendSpecError(f"{AUTH_OPTION}: {error}") from None
    if ":" in secret:
        return "Basic " + base64.b64encode(secret.encode("utf-8")).decode("ascii")
    return f"Bearer {secret}"


def forwarding_spec(
    text: str | None, auth_file: str | os.PathLike[str] | None = None
) -> BackendSpec | None:
    """Where ``collector serve --backend text`` sends the samples it receives: the spec of
    ``victoriametrics=URL``, None without a backend or for ``prometheus=URL``. A bad spec
    exits with the message (status 2)."""
    spec = serve_spec(text, auth_file)
    return spec if spec is not None and spec.forwards_writes else None


def serve_spec(
    text: str | None, auth_file: str | os.PathLike[str] | None = None
) -> BackendSpec | None:
    """``collector serve --backend``'s spec (None without one); a bad one exits (status 2)."""
    if not text:
        return None
    try:
        return parse_backend_spec(text, auth_file=auth_file)
    except BackendSpecError as error:
        print(f"collector serve: --backend {error}", file=sys.stderr)
        raise SystemExit(2) from None


def open_backend_store(spec: BackendSpec, events: object = None) -> ReadStore:
    """The ``ReadStore`` over ``spec``, with runs and events from ``events``: the SQLite
    file's path, its ``EventStore`` or a ``SqliteStore`` over it (by default the ``--db``
    default, when that file exists)."""
    if spec.kind == PROMETHEUS:
        from collector.store.prometheus import PrometheusStore

        return PrometheusStore(spec.url, events, authorization=spec.authorization)  # type: ignore[arg-type]
    from collector.store.victoriametrics import VictoriaMetricsStore

    return VictoriaMetricsStore(spec.url, events, authorization=spec.authorization)  # type: ignore[arg-type]
