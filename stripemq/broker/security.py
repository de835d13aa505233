"""The broker's authentication and authorization, built once from its settings.

``BrokerSecurity`` is what connections and the admin API ask: who a client is (from its
credentials) and whether that role may do an operation on a namespace. Tenant admin roles
and namespace permissions are read from the metadata store at each check, so a grant or
a revocation holds for the next lookup, producer, subscription or admin call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping

from stripemq.broker.config import BrokerConfig
from stripemq.broker.namespaces import NamespaceNotFoundError, read_policies, read_tenant
from stripemq.broker.policies import InvalidPolicyError
from stripemq.errors import BrokerError, ConfigError
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.security.authentication import AuthenticatedRole, AuthenticationService
from stripemq.security.authorization import AuthorizationService, Need

log = logging.getLogger(__name__)


class BrokerSecurity:
    """Authentication (None when off) and authorization (None when off) of one broker."""

    def __init__(self, config: BrokerConfig, get_store: Callable[[], MetadataStore | None]) -> None:
        if config.authorization_enabled and not config.authentication_enabled:
            raise ConfigError("authorization_enabled needs authentication_enabled")
        self._get_store = get_store
        self.authentication = AuthenticationService.from_config(config)
        self.authorization = (
            AuthorizationService(
                config.super_user_roles, self._tenant_admins, self._namespace_grants
            )
            if config.authorization_enabled
            else None
        )
        self.refresh_check_s = config.authentication_refresh_check_seconds
        self.authenticate_metrics = config.authenticate_metrics_endpoint

    @property
    def authenticating(self) -> bool:
        return self.authentication is not None

    def authenticate(self, method: str, data: bytes) -> AuthenticatedRole:
        """A client's credentials on the binary protocol (CONNECT, AUTH_RESPONSE)."""
        assert self.authentication is not None
        return self.authentication.authenticate(method, data)

    def authenticate_http(self, header: str | None) -> AuthenticatedRole | None:
        """The role of an HTTP request (None when authentication is off)."""
        if self.authentication is None:
            return None
        return self.authentication.authenticate_http(header)

    async def check(
        self, need: Need, role: AuthenticatedRole | None, namespace: str | None
    ) -> None:
        """Raise ``AuthorizationError`` unless the role may; a no-op with authorization off."""
        if self.authorization is None or role is None:
            return
        await self.authorization.check(need, role.role, namespace)

    def _store(self) -> MetadataStore:
        store = self._get_store()
        if store is None:
            raise BrokerError(pb.ServiceNotReady, "the broker is starting: try again")
        return store

    async def _tenant_admins(self, tenant: str) -> Collection[str] | None:
        try:
            info, _version = await read_tenant(self._store(), tenant)
        except NamespaceNotFoundError:
            return None
        return info.admin_roles

    async def _namespace_grants(self, namespace: str) -> Mapping[str, Collection[str]]:
        try:
            policies, _version = await read_policies(self._store(), namespace)
        except (NamespaceNotFoundError, InvalidPolicyError):
            return {}
        return policies.namespace_auth
