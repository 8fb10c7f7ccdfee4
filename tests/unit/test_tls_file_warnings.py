"""A server started with a key file every user may read, or with an expired certificate,
says so at start, one warning line each (before: accepted in silence). Real certificates
and key files; nothing is mocked."""

from __future__ import annotations

import datetime
import logging

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from netserve.tls import ServerTls, TlsFiles
from tests.support.tls_certs import TestCa, write_pair


def _warnings(caplog, files: TlsFiles) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="netserve.tls"):
        ServerTls(files)
    return [record.getMessage() for record in caplog.records]


def test_a_key_file_every_user_may_read_is_named_at_start(tmp_path, caplog):
    issued = TestCa(tmp_path).issue("server")
    files = TlsFiles(issued.cert_file, issued.key_file)
    assert _warnings(caplog, files) == []  # mode 600, valid for a day
    issued.key_file.chmod(0o644)
    (message,) = _warnings(caplog, files)
    assert f"TLS key file {issued.key_file} is readable by every user (mode 644)" in message
    assert "chmod 600" in message


def test_an_expired_certificate_is_named_at_start(tmp_path, caplog):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    ended = datetime.datetime(2024, 3, 1, 12, 0, tzinfo=datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(ended - datetime.timedelta(days=90))
        .not_valid_after(ended)
        .sign(key, hashes.SHA256())
    )
    files = TlsFiles(tmp_path / "server.pem", tmp_path / "server.key")
    write_pair(cert, key, files.cert_file, files.key_file)
    (message,) = _warnings(caplog, files)
    assert f"TLS certificate {files.cert_file} expired on 2024-03-01 12:00 UTC" in message
