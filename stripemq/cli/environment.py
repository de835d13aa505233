"""Environment variables the client-side commands take their security defaults from, so a
shell (or the Helm chart's toolset pod) sets them once: the ``--auth-params`` and the TLS
trust file of ``stripemq admin`` and ``stripemq client``, when the options are not given."""

from __future__ import annotations

import os

AUTH_PARAMS_ENV = "STRIPEMQ_AUTH_PARAMS"
TLS_TRUST_CERTS_ENV = "STRIPEMQ_TLS_TRUST_CERTS_FILE_PATH"


def auth_params(given: str | None) -> str | None:
    """``--auth-params`` as given, else ``$STRIPEMQ_AUTH_PARAMS`` (None when neither)."""
    return given or os.environ.get(AUTH_PARAMS_ENV) or None


def tls_trust_certs(given: str | None) -> str | None:
    """The TLS trust file as given, else ``$STRIPEMQ_TLS_TRUST_CERTS_FILE_PATH``."""
    return given or os.environ.get(TLS_TRUST_CERTS_ENV) or None
