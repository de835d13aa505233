"""What a role may do (``security.authorization``): the sans-IO ``decide`` rule, grant bodies,
and ``AuthorizationService`` over fake tenant and namespace records."""

from __future__ import annotations

from collections.abc import Collection, Mapping

import pytest

from stripemq.errors import AuthorizationError, server_error_of
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.security.authorization import (
    AuthAction,
    AuthorizationService,
    Need,
    decide,
    parse_actions,
)

SUPERUSERS = ("root",)
ALL_NEEDS = list(Need)

# ---------------------------------------------------------------------------- decide


@pytest.mark.parametrize("need", ALL_NEEDS)
def test_a_superuser_may_do_everything(need: Need) -> None:
    assert decide(need, "root", superusers=SUPERUSERS)


@pytest.mark.parametrize("need", ALL_NEEDS)
def test_a_tenant_admin_may_do_everything_but_superuser_things(need: Need) -> None:
    allowed = decide(need, "ada", superusers=SUPERUSERS, tenant_admins=("ada",))
    assert allowed is (need is not Need.SUPERUSER)


@pytest.mark.parametrize(
    "granted, allowed_needs",
    [
        ((), {Need.AUTHENTICATED}),
        (("produce",), {Need.AUTHENTICATED, Need.LOOKUP, Need.PRODUCE}),
        (("consume",), {Need.AUTHENTICATED, Need.LOOKUP, Need.CONSUME}),
        (("produce", "consume"), {Need.AUTHENTICATED, Need.LOOKUP, Need.PRODUCE, Need.CONSUME}),
        (("functions", "sources", "sinks", "packages"), {Need.AUTHENTICATED}),
    ],
)
def test_grants_allow_what_they_name(granted: tuple[str, ...], allowed_needs: set[Need]) -> None:
    for need in Need:
        allowed = decide(
            need, "bob", superusers=SUPERUSERS, tenant_admins=("ada",), granted=granted
        )
        assert allowed is (need in allowed_needs), need


def test_grants_do_not_make_a_tenant_admin_or_superuser() -> None:
    granted = [action.value for action in AuthAction]
    assert not decide(Need.TENANT_ADMIN, "bob", superusers=SUPERUSERS, granted=granted)
    assert not decide(Need.SUPERUSER, "bob", superusers=SUPERUSERS, granted=granted)


def test_roles_are_compared_exactly() -> None:
    assert not decide(Need.SUPERUSER, "Root", superusers=SUPERUSERS)
    assert not decide(Need.TENANT_ADMIN, "ad", superusers=(), tenant_admins=("ada",))
    assert not decide(Need.PRODUCE, "bob", superusers=(), granted=("Produce",))


# ---------------------------------------------------------------------------- parse_actions


@pytest.mark.parametrize(
    "body, actions",
    [
        ([], ()),
        (["produce"], ("produce",)),
        (["consume", "produce", "consume"], ("consume", "produce")),
        (
            ["sinks", "functions", "packages", "sources"],
            ("functions", "packages", "sinks", "sources"),
        ),
    ],
)
def test_grant_bodies(body: list[str], actions: tuple[str, ...]) -> None:
    assert parse_actions(body) == actions


@pytest.mark.parametrize(
    "body, message",
    [
        ("produce", "must be a JSON list"),
        ({"produce": True}, "must be a JSON list"),
        (None, "must be a JSON list"),
        (["produce", 1], "must be a JSON list"),
        (["produce", "write", "admin"], "unknown action.*admin, write"),
        (["PRODUCE"], "unknown action"),
    ],
)
def test_bad_grant_bodies(body: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_actions(body)


# ---------------------------------------------------------------------------- the service


class Records:
    """Fake tenant and namespace records, and the reads the service made of them."""

    def __init__(
        self,
        tenants: Mapping[str, Collection[str]],
        grants: Mapping[str, Mapping[str, Collection[str]]],
    ) -> None:
        self.tenants = tenants
        self.grants = grants
        self.reads: list[str] = []

    async def tenant_admins(self, tenant: str) -> Collection[str] | None:
        self.reads.append(f"tenant:{tenant}")
        return self.tenants.get(tenant)

    async def namespace_grants(self, namespace: str) -> Mapping[str, Collection[str]]:
        self.reads.append(f"grants:{namespace}")
        return self.grants.get(namespace, {})


@pytest.fixture
def records() -> Records:
    return Records(
        tenants={"acme": ["ada"], "other": ["olga"]},
        grants={
            "acme/orders": {
                "pete": ["produce"],
                "carl": ["consume"],
                "both": ["produce", "consume"],
            },
            "other/ns": {"pete": ["produce", "consume"]},
        },
    )


@pytest.fixture
def authz(records: Records) -> AuthorizationService:
    return AuthorizationService(["root", "ops"], records.tenant_admins, records.namespace_grants)


def test_superusers_are_a_set(authz: AuthorizationService) -> None:
    assert authz.superusers == frozenset({"root", "ops"})
    assert authz.is_superuser("ops") and not authz.is_superuser("ada")


@pytest.mark.parametrize("need", ALL_NEEDS)
@pytest.mark.parametrize("namespace", [None, "acme", "acme/orders", "nowhere/ns"])
async def test_a_superuser_is_allowed_without_reading_records(
    authz: AuthorizationService, records: Records, need: Need, namespace: str | None
) -> None:
    assert await authz.allowed(need, "root", namespace)
    await authz.check(need, "ops", namespace)
    assert records.reads == []


async def test_any_role_is_authenticated_and_no_other_is_a_superuser(
    authz: AuthorizationService, records: Records
) -> None:
    for role in ("ada", "pete", "stranger"):
        assert await authz.allowed(Need.AUTHENTICATED, role)
        assert await authz.allowed(Need.AUTHENTICATED, role, "acme/orders")
        assert not await authz.allowed(Need.SUPERUSER, role)
        assert not await authz.allowed(Need.SUPERUSER, role, "acme")
    assert records.reads == []


@pytest.mark.parametrize("need", [Need.LOOKUP, Need.PRODUCE, Need.CONSUME, Need.TENANT_ADMIN])
async def test_a_tenant_admin_may_do_anything_in_the_tenant(
    authz: AuthorizationService, records: Records, need: Need
) -> None:
    assert await authz.allowed(need, "ada", "acme/orders")
    assert await authz.allowed(need, "ada", "acme/anything")
    assert not await authz.allowed(need, "ada", "other/ns")
    assert "grants:acme/orders" not in records.reads  # the admin roles were enough


async def test_tenant_scope(authz: AuthorizationService) -> None:
    assert await authz.allowed(Need.TENANT_ADMIN, "ada", "acme")
    assert not await authz.allowed(Need.TENANT_ADMIN, "olga", "acme")
    assert not await authz.allowed(Need.TENANT_ADMIN, "pete", "acme")


async def test_tenant_scope_reads_no_grants(authz: AuthorizationService, records: Records) -> None:
    assert not await authz.allowed(Need.LOOKUP, "pete", "acme")
    assert records.reads == ["tenant:acme"]


async def test_tenant_admin_needs_read_no_grants(
    authz: AuthorizationService, records: Records
) -> None:
    assert not await authz.allowed(Need.TENANT_ADMIN, "both", "acme/orders")
    assert records.reads == ["tenant:acme"]


@pytest.mark.parametrize(
    "role, allowed_needs",
    [
        ("pete", {Need.LOOKUP, Need.PRODUCE}),
        ("carl", {Need.LOOKUP, Need.CONSUME}),
        ("both", {Need.LOOKUP, Need.PRODUCE, Need.CONSUME}),
        ("stranger", set()),
        ("olga", set()),  # another tenant's admin
    ],
)
async def test_namespace_grants(
    authz: AuthorizationService, role: str, allowed_needs: set[Need]
) -> None:
    for need in (Need.LOOKUP, Need.PRODUCE, Need.CONSUME, Need.TENANT_ADMIN):
        assert await authz.allowed(need, role, "acme/orders") is (need in allowed_needs), need


async def test_grants_are_per_namespace(authz: AuthorizationService) -> None:
    assert await authz.allowed(Need.CONSUME, "pete", "other/ns")
    assert not await authz.allowed(Need.CONSUME, "pete", "acme/orders")
    assert not await authz.allowed(Need.PRODUCE, "pete", "acme/payments")


@pytest.mark.parametrize("need", [Need.LOOKUP, Need.PRODUCE, Need.CONSUME, Need.TENANT_ADMIN])
async def test_a_missing_tenant_allows_nothing(authz: AuthorizationService, need: Need) -> None:
    assert not await authz.allowed(need, "ada", "nowhere/ns")
    assert not await authz.allowed(need, "ada", "nowhere")


@pytest.mark.parametrize("need", [Need.LOOKUP, Need.PRODUCE, Need.CONSUME, Need.TENANT_ADMIN])
async def test_without_a_namespace_only_superusers_pass(
    authz: AuthorizationService, records: Records, need: Need
) -> None:
    assert not await authz.allowed(need, "ada")
    assert not await authz.allowed(need, "both")
    assert records.reads == []


async def test_check_passes_quietly(authz: AuthorizationService) -> None:
    await authz.check(Need.PRODUCE, "pete", "acme/orders")


async def test_a_refusal_says_who_what_and_where(authz: AuthorizationService) -> None:
    with pytest.raises(AuthorizationError) as info:
        await authz.check(Need.PRODUCE, "carl", "acme/orders")
    assert str(info.value) == (
        "Client with role 'carl' is not authorized: produce needed on acme/orders"
    )
    assert server_error_of(info.value) == pb.AuthorizationError


async def test_a_refusal_without_a_namespace(authz: AuthorizationService) -> None:
    with pytest.raises(
        AuthorizationError,
        match=r"^Client with role 'ada' is not authorized: "
        r"superuser needed$",
    ):
        await authz.check(Need.SUPERUSER, "ada")
    with pytest.raises(AuthorizationError, match=r"tenant admin needed on acme$"):
        await authz.check(Need.TENANT_ADMIN, "pete", "acme")
