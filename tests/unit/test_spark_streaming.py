"""The streaming source's decisions, driven directly: offsets, what range each micro-batch
reads over a ledger chain, data loss, caps, and exactly-once over a chain that grows,
rolls over and is trimmed."""

from __future__ import annotations

import json
import logging
import random

import pytest
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows

from stripemq.errors import DataLossError, SparkSourceError
from stripemq.spark.options import SourceOptions
from stripemq.spark.planning import LedgerSpan, TopicPartitionRef
from stripemq.spark.streaming import (
    NOTHING,
    EntryRange,
    Partition,
    Position,
    SnapshotBehindError,
    StripeMQStreamReader,
    allocate,
    chain_end,
    decode_offset,
    default_read_limit,
    encode_offset,
    entry_cap,
    initial_offset,
    next_offset,
    normalize,
    pending,
    plan_batch,
    position_after,
    ref_of,
    take,
)

TOPIC = "persistent://public/default/orders"
ML = "public/default/persistent/orders"


def closed(ledger: int, entries: int) -> LedgerSpan:
    return LedgerSpan(
        ledger, entries - 1, entries * 100, 1_000 * ledger, 1_000 * ledger + 500, True
    )


def open_(ledger: int, lac: int) -> LedgerSpan:
    return LedgerSpan(ledger, lac, (lac + 1) * 100, 1_000 * ledger, 0, False)


def part(chain: list[LedgerSpan], name: str = ML) -> Partition:
    return Partition(ref_of(name), tuple(chain))


def spans(ranges: list[EntryRange]) -> list[tuple[int, int, int]]:
    return [(r.span.ledger_id, r.first, r.last) for r in ranges]


def read(start: Position, end: Position, chain: list[LedgerSpan], fail: bool = True) -> list:
    return spans(pending(start, end, chain, topic=TOPIC, fail_on_data_loss=fail))


# ---------------------------------------------------------------- offsets as JSON


def test_offsets_round_trip_as_sorted_json() -> None:
    offset = {"b/ns/persistent/t": Position(5, 3, False), "a/ns/persistent/t": NOTHING}
    encoded = encode_offset(offset)
    assert list(encoded) == ["a/ns/persistent/t", "b/ns/persistent/t"]
    assert encoded["b/ns/persistent/t"] == {"ledger": 5, "entry": 3, "closed": False}
    assert decode_offset(json.loads(json.dumps(encoded))) == offset


@pytest.mark.parametrize(
    "raw",
    [
        [1, 2],
        {"t": {"ledger": 1}},
        {"t": {"ledger": "1", "entry": 2}},
        {"t": {"ledger": -2, "entry": 0}},
    ],
)
def test_foreign_offsets_are_refused(raw: object) -> None:
    with pytest.raises(SparkSourceError):
        decode_offset(raw)


def test_ref_of_an_offset_key_names_the_partition() -> None:
    ref = ref_of("public/default/persistent/orders-partition-3")
    assert ref == TopicPartitionRef(
        "persistent://public/default/orders-partition-3",
        3,
        "public/default/persistent/orders-partition-3",
    )
    assert ref_of(ML).partition == -1


# ---------------------------------------------------------------- positions over a chain


def test_chain_end_is_the_last_ledger_up_to_its_lac() -> None:
    assert chain_end([]) == NOTHING
    assert chain_end([closed(1, 10), open_(2, 4)]) == Position(2, 4, False)
    assert chain_end([closed(1, 10)]) == Position(1, 9, True)
    # an empty ledger (a broker drops it when it loads the topic again) is never the end
    assert chain_end([closed(1, 10), open_(2, -1)]) == Position(1, 9, True)
    assert chain_end([closed(1, 10), closed(2, 0), open_(3, -1)]) == Position(1, 9, True)
    assert chain_end([closed(1, 0), open_(2, -1)]) == NOTHING


def test_normalize_moves_past_closed_ledgers_consumed_to_their_end() -> None:
    chain = [closed(1, 10), closed(2, 0), closed(3, 6), open_(4, 2)]
    # ledger 2 is closed and empty: done with ledger 1 means standing before ledger 3
    assert normalize(Position(1, 9), chain) == Position(3, -1, False)
    assert normalize(Position(3, 4), chain) == Position(3, 4, False)
    assert normalize(Position(4, 2), chain) == Position(4, 2, False)  # open: more may come
    assert normalize(Position(3, 4), chain[:3]) == Position(3, 4, False)
    assert normalize(Position(3, 5), chain[:3]) == Position(3, 5, True)  # last, closed
    assert normalize(Position(9, 0), chain) == Position(9, 0)  # unknown ledger: as is


def test_pending_reads_what_lies_after_start_up_to_end() -> None:
    chain = [closed(1, 10), closed(2, 0), closed(3, 6), open_(4, 7)]
    assert read(NOTHING, Position(4, 7), chain) == [(1, 0, 9), (3, 0, 5), (4, 0, 7)]
    assert read(Position(1, 3), Position(3, 2), chain) == [(1, 4, 9), (3, 0, 2)]
    assert read(Position(3, -1), Position(4, 1), chain) == [(3, 0, 5), (4, 0, 1)]
    assert read(Position(1, 9, True), Position(3, 0), chain) == [(3, 0, 0)]
    assert read(Position(4, 7), Position(4, 7), chain) == []
    assert read(Position(4, 7), Position(4, 3), chain) == []  # never backwards


def test_pending_reads_to_a_planned_end_beyond_a_stale_lac() -> None:
    ranges = pending(
        Position(4, 1), Position(4, 6), [open_(4, 3)], topic=TOPIC, fail_on_data_loss=True
    )
    assert spans(ranges) == [(4, 2, 6)]
    assert ranges[0].span.last_entry == 6  # so split_range does not clamp it


def test_a_vanished_ledger_consumed_to_its_close_is_no_loss() -> None:
    chain = [closed(5, 4), open_(6, 2)]  # ledgers 1..4 trimmed
    assert read(Position(3, 9, True), Position(6, 2), chain) == [(5, 0, 3), (6, 0, 2)]
    # nothing consumed at all: whatever exists now is the earliest
    assert read(NOTHING, Position(6, 2), chain) == [(5, 0, 3), (6, 0, 2)]


def test_a_vanished_ledger_not_consumed_to_its_close_is_data_loss() -> None:
    chain = [closed(5, 4), open_(6, 2)]
    with pytest.raises(DataLossError) as info:
        read(Position(3, 4, False), Position(6, 2), chain)
    assert TOPIC in str(info.value) and "ledger 3" in str(info.value)
    # (3, -1): nothing of ledger 3 was read, and it is gone
    with pytest.raises(DataLossError, match="ledger 3"):
        read(Position(3, -1, False), Position(6, 2), chain)


def test_fail_on_data_loss_false_skips_to_what_exists(caplog: pytest.LogCaptureFixture) -> None:
    chain = [closed(5, 4), open_(6, 2)]
    with caplog.at_level(logging.WARNING, logger="stripemq.spark.streaming"):
        got = read(Position(3, 4, False), Position(6, 2), chain, fail=False)
    assert got == [(5, 0, 3), (6, 0, 2)]
    assert "ledger 3" in caplog.text and TOPIC in caplog.text


def test_an_end_ledger_that_vanished_is_data_loss() -> None:
    # planned up to ledger 2 entry 4; ledgers 1 and 2 were trimmed before the batch ran
    chain = [open_(3, 0)]
    with pytest.raises(DataLossError, match="ledger 2"):
        read(Position(1, 9, True), Position(2, 4), chain)
    assert read(Position(1, 9, True), Position(2, 4), chain, fail=False) == []
    # a topic deleted altogether: no ledgers at all
    with pytest.raises(DataLossError, match="ledger 2"):
        read(Position(2, 1), Position(2, 4), [])


def test_a_ledger_list_older_than_the_end_is_behind_not_loss() -> None:
    """A lagging metadata server shows a chain that ends before the planned end: never
    read what it shows (that would skip the rest), never call it loss."""
    with pytest.raises(SnapshotBehindError, match="ledger 2"):
        read(Position(1, 3), Position(3, 0), [closed(1, 10), open_(2, 4)])
    with pytest.raises(SnapshotBehindError):
        read(Position(3, 1), Position(3, 4), [closed(1, 10), open_(2, 4)], fail=False)
    with pytest.raises(SnapshotBehindError):
        read(NOTHING, Position(3, 4), [])
    assert issubclass(SnapshotBehindError, SparkSourceError)
    assert not issubclass(SnapshotBehindError, DataLossError)


def test_an_idle_topic_survives_a_broker_dropping_its_empty_ledger() -> None:
    """Ledger 1 rolled over to an empty ledger 2 and the producer went idle; a broker
    restart (or unload) drops ledger 2 from the list and opens ledger 3. Wherever the
    stream stood, that is no loss."""
    before = {ML: part([closed(1, 10), open_(2, -1)])}
    after = {ML: part([closed(1, 10), open_(3, -1)])}
    for cap in (None, 5):
        end = next_offset(
            {ML: Position(1, 5)}, before, cap=cap, target=None, fail_on_data_loss=True
        )
        assert end == {ML: Position(1, 9, True)}  # not (2, -1)
        for start in (end, initial_offset(before, "latest")):
            again = next_offset(start, after, cap=cap, target=None, fail_on_data_loss=True)
            assert again == start
            assert (
                plan_batch(
                    start, again, after, max_entries=4, max_bytes=1 << 30, fail_on_data_loss=True
                )
                == []
            )
    # ledger 3 fills, and retention trims ledger 1 meanwhile: read ledger 3, nothing lost
    start = {ML: Position(1, 9, True)}
    later = {ML: part([open_(3, 2)])}
    end = next_offset(start, later, cap=None, target=None, fail_on_data_loss=True)
    splits = plan_batch(start, end, later, max_entries=4, max_bytes=1 << 30, fail_on_data_loss=True)
    assert [(s.ledger_id, s.first_entry, s.last_entry) for s in splits] == [(3, 0, 2)]
    # a closed empty ledger is skipped over, never stood on
    chain = [closed(1, 10), closed(2, 0), open_(3, -1)]
    assert normalize(Position(1, 9), chain) == Position(1, 9, True)


# ---------------------------------------------------------------- caps


def test_take_and_position_after() -> None:
    chain = [closed(1, 3), open_(2, 5)]
    ranges = pending(NOTHING, Position(2, 5), chain, topic=TOPIC, fail_on_data_loss=True)
    assert spans(take(ranges, 2)) == [(1, 0, 1)]
    assert spans(take(ranges, 5)) == [(1, 0, 2), (2, 0, 1)]
    assert spans(take(ranges, 100)) == spans(ranges)
    assert take(ranges, 0) == []
    assert position_after(NOTHING, take(ranges, 2)) == Position(1, 1, False)
    assert position_after(NOTHING, take(ranges, 3)) == Position(1, 2, True)
    assert position_after(Position(7, 7), []) == Position(7, 7)


def test_allocate_shares_a_cap_by_backlog() -> None:
    assert allocate({"a": 3, "b": 4}, 10) == {"a": 3, "b": 4}
    shares = allocate({"a": 90, "b": 10, "c": 0}, 10)
    assert shares == {"a": 9, "b": 1, "c": 0}
    # every partition with a backlog gets an entry when the cap has one for each
    assert allocate({"a": 100, "b": 100, "c": 100, "d": 100, "z": 1}, 5) == dict.fromkeys(
        "abcdz", 1
    )
    # fewer entries than partitions waiting: the largest backlogs first
    assert allocate({"a": 1, "b": 50, "c": 20}, 2) == {"a": 0, "b": 1, "c": 1}
    rng = random.Random(7)
    for _ in range(200):
        backlog = {f"p{i}": rng.randrange(0, 50) for i in range(rng.randrange(1, 6))}
        cap = rng.randrange(1, 60)
        shares = allocate(backlog, cap)
        assert sum(shares.values()) == min(cap, sum(backlog.values()))
        assert all(0 <= shares[k] <= backlog[k] for k in backlog)
        waiting = [k for k in backlog if backlog[k] > 0]
        if len(waiting) <= cap:
            assert all(shares[k] >= 1 for k in waiting), (backlog, cap, shares)


def test_a_small_cap_starves_no_partition() -> None:
    """Producers keep every partition's backlog up; each micro-batch takes 2 entries.
    Within a few batches every partition has been read, whatever its name."""
    backlog = {"a": 10, "b": 10, "c": 10}
    got = dict.fromkeys(backlog, 0)
    for _ in range(3):
        shares = allocate(backlog, 2)
        for name, share in shares.items():
            got[name] += share
            backlog[name] -= share - 1  # one more entry written meanwhile
    assert all(got[name] >= 1 for name in got), got


def test_read_limits() -> None:
    assert entry_cap(ReadAllAvailable()) is None
    assert entry_cap(ReadMaxRows(25)) == 25
    assert entry_cap(ReadMaxBytes(1 << 20)) is None
    opts = SourceOptions.parse({"metadata": "zk://h:1/x", "topic": TOPIC})
    assert default_read_limit(opts) == ReadAllAvailable()
    opts = SourceOptions.parse(
        {"metadata": "zk://h:1/x", "topic": TOPIC, "maxEntriesPerTrigger": "7"}
    )
    assert default_read_limit(opts) == ReadMaxRows(7)


# ---------------------------------------------------------------- offsets of a stream


def test_initial_offsets() -> None:
    parts = {
        "a": part([closed(1, 5), open_(2, 3)], "t/ns/persistent/a"),
        "b": part([], "t/ns/persistent/b"),
    }
    assert initial_offset(parts, "earliest") == {"a": NOTHING, "b": NOTHING}
    assert initial_offset(parts, "latest") == {"a": Position(2, 3), "b": NOTHING}
    # an idle topic whose open ledger is empty: the last entry before it
    parts = {"a": part([closed(1, 5), open_(2, -1)])}
    assert initial_offset(parts, "latest") == {"a": Position(1, 4, True)}


def test_next_offset_reads_everything_without_a_cap() -> None:
    parts = {"a": part([closed(1, 5), closed(2, 3), open_(3, -1)]), "b": part([open_(9, 4)])}
    start = {"a": Position(1, 2), "gone": Position(4, 4)}
    end = next_offset(start, parts, cap=None, target=None, fail_on_data_loss=True)
    # a: closed ledger 2 consumed, ledger 3 empty -> stays on ledger 2's last entry;
    # b: new, read from the start; gone: keeps its position
    assert end == {"a": Position(2, 2, True), "b": Position(9, 4), "gone": Position(4, 4)}


def test_next_offset_never_goes_back() -> None:
    parts = {"a": part([open_(3, 2)])}  # a LAC read lower than one seen before
    end = next_offset({"a": Position(3, 5)}, parts, cap=None, target=None, fail_on_data_loss=True)
    assert end == {"a": Position(3, 5)}


def test_next_offset_with_a_cap_shares_entries_by_backlog() -> None:
    parts = {"a": part([closed(1, 30), open_(2, 59)]), "b": part([open_(7, 9)])}
    start = {"a": NOTHING, "b": NOTHING}
    end = next_offset(start, parts, cap=10, target=None, fail_on_data_loss=True)
    # backlog 90 and 10: 9 and 1 entries
    assert end == {"a": Position(1, 8), "b": Position(7, 0)}
    end = next_offset(
        {"a": Position(1, 25), "b": Position(7, 9)},
        parts,
        cap=10,
        target=None,
        fail_on_data_loss=True,
    )
    assert end == {"a": Position(2, 5), "b": Position(7, 9)}


def test_next_offset_stops_at_the_available_now_target() -> None:
    parts = {"a": part([closed(1, 10), open_(2, 50)]), "new": part([open_(8, 3)])}
    target = {"a": Position(1, 9, False)}  # ledger 1 was open, LAC 9, when the run began
    end = next_offset({"a": Position(1, 2)}, parts, cap=None, target=target, fail_on_data_loss=True)
    assert end == {"a": Position(2, -1), "new": NOTHING}
    again = next_offset(end, parts, cap=None, target=target, fail_on_data_loss=True)
    assert again == end  # the run is over: Spark sees start == latest
    capped = next_offset({"a": Position(1, 2)}, parts, cap=4, target=target, fail_on_data_loss=True)
    assert capped["a"] == Position(1, 6)


def test_next_offset_under_a_cap_passes_lost_ranges_when_allowed() -> None:
    parts = {"a": part([open_(6, 1)])}  # ledger 5 (half read) is gone
    with pytest.raises(DataLossError, match="ledger 5"):
        next_offset({"a": Position(5, 3)}, parts, cap=10, target=None, fail_on_data_loss=True)
    end = next_offset({"a": Position(5, 3)}, parts, cap=10, target=None, fail_on_data_loss=False)
    assert end == {"a": Position(6, 1)}


def test_plan_batch_cuts_each_partitions_range_into_splits() -> None:
    parts = {
        "a": part([closed(1, 30), open_(2, 59)], "t/ns/persistent/a"),
        "b": part([open_(7, 9)], "t/ns/persistent/b"),
    }
    start = {"a": Position(1, 19)}
    end = {"a": Position(2, 24), "b": Position(7, 9)}
    splits = plan_batch(
        start, end, parts, max_entries=10, max_bytes=1 << 30, fail_on_data_loss=True
    )
    got = [(s.ref.topic, s.ledger_id, s.first_entry, s.last_entry) for s in splits]
    assert got == [
        ("persistent://t/ns/a", 1, 20, 29),
        ("persistent://t/ns/a", 2, 0, 8),
        ("persistent://t/ns/a", 2, 9, 16),
        ("persistent://t/ns/a", 2, 17, 24),
        ("persistent://t/ns/b", 7, 0, 9),
    ]
    assert (
        plan_batch(end, end, parts, max_entries=10, max_bytes=1 << 30, fail_on_data_loss=True) == []
    )


def test_plan_batch_reports_a_topic_that_is_gone() -> None:
    with pytest.raises(DataLossError, match="persistent://t/ns/a"):
        plan_batch(
            {},
            {"t/ns/persistent/a": Position(2, 3)},
            {},
            max_entries=10,
            max_bytes=1,
            fail_on_data_loss=True,
        )


def test_every_entry_exactly_once_while_the_chain_grows_rolls_and_trims() -> None:
    """A model: a writer appends, rolls over, brokers reload the topic (dropping empty
    ledgers) and retention trims consumed ledgers; the stream runs micro-batches (capped
    or not) and restarts from its last offset. Every entry is read once, in order."""
    rng = random.Random(16)
    for run in range(30):
        chain: list[LedgerSpan] = [open_(1, -1)]
        next_ledger = 2
        written: list[tuple[int, int]] = []
        read_so_far: list[tuple[int, int]] = []
        offset: dict[str, Position] = {ML: NOTHING}
        cap = rng.choice([None, 1, 3, 7])
        for _step in range(60):
            action = rng.random()
            if action < 0.5:  # append entries
                last = chain[-1]
                count = rng.randrange(1, 6)
                written += [(last.ledger_id, last.last_entry + 1 + i) for i in range(count)]
                chain[-1] = open_(last.ledger_id, last.last_entry + count)
            elif action < 0.6:  # roll over
                last = chain[-1]
                chain[-1] = closed(last.ledger_id, last.entries)
                chain.append(open_(next_ledger, -1))
                next_ledger += rng.choice([1, 3])  # ids shared with other topics
            elif action < 0.65:  # a broker loads the topic again: empty ledgers dropped
                last = chain[-1]
                chain[-1] = closed(last.ledger_id, last.entries)
                chain = [span for span in chain if span.entries > 0]
                chain.append(open_(next_ledger, -1))
                next_ledger += rng.choice([1, 3])
            elif action < 0.75 and len(chain) > 1:  # trim a ledger the stream has consumed
                first = chain[0]
                pos = offset[ML]
                if pos.ledger > first.ledger_id or (pos.ledger == first.ledger_id and pos.closed):
                    chain.pop(0)
            else:  # a micro-batch
                parts = {ML: part(chain)}
                end = next_offset(offset, parts, cap=cap, target=None, fail_on_data_loss=True)
                splits = plan_batch(
                    offset, end, parts, max_entries=4, max_bytes=1 << 30, fail_on_data_loss=True
                )
                for s in splits:
                    read_so_far += [
                        (s.ledger_id, e) for e in range(s.first_entry, s.last_entry + 1)
                    ]
                offset = decode_offset(json.loads(json.dumps(encode_offset(end))))
        # drain
        parts = {ML: part(chain)}
        for _ in range(len(written) + 2):
            end = next_offset(offset, parts, cap=cap, target=None, fail_on_data_loss=True)
            for s in plan_batch(
                offset, end, parts, max_entries=4, max_bytes=1 << 30, fail_on_data_loss=True
            ):
                read_so_far += [(s.ledger_id, e) for e in range(s.first_entry, s.last_entry + 1)]
            if end == offset:
                break
            offset = end
        assert read_so_far == written, f"run {run}"


# ---------------------------------------------------------------- the reader object


def test_stream_reader_reads_splits_and_commits_nothing() -> None:
    opts = SourceOptions.parse(
        {"metadata": "zk://h:1/x", "topic": TOPIC, "maxEntriesPerTrigger": "5"}
    )
    reader = StripeMQStreamReader(opts)
    assert reader.getDefaultReadLimit() == ReadMaxRows(5)
    reader.commit({ML: Position(1, 1).to_json()})  # no-op, no I/O
    assert list(reader.read(InputPartition(None))) == []  # Spark's placeholder partition
    assert reader.partitions({ML: Position(1, 1).to_json()}, {ML: Position(1, 1).to_json()}) == []


def test_a_micro_batch_reads_the_ledger_lists_again_while_they_lag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stale = {ML: part([closed(1, 10), open_(2, 4)])}
    fresh = {ML: part([closed(1, 10), closed(2, 6), open_(3, 2)])}
    answers = [stale, stale, fresh]
    calls: list[list[str]] = []

    async def fetch(options: SourceOptions, extra: list[str]) -> dict[str, Partition]:
        calls.append(list(extra))
        return answers.pop(0)

    monkeypatch.setattr("stripemq.spark.streaming.fetch_partitions", fetch)
    opts = SourceOptions.parse({"metadata": "zk://h:1/x", "topic": TOPIC})
    reader = StripeMQStreamReader(opts)
    got = reader.partitions(
        encode_offset({ML: Position(1, 9)}), encode_offset({ML: Position(3, 2)})
    )
    assert [(p.split.ledger_id, p.split.first_entry, p.split.last_entry) for p in got] == [
        (2, 0, 5),
        (3, 0, 2),
    ]
    assert calls == [[ML], [ML], [ML]]
