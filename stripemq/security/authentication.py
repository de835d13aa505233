"""Who a client is: the broker's authentication providers, as Pulsar's
``AuthenticationService`` and ``AuthenticationProviderToken`` (sans-IO).

A client proves a role with a method name and data: on the binary protocol CONNECT's
``auth_method_name`` and ``auth_data`` (and AUTH_RESPONSE when the broker asks for fresh
data), on HTTP an ``Authorization: Bearer <token>`` header. The only provider is ``token``
(JWT, checked by ``TokenVerifier``). Keys are read once, when the service is built.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stripemq.errors import AuthenticationError, ConfigError
from stripemq.proto.session import AUTH_METHOD_TOKEN
from stripemq.security.tokens import TokenError, TokenVerifier, read_key_spec

if TYPE_CHECKING:
    from stripemq.broker.config import BrokerConfig

log = logging.getLogger(__name__)

TOKEN_METHOD = AUTH_METHOD_TOKEN
NO_AUTH_METHOD = "none"  # what clients without an authentication plugin send
# Pulsar's class names of the token provider (broker side and client side): a config or a
# client naming them means "token" here.
TOKEN_PROVIDER_NAMES = frozenset(
    {
        TOKEN_METHOD,
        "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "org.apache.pulsar.client.impl.auth.AuthenticationToken",
    }
)


@dataclass(frozen=True)
class AuthenticatedRole:
    """A role the broker accepted, and when its credentials stop being valid."""

    role: str
    method: str
    expires_at: float | None = None  # seconds since the epoch; None: never

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and self.expires_at <= now


class TokenAuthenticationProvider:
    """JWT tokens signed with the configured secret or private key (Pulsar's
    ``AuthenticationProviderToken``)."""

    method = TOKEN_METHOD

    def __init__(self, verifier: TokenVerifier) -> None:
        self.verifier = verifier

    @classmethod
    def from_config(cls, config: BrokerConfig) -> TokenAuthenticationProvider:
        options = {
            "role_claim": config.token_auth_claim,
            "audience_claim": config.token_audience_claim,
            "audience": config.token_audience,
        }
        if config.token_audience_claim and not config.token_audience:
            raise ConfigError("token_audience_claim is set: token_audience must be set too")
        try:
            if config.token_secret_key and config.token_public_key:
                raise ConfigError("set one of token_secret_key and token_public_key, not both")
            if config.token_secret_key:
                secret = read_key_spec(config.token_secret_key)
                return cls(TokenVerifier.from_secret(secret, **options))
            if config.token_public_key:
                public = read_key_spec(config.token_public_key)
                return cls(
                    TokenVerifier.from_public_key(public, config.token_public_alg, **options)
                )
        except TokenError as exc:
            raise ConfigError(f"token authentication: {exc}") from exc
        raise ConfigError(
            "token authentication needs token_secret_key or token_public_key "
            "(file:///path or data:;base64,...)"
        )

    def authenticate(self, data: bytes | str) -> AuthenticatedRole:
        token = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        try:
            claims = self.verifier.verify(token.strip())
        except TokenError as exc:
            raise AuthenticationError(f"Failed to authenticate: {exc}") from exc
        return AuthenticatedRole(claims.role, self.method, claims.expires_at)


class AuthenticationService:
    """The enabled providers by method name, and the anonymous role if one is set."""

    def __init__(
        self,
        providers: dict[str, TokenAuthenticationProvider],
        anonymous_role: str | None = None,
    ) -> None:
        self.providers = providers
        self.anonymous_role = anonymous_role

    @classmethod
    def from_config(cls, config: BrokerConfig) -> AuthenticationService | None:
        """The service the settings ask for; None when authentication is off."""
        if not config.authentication_enabled:
            return None
        names = config.authentication_providers or [TOKEN_METHOD]
        unknown = [name for name in names if name not in TOKEN_PROVIDER_NAMES]
        if unknown:
            raise ConfigError(
                f"unknown authentication provider(s) {', '.join(unknown)}: the one provider is "
                "token (org.apache.pulsar.broker.authentication.AuthenticationProviderToken)"
            )
        provider = TokenAuthenticationProvider.from_config(config)
        return cls({provider.method: provider}, config.anonymous_user_role)

    def authenticate(self, method: str | None, data: bytes | str | None) -> AuthenticatedRole:
        """The role proven by ``data`` with ``method`` (the anonymous role when there are
        no credentials and one is set); ``AuthenticationError`` otherwise."""
        if method in (None, "", NO_AUTH_METHOD) and not data:
            if self.anonymous_role:
                return AuthenticatedRole(self.anonymous_role, "anonymous")
            raise AuthenticationError("Authentication required")
        name = method or TOKEN_METHOD
        provider = self.providers.get(TOKEN_METHOD if name in TOKEN_PROVIDER_NAMES else name)
        if provider is None:
            raise AuthenticationError(f"Unsupported authentication method: {name}")
        return provider.authenticate(data or b"")

    def authenticate_http(self, authorization: str | None) -> AuthenticatedRole:
        """The role of an HTTP request from its ``Authorization`` header."""
        if not authorization:
            return self.authenticate(None, None)
        scheme, _, credentials = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            raise AuthenticationError(
                "Authentication required: use 'Authorization: Bearer <token>'"
            )
        return self.authenticate(TOKEN_METHOD, credentials.strip())
