"""TLS for every server of the project and its clients.

Servers (``collector serve``, the agent's ``/metrics``, ``dashboard serve``) take a
certificate file, its key file and, optionally, a CA file: with it a client must present a
certificate that CA signed (mutual TLS), as exporter-toolkit's ``client_ca_file`` with
``RequireAndVerifyClientCert``. ``ServerTls.context()`` is the one ``SSLContext`` builder:

- TLS 1.2 at least; the certificate file may hold the chain after the leaf.
- Renewal: the files' modification times and sizes are looked at (at most once a second,
  on a new connection) and a new context is built when they change, so a renewed
  certificate is served from the next connection on without a restart or a signal.
  Connections already open keep the context they began with. A renewal caught half-way
  (a new certificate beside the old key) fails to load: the old context is kept, a
  warning is logged once per state of the files, and the next look tries again.
- At start, a warning for a key file that every user of the machine may read and for a
  certificate that has expired (clients refuse it; the server still starts, so a renewal
  can land without a restart).

Clients: ``client_context(ca_file)`` verifies the server against ``ca_file`` (else the
system's CAs), with the host name checked; ``EPOCHSCOPE_CA_FILE`` is the default CA file of
every client that is not given one (a workload's pushes, the launcher's checks).
``cert_file``/``key_file`` present a client certificate to a server that asks for one.
"""

from __future__ import annotations

import argparse
import logging
import os
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

CA_FILE_ENV = "EPOCHSCOPE_CA_FILE"
RELOAD_CHECK_SECONDS = 1.0


class TlsConfigError(ValueError):
    """TLS files that cannot be used; the message names the file and why."""


@dataclass(frozen=True)
class TlsFiles:
    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None  # set: clients must present a certificate it signed

    @classmethod
    def of(
        cls, cert_file: str | None, key_file: str | None, client_ca_file: str | None, flag: str
    ) -> TlsFiles | None:
        """From options (``flag`` the prefix their names share, for the message): None
        without a certificate; both certificate and key, or neither."""
        if not cert_file and not key_file:
            if client_ca_file:
                raise TlsConfigError(f"{flag}client-ca-file needs {flag}cert-file and key-file")
            return None
        if not cert_file or not key_file:
            raise TlsConfigError(f"give both {flag}cert-file and {flag}key-file")
        client_ca = Path(client_ca_file) if client_ca_file else None
        return cls(Path(cert_file), Path(key_file), client_ca)

    def paths(self) -> tuple[Path, ...]:
        return tuple(p for p in (self.cert_file, self.key_file, self.client_ca_file) if p)


def _state(paths: tuple[Path, ...]) -> tuple:
    state = []
    for path in paths:
        try:
            info = path.stat()
        except OSError:
            state.append((str(path), None))
        else:
            state.append((str(path), info.st_mtime_ns, info.st_size, info.st_ino))
    return tuple(state)


def build_server_context(files: TlsFiles) -> ssl.SSLContext:
    """An ``SSLContext`` for a server from ``files``; TlsConfigError naming the file."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(files.cert_file, files.key_file)
    except FileNotFoundError as error:
        raise TlsConfigError(f"cannot read {error.filename}: no such file") from None
    except PermissionError as error:
        raise TlsConfigError(f"cannot read {error.filename}: permission denied") from None
    except ssl.SSLError as error:
        raise TlsConfigError(
            f"certificate {files.cert_file} and key {files.key_file} do not load as a pair "
            f"({error.reason or error})"
        ) from None
    if files.client_ca_file is not None:
        try:
            context.load_verify_locations(cafile=files.client_ca_file)
        except (OSError, ssl.SSLError) as error:
            reason = getattr(error, "strerror", None) or error
            raise TlsConfigError(f"client CA file {files.client_ca_file}: {reason}") from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def file_warnings(files: TlsFiles, now: float | None = None) -> list[str]:
    """What is unsafe or out of date in these (loadable) files, one sentence each."""
    warnings = []
    mode = files.key_file.stat().st_mode
    if mode & 0o004:
        warnings.append(
            f"TLS key file {files.key_file} is readable by every user (mode "
            f"{mode & 0o777:o}): anyone on this machine can impersonate the server; "
            f"chmod 600 it"
        )
    not_after = _not_after(files.cert_file)
    if not_after is not None and not_after < (time.time() if now is None else now):
        expired = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(not_after))
        warnings.append(
            f"TLS certificate {files.cert_file} expired on {expired}: clients will refuse "
            f"it until it is renewed"
        )
    return warnings


def _not_after(cert_file: Path) -> float | None:
    """The first certificate's end of validity (seconds since the epoch), or None where
    this Python cannot decode it."""
    # The standard library's only certificate decoder is this private helper (CPython's
    # own tests use it); without it the check is skipped rather than a dependency added.
    decode = getattr(getattr(ssl, "_ssl", None), "_test_decode_cert", None)
    if decode is None:
        return None
    try:
        return float(ssl.cert_time_to_seconds(decode(str(cert_file))["notAfter"]))
    except (OSError, ssl.SSLError, KeyError, ValueError):
        return None


class ServerTls:
    """A server's TLS: ``context()`` for each new connection, rebuilt when the files are
    renewed (see the module's docstring). Raises TlsConfigError at start for files that
    do not load."""

    def __init__(self, files: TlsFiles, check_seconds: float = RELOAD_CHECK_SECONDS) -> None:
        self.files = files
        self.check_seconds = check_seconds
        self._lock = threading.Lock()
        self._state = _state(files.paths())
        self._context = build_server_context(files)
        for warning in file_warnings(files):
            log.warning("%s", warning)
        self._checked = time.monotonic()
        self._failed_state: tuple | None = None
        self.reloads = 0  # contexts built after the first

    def context(self) -> ssl.SSLContext:
        now = time.monotonic()
        with self._lock:
            if now - self._checked < self.check_seconds:
                return self._context
            self._checked = now
            state = _state(self.files.paths())
            if state == self._state or state == self._failed_state:
                return self._context
            try:
                context = build_server_context(self.files)
            except TlsConfigError as error:
                self._failed_state = state
                log.warning("TLS files changed but do not load (%s); serving the old ones", error)
                return self._context
            self._context, self._state, self._failed_state = context, state, None
            self.reloads += 1
            log.info("TLS: loaded the renewed certificate %s", self.files.cert_file)
            return self._context


def client_context(
    ca_file: str | Path | None = None,
    cert_file: str | Path | None = None,
    key_file: str | Path | None = None,
) -> ssl.SSLContext:
    """A client's context: the server verified against ``ca_file`` (default
    ``$EPOCHSCOPE_CA_FILE``, else the system's CAs), its host name checked."""
    ca_file = ca_file or os.environ.get(CA_FILE_ENV) or None
    try:
        context = ssl.create_default_context(cafile=ca_file)
        if cert_file:
            context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as error:
        raise TlsConfigError(
            f"cannot load {'CA file ' + str(ca_file) if ca_file else 'client certificate'}: "
            f"{getattr(error, 'strerror', None) or error}"
        ) from None
    return context


class TlsServerMixIn:
    """Before a ``socketserver`` threading server's other bases: with ``self.tls`` set,
    every accepted connection is wrapped in TLS with the context of the moment. The
    handshake is not done here (one slow client would hold up every accept) but on the
    connection's first read, in its own thread and under its header deadline
    (``netserve.http_guard``)."""

    tls: ServerTls | None = None

    def get_request(self):  # type: ignore[no-untyped-def]
        sock, address = super().get_request()  # type: ignore[misc]
        if self.tls is None:
            return sock, address
        try:
            wrapped = self.tls.context().wrap_socket(
                sock, server_side=True, do_handshake_on_connect=False
            )
        except OSError:
            sock.close()
            raise
        return wrapped, address


def add_server_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """``--tls-cert-file``, ``--tls-key-file``, ``--tls-client-ca-file`` (``what``: the
    server, for the help)."""
    parser.add_argument(
        "--tls-cert-file", help=f"serve {what} over TLS with this certificate (PEM, chain after)"
    )
    parser.add_argument("--tls-key-file", help="the certificate's private key (PEM)")
    parser.add_argument(
        "--tls-client-ca-file",
        help="require a client certificate signed by this CA (PEM): mutual TLS",
    )


def server_tls_of(args: argparse.Namespace) -> ServerTls | None:
    """The parsed options' ``ServerTls`` (None: plain HTTP); TlsConfigError says why not."""
    files = TlsFiles.of(args.tls_cert_file, args.tls_key_file, args.tls_client_ca_file, "--tls-")
    return ServerTls(files) if files else None


def add_client_arguments(parser: argparse.ArgumentParser, flag: str = "--ca-file") -> None:
    parser.add_argument(
        flag,
        help=f"verify an https collector against this CA file (PEM; default ${CA_FILE_ENV}, "
        "else the system's CAs)",
    )
