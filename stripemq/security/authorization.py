"""What a role may do, as Pulsar's ``PulsarAuthorizationProvider`` decides it.

- A superuser (``super_user_roles``) may do everything.
- A tenant's admins (its ``adminRoles``) may do everything inside the tenant: its
  namespaces, their policies and permissions, their topics, producing and consuming.
- Any other role has what a namespace grants it (``auth_policies.namespace_auth``):
  ``produce`` lets it look topics up and publish, ``consume`` lets it look topics up,
  subscribe and work on subscriptions.

``decide`` is the sans-IO rule; ``AuthorizationService`` reads the tenant and namespace
records it needs and raises ``AuthorizationError`` (Pulsar's error code) for a refusal.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping

from stripemq.errors import AuthorizationError

log = logging.getLogger(__name__)


class AuthAction(enum.Enum):
    """Pulsar's ``AuthAction``: what a namespace permission grants (only ``produce`` and
    ``consume`` mean something to this broker; the others are kept as granted)."""

    PRODUCE = "produce"
    CONSUME = "consume"
    FUNCTIONS = "functions"
    SOURCES = "sources"
    SINKS = "sinks"
    PACKAGES = "packages"


class Need(enum.Enum):
    """What an operation needs from the role."""

    AUTHENTICATED = "authenticated"  # any role the broker authenticated
    LOOKUP = "lookup"  # produce or consume on the namespace
    PRODUCE = "produce"
    CONSUME = "consume"
    TENANT_ADMIN = "tenant admin"
    SUPERUSER = "superuser"


def decide(
    need: Need,
    role: str,
    *,
    superusers: Collection[str],
    tenant_admins: Collection[str] = (),
    granted: Collection[str] = (),
) -> bool:
    """Whether ``role`` may do what needs ``need``; ``granted`` are the actions the
    namespace grants the role, ``tenant_admins`` the admin roles of the tenant."""
    if role in superusers:
        return True
    if need is Need.AUTHENTICATED:
        return True
    if need is Need.SUPERUSER:
        return False
    if role in tenant_admins:
        return True
    if need is Need.PRODUCE:
        return AuthAction.PRODUCE.value in granted
    if need is Need.CONSUME:
        return AuthAction.CONSUME.value in granted
    if need is Need.LOOKUP:
        return AuthAction.PRODUCE.value in granted or AuthAction.CONSUME.value in granted
    return False


def parse_actions(body: object) -> tuple[str, ...]:
    """A grant's body: a JSON list of Pulsar ``AuthAction`` names, e.g. ``["produce"]``."""
    if not isinstance(body, list) or not all(isinstance(item, str) for item in body):
        raise ValueError('permissions must be a JSON list of actions, such as ["produce"]')
    known = {action.value for action in AuthAction}
    unknown = sorted(set(body) - known)
    if unknown:
        raise ValueError(f"unknown action(s) {', '.join(unknown)}: choose from {sorted(known)}")
    return tuple(sorted(set(body)))


# Reads a tenant's admin roles (None: no such tenant), and a namespace's granted actions
# by role; both from the metadata store, in the broker.
TenantAdmins = Callable[[str], Awaitable[Collection[str] | None]]
NamespaceGrants = Callable[[str], Awaitable[Mapping[str, Collection[str]]]]


class AuthorizationService:
    """Checks a role against the tenant and namespace of what it asks for."""

    def __init__(
        self,
        superusers: Collection[str],
        tenant_admins: TenantAdmins,
        namespace_grants: NamespaceGrants,
    ) -> None:
        self.superusers = frozenset(superusers)
        self._tenant_admins = tenant_admins
        self._namespace_grants = namespace_grants

    def is_superuser(self, role: str) -> bool:
        return role in self.superusers

    async def allowed(self, need: Need, role: str, namespace: str | None = None) -> bool:
        """Whether ``role`` may do what needs ``need`` in ``namespace`` (``tenant/ns``, or
        just ``tenant`` for tenant-wide operations)."""
        if role in self.superusers or need in (Need.AUTHENTICATED, Need.SUPERUSER):
            return decide(need, role, superusers=self.superusers)
        if namespace is None:
            return False
        tenant, _, local = namespace.partition("/")
        admins = await self._tenant_admins(tenant)
        if admins is not None and role in admins:
            return True
        granted: Collection[str] = ()
        if local and need in (Need.LOOKUP, Need.PRODUCE, Need.CONSUME):
            granted = (await self._namespace_grants(namespace)).get(role, ())
        return decide(
            need,
            role,
            superusers=self.superusers,
            tenant_admins=admins or (),
            granted=granted,
        )

    async def check(self, need: Need, role: str, namespace: str | None = None) -> None:
        """Return if allowed; ``AuthorizationError`` saying what was refused otherwise."""
        if not await self.allowed(need, role, namespace):
            where = f" on {namespace}" if namespace else ""
            raise AuthorizationError(
                f"Client with role {role!r} is not authorized: {need.value} needed{where}"
            )
