"""The periodic TTL and backlog-quota checks: a round goes over every topic served, whatever
one of them raises, and leaves out topics that are not being served."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from stripemq.broker import policy_tasks
from stripemq.broker.namespace_policies import EffectivePolicies
from stripemq.broker.policy_tasks import PolicyChecks
from stripemq.errors import ManagedLedgerError


def topic(name: str, *, serving: bool = True) -> Any:
    """What the checks read of a topic."""
    return SimpleNamespace(name=name, serving=serving, policies=EffectivePolicies(message_ttl_s=60))


@pytest.mark.parametrize("error", [RuntimeError("a bug"), ManagedLedgerError("storage")])
@pytest.mark.parametrize("check", ["message expiry", "backlog quota"])
async def test_one_topic_failing_does_not_end_the_round(
    monkeypatch: pytest.MonkeyPatch, error: Exception, check: str
) -> None:
    topics = [topic("a"), topic("closing", serving=False), topic("b")]
    checked: list[str] = []

    async def work(target: Any, *_args: object) -> None:
        checked.append(target.name)
        if target.name == "a":
            raise error

    monkeypatch.setattr(policy_tasks, "expire_topic", work)
    monkeypatch.setattr(policy_tasks, "enforce", work)
    checks = PolicyChecks(lambda: topics, message_expiry_interval_s=0, backlog_quota_interval_s=0)
    if check == "message expiry":
        await checks.check_message_expiry()
    else:
        await checks.check_backlog_quotas()
    assert checked == ["a", "b"]
