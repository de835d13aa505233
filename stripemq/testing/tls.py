"""A certificate authority of its own for TLS tests: a CA, a server certificate for this
host, and client certificates it signed, written as PEM files into a directory.

The server certificate names ``127.0.0.1`` (an IP address SAN) and ``localhost`` (a DNS
SAN), so a client that validates host names accepts it on either. A client certificate's
subject common name is the role a TLS authentication provider reads from it. Keys are
ECDSA P-256, written unencrypted as PKCS#8; certificates are valid from a day ago for a
year. Another ``make_test_pki`` in another directory is a CA the first does not trust.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_HOSTS = ("127.0.0.1", "localhost")
VALID_DAYS = 365


@dataclass(frozen=True)
class TlsFiles:
    """Paths of the PEM files ``make_test_pki`` wrote."""

    directory: Path
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def broker_settings(self, *, require_client_cert: bool = False) -> dict[str, object]:
        """The broker's TLS file settings for these files (the ports are the caller's)."""
        return {
            "tls_certificate_file_path": str(self.server_cert),
            "tls_key_file_path": str(self.server_key),
            "tls_trust_certs_file_path": str(self.ca_cert),
            "tls_require_trusted_client_cert_on_connect": require_client_cert,
        }

    def issue_client(self, name: str, common_name: str | None = None) -> tuple[Path, Path]:
        """Another client certificate signed by this CA, with ``common_name`` (``name`` by
        default) as its subject: written as ``<name>.cert.pem`` and ``<name>.key.pem``;
        returns their paths."""
        ca_key = serialization.load_pem_private_key(self.ca_key.read_bytes(), password=None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        ca_cert = x509.load_pem_x509_certificate(self.ca_cert.read_bytes())
        key = _new_key()
        cert = _sign(
            _builder(common_name or name, key, ca_cert.subject)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
            ),
            ca_key,
        )
        return _write_pair(self.directory, name, cert, key)


def make_test_pki(directory: Path, client_role: str = "client") -> TlsFiles:
    """A CA, a server certificate for ``SERVER_HOSTS`` and a client certificate for
    ``client_role``, all signed by the CA, written into ``directory`` (made if need be)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _new_key()
    ca_name = _name(f"stripemq test CA {directory.name}")
    ca_cert = _sign(
        _builder(ca_name, ca_key, ca_name)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        ),
        ca_key,
    )
    ca_cert_path, ca_key_path = _write_pair(directory, "ca", ca_cert, ca_key)

    server_key = _new_key()
    names: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address(SERVER_HOSTS[0])),
        x509.DNSName(SERVER_HOSTS[1]),
    ]
    server_cert = _sign(
        _builder("localhost", server_key, ca_name)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False),
        ca_key,
    )
    server_cert_path, server_key_path = _write_pair(directory, "server", server_cert, server_key)

    files = TlsFiles(
        directory,
        ca_cert_path,
        ca_key_path,
        server_cert_path,
        server_key_path,
        directory / "client.cert.pem",
        directory / "client.key.pem",
    )
    files.issue_client("client", client_role)
    return files


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(
    subject: str | x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject) if isinstance(subject, str) else subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
    )


def _sign(
    builder: x509.CertificateBuilder, issuer_key: ec.EllipticCurvePrivateKey
) -> x509.Certificate:
    return builder.sign(issuer_key, hashes.SHA256())


def _write_pair(
    directory: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> tuple[Path, Path]:
    cert_path = directory / f"{name}.cert.pem"
    key_path = directory / f"{name}.key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return cert_path, key_path
