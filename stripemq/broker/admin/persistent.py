"""``/admin/v2/persistent``: Pulsar's persistent topics resource.

Namespace level (``{tenant}/{namespace}``; 404 for one that does not exist):

- ``GET``: the namespace's topics, non-partitioned ones and partitions by name;
  ``GET .../partitioned``: its partitioned topics.

Topic level (``.../{topic}``):

- ``PUT`` creates a non-partitioned topic (409 if it exists, partitioned or not; a
  ``<t>-partition-<n>`` name only as a partition of partitioned topic ``t``: 412 for ``n``
  at or above its count, 409 without one, Pulsar's validateNonPartitionTopicName);
  ``DELETE [?force]`` deletes it with its cursors and ledgers (412 while producers or
  consumers are connected, unless forced; 409 for a partitioned topic). A topic that does
  not exist answers 404 before anything is written (no bundle is taken for it).
- ``/partitions``: ``PUT`` declares a partitioned topic and creates its partitions, with a
  bare int body or Pulsar's PartitionedTopicMetadata (``{"partitions", "properties"}``, what
  the Java admin sends with properties); 406 outside 1 to ``MAX_PARTITIONS``. ``GET``
  answers ``{"partitions": N}`` (with its ``properties`` if any; 0 for a non-partitioned
  topic, 404 for none); ``POST`` grows it (406 for 0 or less, 422 for fewer partitions or
  more than ``MAX_PARTITIONS``, 409 if not partitioned; new partitions get partition 0's
  durable subscriptions at their start, as Pulsar copies them); ``DELETE [?force]`` deletes
  every partition (without ``force``, none while one has clients: 412), then the
  declaration.
- ``/stats``, ``/internalStats``: ``stripemq.broker.stats``' TopicStats and
  PersistentTopicInternalStats; ``/partitioned-stats[?perPartition]`` and
  ``/partitioned-internalStats`` gather the partitions' from whichever broker serves each.
- ``PUT /unload``, ``POST /terminate`` (answers the last message id; ``/terminate/partitions``
  each partition's), ``POST /all_subscription/expireMessages/{seconds}``, ``GET /lastMessageId``
  (``{"ledgerId", "entryId", "partitionIndex"}``, ``batchIndex`` for a batch),
  ``GET /subscriptions``.
- ``/compaction``: ``PUT`` starts a compaction (each partition's, for a partitioned topic;
  409 "Compaction already in progress" while one runs), ``GET`` answers the last one's
  status (``{"status": NOT_RUN|RUNNING|SUCCESS|ERROR, "lastError"}``).
- ``/subscription/{sub}``: ``PUT`` creates it (optional body: a message id or Pulsar's
  ResetCursorData; latest by default; 409 if it exists; a topic that does not exist yet is
  made first when the auto-creation policy allows it, partitioned if it says so, as
  Pulsar's internalCreateSubscription), ``DELETE [?force]`` (412 with consumers, unless
  forced); ``POST .../skip_all``, ``.../skip/{n}``, ``.../expireMessages/{seconds}``,
  ``.../expireMessages`` (message-id body: everything up to it, or before it with
  ``isExcluded``; 405 on a partitioned topic), ``.../resetcursor/{timestampMs}``,
  ``.../resetcursor`` (message-id body); ``GET .../position/{n}``: the n-th
  unacknowledged entry (1-based) as Pulsar's peek answers it: the (decompressed) payload,
  metadata in ``X-Pulsar-*`` headers; a batch entry whole, with
  ``X-Pulsar-num-batch-message`` (the admin client splits it).
- ``GET /examinemessage?initialPosition=earliest|latest&messagePosition=n`` (examine-message:
  the n-th entry from that end, latest and 1 by default; 412 on an empty topic) and
  ``GET /ledger/{ledgerId}/entry/{entryId}`` (get-message-by-id) answer an entry as peek
  does; 404 "Message not found" for none, 405 on a partitioned topic.

A topic operation is served by the broker owning the topic's bundle: another broker answers
307 with the same path and query on the owner's web service; a bundle nobody owns is
assigned as a lookup would (here when ``?authoritative`` or least loaded, else redirected to
the least-loaded broker with ``authoritative=true``). Operations on a partitioned topic as a
whole are fanned out over HTTP to each partition's own resource, wherever it is served.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from aiohttp import web

from stripemq.broker.admin.rest import (
    AdminContext,
    Forwarder,
    RestError,
    conflict,
    flag,
    namespace_of,
    no_content,
    not_found,
    ok_json,
    precondition_failed,
    read_json,
    redirect_to_broker,
    serving_broker,
    topic_of,
    topic_url,
)
from stripemq.broker.compaction import CompactionInProgressError
from stripemq.broker.message_expiry import entry_before, expire_cursor_to, expire_messages
from stripemq.broker.names import DEDUPLICATION_CURSOR
from stripemq.broker.namespaces import check_namespace, stored_topics
from stripemq.broker.partitions import (
    MAX_PARTITIONS,
    PartitionedTopicExistsError,
    PartitionedTopicMetadata,
    create_partitioned_topic,
    partition_count,
    partitions_path,
    read_partitioned_metadata,
    update_partition_count,
)
from stripemq.broker.policies import MAX_INT, parse_int
from stripemq.broker.schema import schema_id
from stripemq.broker.service import BrokerService
from stripemq.broker.stats import internal_stats, partitioned_stats, topic_stats
from stripemq.broker.topic import PersistentTopic, Subscription
from stripemq.broker.topic_policies import delete_topic_policies
from stripemq.errors import BadVersionError, NodeExistsError, NotFoundError, StripeMQError
from stripemq.managed_ledger.ledger_list import LedgerList, child_name, managed_ledger_path
from stripemq.managed_ledger.position import Position
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.compression import decompress
from stripemq.proto.frames import parse_entry
from stripemq.proto.initial_position import InitialPosition
from stripemq.proto.topic_name import TopicName

log = logging.getLogger(__name__)

# Message ids: earliest is (-1, -1); latest is Long.MAX (what the Java admin client sends for
# MessageId.latest).
_LATEST = (1 << 63) - 1


# ------------------------------------------------------------------ sans-IO decisions


@dataclass(frozen=True)
class MessageIdBody:
    """A message id as the admin API takes it (MessageIdImpl or ResetCursorData JSON)."""

    ledger_id: int
    entry_id: int
    partition_index: int = -1
    batch_index: int = -1
    excluded: bool = False

    @property
    def earliest(self) -> bool:
        return self.ledger_id < 0

    @property
    def latest(self) -> bool:
        return self.ledger_id >= _LATEST or self.entry_id >= _LATEST


def _int_field(doc: Mapping[str, Any], name: str, default: int | None = None) -> int:
    value = doc.get(name, default)
    if value is None:
        raise precondition_failed(f"the message id lacks {name!r}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise precondition_failed(f"{name!r} must be an integer, not {value!r}")
    if not -1 <= value <= (1 << 64) - 1:
        raise precondition_failed(f"{name!r} is out of range: {value}")
    return value


def parse_message_id(doc: object) -> MessageIdBody:
    """The message id of a request body; 412 for anything else."""
    if not isinstance(doc, Mapping):
        raise precondition_failed("the body must be a message id JSON object")
    excluded = doc.get("isExcluded", False)
    if not isinstance(excluded, bool):
        raise precondition_failed("'isExcluded' must be a boolean")
    ledger = _int_field(doc, "ledgerId")
    entry = _int_field(doc, "entryId")
    if ledger == (1 << 64) - 1 or entry == (1 << 64) - 1:  # -1 sent unsigned: earliest
        ledger, entry = -1, -1
    return MessageIdBody(
        ledger_id=ledger,
        entry_id=entry,
        partition_index=_int_field(doc, "partitionIndex", -1),
        batch_index=_int_field(doc, "batchIndex", -1),
        excluded=excluded,
    )


def target_position(message_id: MessageIdBody, first: Position, end: Position) -> Position:
    """Where a cursor is put for ``message_id``: the entry itself (the one after it when
    excluded), ``first`` for earliest and ``end`` (the write position) for latest."""
    if message_id.latest:
        return end
    if message_id.earliest:
        return first
    position = Position(message_id.ledger_id, message_id.entry_id)
    if message_id.excluded:
        position = position.next()
    return position


def message_id_json(position: Position, partition_index: int) -> dict[str, int]:
    """Pulsar's MessageIdImpl JSON."""
    return {
        "ledgerId": position.ledger_id,
        "entryId": position.entry_id,
        "partitionIndex": partition_index,
    }


def format_time(ms: int) -> str:
    """Pulsar's ``DateFormatter``: ISO 8601 with milliseconds (here in UTC)."""
    stamp = datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def peek_response(position: Position, entry: bytes) -> tuple[dict[str, str], bytes]:
    """Headers and body of Pulsar's peek for a stored entry: the payload decompressed (a
    batch entry's whole batch payload), its metadata in ``X-Pulsar-*`` headers.

    Raises ``RestError`` (500) for an entry whose metadata or payload cannot be read."""
    metadata, payload, problem = parse_entry(entry)
    if metadata is None:
        raise RestError(500, f"entry {position} is unreadable: {problem}")
    try:
        body = decompress(metadata.compression, payload, metadata.uncompressed_size)
    except StripeMQError as exc:
        raise RestError(500, f"entry {position} cannot be decompressed: {exc}") from None
    properties = {kv.key: kv.value for kv in metadata.properties}
    headers = {
        "X-Pulsar-Message-ID": str(position),
        "X-Pulsar-publish-time": format_time(metadata.publish_time),
        "X-Pulsar-producer-name": metadata.producer_name,
        "X-Pulsar-sequence-id": str(metadata.sequence_id),
        "X-Pulsar-PROPERTY": json.dumps(properties, separators=(",", ":")),
        "X-Pulsar-Is-Encrypted": "true" if metadata.encryption_keys else "false",
        "X-Pulsar-uncompressed-size": str(len(body)),
    }
    for key, value in properties.items():
        if _header_safe(key) and _header_safe(value):
            headers[f"X-Pulsar-PROPERTY-{key}"] = value
    if metadata.event_time:
        headers["X-Pulsar-event-time"] = format_time(metadata.event_time)
    if metadata.HasField("deliver_at_time"):
        headers["X-Pulsar-deliver-at-time"] = format_time(metadata.deliver_at_time)
    if metadata.HasField("partition_key") and _header_safe(metadata.partition_key):
        headers["X-Pulsar-partition-key"] = metadata.partition_key
    if metadata.compression != pb.NONE:
        headers["X-Pulsar-compression"] = pb.CompressionType.Name(metadata.compression)
    if metadata.HasField("num_messages_in_batch"):
        headers["X-Pulsar-num-batch-message"] = str(metadata.num_messages_in_batch)
        headers["X-Pulsar-batch-size"] = str(len(payload))
    if metadata.HasField("null_value") and metadata.null_value:
        headers["X-Pulsar-null-value"] = "true"
    if not _header_safe(headers["X-Pulsar-producer-name"]):
        headers["X-Pulsar-producer-name"] = quote(metadata.producer_name)
    return headers, body


def _header_safe(text: str) -> bool:
    """Whether ``text`` can travel as an HTTP header name or value unchanged."""
    return text.isprintable() and text.isascii() and "\r" not in text and "\n" not in text


def parse_partitioned_metadata(body: object) -> PartitionedTopicMetadata:
    """A partitioned topic's creation body: a bare partition count (what pulsar-admin
    sends) or Pulsar's PartitionedTopicMetadata (``{"partitions": n, "properties": {...}}``,
    what the Java admin client sends with properties); 412 for anything else."""
    if not isinstance(body, Mapping):
        return PartitionedTopicMetadata(parse_int(body, "the number of partitions", low=-MAX_INT))
    properties = body.get("properties") or {}
    if not isinstance(properties, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in properties.items()
    ):
        raise precondition_failed(f"properties must map names to strings, not {properties!r}")
    count = parse_int(body.get("partitions"), "partitions", low=-MAX_INT)
    return PartitionedTopicMetadata(count, dict(properties))


def check_partitions_to_create(count: int) -> None:
    """Pulsar's bounds of a new partitioned topic: 406 NOT_ACCEPTABLE outside 1 to
    ``MAX_PARTITIONS``."""
    if count <= 0:
        raise RestError(406, "Number of partitions should be more than 0")
    if count > MAX_PARTITIONS:
        raise RestError(
            406, f"Number of partitions should be less than or equal to {MAX_PARTITIONS}"
        )


def check_partitions_update(current: int, wanted: int) -> None:
    """Pulsar's bounds of a partition count change (a count of 0 or less is refused, 406,
    before anything is read): 422 for fewer than now, or more than ``MAX_PARTITIONS``."""
    if wanted < current:
        raise RestError(
            422, f"Expect partitions {wanted} can't less than current partitions {current}."
        )
    if wanted > MAX_PARTITIONS:
        raise RestError(
            422,
            f"Expect partitions {wanted} greater than maximum partitions per topic "
            f"{MAX_PARTITIONS}",
        )


def has_clients(stats: object) -> bool:
    """Whether a topic's stats (TopicStats JSON) show a producer or a consumer."""
    if not isinstance(stats, Mapping):
        return False
    subscriptions = stats.get("subscriptions") or {}
    return bool(stats.get("publishers")) or any(
        isinstance(sub, Mapping) and sub.get("consumers") for sub in subscriptions.values()
    )


def query_int(request: web.Request, name: str, default: int) -> int:
    """An integer query parameter (``?messagePosition=3``); 412 if it is not one."""
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise precondition_failed(f"{name} must be an integer, not {raw!r}") from None


def path_int(request: web.Request, name: str, what: str) -> int:
    raw = request.match_info[name]
    try:
        return int(raw)
    except ValueError:
        raise precondition_failed(f"{what} must be an integer, not {raw!r}") from None


# ------------------------------------------------------------------ the resource


class PersistentTopics:
    """The handlers, on one broker's admin context."""

    def __init__(self, ctx: AdminContext) -> None:
        self.ctx = ctx

    # ------------------------------------------------------------------ names and owners

    async def _owner(self, request: web.Request, topic: TopicName) -> BrokerService:
        """This broker's service if it serves ``topic``'s bundle (taking the bundle if
        nobody has it and a lookup would pick this broker); otherwise 307 to the broker
        that serves it, or is to (then with ``authoritative=true``: it takes the bundle)."""
        owner, picked = await serving_broker(self.ctx, request, topic)
        service = self.ctx.service
        if owner.service_url == service.service_url:
            return service
        if not owner.web_url:
            raise RestError(503, f"{topic} is served by a broker without a web service")
        raise redirect_to_broker(owner, request, authoritative=picked)

    async def _partitions(self, topic: TopicName) -> int:
        if topic.partition_index >= 0:
            return 0
        return await partition_count(self.ctx.store, topic)

    async def _exists(self, topic: TopicName) -> bool:
        """Whether the non-partitioned topic (or partition) exists: made, or a partition of
        a partitioned topic. Reads only: asked before any bundle is taken, so that nothing
        is written for a topic that does not exist."""
        if await self.ctx.store.exists(managed_ledger_path(topic.managed_ledger_name)):
            return True
        index = topic.partition_index
        return 0 <= index < await partition_count(self.ctx.store, topic)

    async def _check_exists(self, topic: TopicName) -> None:
        if not await self._exists(topic):
            raise not_found(f"Topic {topic} not found")

    async def _served_topic(self, request: web.Request, topic: TopicName) -> PersistentTopic:
        """The non-partitioned topic (or partition), loaded on its owner (307 elsewhere);
        404 if it does not exist."""
        await check_namespace(self.ctx.store, topic.namespace_name)
        if await self._partitions(topic):
            raise not_found(f"Topic {topic} is a partitioned topic: use its partitions")
        await self._check_exists(topic)
        service = await self._owner(request, topic)
        return await service.open_existing(topic)

    async def _subscription(self, topic: PersistentTopic, name: str) -> Subscription:
        subscription = await topic.subscription(name)
        if subscription is None:
            raise not_found("Subscription not found")
        return subscription

    # ------------------------------------------------------------------ partitions, over HTTP

    async def _fan_out(
        self,
        request: web.Request,
        topic: TopicName,
        count: int,
        method: str,
        suffix: str = "",
        *,
        body: object = None,
        missing_ok: bool = False,
    ) -> dict[str, Any]:
        """Call each partition's own resource (on whichever broker serves it, following
        redirects); answers by partition name. A partition's failure fails the call with
        its status and reason (a 404 is skipped with ``missing_ok``)."""
        query = {k: v for k, v in request.query.items() if k != "authoritative"}
        async with Forwarder() as forwarder:

            async def one(index: int) -> tuple[str, Any]:
                partition = topic.partition(index)
                url = topic_url(self.ctx.web_url, partition, suffix)
                try:
                    return str(partition), await forwarder.call(method, url, body=body, query=query)
                except RestError as exc:
                    if exc.status == 404 and missing_ok:
                        return str(partition), None
                    raise

            answers = await asyncio.gather(*(one(i) for i in range(count)))
        return dict(answers)

    # ------------------------------------------------------------------ namespace level

    async def _stored(self, request: web.Request) -> tuple[str, tuple[list[str], list[str]]]:
        namespace = namespace_of(request)
        await check_namespace(self.ctx.store, namespace)
        return namespace, await stored_topics(self.ctx.store, namespace)

    async def list_topics(self, request: web.Request) -> web.Response:
        namespace, (topics, _) = await self._stored(request)
        return ok_json([f"persistent://{namespace}/{local}" for local in topics])

    async def list_partitioned(self, request: web.Request) -> web.Response:
        namespace, (_, partitioned) = await self._stored(request)
        return ok_json([f"persistent://{namespace}/{local}" for local in partitioned])

    # ------------------------------------------------------------------ create and delete

    async def create_topic(self, request: web.Request) -> web.Response:
        topic = topic_of(request)
        store = self.ctx.store
        await check_namespace(store, topic.namespace_name)
        count = await partition_count(store, topic.partitioned_topic)
        index = topic.partition_index
        if index < 0 and count:
            raise conflict("This topic already exists")
        if index >= 0 and count and index >= count:  # Pulsar's validateNonPartitionTopicName
            raise precondition_failed(
                f'Can\'t create topic {topic} with "-partition-" followed by a number not '
                f"smaller than the {count} partitions of partitioned topic "
                f"{topic.partitioned_topic.local_name}"
            )
        if index >= 0 and not count:
            raise conflict(
                f'Can\'t create topic {topic} with "-partition-" followed by a number if '
                f"there isn't a partitioned topic {topic.partitioned_topic.local_name} created"
            )
        try:
            await self.ctx.service.create_topic(topic)
        except NodeExistsError:
            raise conflict("This topic already exists") from None
        return no_content()

    async def delete_topic(self, request: web.Request) -> web.Response:
        topic = topic_of(request)
        await check_namespace(self.ctx.store, topic.namespace_name)
        if await self._partitions(topic):
            raise conflict(f"{topic} is a partitioned topic: please call delete-partitioned-topic")
        await self._check_exists(topic)
        service = await self._owner(request, topic)
        await service.delete_topic(topic, force=flag(request, "force"))
        return no_content()

    async def create_partitioned(self, request: web.Request) -> web.Response:
        topic = topic_of(request)
        metadata = parse_partitioned_metadata(await read_json(request))
        check_partitions_to_create(metadata.partitions)
        count = metadata.partitions
        store = self.ctx.store
        await check_namespace(store, topic.namespace_name)
        if topic.partition_index >= 0:
            raise precondition_failed(f"{topic} is a partition, not a topic")
        if await store.exists(managed_ledger_path(topic.managed_ledger_name)) is not None:
            raise conflict("This topic already exists")
        await self.ctx.service.check_room_for_topics(topic, count)
        try:
            await create_partitioned_topic(store, topic, count, metadata.properties)
        except PartitionedTopicExistsError:
            raise conflict("This topic already exists") from None
        await _create_partitions(store, topic, range(count))
        return no_content()

    async def get_partitions(self, request: web.Request) -> web.Response:
        topic = topic_of(request)
        store = self.ctx.store
        await check_namespace(store, topic.namespace_name)
        found = await read_partitioned_metadata(store, topic) if topic.partition_index < 0 else None
        if found is not None:
            return ok_json(found[0].to_json())
        if await store.exists(managed_ledger_path(topic.managed_ledger_name)) is None:
            declared = topic.partition_index >= 0 and topic.partition_index < (
                await partition_count(store, topic)
            )
            if not declared:
                raise not_found(f"Topic {topic} not found")
        return ok_json({"partitions": 0})

    async def update_partitions(self, request: web.Request) -> web.Response:
        topic = topic_of(request)
        wanted = parse_int(await read_json(request), "the number of partitions", low=-MAX_INT)
        if wanted <= 0:
            raise RestError(406, "Number of partitions should be more than 0")
        store = self.ctx.store
        await check_namespace(store, topic.namespace_name)
        found = await read_partitioned_metadata(store, topic) if topic.partition_index < 0 else None
        if found is None:
            raise conflict(f"Topic {topic} is not the partitioned topic.")
        metadata, version = found
        current = metadata.partitions
        check_partitions_update(current, wanted)
        if wanted == current:
            return no_content()
        try:
            grown = replace(metadata, partitions=wanted)
            await update_partition_count(store, topic, grown, version)
        except (BadVersionError, NotFoundError):
            raise conflict("Concurrent modification") from None
        added = range(current, wanted)
        await _create_partitions(store, topic, added)
        await self._copy_subscriptions(request, topic, added)
        return no_content()

    async def _copy_subscriptions(
        self, request: web.Request, topic: TopicName, added: range
    ) -> None:
        """New partitions get partition 0's durable subscriptions, at their start."""
        first = topic.partition(0)
        children = await self.ctx.store.children(managed_ledger_path(first.managed_ledger_name))
        names = [n for n in map(child_name, children) if n != DEDUPLICATION_CURSOR]
        earliest = {"ledgerId": -1, "entryId": -1}
        async with Forwarder() as forwarder:
            for index in added:
                partition = topic.partition(index)
                for name in names:
                    url = topic_url(self.ctx.web_url, partition, f"/subscription/{_q(name)}")
                    try:
                        await forwarder.call("PUT", url, body=earliest)
                    except RestError as exc:
                        if exc.status != 409:  # 409: made meanwhile
                            log.warning("[%s] copying subscription %s: %s", partition, name, exc)

    async def delete_partitioned(self, request: web.Request) -> web.Response:
        topic = topic_of(request)
        store = self.ctx.store
        await check_namespace(store, topic.namespace_name)
        count = await self._partitions(topic)
        if not count:
            if await store.exists(managed_ledger_path(topic.managed_ledger_name)) is not None:
                raise conflict(
                    f"{topic} is a non-partitioned topic. Instead of calling "
                    "delete-partitioned-topic please call delete."
                )
            raise not_found(f"Topic {topic} not found")
        if not flag(request, "force"):
            # Checked on every partition first: none is deleted while one has clients.
            answers = await self._fan_out(request, topic, count, "GET", "/stats", missing_ok=True)
            if any(has_clients(doc) for doc in answers.values()):
                raise precondition_failed("Topic has active producers/subscriptions")
        # Its schemas first, as a topic's own deletion does (nothing is left for a
        # producer that comes back meanwhile to find).
        await self.ctx.service.schemas.delete_all(schema_id(topic))
        try:
            await self._fan_out(request, topic, count, "DELETE", missing_ok=True)
        except RestError as exc:
            if exc.status == 412:
                raise precondition_failed("Topic has active producers/subscriptions") from None
            raise
        try:
            await store.delete(partitions_path(topic))
        except NotFoundError:
            pass
        await delete_topic_policies(store, topic)
        return no_content()

    # ------------------------------------------------------------------ stats

    async def stats(self, request: web.Request) -> web.Response:
        topic = await self._served_topic(request, topic_of(request))
        return ok_json(topic_stats(topic))

    async def internal_stats(self, request: web.Request) -> web.Response:
        topic = await self._served_topic(request, topic_of(request))
        try:
            await topic.compaction.compacted()  # recorded but not read since the load
        except StripeMQError as exc:
            log.warning("%s: compacted ledger not opened for stats: %s", topic.name, exc)
        return ok_json(internal_stats(topic))

    async def _partitioned_only(self, topic: TopicName) -> int:
        await check_namespace(self.ctx.store, topic.namespace_name)
        count = await self._partitions(topic)
        if not count:
            raise not_found(f"Partitioned Topic not found: {topic} is not a partitioned topic")
        return count

    async def partitioned_stats(self, request: web.Request) -> web.Response:
        topic = topic_of(request)
        count = await self._partitioned_only(topic)
        per_partition = flag(request, "perPartition", default=True)
        answers = await self._fan_out(request, topic, count, "GET", "/stats")
        stats = {name: doc for name, doc in answers.items() if isinstance(doc, dict)}
        return ok_json(partitioned_stats(stats, partitions=count, per_partition=per_partition))

    async def partitioned_internal_stats(self, request: web.Request) -> web.Response:
        topic = topic_of(request)
        count = await self._partitioned_only(topic)
        answers = await self._fan_out(request, topic, count, "GET", "/internalStats")
        return ok_json({"metadata": {"partitions": count}, "partitions": answers})

    # ------------------------------------------------------------------ topic operations

    async def unload(self, request: web.Request) -> web.Response:
        topic = topic_of(request)
        await check_namespace(self.ctx.store, topic.namespace_name)
        count = await self._partitions(topic)
        if count:
            await self._fan_out(request, topic, count, "PUT", "/unload", missing_ok=True)
            return no_content()
        await self._check_exists(topic)
        service = await self._owner(request, topic)
        await service.unload_topic(topic)
        return no_content()

    async def terminate(self, request: web.Request) -> web.Response:
        served = await self._single_topic(
            request, "Termination of a partitioned topic is not allowed"
        )
        last = await served.terminate()
        return ok_json(message_id_json(last, served.topic_name.partition_index))

    async def terminate_partitions(self, request: web.Request) -> web.Response:
        """Terminate every partition; answers ``{index: message id}`` as Pulsar does."""
        topic = topic_of(request)
        count = await self._partitioned_only(topic)
        answers = await self._fan_out(request, topic, count, "POST", "/terminate")
        return ok_json(
            {str(TopicName.parse(name).partition_index): doc for name, doc in answers.items()}
        )

    async def compact(self, request: web.Request) -> web.Response:
        """Trigger compaction (of every partition, for a partitioned topic); 409 while
        one runs."""
        topic = topic_of(request)
        await check_namespace(self.ctx.store, topic.namespace_name)
        count = await self._partitions(topic)
        if count:
            await self._fan_out(request, topic, count, "PUT", "/compaction")
            return no_content()
        served = await self._served_topic(request, topic)
        try:
            served.compaction.trigger()
        except CompactionInProgressError as exc:
            raise conflict(str(exc)) from None
        return no_content()

    async def compaction_status(self, request: web.Request) -> web.Response:
        """Pulsar's LongRunningProcessStatus of the topic's last compaction."""
        served = await self._served_topic(request, topic_of(request))
        compaction = served.compaction
        return ok_json({"status": compaction.status.value, "lastError": compaction.last_error})

    async def last_message_id(self, request: web.Request) -> web.Response:
        served = await self._single_topic(
            request, "GetLastMessageId on a partitioned topic is not allowed"
        )
        last, batch_index = await served.last_message_id()
        answer: dict[str, int] = message_id_json(last, served.topic_name.partition_index)
        if batch_index >= 0:
            answer["batchIndex"] = batch_index
        return ok_json(answer)

    async def subscriptions(self, request: web.Request) -> web.Response:
        topic = topic_of(request)
        await check_namespace(self.ctx.store, topic.namespace_name)
        count = await self._partitions(topic)
        if count:
            answers = await self._fan_out(
                request, topic, count, "GET", "/subscriptions", missing_ok=True
            )
            names = {n for doc in answers.values() if isinstance(doc, list) for n in doc}
            return ok_json(sorted(names))
        served = await self._served_topic(request, topic)
        return ok_json(served.subscription_names())

    # ------------------------------------------------------------------ subscriptions

    async def create_subscription(self, request: web.Request) -> web.Response:
        topic = topic_of(request)
        name = request.match_info["subscription"]
        doc = await read_json(request, required=False)
        message_id = parse_message_id(doc) if doc is not None else None
        # Made partitioned first if the auto-creation policy says so, as a client would.
        count = await self.ctx.service.partitions(topic)
        if count:
            existing = await self._fan_out(
                request, topic, count, "GET", "/subscriptions", missing_ok=True
            )
            if any(isinstance(d, list) and name in d for d in existing.values()):
                raise conflict(f"Subscription {name} already exists")
            await self._fan_out(request, topic, count, "PUT", f"/subscription/{_q(name)}", body=doc)
            return no_content()
        served = await self._topic_to_subscribe(request, topic)
        if name in served.subscription_names():
            raise conflict("Subscription already exists for topic")
        chain = served.ml.chain
        position = None
        if message_id is not None:  # checked before anything is made
            position = target_position(message_id, chain.first_position(), chain.write_position())
            _check_position(position, chain.write_position())
        # No type until a consumer chooses one (stats say "None", as Pulsar's do).
        subscription = await served.subscribe(name, None, InitialPosition.Latest)
        if position is not None:
            subscription.reset_cursor(position)
        await subscription.persist_acks()
        return no_content()

    async def _topic_to_subscribe(self, request: web.Request, topic: TopicName) -> PersistentTopic:
        """The non-partitioned topic (or partition), loaded on its owner (307 elsewhere); a
        topic that does not exist is made if the auto-creation policy allows it, else 404
        (Pulsar's ``internalCreateSubscription``)."""
        if not await self._exists(topic):
            policies = await self.ctx.service.effective_policies(topic, watch=False)
            if not policies.auto_create:
                raise not_found(f"Topic {topic} not found")
        service = await self._owner(request, topic)
        return await service.get_topic(topic)

    async def delete_subscription(self, request: web.Request) -> web.Response:
        topic = topic_of(request)
        name = request.match_info["subscription"]
        await check_namespace(self.ctx.store, topic.namespace_name)
        count = await self._partitions(topic)
        if count:
            await self._fan_out(request, topic, count, "DELETE", f"/subscription/{_q(name)}")
            return no_content()
        served = await self._served_topic(request, topic)
        if await served.subscription(name) is None:
            raise not_found("Subscription not found")
        try:
            await served.remove_subscription(name, force=flag(request, "force"))
        except StripeMQError as exc:
            if getattr(exc, "server_error", None) == pb.ConsumerBusy:
                raise precondition_failed("Subscription has active connected consumers") from None
            raise
        return no_content()

    async def _on_each(
        self, request: web.Request, suffix: str
    ) -> tuple[TopicName, Subscription | None]:
        """The subscription of a non-partitioned topic; ``None`` after fanning the same
        request out to the partitions of a partitioned one."""
        topic = topic_of(request)
        name = request.match_info["subscription"]
        await check_namespace(self.ctx.store, topic.namespace_name)
        count = await self._partitions(topic)
        if count:
            body = await read_json(request, required=False)
            await self._fan_out(
                request,
                topic,
                count,
                request.method,
                f"/subscription/{_q(name)}{suffix}",
                body=body,
            )
            return topic, None
        served = await self._served_topic(request, topic)
        return topic, await self._subscription(served, name)

    async def skip_all(self, request: web.Request) -> web.Response:
        _topic, subscription = await self._on_each(request, "/skip_all")
        if subscription is not None:
            await subscription.clear_backlog()
        return no_content()

    async def skip(self, request: web.Request) -> web.Response:
        count = path_int(request, "count", "the number of messages")
        if count < 0:
            raise precondition_failed("the number of messages to skip must not be negative")
        served = await self._single_topic(
            request, "Skip messages on a partitioned topic is not allowed"
        )
        subscription = await self._subscription(served, request.match_info["subscription"])
        await subscription.skip(count)
        return no_content()

    async def expire_messages(self, request: web.Request) -> web.Response:
        seconds = path_int(request, "seconds", "the expiry time")
        if seconds < 0:
            raise precondition_failed("the expiry time must not be negative")
        _topic, subscription = await self._on_each(request, f"/expireMessages/{seconds}")
        if subscription is not None:
            await expire_messages(subscription.topic, subscription, float(seconds))
            subscription.cursor_moved_on()
            await subscription.persist_acks()
        return no_content()

    async def expire_to_position(self, request: web.Request) -> web.Response:
        """Expire every message up to a message id (ResetCursorData body; with
        ``isExcluded``, the ones before it): the subscription is acknowledged up to there."""
        message_id = parse_message_id(await read_json(request))
        served = await self._single_topic(
            request, "Expire message at position is not supported for partitioned-topic"
        )
        subscription = await self._subscription(served, request.match_info["subscription"])
        chain = served.ml.chain
        last: Position | None = chain.last_confirmed()
        if message_id.earliest:
            last = None  # nothing is before the earliest message
        elif not message_id.latest:
            position = Position(message_id.ledger_id, message_id.entry_id)
            if last is None or position > last:
                raise precondition_failed(f"cannot expire past {last}, the last message")
            last = entry_before(chain, position) if message_id.excluded else position
        expired = expire_cursor_to(subscription.cursor, last)
        subscription.stats.record_expired(expired)
        subscription.cursor_moved_on()
        await subscription.persist_acks()
        return no_content()

    async def expire_all_subscriptions(self, request: web.Request) -> web.Response:
        seconds = path_int(request, "seconds", "the expiry time")
        if seconds < 0:
            raise precondition_failed("the expiry time must not be negative")
        topic = topic_of(request)
        await check_namespace(self.ctx.store, topic.namespace_name)
        count = await self._partitions(topic)
        if count:
            suffix = f"/all_subscription/expireMessages/{seconds}"
            await self._fan_out(request, topic, count, "POST", suffix)
            return no_content()
        served = await self._served_topic(request, topic)
        for name in served.subscription_names():
            subscription = await served.subscription(name)
            if subscription is not None:
                await expire_messages(served, subscription, float(seconds))
                subscription.cursor_moved_on()
                await subscription.persist_acks()
        return no_content()

    async def reset_by_time(self, request: web.Request) -> web.Response:
        timestamp = path_int(request, "timestamp", "the timestamp")
        if timestamp < 0:
            raise precondition_failed("the timestamp must not be negative")
        _topic, subscription = await self._on_each(request, f"/resetcursor/{timestamp}")
        if subscription is not None:
            position = await subscription.topic.find_by_publish_time(timestamp)
            subscription.reset_cursor(position)
            await subscription.persist_acks()
        return no_content()

    async def reset_by_id(self, request: web.Request) -> web.Response:
        message_id = parse_message_id(await read_json(request))
        served = await self._single_topic(
            request, "Reset-cursor at position is not allowed for partitioned-topic"
        )
        subscription = await self._subscription(served, request.match_info["subscription"])
        chain = served.ml.chain
        position = target_position(message_id, chain.first_position(), chain.write_position())
        _check_position(position, chain.write_position())
        subscription.reset_cursor(position)
        await subscription.persist_acks()
        return no_content()

    async def examine(self, request: web.Request) -> web.StreamResponse:
        """Pulsar's examine-message: the ``messagePosition``-th entry (1-based, clamped to
        the entries there are) counted from the ``initialPosition`` end of the topic."""
        raw = request.query.get("initialPosition", "latest")
        initial = raw.lower()
        if initial not in ("earliest", "latest"):
            raise precondition_failed(f"initialPosition must be earliest or latest, not {raw!r}")
        nth = query_int(request, "messagePosition", 1)
        if nth < 1:
            raise precondition_failed("the message position must be 1 or more")
        served = await self._single_topic(
            request, "Examine messages on a partitioned topic is not allowed"
        )
        chain = served.ml.chain
        total = chain.entries
        if total == 0:
            raise precondition_failed("Could not examine messages due to the total message is zero")
        position = chain.nth_entry(min(nth, total), from_end=initial == "latest")
        return await self._entry_response(served, position)

    async def message_by_id(self, request: web.Request) -> web.StreamResponse:
        """Pulsar's get-message-by-id: the entry at ``{ledgerId}:{entryId}``."""
        ledger_id = path_int(request, "ledger", "the ledger id")
        entry_id = path_int(request, "entry", "the entry id")
        served = await self._single_topic(
            request, "Get message by id on a partitioned topic is not allowed"
        )
        position = None
        if (
            ledger_id >= 0
            and entry_id >= 0
            and served.ml.chain.exists(Position(ledger_id, entry_id))
        ):
            position = Position(ledger_id, entry_id)
        return await self._entry_response(served, position)

    async def _single_topic(self, request: web.Request, refusal: str) -> PersistentTopic:
        """The served non-partitioned topic of the path; 405 with ``refusal`` for a
        partitioned one (an operation Pulsar does on one topic only)."""
        topic = topic_of(request)
        await check_namespace(self.ctx.store, topic.namespace_name)
        if await self._partitions(topic):
            raise RestError(405, refusal)
        return await self._served_topic(request, topic)

    async def _entry_response(
        self, served: PersistentTopic, position: Position | None
    ) -> web.StreamResponse:
        """The stored entry at ``position`` as Pulsar's peek answers it (404 if none)."""
        entries = await served.ml.read_entries(position, 1) if position is not None else []
        if position is None or not entries or entries[0].position != position:
            raise not_found("Message not found")
        headers, body = peek_response(position, entries[0].data)
        return web.Response(body=body, headers=headers, content_type="application/octet-stream")

    async def peek(self, request: web.Request) -> web.StreamResponse:
        nth = path_int(request, "position", "the message position")
        if nth < 1:
            raise precondition_failed("the message position must be 1 or more")
        served = await self._single_topic(
            request, "Peek messages on a partitioned topic is not allowed"
        )
        subscription = await self._subscription(served, request.match_info["subscription"])
        return await self._entry_response(served, nth_unacknowledged(subscription, nth))


def nth_unacknowledged(subscription: Subscription, nth: int) -> Position | None:
    """The ``nth`` (1-based) entry the subscription has not acknowledged, if it exists."""
    state = subscription.cursor.state
    chain = state.chain
    position = state.first_unacked_from(chain.next_valid(state.mark_delete))
    for _ in range(nth - 1):
        if not chain.exists(position):
            return None
        position = state.first_unacked_from(chain.next_valid(position))
    return position if chain.exists(position) else None


async def _create_partitions(store: MetadataStore, topic: TopicName, indexes: range) -> None:
    """Create the partitions' managed ledgers in the metadata store (Pulsar creates them
    with the partitioned topic); each opens, on whichever broker, on first use."""
    for index in indexes:
        path = managed_ledger_path(topic.partition(index).managed_ledger_name)
        try:
            await store.create(path, LedgerList().encode())
        except NodeExistsError:
            pass


def _check_position(position: Position, end: Position) -> None:
    """A cursor may be put anywhere up to the write position (412 beyond it)."""
    if position > end:
        raise precondition_failed(f"cannot reset to {position}: the topic ends at {end}")


def _q(name: str) -> str:
    return quote(name, safe="")


def add_routes(router: web.UrlDispatcher, ctx: AdminContext) -> None:
    """Add this resource's routes to ``router``."""
    r = PersistentTopics(ctx)
    base = "/admin/v2/persistent/{tenant}/{namespace}"
    topic = base + "/{topic}"
    sub = topic + "/subscription/{subscription}"
    router.add_get(base, r.list_topics)
    router.add_get(base + "/partitioned", r.list_partitioned)
    router.add_put(topic, r.create_topic)
    router.add_delete(topic, r.delete_topic)
    router.add_put(topic + "/partitions", r.create_partitioned)
    router.add_get(topic + "/partitions", r.get_partitions)
    router.add_post(topic + "/partitions", r.update_partitions)
    router.add_delete(topic + "/partitions", r.delete_partitioned)
    router.add_get(topic + "/stats", r.stats)
    router.add_get(topic + "/internalStats", r.internal_stats)
    router.add_get(topic + "/partitioned-stats", r.partitioned_stats)
    router.add_get(topic + "/partitioned-internalStats", r.partitioned_internal_stats)
    router.add_put(topic + "/unload", r.unload)
    router.add_post(topic + "/terminate", r.terminate)
    router.add_post(topic + "/terminate/partitions", r.terminate_partitions)
    router.add_post(
        topic + "/all_subscription/expireMessages/{seconds}", r.expire_all_subscriptions
    )
    router.add_put(topic + "/compaction", r.compact)
    router.add_get(topic + "/compaction", r.compaction_status)
    router.add_get(topic + "/lastMessageId", r.last_message_id)
    router.add_get(topic + "/subscriptions", r.subscriptions)
    router.add_put(sub, r.create_subscription)
    router.add_delete(sub, r.delete_subscription)
    router.add_post(sub + "/skip_all", r.skip_all)
    router.add_post(sub + "/skip/{count}", r.skip)
    router.add_post(sub + "/expireMessages/{seconds}", r.expire_messages)
    router.add_post(sub + "/expireMessages", r.expire_to_position)
    router.add_post(sub + "/resetcursor/{timestamp}", r.reset_by_time)
    router.add_post(sub + "/resetcursor", r.reset_by_id)
    router.add_get(sub + "/position/{position}", r.peek)
    router.add_get(topic + "/examinemessage", r.examine)
    router.add_get(topic + "/ledger/{ledger}/entry/{entry}", r.message_by_id)
