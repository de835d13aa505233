"""The client's TLS settings, as the official Pulsar clients take them, turned into an
``ssl.SSLContext`` (for ``pulsar+ssl://`` connections and ``https://`` admin requests).

    tls_trust_certs_file_path      PEM certificates to trust (default: the system's)
    tls_allow_insecure_connection  accept any certificate (no verification at all)
    tls_validate_hostname          the certificate must name the host dialled

As in the official Python client, the certificate chain is verified by default and the
host name is not (``tls_validate_hostname=False``). Only the standard library and
``stripemq.errors`` are imported here.
"""

from __future__ import annotations

import ssl

from stripemq.errors import InvalidConfigurationError


def client_ssl_context(
    trust_certs_file_path: str | None = None,
    *,
    allow_insecure_connection: bool = False,
    validate_hostname: bool = False,
    certificate_file: str | None = None,
    key_file: str | None = None,
) -> ssl.SSLContext:
    """A client context with those settings (TLS 1.2 or later), presenting the client's
    own certificate and key (PEM) when given, for brokers that ask for one.

    Raises:
        InvalidConfigurationError: the trust file cannot be read or holds no certificate;
            a client certificate without its key (or the other way round), or unreadable.
    """
    if (certificate_file is None) != (key_file is None):
        raise InvalidConfigurationError(
            "a client certificate needs its key, and a key its certificate"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if certificate_file is not None and key_file is not None:
        try:
            context.load_cert_chain(certificate_file, key_file)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidConfigurationError(
                f"TLS client certificate {certificate_file} with key {key_file}: {exc}"
            ) from None
    if allow_insecure_connection:
        context.check_hostname = False  # before verify_mode: CERT_NONE needs it off
        context.verify_mode = ssl.CERT_NONE
        return context
    context.check_hostname = validate_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    if trust_certs_file_path:
        try:
            context.load_verify_locations(cafile=trust_certs_file_path)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidConfigurationError(
                f"TLS trust certificates {trust_certs_file_path}: {exc}"
            ) from None
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    return context
