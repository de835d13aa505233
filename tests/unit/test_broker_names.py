"""Names the broker refuses: non-persistent topics and reserved, empty or unstorable
(``..``) subscription names (``broker.names``), also through ``PersistentTopic``'s
subscribe methods."""

from __future__ import annotations

import pytest

from stripemq.broker.names import (
    ReservedSubscriptionNameError,
    UnsupportedTopicError,
    check_subscription_name,
    check_topic_supported,
)
from stripemq.broker.topic import PersistentTopic
from stripemq.managed_ledger.ledger_chain import LedgerChain
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.initial_position import InitialPosition
from stripemq.proto.topic_name import TopicName

RESERVED = ["pulsar.dedup", "pulsar.repl", "pulsar.repl.us-west", "", "   ", ".", "..", "a\x00b"]


def test_non_persistent_topics_are_refused_with_not_allowed() -> None:
    check_topic_supported(TopicName.parse("persistent://public/default/t"))
    check_topic_supported(TopicName.parse("t"))
    with pytest.raises(UnsupportedTopicError, match="non-persistent topics are not supported"):
        check_topic_supported(TopicName.parse("non-persistent://public/default/t"))
    assert UnsupportedTopicError.server_error == pb.NotAllowedError


@pytest.mark.parametrize("name", RESERVED)
def test_reserved_and_empty_subscription_names_are_refused(name: str) -> None:
    with pytest.raises(ReservedSubscriptionNameError):
        check_subscription_name(name)
    assert ReservedSubscriptionNameError.server_error == pb.NotAllowedError


@pytest.mark.parametrize(
    "name", ["sub", "pulsar", "pulsar.dedup2", "my.pulsar.repl", "reader-1", "...", ".a", "a/b"]
)
def test_ordinary_subscription_names_pass(name: str) -> None:
    check_subscription_name(name)


class NoCursors:
    """A managed ledger that must not be asked for a cursor."""

    chain = LedgerChain()
    cursors: dict[str, object] = {}

    async def open_cursor(self, name: str, initial: InitialPosition) -> None:
        raise AssertionError(f"cursor {name!r} opened")

    def open_non_durable_cursor(self, name: str, start: object) -> None:
        raise AssertionError(f"cursor {name!r} opened")


@pytest.mark.parametrize("name", RESERVED)
async def test_the_topic_refuses_them_before_opening_a_cursor(name: str) -> None:
    topic = PersistentTopic(TopicName.parse("t"), NoCursors())  # type: ignore[arg-type]
    with pytest.raises(ReservedSubscriptionNameError):
        await topic.subscribe(name, pb.CommandSubscribe.Exclusive, InitialPosition.Earliest)
    with pytest.raises(ReservedSubscriptionNameError):
        topic.subscribe_non_durable(name, pb.CommandSubscribe.Exclusive, None)
    assert topic.subscriptions == {}
