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

``collector --backend`` and ``dashboard serve --backend`` both parse with
:func:`parse_backend_spec` (``dashboard serve --collector URL`` is a remote collector's read
API, as for ``collector report``).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from collector.store.api import ReadStore

VICTORIAMETRICS = "victoriametrics"
PROMETHEUS = "prometheus"
KINDS = (VICTORIAMETRICS, PROMETHEUS)
SPEC_FORMS = " or ".join(f"{kind}=URL" for kind in KINDS)


class BackendSpecError(ValueError):
    """A backend spec that is not ``victoriametrics=URL`` or ``prometheus=URL``."""


@dataclass(frozen=True)
class BackendSpec:
    kind: str  # VICTORIAMETRICS or PROMETHEUS
    url: str  # http(s)://HOST:PORT[/PREFIX], no trailing slash

    @property
    def forwards_writes(self) -> bool:
        """Whether ``collector serve`` sends the samples it receives to this store."""
        return self.kind == VICTORIAMETRICS


def parse_backend_spec(text: str, bare_url_kind: str | None = None) -> BackendSpec:
    """``KIND=URL`` as a :class:`BackendSpec`; a bare URL only when ``bare_url_kind`` says
    what it is. Raises :class:`BackendSpecError` with a message naming the accepted forms."""
    kind, sep, url = text.partition("=")
    if not sep and bare_url_kind is not None and text.startswith(("http://", "https://")):
        kind, url = bare_url_kind, text
    if kind not in KINDS or not url.startswith(("http://", "https://")):
        raise BackendSpecError(f"must be {SPEC_FORMS} (URL: http://HOST:PORT), not {text!r}")
    return BackendSpec(kind, url.rstrip("/"))


def forwarding_url(text: str | None) -> str | None:
    """Where ``collector serve --backend text`` sends the samples it receives: the URL of
    ``victoriametrics=URL``, None without a backend or for ``prometheus=URL``. A bad spec
    exits with the message (status 2)."""
    if not text:
        return None
    try:
        spec = parse_backend_spec(text)
    except BackendSpecError as error:
        print(f"collector serve: --backend {error}", file=sys.stderr)
        raise SystemExit(2) from None
    return spec.url if spec.forwards_writes else None


def open_backend_store(
    spec: BackendSpec, events: str | os.PathLike[str] | None = None
) -> ReadStore:
    """The ``ReadStore`` over ``spec``, with runs and events from the SQLite file
    ``events`` (by default the ``--db`` default, when that file exists)."""
    if spec.kind == PROMETHEUS:
        from collector.store.prometheus import PrometheusStore

        return PrometheusStore(spec.url, events)
    from collector.store.victoriametrics import VictoriaMetricsStore

    return VictoriaMetricsStore(spec.url, events)
