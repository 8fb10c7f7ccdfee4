"""Real X.509 certificates made for a test (the ``cryptography`` package): a CA, server
certificates for 127.0.0.1/localhost, client certificates, written as PEM files."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Issued:
    cert_file: Path
    key_file: Path
    serial: int


class TestCa:
    """A CA whose certificate is ``ca_file``; ``issue`` signs a server or client
    certificate and writes it (and its key, mode 600) under ``directory``."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self, directory: Path, name: str = "epochscope test CA") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, key_cert_sign=True, crl_sign=True,
                    content_commitment=False, key_encipherment=False, data_encipherment=False,
                    key_agreement=False, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )  # fmt: skip
        self.ca_file = directory / f"{name.replace(' ', '-')}.pem"
        self.key_file = directory / f"{name.replace(' ', '-')}.key"  # a site's CA key
        write_pair(self.cert, self.key, self.ca_file, self.key_file)

    def issue(self, name: str, server: bool = True) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        serial = x509.random_serial_number()
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        cert = builder.sign(self.key, hashes.SHA256())
        cert_file = self.directory / f"{name}.pem"
        key_file = self.directory / f"{name}.key"
        write_pair(cert, key, cert_file, key_file)
        return Issued(cert_file, key_file, serial)


def write_pair(cert, key, cert_file: Path, key_file: Path) -> None:
    """Write both through temporary files renamed into place (as a renewal tool does)."""
    key_tmp = key_file.with_suffix(".key.tmp")
    key_tmp.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_tmp.chmod(0o600)
    cert_tmp = cert_file.with_suffix(".pem.tmp")
    cert_tmp.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_tmp.replace(key_file)
    cert_tmp.replace(cert_file)


def peer_serial(port: int, ca_file: Path) -> int:
    """The serial number of the certificate ``127.0.0.1:port`` serves (verified)."""
    import socket
    import ssl

    context = ssl.create_default_context(cafile=str(ca_file))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number
