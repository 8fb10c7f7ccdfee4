"""Prometheus /metrics: the latest sample in the text exposition format (0.0.4).

A field becomes ``epochscope_<measurement>_<field>`` (``schema.prometheus_name``; counters
end in ``_total``) with the point's tags as labels and the schema's help line as HELP. A
few fields share one family and are told apart by a label the schema gives them: the
CPU modes are ``epochscope_cpu_seconds_total{mode="user"}``. Text fields are not
exposed, and neither are fields the schema does not know (logged once each).

Every sample line carries the sample's own timestamp (ms), the instant the agent read
the counters. Prometheus then computes ``rate()`` over the real interval between two
readings, not between two scrapes: a scrape that lands 0.9 s after a tick and the next
one 0.1 s after the following tick would otherwise see 1 s of counting in 0.2 s. (The
cost, as for any exporter that sets timestamps: Prometheus does not mark such series
stale when the agent stops; they disappear after the 5-minute lookback.)

The page is rendered at most once per sample, by the first scrape after a tick, and the
same bytes are served to every later scrape until the next tick: a scrape never reads
/proc or /sys and never formats anything twice. An agent nobody scrapes renders nothing.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from contract import schema
from contract.point import Point
from netserve.http_guard import ConnectionGuard, GuardedThreadingMixIn
from netserve.limits import ConnectionLimits
from netserve.refusals import RefusalLog
from netserve.tls import ServerTls, TlsServerMixIn
from netserve.tokens import WatchedToken

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# /metrics connections: 64 open at most (threads), the collector's head and idle timeouts;
# [metrics] keys of the agent's configuration (see MetricsHTTPServer)
LIMITS = ConnectionLimits(max_connections=64, header_timeout=10.0, idle_timeout=75.0)
EDGE_PATH = "/edge"  # POST: an immediate sample for a run/epoch edge (loopback only)
# Label sets seen; past this many (interfaces and devices that come and go by the
# thousand) the cache is emptied and refilled rather than grown without bound.
_MAX_CACHED_LABEL_SETS = 10_000


@dataclass(frozen=True)
class _Exposed:
    """How one (measurement, field) is exposed."""

    family: str  # family name (and the sample name: counters' family ends in _total too)
    header: str  # its HELP and TYPE lines
    extra_labels: str  # 'mode="user"' for a field of a shared family, else ""


# (measurement, field) -> how it is exposed, or None: not exposed (text or unknown).
_exposed_cache: dict[tuple[str, str], _Exposed | None] = {}


def _escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _exposed(measurement: str, field: str) -> _Exposed | None:
    key = (measurement, field)
    if key in _exposed_cache:
        return _exposed_cache[key]
    spec = schema.field_spec(measurement, field)
    exposed = None
    if spec is None:
        log.warning("field %s.%s is not in contract/schema.py: not exposed", measurement, field)
    elif spec.kind is not schema.Kind.TEXT:
        name = schema.prometheus_name(measurement, spec)
        kind = "counter" if spec.is_counter else "gauge"
        header = (
            f"# HELP {name} {_escape_help(schema.prometheus_help(spec))}\n# TYPE {name} {kind}\n"
        )
        extra = ",".join(
            f'{label}="{_escape_label_value(value)}"'
            for label, value in schema.prometheus_labels(spec).items()
        )
        exposed = _Exposed(name, header, extra)
    _exposed_cache[key] = exposed
    return exposed


def _format_value(value: float | int) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(int(value))  # exact, however large (a float would round past 2**53)
    number = float(value)
    if number != number:
        return "NaN"
    if number in (float("inf"), float("-inf")):
        return "+Inf" if number > 0 else "-Inf"
    return repr(number)


class Renderer:
    """Formats samples as exposition text, caching the label text of every tag set."""

    def __init__(self) -> None:
        self._labels: dict[tuple[tuple[str, str], ...], str] = {}

    def label_text(self, tags: dict[str, str]) -> str:
        key = tuple(tags.items())
        text = self._labels.get(key)
        if text is None:
            if len(self._labels) >= _MAX_CACHED_LABEL_SETS:
                self._labels.clear()
            text = ",".join(
                f'{name}="{_escape_label_value(str(value))}"'
                for name, value in sorted(key)
                if value != ""  # an empty tag is no label, as in line protocol
            )
            self._labels[key] = text
        return text

    def render(self, points: Sequence[Point]) -> bytes:
        """The page: every family's HELP and TYPE, then its samples, in first-seen order."""
        families: dict[str, tuple[str, list[str]]] = {}
        for point in points:
            labels = self.label_text(point.tags)
            suffix = f" {point.time_ns // 1_000_000}\n"
            measurement = point.measurement
            for field, value in point.fields.items():
                exposed = _exposed_cache.get((measurement, field), False)
                if exposed is False:
                    exposed = _exposed(measurement, field)
                if exposed is None:
                    continue
                kind = type(value)
                if kind is float and value - value == 0.0:  # finite
                    text = repr(value)
                elif kind is int:
                    text = str(value)  # exact, however large
                elif isinstance(value, str):
                    continue
                else:
                    text = _format_value(value)
                family = families.get(exposed.family)
                if family is None:
                    family = families[exposed.family] = (exposed.header, [])
                extra = exposed.extra_labels
                all_labels = labels if not extra else f"{labels},{extra}" if labels else extra
                if all_labels:
                    family[1].append(f"{exposed.family}{{{all_labels}}} {text}{suffix}")
                else:
                    family[1].append(f"{exposed.family} {text}{suffix}")
        return "".join(header + "".join(lines) for header, lines in families.values()).encode()


class LatestSample:
    """Holds the last published sample and its page, rendered on the first scrape."""

    def __init__(self) -> None:
        self._points: Sequence[Point] = ()
        self._page: bytes | None = b""
        self._renderer = Renderer()
        self._lock = threading.Lock()

    def publish(self, points: Sequence[Point]) -> None:
        with self._lock:
            self._points = tuple(points)
            self._page = None

    def page(self) -> bytes:
        with self._lock:
            if self._page is None:
                self._page = self._renderer.render(self._points)
            return self._page


def render(points: Sequence[Point]) -> str:
    """The exposition text of ``points`` (for tests and ``agent sample``)."""
    return Renderer().render(points).decode()


class _Headers(dict[str, str]):
    """Request headers by lower-case name (``get`` is case-insensitive, as the
    ``email.message.Message`` that http.server would build)."""

    def get(self, name: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return super().get(name.lower(), default)


_MAX_LINE = 8192
_MAX_HEADERS = 100


class _Handler(BaseHTTPRequestHandler):
    """http.server's handler with a lighter request parser and one write per reply.

    A scrape is a GET with a handful of headers; parsing them through the ``email``
    package and writing status, each header and the body separately cost more than
    serving the already rendered page (0.65 ms of CPU per scrape, against ~0.2 ms this
    way). ``routes`` answer GET and HEAD; ``post_routes`` answer POST, and only to a
    client on loopback (the edge-sample endpoint: it makes the agent sample now, so no
    other host may ask for it, whatever address /metrics listens on). Anything else is 405.
    """

    protocol_version = "HTTP/1.1"  # keep-alive: Prometheus reuses its connection
    timeout = None  # the guard's deadlines, then its write_timeout (netserve.http_guard)
    server: MetricsHTTPServer

    def handle_one_request(self) -> None:
        self.command, self.request_version = "", "HTTP/1.1"
        guard = self.server.guard
        if not guard.wait_for_request(self.connection, self.rfile):
            self.close_connection = True
            return
        line = self.rfile.readline(_MAX_LINE + 1)
        words = line.decode("iso-8859-1").split()
        bad = len(line) > _MAX_LINE or len(words) != 3 or not words[2].startswith("HTTP/1.")
        headers = _Headers()
        too_many = False
        if not bad:
            self.command, self.path, self.request_version = words
            for _ in range(_MAX_HEADERS + 1):
                header = self.rfile.readline(_MAX_LINE + 1)
                if header in (b"\r\n", b"\n", b""):
                    break
                name, colon, value = header.decode("iso-8859-1").partition(":")
                if colon:
                    headers[name.strip().lower()] = value.strip()
            else:
                too_many = True
        if not guard.request_in_hand(self.connection):  # cut at its deadline, or evicted
            self.close_connection = True
            return
        if bad:
            self._reply(400, b"bad request\n", "text/plain; charset=utf-8", close=True)
            return
        if too_many:
            self._reply(431, b"too many headers\n", "text/plain; charset=utf-8", close=True)
            return
        self.headers = headers  # type: ignore[assignment]
        connection = headers.get("connection", "").lower()
        self.close_connection = connection == "close" or (
            self.request_version == "HTTP/1.0" and connection != "keep-alive"
        )
        path = self.path.split("?", 1)[0]
        if self.command == "POST" and path in self.server.post_routes:
            self._post(self.server.post_routes[path], headers)
            return
        if self.command not in ("GET", "HEAD"):
            self._reply(405, b"GET only\n", "text/plain; charset=utf-8", close=True)
            return
        route = self.server.routes.get(path)
        if route is None:
            self._reply(404, b"not found: try /metrics\n", "text/plain; charset=utf-8")
            return
        if not self._authorized(headers):
            self.server.refusals.refused(401, self.client_address[0], path, "no valid bearer token")
            self._reply(401, b"unauthorized\n", "text/plain; charset=utf-8", bearer=True)
            return
        content_type, body = route()
        self._reply(200, body, content_type)

    def _post(self, route: Callable[[], tuple[str, bytes]], headers: _Headers) -> None:
        length = headers.get("content-length", "0") or "0"
        if not length.isdigit() or int(length) > _MAX_LINE:
            self._reply(400, b"bad content-length\n", "text/plain; charset=utf-8", close=True)
            return
        self.rfile.read(int(length))  # the body means nothing: drain it for keep-alive
        if not ipaddress.ip_address(self.client_address[0].removeprefix("::ffff:")).is_loopback:
            self._reply(403, b"loopback only\n", "text/plain; charset=utf-8", close=True)
            return
        try:
            content_type, body = route()
        except Exception as error:  # the edge sample's EdgeBusy: the client falls back
            self.server.refusals.refused(503, self.client_address[0], self.path, str(error))
            self._reply(503, f"{error}\n".encode(), "text/plain; charset=utf-8")
            return
        self._reply(200, body, content_type)

    def _authorized(self, headers: _Headers) -> bool:
        """Without ``[metrics] bearer_token_file`` every scrape is; with it, one that sends
        ``Authorization: Bearer <token>`` (Prometheus: ``authorization: credentials_file``)."""
        token = self.server.bearer_token
        if token is None:
            return True
        scheme, _, offered = (headers.get("authorization") or "").strip().partition(" ")
        return scheme.lower() == "bearer" and token.matches(offered.strip())

    def _reply(
        self, status: int, body: bytes, content_type: str, close: bool = False, bearer: bool = False
    ) -> None:
        if close:
            self.close_connection = True
        head = (
            f"HTTP/1.1 {status} {self.responses[status][0]}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            + ('WWW-Authenticate: Bearer realm="epochscope"\r\n' if bearer else "")
            + ("Connection: close\r\n" if self.close_connection else "")
            + "\r\n"
        ).encode()
        self.wfile.write(head if self.command == "HEAD" else head + body)


class MetricsHTTPServer(TlsServerMixIn, GuardedThreadingMixIn, ThreadingHTTPServer):
    """A thread per connection, within ``netserve.http_guard``'s limits (a scraper needs one
    or two connections): at most ``max_connections`` (64) open; at the cap a new one
    closes the connection that has waited longest for a request, and when every one has
    a request in hand the new one gets 503 with Retry-After. A request's whole head must
    arrive within ``header_timeout`` (10 s; 408 when part of it came), and a kept-alive
    connection with no request is closed after ``idle_timeout`` (75 s: longer than
    Prometheus's default 1-minute scrape interval, so its connection is reused). So idle
    or slow clients cannot hold an unbounded number of threads, nor one thread for long,
    nor lock out Prometheus.

    With ``tls`` every connection is TLS (``netserve.tls``: renewed files are picked up,
    and a client CA file makes a client certificate required); with ``bearer_token``
    ``/metrics`` answers 401 to a scrape without it (``/edge`` stays loopback-only)."""

    daemon_threads = True
    request_queue_size = 64
    routes: dict[str, Callable[[], tuple[str, bytes]]]
    post_routes: dict[str, Callable[[], tuple[str, bytes]]]

    def __init__(
        self,
        address: tuple[str, int],
        handler: type,
        limits: ConnectionLimits,
        tls: ServerTls | None = None,
        bearer_token: WatchedToken | None = None,
    ) -> None:
        super().__init__(address, handler)
        self.guard = ConnectionGuard(limits, log, "metrics-http")
        self.refusals = RefusalLog(log)  # one line per kind of refusal per minute
        self.tls = tls
        self.bearer_token = bearer_token


class MetricsServer:
    """/metrics over HTTP (or HTTPS with ``tls``) on ``address:port`` (port 0: any free
    port); ``bearer_token``: the token a scrape must send."""

    def __init__(
        self,
        address: str,
        port: int,
        limits: ConnectionLimits = LIMITS,
        tls: ServerTls | None = None,
        bearer_token: WatchedToken | None = None,
    ) -> None:
        self.latest = LatestSample()
        self._server = MetricsHTTPServer((address, port), _Handler, limits, tls, bearer_token)
        self._server.routes = {"/metrics": lambda: (CONTENT_TYPE, self.latest.page())}
        self._server.post_routes = {}
        self.address, self.port = self._server.server_address[:2]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-http", daemon=True
        )
        self._thread.start()

    def publish(self, points: Sequence[Point]) -> None:
        self.latest.publish(points)

    def serve_edge_samples(self, take_edge_sample: Callable[[], int]) -> None:
        """Answer ``POST /edge`` (loopback clients only): take a sample now, reply
        ``{"time_ns": N}`` with the sample's timestamp (see ``Daemon.edge_sample``)."""

        def route() -> tuple[str, bytes]:
            return "application/json", json.dumps({"time_ns": take_edge_sample()}).encode()

        self._server.post_routes[EDGE_PATH] = route

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
