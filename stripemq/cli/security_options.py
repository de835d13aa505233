"""The authentication and TLS options of the client-side commands (``stripemq admin``,
``stripemq client``), named as pulsar-admin and pulsar-client name them, and the environment
variables they default to, so a shell (or the Helm chart's toolset pod) sets them once.

Light on purpose: ``stripemq admin`` builds its parser from this module without importing
the Python client.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

AUTH_PARAMS_ENV = "STRIPEMQ_AUTH_PARAMS"
TLS_TRUST_CERTS_ENV = "STRIPEMQ_TLS_TRUST_CERTS_FILE_PATH"
# What --auth-params takes (``stripemq.client.auth.authentication_from_params`` reads it).
PARAMS_FORMS = 'token:<jwt>, file:///path/to/token, env:NAME or {"token": "<jwt>"}'


def _as_given(value: object) -> object:
    return value


def add_security_options(
    parser: argparse.ArgumentParser,
    *,
    url: str,
    default: Callable[[object], object] = _as_given,
) -> None:
    """``--auth-plugin``, ``--auth-params`` and the TLS options; ``url`` names what the TLS
    options are for (help text), ``default`` maps each option's default (``stripemq
    admin`` suppresses them after its command, so one given earlier is not reset)."""
    parser.add_argument(
        "--auth-plugin",
        default=default(None),
        help="authentication plugin: token or org.apache.pulsar.client.impl.auth."
        "AuthenticationToken (implied by --auth-params)",
    )
    parser.add_argument(
        "--auth-params",
        default=default(None),
        help=f"authentication parameters: {PARAMS_FORMS} (default: ${AUTH_PARAMS_ENV})",
    )
    parser.add_argument(
        "--tls-trust-cert-path",
        "--tls-trust-certs-file-path",
        dest="tls_trust_certs_file_path",
        default=default(None),
        metavar="FILE",
        help=f"PEM certificates to trust for {url} (default: ${TLS_TRUST_CERTS_ENV}, else the "
        "system's)",
    )
    parser.add_argument(
        "--tls-allow-insecure",
        action="store_true",
        default=default(False),
        help="accept any broker certificate (no verification)",
    )
    parser.add_argument(
        "--tls-enable-hostname-verification",
        action="store_true",
        default=default(False),
        help="the broker's certificate must name the host connected to",
    )


def auth_params(given: str | None) -> str | None:
    """``--auth-params`` as given, else ``$STRIPEMQ_AUTH_PARAMS`` (None when neither)."""
    return given or os.environ.get(AUTH_PARAMS_ENV) or None


def tls_trust_certs(given: str | None) -> str | None:
    """The TLS trust file as given, else ``$STRIPEMQ_TLS_TRUST_CERTS_FILE_PATH``."""
    return given or os.environ.get(TLS_TRUST_CERTS_ENV) or None
