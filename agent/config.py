"""The agent's configuration: a TOML file, then environment overrides, then checks.

Keys (all optional)::

    host = "node01"               # the host tag; default: this machine's hostname
    interval_seconds = 1          # sampling period, 0.1..3600; ticks align to the wall clock
    proc_root = "/proc"           # where procfs is (a captured tree in tests)
    sys_root = "/sys"             # where sysfs is
    cgroup_root = "/sys/fs/cgroup"  # cgroup hierarchies; default <sys_root>/fs/cgroup
    samplers = ["cpu", "disk"]    # default: every sampler whose data this host has
    gpu_call_timeout_seconds = 5  # an NVML call slower than this marks its GPU hung

    [push]                        # InfluxDB v2 write API; no url: no push
    url = "http://head:8086"
    token = "..."                 # or token_file = "/etc/epochscope/token"
    bucket = "epochscope"
    org = "epochscope"
    spool_dir = "/var/lib/epochscope/spool"
    spool_max_bytes = 536870912   # 512 MiB; when full the oldest points are dropped
    batch_seconds = 5             # once caught up, send at most this often (0: every tick)
    spool_sync = "segment"        # fdatasync a spool segment when it is cut and not sent;
                                  # "batch": every tick's batch (agent.spool)
    ca_file = "/etc/epochscope/ca.pem"  # https url: verify the collector against this CA
    cert_file = "/etc/epochscope/agent.pem"  # a client certificate, where the collector
    key_file = "/etc/epochscope/agent.key"   # asks for one (--tls-client-ca-file)

    [metrics]
    listen = "127.0.0.1:9711"     # Prometheus /metrics; "" turns it off
    max_connections = 64          # open at once; at the cap the longest-waiting one is closed
    header_timeout_seconds = 10   # a request's whole head must arrive within this
    idle_timeout_seconds = 75     # a kept-alive connection with no request is closed
    tls_cert_file = "/etc/epochscope/node.pem"  # serve /metrics over TLS (netserve.tls)
    tls_key_file = "/etc/epochscope/node.key"
    tls_client_ca_file = "/etc/epochscope/ca.pem"  # scrapers must show a cert it signed
    bearer_token_file = "/etc/epochscope/metrics-token"  # scrapes must send this token

    [otlp]                        # OTLP/HTTP JSON metrics (agent.otlp); no endpoint: off
    endpoint = "http://127.0.0.1:4318/v1/metrics"
    headers_file = "/etc/epochscope/otlp-headers"  # "Name: value" lines, e.g. auth; 0600
    batch_seconds = 5             # send at most this often (0: every tick)
    max_queued_points = 200000    # kept while the endpoint is down; then the oldest dropped

Every key can be overridden from the environment: ``EPOCHSCOPE_<KEY>`` for a top-level
key and ``EPOCHSCOPE_<SECTION>_<KEY>`` for a key in a section (``EPOCHSCOPE_PUSH_TOKEN``,
``EPOCHSCOPE_INTERVAL_SECONDS``); a list is written comma-separated.

A bad configuration raises ``ConfigError`` naming the key and the reason. The push token
is held in a ``Secret`` whose repr and str never show it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import tomllib
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.exposition import LIMITS as METRICS_LIMITS
from agent.samplers import SAMPLER_NAMES
from contract.identifiers import tag_problem
from contract.schema import Tag
from netserve import listen
from netserve.limits import ConnectionLimits
from netserve.listen import ListenError, is_loopback
from netserve.tls import TlsConfigError, TlsFiles
from netserve.tokens import TokenFileError, header_safe, read_token_file, warn_if_readable_by_others

log = logging.getLogger(__name__)

ENV_PREFIX = "EPOCHSCOPE_"
DEFAULT_INTERVAL_SECONDS = 1.0
MIN_INTERVAL_SECONDS = 0.1
MAX_INTERVAL_SECONDS = 3600.0  # beyond an hour no rate or epoch view is meaningful
DEFAULT_SPOOL_DIR = Path("/var/lib/epochscope/spool")
DEFAULT_SPOOL_MAX_BYTES = 512 * 2**20
DEFAULT_METRICS_LISTEN = "127.0.0.1:9711"
DEFAULT_BUCKET = "epochscope"
DEFAULT_ORG = "epochscope"
DEFAULT_BATCH_SECONDS = 5.0
DEFAULT_GPU_CALL_TIMEOUT_SECONDS = 5.0


class ConfigError(ValueError):
    """A key of the configuration is wrong; the message names it and says why."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason


class Secret:
    """A string that is never shown: its repr and str are ``***``."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


SPOOL_SYNC_POLICIES = ("segment", "batch")


@dataclass(frozen=True)
class PushConfig:
    url: str
    token: Secret | None
    bucket: str = DEFAULT_BUCKET
    org: str = DEFAULT_ORG
    spool_dir: Path = DEFAULT_SPOOL_DIR
    spool_max_bytes: int = DEFAULT_SPOOL_MAX_BYTES
    batch_seconds: float = DEFAULT_BATCH_SECONDS
    spool_sync: str = "segment"  # "segment" or "batch": when the spool is fdatasync'd
    ca_file: Path | None = None  # https: the CA the collector is verified against
    cert_file: Path | None = None  # a client certificate for the collector, with its key
    key_file: Path | None = None


@dataclass(frozen=True)
class OtlpConfig:
    endpoint: str
    headers_file: Path | None = None  # read at start; its values are never logged
    batch_seconds: float = DEFAULT_BATCH_SECONDS
    max_queued_points: int = 200_000


@dataclass(frozen=True)
class MetricsListen:
    address: str
    port: int
    limits: ConnectionLimits = METRICS_LIMITS  # see netserve.http_guard
    tls: TlsFiles | None = None  # None: plain HTTP
    bearer_token_file: Path | None = None  # set: /metrics wants `Authorization: Bearer`


@dataclass(frozen=True)
class AgentConfig:
    host: str = field(default_factory=socket.gethostname)
    interval_seconds: float = DEFAULT_INTERVAL_SECONDS
    proc_root: Path = Path("/proc")
    sys_root: Path = Path("/sys")
    cgroup_root: Path | None = None  # None: <sys_root>/fs/cgroup
    # None: every sampler whose data this host has.
    samplers: tuple[str, ...] | None = None
    push: PushConfig | None = None
    metrics: MetricsListen | None = MetricsListen("127.0.0.1", 9711)
    otlp: OtlpConfig | None = None
    gpu_call_timeout_seconds: float = DEFAULT_GPU_CALL_TIMEOUT_SECONDS
    ceilings_file: Path | None = None  # None: $EPOCHSCOPE_CEILINGS_FILE or the default


# The accepted keys and the type each must have, per section ("" is the top level).
_STR, _NUMBER, _INT, _STR_LIST = "a string", "a number", "an integer", "a list of strings"
_KEYS: dict[str, dict[str, str]] = {
    "": {
        "host": _STR,
        "interval_seconds": _NUMBER,
        "proc_root": _STR,
        "sys_root": _STR,
        "cgroup_root": _STR,
        "samplers": _STR_LIST,
        "gpu_call_timeout_seconds": _NUMBER,
        "ceilings_file": _STR,
    },
    "push": {
        "url": _STR,
        "token": _STR,
        "token_file": _STR,
        "bucket": _STR,
        "org": _STR,
        "spool_dir": _STR,
        "spool_max_bytes": _INT,
        "batch_seconds": _NUMBER,
        "spool_sync": _STR,
        "ca_file": _STR,
        "cert_file": _STR,
        "key_file": _STR,
    },
    "metrics": {
        "listen": _STR,
        "max_connections": _INT,
        "header_timeout_seconds": _NUMBER,
        "idle_timeout_seconds": _NUMBER,
        "tls_cert_file": _STR,
        "tls_key_file": _STR,
        "tls_client_ca_file": _STR,
        "bearer_token_file": _STR,
    },
    "otlp": {
        "endpoint": _STR,
        "headers_file": _STR,
        "batch_seconds": _NUMBER,
        "max_queued_points": _INT,
    },
}
_SECRET_KEYS = {"push.token"}


def _dotted(section: str, key: str) -> str:
    return f"{section}.{key}" if section else key


def _check_type(name: str, expected: str, value: Any) -> None:
    ok = {
        _STR: isinstance(value, str),
        _NUMBER: isinstance(value, int | float) and not isinstance(value, bool),
        _INT: isinstance(value, int) and not isinstance(value, bool),
        _STR_LIST: isinstance(value, list) and all(isinstance(v, str) for v in value),
    }[expected]
    if not ok:
        shown = "" if name in _SECRET_KEYS else f" (got {type(value).__name__})"
        raise ConfigError(name, f"must be {expected}{shown}")


def _from_env_text(name: str, expected: str, text: str) -> Any:
    """Convert an environment variable's text to the type the key wants."""
    if expected == _STR:
        return text
    if expected == _STR_LIST:
        return [part.strip() for part in text.split(",") if part.strip()]
    try:
        return int(text) if expected == _INT else float(text)
    except ValueError:
        raise ConfigError(name, f"must be {expected} (got {text!r} from the environment)") from None


def apply_env(raw: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """``raw`` with every ``EPOCHSCOPE_*`` variable naming a known key laid over it.

    Other ``EPOCHSCOPE_*`` variables are left alone: tools beside the agent use that
    prefix too.
    """
    merged = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    for section, keys in _KEYS.items():
        for key, expected in keys.items():
            env_name = ENV_PREFIX + (f"{section}_{key}" if section else key).upper()
            if env_name not in environ:
                continue
            value = _from_env_text(_dotted(section, key), expected, environ[env_name])
            if section:
                table = merged.setdefault(section, {})
                if not isinstance(table, dict):
                    raise ConfigError(section, "must be a table")
                table[key] = value
            else:
                merged[key] = value
    return merged


def _check_keys(raw: Mapping[str, Any]) -> None:
    for key, value in raw.items():
        if key in _KEYS and key != "":
            if not isinstance(value, dict):
                raise ConfigError(key, f"must be a table ([{key}])")
            for sub_key, sub_value in value.items():
                expected = _KEYS[key].get(sub_key)
                if expected is None:
                    known = ", ".join(_KEYS[key])
                    raise ConfigError(f"{key}.{sub_key}", f"unknown key (known: {known})")
                _check_type(f"{key}.{sub_key}", expected, sub_value)
        elif key in _KEYS[""]:
            _check_type(key, _KEYS[""][key], value)
        else:
            known = ", ".join([*_KEYS[""], *(f"[{s}]" for s in _KEYS if s)])
            raise ConfigError(key, f"unknown key (known: {known})")


def parse_listen(text: str) -> MetricsListen | None:
    """``"127.0.0.1:9711"``, ``"[::1]:9711"`` or ``":9711"`` (all addresses); ``""``: off
    (``netserve.listen``)."""
    if text == "":
        return None
    try:
        address, port = listen.parse_listen(text, default_host="0.0.0.0")
    except ListenError as error:
        if error.port is None:
            raise ConfigError(
                "metrics.listen", f"must be ADDRESS:PORT or '' (got {text!r})"
            ) from None
        raise ConfigError("metrics.listen", str(error)) from None
    return MetricsListen(address, port)


def _metrics_config(table: Mapping[str, Any]) -> MetricsListen | None:
    listen = parse_listen(table.get("listen", DEFAULT_METRICS_LISTEN))
    if listen is None:
        return None
    max_connections = table.get("max_connections", METRICS_LIMITS.max_connections)
    if max_connections < 1:
        raise ConfigError("metrics.max_connections", f"must be at least 1 (got {max_connections})")
    timeouts = {}
    for key, default in (
        ("header_timeout_seconds", METRICS_LIMITS.header_timeout),
        ("idle_timeout_seconds", METRICS_LIMITS.idle_timeout),
    ):
        timeouts[key] = float(table.get(key, default))
        if not 0 < timeouts[key] <= MAX_INTERVAL_SECONDS:
            raise ConfigError(
                f"metrics.{key}",
                f"must be > 0 and <= {MAX_INTERVAL_SECONDS:g} (got {timeouts[key]})",
            )
    limits = dataclasses.replace(
        METRICS_LIMITS,
        max_connections=max_connections,
        header_timeout=timeouts["header_timeout_seconds"],
        idle_timeout=timeouts["idle_timeout_seconds"],
    )
    try:
        tls = TlsFiles.of(
            table.get("tls_cert_file"),
            table.get("tls_key_file"),
            table.get("tls_client_ca_file"),
            "metrics.tls_",
        )
    except TlsConfigError as error:
        raise ConfigError("metrics.tls_cert_file", str(error).replace("-", "_")) from None
    token_file = table.get("bearer_token_file")
    if token_file:
        try:
            read_token_file(token_file, "metrics bearer token file")
        except TokenFileError as error:
            raise ConfigError("metrics.bearer_token_file", str(error)) from None
        if tls is None and not is_loopback(listen.address):
            log.warning(
                "metrics.bearer_token_file without TLS on %s: the token crosses the network "
                "in clear (give metrics.tls_cert_file and tls_key_file)",
                listen.address,
            )
    return dataclasses.replace(
        listen,
        limits=limits,
        tls=tls,
        bearer_token_file=Path(token_file) if token_file else None,
    )


def _read_token_file(path: Path) -> Secret:
    try:
        return Secret(read_token_file(path, "push token file"))
    except TokenFileError as error:
        raise ConfigError("push.token_file", str(error)) from None


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a write endpoint to connect to (no http(s) scheme, no host, a
    bad port, spaces, a query), or None when it can. Shared by the agent's ``push.url``
    and ``workloads run --collector``."""
    if any(ch.isspace() or ord(ch) < 32 for ch in url):
        return f"must not contain spaces or control characters (got {url!r})"
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        return f"must start with http:// or https:// (got {url!r})"
    if not parts.hostname:
        return f"names no host (got {url!r})"
    try:
        parts.port  # noqa: B018  (raises ValueError for a bad port)
    except ValueError:
        return f"has a port that is not 0..65535 (got {url!r})"
    if parts.query or parts.fragment:
        return f"must not have a query or fragment (got {url!r})"
    if parts.username is not None or parts.password is not None:
        shown = url.replace(parts.netloc, parts.netloc.rpartition("@")[2])
        return (
            f"must not carry a user or password (got {shown!r} with them): the collector "
            "takes a token, give it with token_file"
        )
    return None


def _check_url(url: str) -> None:
    """A push URL that can be connected to: a host, a valid port, no spaces."""
    problem = url_problem(url)
    if problem is not None:
        raise ConfigError("push.url", problem)


def check_host(host: str) -> str:
    """A host tag every line can carry: no control characters, no trailing backslash
    (which would escape the separator after it and make every line unparseable)."""
    if not host.strip():
        raise ConfigError("host", "must not be blank")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in host):
        raise ConfigError("host", f"must not contain control characters (got {host!r})")
    if host.endswith("\\"):
        raise ConfigError("host", f"must not end in a backslash (got {host!r})")
    problem = tag_problem([(Tag.HOST, host)])  # what the collector would refuse
    if problem:
        raise ConfigError("host", problem)
    return host


# kernel file systems: a spool there is no spool (writes fail or vanish)
_NOT_A_DISK = (Path("/proc"), Path("/sys"), Path("/dev"))


def _check_spool_dir(path: Path) -> None:
    """A spool directory on a disk: not under /proc, /sys or /dev, and not a file."""
    resolved = path.resolve()
    if any(resolved == root or root in resolved.parents for root in _NOT_A_DISK):
        raise ConfigError("push.spool_dir", f"must be a directory on a disk (got {str(path)!r})")
    if resolved.exists() and not resolved.is_dir():
        raise ConfigError("push.spool_dir", f"{str(path)!r} exists and is not a directory")


def _push_config(table: Mapping[str, Any]) -> PushConfig | None:
    url = table.get("url", "")
    if not url:
        if set(table) - {"url"}:
            log.info("no push.url: push is off (the other [push] keys are unused)")
        return None
    if not url.startswith(("http://", "https://")):
        raise ConfigError("push.url", f"must start with http:// or https:// (got {url!r})")
    _check_url(url)
    if "token" in table and "token_file" in table:
        raise ConfigError("push.token", "give token or token_file, not both")
    token: Secret | None = None
    if table.get("token"):
        if not header_safe(table["token"].strip()):
            raise ConfigError(
                "push.token", "holds a line break or a character no HTTP header can carry"
            )
        token = Secret(table["token"])
    elif "token_file" in table:
        token = _read_token_file(Path(table["token_file"]))
    spool_max_bytes = table.get("spool_max_bytes", DEFAULT_SPOOL_MAX_BYTES)
    if spool_max_bytes <= 0:
        raise ConfigError("push.spool_max_bytes", f"must be > 0 (got {spool_max_bytes})")
    batch_seconds = float(table.get("batch_seconds", DEFAULT_BATCH_SECONDS))
    if not 0 <= batch_seconds <= 3600:
        raise ConfigError("push.batch_seconds", f"must be 0..3600 (got {batch_seconds})")
    spool_sync = table.get("spool_sync", "segment")
    if spool_sync not in SPOOL_SYNC_POLICIES:
        raise ConfigError("push.spool_sync", f'must be "segment" or "batch" (got {spool_sync!r})')
    for key in ("bucket", "org", "spool_dir"):
        if key in table and not table[key]:
            raise ConfigError(f"push.{key}", "must not be empty")
    spool_dir = Path(table.get("spool_dir", DEFAULT_SPOOL_DIR))
    _check_spool_dir(spool_dir)
    if bool(table.get("cert_file")) != bool(table.get("key_file")):
        raise ConfigError("push.cert_file", "give both cert_file and key_file, or neither")
    tls_keys = ("ca_file", "cert_file", "key_file")
    tls_files = {key: Path(table[key]) for key in tls_keys if table.get(key)}
    if tls_files and not url.startswith("https://"):
        raise ConfigError("push.ca_file", f"goes with an https:// url (got {url!r})")
    return PushConfig(
        **tls_files,
        url=url.rstrip("/"),
        token=token,
        bucket=table.get("bucket", DEFAULT_BUCKET),
        org=table.get("org", DEFAULT_ORG),
        spool_dir=spool_dir,
        spool_max_bytes=spool_max_bytes,
        batch_seconds=batch_seconds,
        spool_sync=spool_sync,
    )


def _otlp_config(table: Mapping[str, Any]) -> OtlpConfig | None:
    endpoint = table.get("endpoint", "")
    if not endpoint:
        return None
    problem = url_problem(endpoint)
    if problem:
        raise ConfigError("otlp.endpoint", problem)
    batch_seconds = float(table.get("batch_seconds", DEFAULT_BATCH_SECONDS))
    if not 0 <= batch_seconds <= MAX_INTERVAL_SECONDS:
        raise ConfigError(
            "otlp.batch_seconds",
            f"must be >= 0 and <= {MAX_INTERVAL_SECONDS:g} (got {batch_seconds})",
        )
    max_queued = table.get("max_queued_points", 200_000)
    if max_queued < 1:
        raise ConfigError("otlp.max_queued_points", f"must be at least 1 (got {max_queued})")
    headers_file = Path(table["headers_file"]) if table.get("headers_file") else None
    if headers_file is not None:
        from netserve.otlp import OtlpHeadersError, read_headers_file

        try:
            read_headers_file(headers_file)
        except OtlpHeadersError as error:
            raise ConfigError("otlp.headers_file", str(error)) from None
        warn_if_readable_by_others(headers_file, "OTLP headers file")
    return OtlpConfig(endpoint, headers_file, batch_seconds, max_queued)


def build(raw: Mapping[str, Any]) -> AgentConfig:
    """Check a parsed configuration (file plus environment) and build the config."""
    _check_keys(raw)
    interval = float(raw.get("interval_seconds", DEFAULT_INTERVAL_SECONDS))
    if not MIN_INTERVAL_SECONDS <= interval <= MAX_INTERVAL_SECONDS:
        raise ConfigError(
            "interval_seconds",
            f"must be >= {MIN_INTERVAL_SECONDS} and <= {MAX_INTERVAL_SECONDS:g} (got {interval})",
        )
    samplers: tuple[str, ...] | None = None
    if "samplers" in raw:
        unknown = [name for name in raw["samplers"] if name not in SAMPLER_NAMES]
        if unknown:
            raise ConfigError(
                "samplers",
                f"unknown sampler {', '.join(map(repr, unknown))} "
                f"(known: {', '.join(SAMPLER_NAMES)})",
            )
        samplers = tuple(dict.fromkeys(raw["samplers"]))  # keep order, drop repeats
    host = check_host(raw["host"]) if "host" in raw else socket.gethostname()
    gpu_timeout = float(raw.get("gpu_call_timeout_seconds", DEFAULT_GPU_CALL_TIMEOUT_SECONDS))
    if not 0.01 <= gpu_timeout <= MAX_INTERVAL_SECONDS:
        raise ConfigError(
            "gpu_call_timeout_seconds",
            f"must be >= 0.01 and <= {MAX_INTERVAL_SECONDS:g} (got {gpu_timeout})",
        )
    metrics_table = raw.get("metrics", {})
    return AgentConfig(
        host=host,
        interval_seconds=interval,
        proc_root=Path(raw.get("proc_root", "/proc")),
        sys_root=Path(raw.get("sys_root", "/sys")),
        cgroup_root=Path(raw["cgroup_root"]) if "cgroup_root" in raw else None,
        samplers=samplers,
        push=_push_config(raw.get("push", {})),
        metrics=_metrics_config(metrics_table),
        otlp=_otlp_config(raw.get("otlp", {})),
        gpu_call_timeout_seconds=gpu_timeout,
        ceilings_file=Path(raw["ceilings_file"]) if "ceilings_file" in raw else None,
    )


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except OSError as error:
        raise ConfigError(str(path), f"cannot read: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        # The decoder's message gives line and column, never the text of the line.
        raise ConfigError(str(path), f"invalid TOML: {error}") from None


def load(path: Path | None, environ: Mapping[str, str] | None = None) -> AgentConfig:
    """Read ``path`` (or nothing), lay the environment over it and check it."""
    raw: dict[str, Any] = read_toml(path) if path is not None else {}
    push_table = raw.get("push")
    if path is not None and isinstance(push_table, dict) and "token" in push_table:
        warn_if_readable_by_others(path, "config file with a push token")
    return build(apply_env(raw, os.environ if environ is None else environ))
