"""Topic names: short forms, partitions, managed-ledger names, and refusals."""

from __future__ import annotations

import pytest

from stripemq.proto.topic_name import InvalidTopicNameError, TopicName, is_valid_name


def test_short_forms_complete_like_pulsar() -> None:
    assert str(TopicName.parse("orders")) == "persistent://public/default/orders"
    assert str(TopicName.parse("acme/billing/orders")) == "persistent://acme/billing/orders"
    full = TopicName.parse("non-persistent://acme/billing/a/b")
    assert (full.domain, full.namespace_name, full.local_name) == (
        "non-persistent",
        "acme/billing",
        "a/b",
    )
    assert not full.persistent


def test_partitions() -> None:
    topic = TopicName.parse("persistent://t/ns/orders")
    second = topic.partition(2)
    assert str(second) == "persistent://t/ns/orders-partition-2"
    assert second.partition_index == 2 and second.partitioned_topic == topic
    assert topic.partition_index == -1 and topic.partitioned_topic == topic
    assert TopicName.parse("t/ns/-partition-3").partition_index == -1


def test_managed_ledger_names_encode_the_local_name() -> None:
    topic = TopicName.parse("persistent://t/ns/a b/c")
    assert topic.managed_ledger_name == "t/ns/persistent/a%20b%2Fc"
    assert TopicName.from_managed_ledger_name(topic.managed_ledger_name) == topic


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "http://t/ns/x",
        "persistent://t/ns",
        "persistent://t//x",
        "t/ns",
        "a/b/c/d",
        "persistent://t/n s/x",
        "persistent://t/ns/",
        "persistent://t/ns/.",
        "..",
        "persistent://t/ns/a\x00b",
    ],
)
def test_invalid_names_are_refused(bad: str) -> None:
    with pytest.raises(InvalidTopicNameError):
        TopicName.parse(bad)


def test_names_follow_pulsars_named_entity_rule() -> None:
    """ASCII letters, digits and ``-=:._``, the whole name (``^...$`` would let a trailing
    newline through)."""
    assert all(is_valid_name(n) for n in ("public", "a-b_c", "x=1:2.3", "UPPER9"))
    assert not is_valid_name("a/b")
    for bad in ("", "caf\u00e9", "\u0661", "name\n", "a b", "a*b"):
        assert not is_valid_name(bad), repr(bad)
        with pytest.raises(InvalidTopicNameError):
            TopicName.parse(f"persistent://{bad}/ns/t")
