"""The consumer's sans-IO parts (``client.consumer``): which messages a reader's start
filters out, and whether a topic has messages after the last one seen."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stripemq.client.consumer import ConsumerConfig, StartFilter, has_messages_after
from stripemq.client.message import MessageId
from stripemq.client.options import ConsumerType
from stripemq.errors import InvalidConfigurationError


def _kept(start: StartFilter, ids: list[MessageId]) -> list[MessageId]:
    return [m for m in ids if not start.drops(m)]


def _batch(ledger: int, entry: int, size: int) -> list[MessageId]:
    return [
        MessageId(ledger_id=ledger, entry_id=entry, partition=-1, batch_index=i, batch_size=size)
        for i in range(size)
    ]


def test_start_filter_on_whole_entries() -> None:
    ids = [
        MessageId(ledger_id=1, entry_id=0),
        MessageId(ledger_id=1, entry_id=1),
        MessageId(ledger_id=1, entry_id=2),
        MessageId(ledger_id=2, entry_id=0),
    ]
    assert _kept(StartFilter(MessageId(ledger_id=1, entry_id=1), inclusive=True), ids) == ids[1:]
    assert _kept(StartFilter(MessageId(ledger_id=1, entry_id=1), inclusive=False), ids) == ids[2:]
    assert _kept(StartFilter(MessageId(ledger_id=1, entry_id=2), inclusive=False), ids) == ids[3:]
    assert _kept(StartFilter(MessageId(ledger_id=2, entry_id=0), inclusive=False), ids) == []


def test_start_filter_on_an_entry_that_is_a_batch() -> None:
    ids = [*_batch(1, 0, 2), *_batch(1, 1, 3), *_batch(1, 2, 2)]
    # The start names the whole batch entry: inclusive keeps all of it, exclusive none.
    assert _kept(StartFilter(MessageId(ledger_id=1, entry_id=1), inclusive=True), ids) == ids[2:]
    assert _kept(StartFilter(MessageId(ledger_id=1, entry_id=1), inclusive=False), ids) == ids[5:]


def test_start_filter_on_a_message_inside_a_batch() -> None:
    ids = [*_batch(1, 0, 2), *_batch(1, 1, 4), MessageId(ledger_id=1, entry_id=2)]
    start = MessageId(ledger_id=1, entry_id=1, partition=-1, batch_index=2, batch_size=4)
    assert _kept(StartFilter(start, inclusive=True), ids) == [
        MessageId(ledger_id=1, entry_id=1, partition=-1, batch_index=2, batch_size=4),
        MessageId(ledger_id=1, entry_id=1, partition=-1, batch_index=3, batch_size=4),
        MessageId(ledger_id=1, entry_id=2),
    ]
    assert _kept(StartFilter(start, inclusive=False), ids) == [
        MessageId(ledger_id=1, entry_id=1, partition=-1, batch_index=3, batch_size=4),
        MessageId(ledger_id=1, entry_id=2),
    ]
    last = MessageId(ledger_id=1, entry_id=1, partition=-1, batch_index=3, batch_size=4)
    assert _kept(StartFilter(last, inclusive=False), ids) == [MessageId(ledger_id=1, entry_id=2)]


def test_start_filter_at_earliest_drops_nothing() -> None:
    ids = [MessageId(ledger_id=0, entry_id=0), *_batch(0, 1, 3), MessageId(ledger_id=5, entry_id=5)]
    assert _kept(StartFilter(MessageId.earliest, inclusive=True), ids) == ids
    assert _kept(StartFilter(MessageId.earliest, inclusive=False), ids) == ids


def test_start_filter_compares_ledgers_before_entries() -> None:
    start = StartFilter(MessageId(ledger_id=2, entry_id=5), inclusive=True)
    assert start.drops(MessageId(ledger_id=1, entry_id=99))
    assert not start.drops(MessageId(ledger_id=3, entry_id=0))


@st.composite
def topic_layouts(draw: st.DrawFn) -> tuple[list[list[MessageId]], int, int, str, bool]:
    """Entries in order (each the ids of its messages), a chosen message, and how the
    start names it."""
    sizes = draw(st.lists(st.integers(0, 4), min_size=1, max_size=8))
    entries = []
    for n, size in enumerate(sizes):
        ledger, entry = 10 + n // 3, n % 3
        entries.append(
            _batch(ledger, entry, size) if size else [MessageId(ledger_id=ledger, entry_id=entry)]
        )
    e = draw(st.integers(0, len(entries) - 1))
    i = draw(st.integers(0, len(entries[e]) - 1))
    how = draw(st.sampled_from(["message", "entry"]))
    return entries, e, i, how, draw(st.booleans())


@given(topic_layouts())
def test_a_reader_sees_exactly_the_messages_from_its_start(
    layout: tuple[list[list[MessageId]], int, int, str, bool],
) -> None:
    entries, e, i, how, inclusive = layout
    flat = [m for entry in entries for m in entry]
    chosen = entries[e][i]
    if how == "message":
        start = chosen
        position = flat.index(chosen)
        expected = flat[position:] if inclusive else flat[position + 1 :]
    else:
        start = chosen.entry_id_only()
        before = sum(len(x) for x in entries[:e])
        expected = flat[before:] if inclusive else flat[before + len(entries[e]) :]
    assert _kept(StartFilter(start, inclusive), flat) == expected


def test_after_between_entries() -> None:
    def mid(ledger: int, entry: int) -> MessageId:
        return MessageId(ledger_id=ledger, entry_id=entry)

    assert has_messages_after(mid(1, 5), mid(1, 4))
    assert has_messages_after(mid(2, 0), mid(1, 9))
    assert not has_messages_after(mid(1, 4), mid(1, 5))
    assert not has_messages_after(mid(1, 9), mid(2, 0))
    assert has_messages_after(
        MessageId(ledger_id=1, entry_id=5), MessageId(ledger_id=1, entry_id=4)
    )
    assert has_messages_after(
        MessageId(ledger_id=2, entry_id=0), MessageId(ledger_id=1, entry_id=9)
    )
    assert not has_messages_after(
        MessageId(ledger_id=1, entry_id=4), MessageId(ledger_id=1, entry_id=5)
    )
    assert not has_messages_after(
        MessageId(ledger_id=1, entry_id=9), MessageId(ledger_id=2, entry_id=0)
    )
    assert has_messages_after(
        MessageId(ledger_id=1, entry_id=5),
        MessageId(ledger_id=1, entry_id=4, partition=-1, batch_index=2, batch_size=3),
    )


def test_after_within_the_last_entry() -> None:
    last = MessageId(ledger_id=1, entry_id=5)
    assert not has_messages_after(
        last, MessageId(ledger_id=1, entry_id=5)
    )  # the whole entry was seen
    assert has_messages_after(
        last, MessageId(ledger_id=1, entry_id=5, partition=-1, batch_index=0, batch_size=3)
    )
    assert has_messages_after(
        last, MessageId(ledger_id=1, entry_id=5, partition=-1, batch_index=1, batch_size=3)
    )
    assert not has_messages_after(
        last, MessageId(ledger_id=1, entry_id=5, partition=-1, batch_index=2, batch_size=3)
    )  # the batch's last message
    assert not has_messages_after(
        MessageId(ledger_id=1, entry_id=5, partition=-1, batch_index=2, batch_size=3),
        MessageId(ledger_id=1, entry_id=5, partition=-1, batch_index=2, batch_size=3),
    )


def test_after_an_index_the_broker_names_as_the_last() -> None:
    """The broker's last id names the batch's last index: a hand-made id (no batch size)
    inside that batch is judged by it."""
    last = MessageId(ledger_id=1, entry_id=5, batch_index=2)
    assert has_messages_after(last, MessageId(ledger_id=1, entry_id=5, batch_index=1))
    assert not has_messages_after(last, MessageId(ledger_id=1, entry_id=5, batch_index=2))
    assert not has_messages_after(last, MessageId(ledger_id=1, entry_id=5))  # whole entry


def test_only_exclusive_and_failover_consumers_may_read_compacted() -> None:
    for allowed in (ConsumerType.Exclusive, ConsumerType.Failover):
        ConsumerConfig("s", consumer_type=allowed, is_read_compacted=True)
    for refused in (ConsumerType.Shared, ConsumerType.KeyShared):
        with pytest.raises(InvalidConfigurationError, match="Exclusive or Failover"):
            ConsumerConfig("s", consumer_type=refused, is_read_compacted=True)
