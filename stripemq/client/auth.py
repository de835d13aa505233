"""Client authentication as the official Pulsar clients offer it: ``AuthenticationToken``,
and the ``--auth-plugin`` / ``--auth-params`` strings of pulsar-client and pulsar-admin.

A token goes in CONNECT (``auth_method_name`` ``"token"``, ``auth_data`` the token's UTF-8
bytes) and again in AUTH_RESPONSE when the broker asks for a fresh one (AUTH_CHALLENGE
before the token it holds expires). A token given as a supplier (a function of no
arguments returning it) is asked again each time, so it may hand out a renewed token; a
token file is read again each time.

Auth params, as Pulsar's ``AuthenticationToken.configure`` reads them:

    token:<jwt>         the token itself
    file:///path/to/f   a file holding it (surrounding whitespace ignored)
    env:NAME            an environment variable holding it
    {"token": "<jwt>"}  JSON
    <jwt>               a bare token

A string of another ``word:`` form is refused rather than sent as a token (a misspelt
prefix would only come back from the broker as "authentication failed"). Every refusal is an
``InvalidConfigurationError`` saying which forms there are.

Only the standard library and ``stripemq.errors`` are imported here.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from urllib.parse import unquote, urlsplit

from stripemq.errors import AuthenticationError, InvalidConfigurationError
from stripemq.proto.session import AUTH_METHOD_TOKEN

TOKEN_METHOD = AUTH_METHOD_TOKEN

# What --auth-plugin accepts for token authentication: Pulsar's class name and short name.
TOKEN_PLUGINS = frozenset({"token", "org.apache.pulsar.client.impl.auth.AuthenticationToken"})

# The forms of auth params, as the CLIs' --auth-params help also names them.
PARAMS_FORMS = 'token:<jwt>, file:///path/to/token, env:NAME or {"token": "<jwt>"}'

_PREFIX = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")

TokenSupplier = Callable[[], str]


class Authentication:
    """What an authentication gives a connection (the official client's
    ``Authentication``): the method name CONNECT carries, and the credentials, asked for
    every CONNECT and every AUTH_RESPONSE."""

    auth_method_name: str = "none"

    def auth_data(self) -> bytes:
        """The credentials to send now.

        Raises:
            AuthenticationError: they cannot be had (a supplier failed, a file is gone).
        """
        raise NotImplementedError


class AuthenticationToken(Authentication):
    """Token authentication (``pulsar.AuthenticationToken``): ``token`` is the token, or a
    function of no arguments that returns it (called again for every connection and
    every refresh the broker asks for)."""

    auth_method_name = TOKEN_METHOD

    def __init__(self, token: str | TokenSupplier) -> None:
        if not isinstance(token, str) and not callable(token):
            raise ValueError("AuthenticationToken takes a token (str) or a function returning one")
        self._token = token

    def __repr__(self) -> str:  # never the token itself
        kind = "supplier" if callable(self._token) else "token"
        return f"AuthenticationToken(<{kind}>)"

    def token(self) -> str:
        """The token to send now.

        Raises:
            AuthenticationError: the supplier failed or returned no token.
        """
        if not callable(self._token):
            token: object = self._token
        else:
            try:
                token = self._token()
            except Exception as exc:
                raise AuthenticationError(f"cannot get the token: {exc}") from exc
        if isinstance(token, bytes):
            token = token.decode("utf-8", errors="replace")
        if not isinstance(token, str) or not token:
            raise AuthenticationError(f"the token supplier gave no token ({type(token).__name__})")
        return token

    def auth_data(self) -> bytes:
        return self.token().encode()


def token_file_supplier(path: str) -> TokenSupplier:
    """A supplier that reads the token from ``path`` on every call."""

    def read() -> str:
        try:
            with open(path, encoding="utf-8") as file:
                token = file.read().strip()
        except OSError as exc:
            raise AuthenticationError(f"cannot read the token file {path}: {exc}") from None
        if not token:
            raise AuthenticationError(f"the token file {path} is empty")
        return token

    return read


def token_env_supplier(name: str) -> TokenSupplier:
    """A supplier that reads the token from environment variable ``name`` on every call."""

    def read() -> str:
        token = os.environ.get(name, "").strip()
        if not token:
            raise AuthenticationError(f"the environment variable {name} holds no token")
        return token

    return read


def _file_path(params: str) -> str:
    """The path of a ``file:`` auth param (``file:///abs``, ``file:/abs``, ``file:rel``)."""
    parts = urlsplit(params)
    if parts.netloc not in ("", "localhost"):
        raise InvalidConfigurationError(
            f"auth params {params!r} name host {parts.netloc!r}: a token file is "
            f"file:///absolute/path (three slashes)"
        )
    path = unquote(parts.path)
    if not path:
        raise InvalidConfigurationError(f"auth params {params!r} name no file")
    return path


def token_from_params(params: str) -> str | TokenSupplier:
    """The token (or its supplier) that auth params ``params`` describe.

    Raises:
        InvalidConfigurationError: ``params`` are none of the forms, name no token, or
            name a token file that cannot be read.
    """
    text = params.strip()
    if text.startswith("token:"):
        token = text[len("token:") :].strip()
        if not token:
            raise InvalidConfigurationError("auth params 'token:' hold no token")
        return token
    if text.startswith("file:"):
        supplier = token_file_supplier(_file_path(text))
        try:
            supplier()  # refused now, not at the first connection
        except AuthenticationError as exc:
            raise InvalidConfigurationError(str(exc)) from None
        return supplier
    if text.startswith("env:"):
        name = text[len("env:") :]
        if not name or not os.environ.get(name, "").strip():
            raise InvalidConfigurationError(f"auth params {text!r}: {name or '(none)'} is not set")
        return token_env_supplier(name)
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        value = doc.get("token") if isinstance(doc, dict) else None
        if not isinstance(value, str) or not value.strip():
            raise InvalidConfigurationError('auth params in JSON need {"token": "<jwt>"}')
        return value.strip()
    prefix = _PREFIX.match(text)
    if not text or prefix or any(c.isspace() for c in text):  # never echo a token
        what = f"{prefix.group()}..." if prefix else "with spaces" if text else "(empty)"
        raise InvalidConfigurationError(f"auth params {what} are none of {PARAMS_FORMS}")
    return text


def authentication_from_params(
    plugin: str | None, params: str | None
) -> AuthenticationToken | None:
    """The authentication that ``--auth-plugin`` and ``--auth-params`` name (``None``
    for neither). The plugin may be left out: token authentication is the only one.

    Raises:
        InvalidConfigurationError: an unknown plugin, a plugin without params, or params
            of no known form.
    """
    plugin = (plugin or "").strip()
    if not plugin and not params:
        return None
    if plugin and plugin not in TOKEN_PLUGINS:
        names = " or ".join(sorted(TOKEN_PLUGINS))
        raise InvalidConfigurationError(
            f"authentication plugin {plugin!r} is not supported: only token authentication "
            f"({names})"
        )
    if not params:
        raise InvalidConfigurationError(f"--auth-plugin {plugin} needs --auth-params")
    return AuthenticationToken(token_from_params(params))
