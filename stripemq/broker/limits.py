"""Bounds on every size and count a client chooses, checked before the broker acts on them.

A request that breaks a bound is refused with a ``BrokerError`` carrying the protocol's
code, for that request only; the connection goes on. The checks are sans-IO and look only
at lengths and values of the decoded command (``len`` of a repeated field costs nothing),
so a hostile number never turns into an allocation: an ACK claiming ``batch_size=2**31-1``
is refused before anyone builds its 2**31 batch indexes.

Bounds, with their Pulsar counterparts where Pulsar has one:

- messages in a batch entry (batch-index acks, PIP-54): ``MAX_BATCH_SIZE``, the most the
  cursor keeps bits for; an ack set has at most ``ceil(batch_size / 64)`` words, since
  Java's ``BitSet.toLongArray`` leaves out trailing clear words;
- message ids in one ACK or REDELIVER: ten times the clients' ack group size (1000);
- STICKY hash ranges per Key_Shared consumer: each within ``[0, 65536)`` and disjoint,
  checked by sorting (O(n log n));
- consumer metadata: Pulsar's ``maxConsumerMetadataSize`` (1024 characters of keys and
  values, refused with MetadataError); producer metadata and subscription properties
  likewise, with their own sizes, and a count bound since empty keys have no size;
- producer, consumer and subscription names;
- producers and consumers per connection;
- ledger and entry ids: Java longs, so ``0 <= id < 2**63``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stripemq.broker.key_shared import disjoint_ranges
from stripemq.errors import BrokerError, ConsumerAssignError
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.ack_set import MAX_BATCH_SIZE, words_for

MAX_ID = (1 << 63) - 1  # ledger and entry ids are Java longs, never negative
MAX_PERMITS = (1 << 31) - 1  # a consumer's permits are a Java int in Pulsar
# A seek or reader start names these ids as "earliest" (-1 as unsigned) or "latest".
_SENTINEL_IDS = frozenset({(1 << 64) - 1, MAX_ID})


@dataclass(frozen=True)
class BrokerLimits:
    """The bounds the broker holds clients to (see the module docstring)."""

    max_batch_size: int = MAX_BATCH_SIZE
    max_message_ids_per_ack: int = 10_000
    max_message_ids_per_redeliver: int = 10_000
    max_hash_ranges_per_consumer: int = 1_024
    max_properties: int = 64  # entries in producer or consumer metadata, subscription props
    # Characters of keys and values; the first is Pulsar's maxConsumerMetadataSize.
    max_consumer_metadata_size: int = 1_024
    max_subscription_properties_size: int = 1_024
    max_producer_metadata_size: int = 16 * 1_024
    max_name_length: int = 1_024  # producer, consumer and subscription names, characters
    max_producers_per_connection: int = 10_000
    max_consumers_per_connection: int = 10_000

    def __post_init__(self) -> None:
        if not 0 < self.max_batch_size <= MAX_BATCH_SIZE:
            raise ValueError(f"max_batch_size must be in 1..{MAX_BATCH_SIZE}")

    @property
    def max_ack_set_words(self) -> int:
        """Words in the ack set of the largest batch allowed."""
        return words_for(self.max_batch_size)


DEFAULT_LIMITS = BrokerLimits()


# ------------------------------------------------------------------ ids


def check_id(kind: str, value: int) -> None:
    """``value`` is a ledger or entry id a cursor can hold (a non-negative Java long)."""
    if not 0 <= value <= MAX_ID:
        raise BrokerError(pb.NotAllowedError, f"{kind} id {value} is outside 0..2**63-1")


def check_message_id(message_id: pb.MessageIdData, limits: BrokerLimits = DEFAULT_LIMITS) -> None:
    """A message id a client acknowledges or gives back: ids, batch size and ack set."""
    check_id("ledger", message_id.ledgerId)
    check_id("entry", message_id.entryId)
    if message_id.HasField("batch_index") and not (
        -1 <= message_id.batch_index < limits.max_batch_size
    ):
        raise BrokerError(
            pb.NotAllowedError,
            f"batch index {message_id.batch_index} is outside -1..{limits.max_batch_size - 1}",
        )
    size = message_id.batch_size if message_id.HasField("batch_size") else 0
    if not 0 <= size <= limits.max_batch_size:
        raise BrokerError(
            pb.NotAllowedError,
            f"batch size {size} is outside 0..{limits.max_batch_size}",
        )
    words = len(message_id.ack_set)
    most = words_for(size) if size else limits.max_ack_set_words
    if words > most:
        raise BrokerError(
            pb.NotAllowedError,
            f"an ack set of {words} words for a batch of at most "
            f"{size or limits.max_batch_size} messages",
        )


def check_seek_id(message_id: pb.MessageIdData) -> None:
    """A seek's or reader's start: an entry, or the clients' earliest/latest sentinels."""
    for kind, value in (("ledger", message_id.ledgerId), ("entry", message_id.entryId)):
        if value not in _SENTINEL_IDS:
            check_id(kind, value)


# ------------------------------------------------------------------ consuming


def check_ack(ack: pb.CommandAck, limits: BrokerLimits = DEFAULT_LIMITS) -> None:
    """An ACK: how many message ids, and each of them."""
    count = len(ack.message_id)
    if count > limits.max_message_ids_per_ack:
        raise BrokerError(
            pb.NotAllowedError,
            f"an ack of {count} message ids (at most {limits.max_message_ids_per_ack})",
        )
    if len(ack.properties) > limits.max_properties:
        raise BrokerError(
            pb.NotAllowedError,
            f"an ack with {len(ack.properties)} properties (at most {limits.max_properties})",
        )
    for message_id in ack.message_id:
        check_message_id(message_id, limits)


def check_redeliver(
    command: pb.CommandRedeliverUnacknowledgedMessages, limits: BrokerLimits = DEFAULT_LIMITS
) -> None:
    """A REDELIVER_UNACKNOWLEDGED_MESSAGES: how many message ids, and each of them."""
    count = len(command.message_ids)
    if count > limits.max_message_ids_per_redeliver:
        raise BrokerError(
            pb.NotAllowedError,
            f"a redelivery of {count} message ids (at most {limits.max_message_ids_per_redeliver})",
        )
    for message_id in command.message_ids:
        check_message_id(message_id, limits)


def permits_to_grant(current: int, asked: int) -> int:
    """How many of the ``asked`` permits (a FLOW) a consumer holding ``current`` gets:
    all, up to ``MAX_PERMITS`` held."""
    return max(0, min(asked, MAX_PERMITS - current))


def check_hash_ranges(
    ranges: Sequence[pb.IntRange], limits: BrokerLimits = DEFAULT_LIMITS
) -> list[tuple[int, int]]:
    """A STICKY consumer's hash ranges, sorted: few enough, in bounds, disjoint.

    Refused with ConsumerAssignError, as Pulsar refuses overlapping ranges. Overlap with
    other consumers' ranges is the dispatcher's to check (it knows them).
    """
    if len(ranges) > limits.max_hash_ranges_per_consumer:
        raise BrokerError(
            pb.ConsumerAssignError,
            f"{len(ranges)} hash ranges (at most {limits.max_hash_ranges_per_consumer})",
        )
    try:
        return disjoint_ranges([(r.start, r.end) for r in ranges])
    except ConsumerAssignError as exc:
        raise BrokerError(pb.ConsumerAssignError, str(exc)) from None


def _check_room(kind: str, count: int, most: int) -> None:
    """Room for one more producer or consumer on a connection that has ``count``."""
    if count >= most:
        raise BrokerError(
            pb.NotAllowedError, f"{count} {kind} on this connection already (at most {most})"
        )


def check_subscribe(
    command: pb.CommandSubscribe, consumers: int, limits: BrokerLimits = DEFAULT_LIMITS
) -> None:
    """A SUBSCRIBE on a connection that already has ``consumers`` consumers."""
    _check_room("consumers", consumers, limits.max_consumers_per_connection)
    _check_name("subscription", command.subscription, limits)
    _check_name("consumer", command.consumer_name, limits)
    _check_properties(
        "consumer metadata",
        command.metadata,
        limits.max_consumer_metadata_size,
        limits,
        pb.MetadataError,
    )
    _check_properties(
        "subscription properties",
        command.subscription_properties,
        limits.max_subscription_properties_size,
        limits,
        pb.MetadataError,
    )
    if command.HasField("start_message_id"):
        check_seek_id(command.start_message_id)
    if command.HasField("keySharedMeta"):
        meta = command.keySharedMeta
        if meta.keySharedMode == pb.STICKY:
            check_hash_ranges(meta.hashRanges, limits)
        elif len(meta.hashRanges) > limits.max_hash_ranges_per_consumer:
            raise BrokerError(
                pb.ConsumerAssignError,
                f"{len(meta.hashRanges)} hash ranges "
                f"(at most {limits.max_hash_ranges_per_consumer})",
            )


# ------------------------------------------------------------------ producing


def check_send(metadata: pb.MessageMetadata | None, limits: BrokerLimits = DEFAULT_LIMITS) -> None:
    """A SEND's entry: consumers' permits and ack sets count the messages of its batch."""
    batch = metadata.num_messages_in_batch if metadata is not None else 1
    if batch > limits.max_batch_size:
        raise BrokerError(
            pb.NotAllowedError, f"a batch of {batch} messages (at most {limits.max_batch_size})"
        )


def messages_in_send(command: pb.CommandSend, limits: BrokerLimits = DEFAULT_LIMITS) -> int:
    """The messages a SEND counts for, in stats and against a publish rate: what its client
    says (``num_messages``), within ``1..max_batch_size`` (the most a batch entry may hold,
    ``check_send``), so that no number a client writes can run a rate limiter into a debt
    that pauses the topic's producers for longer than one batch's worth."""
    return min(max(command.num_messages, 1), limits.max_batch_size)


def check_producer(
    command: pb.CommandProducer, producers: int, limits: BrokerLimits = DEFAULT_LIMITS
) -> None:
    """A PRODUCER on a connection that already has ``producers`` producers."""
    _check_room("producers", producers, limits.max_producers_per_connection)
    _check_name("producer", command.producer_name, limits)
    _check_name("subscription", command.initial_subscription_name, limits)
    _check_properties(
        "producer metadata",
        command.metadata,
        limits.max_producer_metadata_size,
        limits,
        pb.MetadataError,
    )


# ------------------------------------------------------------------ shared


def _check_name(kind: str, name: str, limits: BrokerLimits) -> None:
    if len(name) > limits.max_name_length:
        raise BrokerError(
            pb.NotAllowedError,
            f"a {kind} name of {len(name)} characters (at most {limits.max_name_length})",
        )


def _check_properties(
    kind: str,
    properties: Sequence[pb.KeyValue],
    max_size: int,
    limits: BrokerLimits,
    code: pb.ServerError,
) -> None:
    """Count first (free), then characters of keys and values, stopping at the bound."""
    if len(properties) > limits.max_properties:
        raise BrokerError(
            code, f"{kind} of {len(properties)} entries (at most {limits.max_properties})"
        )
    size = 0
    for kv in properties:
        size += len(kv.key) + len(kv.value)
        if size > max_size:
            raise BrokerError(code, f"{kind} of more than {max_size} characters")
