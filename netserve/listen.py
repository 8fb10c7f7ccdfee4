"""Where a server listens, for every server of the project: the collector's ``--listen``,
the agent's ``[metrics] listen``, the dashboard's ``--host``/``--port``.

- ``parse_listen``: ``HOST:PORT``, ``[V6]:PORT`` or ``:PORT`` (the caller's default host:
  loopback for the collector, every address for the agent's /metrics, as before).
- ``is_loopback`` and ``check_bind``: anything but loopback exposes the server to the
  network; a caller that requires authentication there (the dashboard: ``--auth``) refuses
  such an address without it.
- ``cannot_listen``: one line saying why an address cannot be listened on and what to do.
"""

from __future__ import annotations

import errno
import ipaddress


class ListenError(ValueError):
    """A listen address that is not ``HOST:PORT`` (``port`` None) or whose port is not
    0..65535 (``port`` that number)."""

    def __init__(self, text: str, port: int | None = None) -> None:
        self.text = text
        self.port = port
        super().__init__(
            f"must be HOST:PORT (got {text!r})"
            if port is None
            else f"port must be 0..65535 (got {port})"
        )


def parse_listen(text: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """``"127.0.0.1:8086"``, ``"[::1]:8086"``, ``":8086"`` (``default_host``) -> host, port."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ListenError(text)
    port = check_port(int(port_text), text)
    return host.strip("[]") or default_host, port


def check_port(port: int, text: str | None = None) -> int:
    if not 0 <= port <= 65535:
        raise ListenError(text if text is not None else str(port), port)
    return port


def shown(host: str, port: int) -> str:
    """``host:port``, an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


class NeedsAuth(ValueError):
    """A non-loopback address without the authentication its server requires there."""


def check_bind(host: str, authenticated: bool, exposes: str, give: str) -> None:
    """Refuse ``host`` beyond loopback unless ``authenticated``: ``exposes`` says what
    anyone who can reach the server would get, ``give`` what turns authentication on."""
    if not authenticated and not is_loopback(host):
        raise NeedsAuth(
            f"refusing to listen on {host}: {exposes} to anyone who can reach it. Give "
            f"{give}, or listen on 127.0.0.1 (the default)."
        )


def cannot_listen(
    host: str, port: int, error: OSError, fix: str = "--listen HOST:PORT", who: str = ""
) -> str:
    """One line saying why ``host:port`` cannot be listened on, and what to do: ``fix`` is
    the option or key that sets the address, ``who`` a guess at the port's holder."""
    where = f"cannot listen on {shown(host, port)}: {error.strerror or error}"
    if error.errno == errno.EADDRINUSE:
        holder = f"another process ({who})" if who else "another process"
        return (
            f"{where}: {holder} has that port; stop it (ss -ltnp 'sport = :{port}' names it) "
            f"or choose a free one with {fix}"
        )
    if error.errno == errno.EACCES:
        return f"{where}: ports below 1024 need root; choose one above with {fix}"
    if error.errno == errno.EADDRNOTAVAIL:
        return f"{where}: no interface of this machine has that address; fix {fix}"
    return f"{where}; fix {fix}"
