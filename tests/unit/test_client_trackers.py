"""The consumer's acknowledgement bookkeeping (``client.trackers``): batch acks, grouped
acks, negative acks and the ack timeout, driven with explicit times."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from stripemq.client.message import MessageId
from stripemq.client.trackers import (
    AckGroupingTracker,
    BatchAcks,
    NegativeAckTracker,
    UnackedMessageTracker,
)
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.ack_set import bits_of


def test_batch_acks_complete_once_every_message_is_acked() -> None:
    acks = BatchAcks(3)
    assert acks.unacked == [True, True, True]
    assert acks.ack(1) is False
    assert acks.ack(1) is False  # again: no change
    assert acks.ack(0) is False
    assert acks.unacked == [False, False, True]
    assert acks.ack(2) is True


def test_batch_acks_ignore_indexes_outside_the_batch() -> None:
    acks = BatchAcks(2)
    assert acks.ack(-1) is False
    assert acks.ack(2) is False
    assert acks.unacked == [True, True]


def test_batch_acks_ack_up_to_an_index() -> None:
    acks = BatchAcks(4)
    assert acks.ack_up_to(1) is False
    assert acks.unacked == [False, False, True, True]
    acks.ack(3)
    assert acks.ack_up_to(2) is True
    assert BatchAcks(3).ack_up_to(99) is True


def test_batch_acks_can_start_from_a_known_state() -> None:
    acks = BatchAcks(3, [False, True, False])
    assert acks.ack(1) is True


def _ids(command: pb.CommandAck) -> list[MessageId]:
    return [MessageId.from_proto(m) for m in command.message_id]


def test_an_empty_tracker_flushes_nothing() -> None:
    tracker = AckGroupingTracker()
    assert not tracker.has_pending and len(tracker) == 0
    assert tracker.flush(1) == []


def test_individual_acks_are_flushed_together_and_forgotten() -> None:
    tracker = AckGroupingTracker(group_time_s=10, max_size=100)
    tracker.add_individual(MessageId(ledger_id=1, entry_id=2))
    tracker.add_individual(
        MessageId(ledger_id=1, entry_id=3, batch_index=0, batch_size=1)
    )  # its whole entry
    tracker.add_individual(MessageId(ledger_id=1, entry_id=2))  # again
    assert len(tracker) == 2 and tracker.has_pending
    [command] = tracker.flush(consumer_id=7)
    assert command.consumer_id == 7
    assert command.ack_type == pb.CommandAck.Individual
    assert sorted(_ids(command)) == [
        MessageId(ledger_id=1, entry_id=2),
        MessageId(ledger_id=1, entry_id=3),
    ]
    assert all(not m.HasField("batch_index") and not m.ack_set for m in command.message_id)
    assert not tracker.has_pending and len(tracker) == 0
    assert tracker.flush(7) == []


def test_cumulative_ack_keeps_the_furthest_position() -> None:
    tracker = AckGroupingTracker(group_time_s=10)
    tracker.add_cumulative(MessageId(ledger_id=3, entry_id=5))
    tracker.add_cumulative(MessageId(ledger_id=3, entry_id=2))
    tracker.add_cumulative(MessageId(ledger_id=2, entry_id=9))
    assert tracker.has_pending
    [command] = tracker.flush(consumer_id=4)
    assert command.ack_type == pb.CommandAck.Cumulative
    assert command.consumer_id == 4
    assert _ids(command) == [MessageId(ledger_id=3, entry_id=5)]
    assert tracker.flush(4) == []


def test_cumulative_and_individual_acks_flush_as_two_commands() -> None:
    tracker = AckGroupingTracker(group_time_s=10)
    tracker.add_individual(MessageId(ledger_id=1, entry_id=9))
    tracker.add_cumulative(MessageId(ledger_id=1, entry_id=5))
    commands = tracker.flush(2)
    assert [c.ack_type for c in commands] == [pb.CommandAck.Cumulative, pb.CommandAck.Individual]
    assert _ids(commands[0]) == [MessageId(ledger_id=1, entry_id=5)]
    assert _ids(commands[1]) == [MessageId(ledger_id=1, entry_id=9)]


def test_partial_batch_acks_are_sent_with_an_ack_set() -> None:
    tracker = AckGroupingTracker(group_time_s=10)
    unacked = [True, False, True, True]
    tracker.add_batch_index(
        MessageId(ledger_id=4, entry_id=8, partition=2, batch_index=1, batch_size=4), unacked
    )
    unacked[0] = False  # the tracker kept its own copy
    [command] = tracker.flush(9)
    assert command.ack_type == pb.CommandAck.Individual
    [data] = command.message_id
    assert (data.ledgerId, data.entryId, data.partition) == (4, 8, 2)
    assert not data.HasField("batch_index")
    assert data.batch_size == 4
    assert bits_of(list(data.ack_set), 4) == [True, False, True, True]


def test_a_later_partial_ack_of_a_batch_replaces_the_earlier_one() -> None:
    tracker = AckGroupingTracker(group_time_s=10)
    entry = MessageId(ledger_id=1, entry_id=1, batch_index=0, batch_size=3)
    tracker.add_batch_index(entry, [False, True, True])
    tracker.add_batch_index(entry, [False, True, False])
    assert len(tracker) == 1
    [command] = tracker.flush(1)
    [data] = command.message_id
    assert bits_of(list(data.ack_set), 3) == [False, True, False]


def test_a_whole_entry_ack_supersedes_its_partial_ack() -> None:
    tracker = AckGroupingTracker(group_time_s=10)
    tracker.add_batch_index(
        MessageId(ledger_id=1, entry_id=1, batch_index=0, batch_size=3), [False, True, True]
    )
    tracker.add_individual(MessageId(ledger_id=1, entry_id=1, batch_index=2, batch_size=3))
    [command] = tracker.flush(1)
    [data] = command.message_id
    assert MessageId.from_proto(data) == MessageId(ledger_id=1, entry_id=1)
    assert not data.ack_set


def test_pending_acks_mark_arriving_messages_as_duplicates() -> None:
    tracker = AckGroupingTracker(group_time_s=10)
    tracker.add_cumulative(MessageId(ledger_id=1, entry_id=5))
    tracker.add_individual(MessageId(ledger_id=1, entry_id=9))
    assert tracker.is_duplicate(MessageId(ledger_id=1, entry_id=3))
    assert tracker.is_duplicate(MessageId(ledger_id=1, entry_id=5))
    assert tracker.is_duplicate(MessageId(ledger_id=1, entry_id=5, batch_index=3, batch_size=4))
    assert tracker.is_duplicate(MessageId(ledger_id=0, entry_id=100))
    assert not tracker.is_duplicate(MessageId(ledger_id=1, entry_id=6))
    assert tracker.is_duplicate(MessageId(ledger_id=1, entry_id=9))
    assert tracker.is_duplicate(MessageId(ledger_id=1, entry_id=9, batch_index=0, batch_size=2))
    assert not tracker.is_duplicate(MessageId(ledger_id=2, entry_id=0))
    tracker.flush(1)
    # The cumulative position stays known after it is sent; individual acks are gone.
    assert tracker.is_duplicate(MessageId(ledger_id=1, entry_id=4))
    assert not tracker.is_duplicate(MessageId(ledger_id=1, entry_id=9))


def test_partially_acked_batches_are_not_duplicates() -> None:
    tracker = AckGroupingTracker(group_time_s=10)
    tracker.add_batch_index(
        MessageId(ledger_id=1, entry_id=1, batch_index=0, batch_size=2), [False, True]
    )
    assert not tracker.is_duplicate(MessageId(ledger_id=1, entry_id=1, batch_index=1, batch_size=2))


def test_should_flush_once_max_size_acks_wait() -> None:
    tracker = AckGroupingTracker(group_time_s=10, max_size=3)
    assert not tracker.immediate
    tracker.add_individual(MessageId(ledger_id=1, entry_id=1))
    tracker.add_batch_index(
        MessageId(ledger_id=1, entry_id=2, batch_index=0, batch_size=2), [False, True]
    )
    assert not tracker.should_flush()
    tracker.add_individual(MessageId(ledger_id=1, entry_id=1))  # the same entry again: still two
    assert not tracker.should_flush()
    tracker.add_individual(MessageId(ledger_id=1, entry_id=3))
    assert tracker.should_flush()
    tracker.flush(1)
    assert not tracker.should_flush()


def test_group_time_zero_means_immediate_acks() -> None:
    tracker = AckGroupingTracker(group_time_s=0, max_size=1000)
    assert tracker.immediate
    tracker.add_individual(MessageId(ledger_id=1, entry_id=1))
    assert tracker.should_flush()
    [command] = tracker.flush(1)
    assert _ids(command) == [MessageId(ledger_id=1, entry_id=1)]


def test_reset_forgets_everything_waiting() -> None:
    tracker = AckGroupingTracker(group_time_s=10)
    tracker.add_cumulative(MessageId(ledger_id=1, entry_id=5))
    tracker.flush(1)
    tracker.add_cumulative(MessageId(ledger_id=1, entry_id=7))
    tracker.add_individual(MessageId(ledger_id=1, entry_id=9))
    tracker.add_batch_index(
        MessageId(ledger_id=1, entry_id=10, batch_index=0, batch_size=2), [False, True]
    )
    tracker.reset()
    assert not tracker.has_pending and len(tracker) == 0
    assert tracker.flush(1) == []
    assert not tracker.is_duplicate(
        MessageId(ledger_id=1, entry_id=1)
    )  # the sent position is forgotten too
    assert not tracker.is_duplicate(MessageId(ledger_id=1, entry_id=9))


def test_negative_acks_come_due_after_the_delay() -> None:
    tracker = NegativeAckTracker(delay_s=1.0)
    assert tracker.next_deadline() is None and tracker.pop_due(1e9) == []
    tracker.add(MessageId(ledger_id=1, entry_id=1), now=10.0)
    tracker.add(MessageId(ledger_id=1, entry_id=2), now=10.5)
    assert len(tracker) == 2
    assert tracker.next_deadline() == 11.0
    assert tracker.pop_due(10.99) == []
    assert tracker.pop_due(11.0) == [MessageId(ledger_id=1, entry_id=1)]
    assert tracker.next_deadline() == 11.5
    assert tracker.pop_due(20.0) == [MessageId(ledger_id=1, entry_id=2)]
    assert len(tracker) == 0 and tracker.next_deadline() is None


def test_negative_acks_of_one_batch_redeliver_its_entry_once() -> None:
    tracker = NegativeAckTracker(delay_s=0.5)
    tracker.add(MessageId(ledger_id=1, entry_id=4, batch_index=0, batch_size=3), now=0.0)
    tracker.add(MessageId(ledger_id=1, entry_id=4, batch_index=2, batch_size=3), now=0.0)
    assert len(tracker) == 1
    due = tracker.pop_due(1.0)
    assert due == [MessageId(ledger_id=1, entry_id=4)]
    assert due[0].batch_index() == -1


def test_clearing_negative_acks() -> None:
    tracker = NegativeAckTracker(delay_s=0.0)
    tracker.add(MessageId(ledger_id=1, entry_id=1), now=0.0)
    tracker.clear()
    assert len(tracker) == 0 and tracker.pop_due(10.0) == []


def test_unacked_messages_expire_after_the_timeout() -> None:
    tracker = UnackedMessageTracker(timeout_s=5.0)
    tracker.add(MessageId(ledger_id=1, entry_id=1), now=0.0)
    tracker.add(MessageId(ledger_id=1, entry_id=2), now=1.0)
    assert len(tracker) == 2
    assert tracker.pop_expired(4.99) == []
    assert tracker.pop_expired(5.0) == [MessageId(ledger_id=1, entry_id=1)]
    assert tracker.pop_expired(5.5) == []
    assert tracker.pop_expired(6.0) == [MessageId(ledger_id=1, entry_id=2)]
    assert len(tracker) == 0
    assert tracker.pop_expired(100.0) == []


def test_removed_messages_do_not_expire() -> None:
    tracker = UnackedMessageTracker(timeout_s=5.0)
    tracker.add(MessageId(ledger_id=1, entry_id=1), now=0.0)
    tracker.add(MessageId(ledger_id=1, entry_id=2), now=0.0)
    tracker.remove(MessageId(ledger_id=1, entry_id=1))
    tracker.remove(MessageId(ledger_id=7, entry_id=7))  # never added: no harm
    assert tracker.pop_expired(10.0) == [MessageId(ledger_id=1, entry_id=2)]


def test_a_message_handed_out_again_expires_from_the_second_time() -> None:
    tracker = UnackedMessageTracker(timeout_s=5.0)
    tracker.add(MessageId(ledger_id=1, entry_id=1), now=0.0)
    tracker.remove(MessageId(ledger_id=1, entry_id=1))
    tracker.add(MessageId(ledger_id=1, entry_id=1), now=3.0)
    assert tracker.pop_expired(5.0) == []
    assert tracker.pop_expired(8.0) == [MessageId(ledger_id=1, entry_id=1)]


def test_a_message_tracked_twice_expires_from_the_first_time() -> None:
    tracker = UnackedMessageTracker(timeout_s=5.0)
    tracker.add(MessageId(ledger_id=1, entry_id=1), now=0.0)
    tracker.add(MessageId(ledger_id=1, entry_id=1), now=3.0)
    assert len(tracker) == 1
    assert tracker.pop_expired(5.0) == [MessageId(ledger_id=1, entry_id=1)]
    assert tracker.pop_expired(8.0) == []


def test_batch_messages_are_tracked_by_entry() -> None:
    tracker = UnackedMessageTracker(timeout_s=1.0)
    tracker.add(MessageId(ledger_id=1, entry_id=1, batch_index=0, batch_size=2), now=0.0)
    tracker.add(MessageId(ledger_id=1, entry_id=1, batch_index=1, batch_size=2), now=0.0)
    assert len(tracker) == 1
    tracker.remove(MessageId(ledger_id=1, entry_id=1, batch_index=1, batch_size=2))
    assert len(tracker) == 0


def test_remove_up_to_clears_everything_at_or_before_a_position() -> None:
    tracker = UnackedMessageTracker(timeout_s=5.0)
    for ledger, entry in [(1, 3), (1, 5), (1, 6), (2, 0)]:
        tracker.add(MessageId(ledger_id=ledger, entry_id=entry), now=0.0)
    tracker.add(MessageId(ledger_id=0, entry_id=99, batch_index=1, batch_size=2), now=0.0)
    tracker.remove_up_to(MessageId(ledger_id=1, entry_id=5, batch_index=0, batch_size=4))
    assert len(tracker) == 2
    assert sorted(tracker.pop_expired(5.0)) == [
        MessageId(ledger_id=1, entry_id=6),
        MessageId(ledger_id=2, entry_id=0),
    ]


def test_remove_all_and_clear() -> None:
    tracker = UnackedMessageTracker(timeout_s=1.0)
    for i in range(5):
        tracker.add(MessageId(ledger_id=1, entry_id=i), now=0.0)
    tracker.remove_all([MessageId(ledger_id=1, entry_id=0), MessageId(ledger_id=1, entry_id=1)])
    assert len(tracker) == 3
    tracker.clear()
    assert len(tracker) == 0 and tracker.pop_expired(10.0) == []


@given(
    st.lists(
        st.tuples(st.sampled_from(["add", "remove"]), st.integers(0, 5), st.integers(0, 20)),
        max_size=40,
    )
)
def test_unacked_tracker_expires_exactly_what_a_model_says(
    ops: list[tuple[str, int, int]],
) -> None:
    """Times only move forward; an id expires timeout after it was first added (since its
    last removal) unless it was removed."""
    timeout = 5.0
    tracker = UnackedMessageTracker(timeout)
    model: dict[int, float] = {}
    now = 0.0
    expired_seen: list[int] = []
    for op, entry, step in ops:
        now += step / 4
        for mid in tracker.pop_expired(now):
            expired_seen.append(mid.entry_id())
        expected = sorted(e for e, t in model.items() if t + timeout <= now)
        assert sorted(expired_seen) == expected
        for e in expected:
            del model[e]
        expired_seen.clear()
        if op == "add":
            tracker.add(MessageId(ledger_id=1, entry_id=entry), now)
            model.setdefault(entry, now)
        else:
            tracker.remove(MessageId(ledger_id=1, entry_id=entry))
            model.pop(entry, None)
        assert len(tracker) == len(model)
