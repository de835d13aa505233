"""The asyncio client: lookups, a connection pool, and the producers, consumers and
readers it creates (and closes with itself)."""

from __future__ import annotations

import itertools
import logging
import re
import secrets
from collections.abc import Callable
from typing import Any

from stripemq.client.auth import Authentication
from stripemq.client.consumer import ConsumerBase, ConsumerConfig, TopicConsumer
from stripemq.client.lookup import LookupService
from stripemq.client.message import MessageId
from stripemq.client.multi_topics import MultiTopicsConsumer
from stripemq.client.options import (
    BatchingType,
    BatchReceivePolicy,
    CompressionType,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
    ConsumerType,
    HashingScheme,
    InitialPosition,
    PartitionsRoutingMode,
    ProducerAccessMode,
    RegexSubscriptionMode,
)
from stripemq.client.pool import ConnectionPool, ServiceAddresses
from stripemq.client.producer import PartitionedProducer, Producer, ProducerConfig
from stripemq.client.reader import Reader
from stripemq.client.tls import client_ssl_context
from stripemq.errors import AlreadyClosedError, InvalidConfigurationError, NotAllowedError
from stripemq.proto.topic_name import TopicName

log = logging.getLogger(__name__)

AnyProducer = Producer | PartitionedProducer


def _topic(name: str) -> str:
    """The full topic name (``InvalidTopicNameError`` if it is not one)."""
    return str(TopicName.parse(name))


def _unsupported(**options: Any) -> None:
    for name, value in options.items():
        if value:
            raise InvalidConfigurationError(f"{name} is not supported by this client")


class AsyncClient:
    """A client of a stripemq (or Pulsar) cluster, for use inside one event loop.

    Arguments follow the official ``pulsar.Client``; those that tune the C++ library
    (``io_threads``, ``stats_interval_in_seconds``, ...) are accepted and have no effect.
    ``authentication`` is an ``AuthenticationToken``; a ``pulsar+ssl://`` service URL
    connects over TLS, verifying the brokers' certificates against
    ``tls_trust_certs_file_path`` (default: the system's), their host names only with
    ``tls_validate_hostname``, and nothing with ``tls_allow_insecure_connection``.

    Raises:
        InvalidConfigurationError: a bad service URL, an authentication of another kind, or
            a trust file that cannot be read.
    """

    def __init__(
        self,
        service_url: str,
        authentication: Authentication | None = None,
        operation_timeout_seconds: float = 30,
        io_threads: int = 1,
        message_listener_threads: int = 1,
        concurrent_lookup_requests: int = 50000,
        log_conf_file_path: str | None = None,
        stats_interval_in_seconds: int = 600,
        use_tls: bool = False,
        tls_trust_certs_file_path: str | None = None,
        tls_allow_insecure_connection: bool = False,
        tls_validate_hostname: bool = False,
        logger: Any = None,
        connection_timeout_ms: int = 10000,
        listener_name: str | None = None,
        keep_alive_interval_seconds: float = 30,
    ) -> None:
        _unsupported(listener_name=listener_name)
        if authentication is not None and not isinstance(authentication, Authentication):
            raise InvalidConfigurationError(
                f"authentication {authentication!r} is not supported: use "
                f"stripemq.client.AuthenticationToken"
            )
        self.service = ServiceAddresses(service_url, use_tls=use_tls)
        self.operation_timeout_s = float(operation_timeout_seconds)
        ssl_context = None
        if self.service.tls:
            ssl_context = client_ssl_context(
                tls_trust_certs_file_path,
                allow_insecure_connection=tls_allow_insecure_connection,
                validate_hostname=tls_validate_hostname,
            )
        self.pool = ConnectionPool(
            connection_timeout_s=connection_timeout_ms / 1000,
            operation_timeout_s=self.operation_timeout_s,
            keepalive_s=keep_alive_interval_seconds,
            authentication=authentication,
            ssl_context=ssl_context,
        )
        self.lookup = LookupService(self.pool, self.service)
        self.message_listener_threads = message_listener_threads
        self._producer_ids = itertools.count()
        self._consumer_ids = itertools.count()
        self._handles: set[Any] = set()
        self.closed = False

    def new_producer_id(self) -> int:
        return next(self._producer_ids)

    def new_consumer_id(self) -> int:
        return next(self._consumer_ids)

    def forget(self, handle: Any) -> None:
        """A producer, consumer or reader closed itself."""
        self._handles.discard(handle)

    def _check_open(self) -> None:
        if self.closed:
            raise AlreadyClosedError("the client is closed")

    # ------------------------------------------------------------------ producers

    async def create_producer(
        self,
        topic: str,
        producer_name: str | None = None,
        schema: Any = None,
        initial_sequence_id: int | None = None,
        send_timeout_millis: int = 30000,
        compression_type: CompressionType = CompressionType.NONE,
        max_pending_messages: int = 1000,
        max_pending_messages_across_partitions: int = 50000,
        block_if_queue_full: bool = False,
        batching_enabled: bool = False,
        batching_max_messages: int = 1000,
        batching_max_allowed_size_in_bytes: int = 128 * 1024,
        batching_max_publish_delay_ms: int = 10,
        chunking_enabled: bool = False,
        message_routing_mode: PartitionsRoutingMode = PartitionsRoutingMode.RoundRobinDistribution,
        lazy_start_partitioned_producers: bool = False,
        properties: dict[str, str] | None = None,
        batching_type: BatchingType = BatchingType.Default,
        encryption_key: str | None = None,
        crypto_key_reader: Any = None,
        access_mode: ProducerAccessMode = ProducerAccessMode.Shared,
        message_router: Callable[[Any, int], int] | None = None,
        hashing_scheme: HashingScheme = HashingScheme.BoostHash,
    ) -> AnyProducer:
        """A producer on ``topic`` (on each partition, if it is partitioned)."""
        self._check_open()
        _unsupported(
            schema=schema,
            chunking_enabled=chunking_enabled,
            encryption_key=encryption_key,
            crypto_key_reader=crypto_key_reader,
        )
        config = ProducerConfig(
            producer_name=producer_name,
            initial_sequence_id=initial_sequence_id,
            send_timeout_millis=send_timeout_millis,
            compression_type=compression_type,
            max_pending_messages=max_pending_messages,
            max_pending_messages_across_partitions=max_pending_messages_across_partitions,
            block_if_queue_full=block_if_queue_full,
            batching_enabled=batching_enabled,
            batching_max_messages=batching_max_messages,
            batching_max_allowed_size_in_bytes=batching_max_allowed_size_in_bytes,
            batching_max_publish_delay_ms=batching_max_publish_delay_ms,
            message_routing_mode=(
                PartitionsRoutingMode.CustomPartition
                if message_router is not None
                else message_routing_mode
            ),
            hashing_scheme=hashing_scheme,
            message_router=message_router,
            properties=dict(properties or {}),
            access_mode=access_mode,
            batching_type=batching_type,
        )
        name = _topic(topic)
        partitions = await self.lookup.partitions(name)
        if partitions > 0:
            producer: AnyProducer = PartitionedProducer(self, name, partitions, config)
            await producer.connect_first()
        else:
            producer = await self.create_single_producer(name, config)
        self._handles.add(producer)
        return producer

    async def create_single_producer(self, topic: str, config: ProducerConfig) -> Producer:
        """A producer on exactly ``topic`` (no partition lookup)."""
        self._check_open()
        producer = Producer(self, _topic(topic), config)
        await producer.connect_first()
        self._handles.add(producer)
        return producer

    # ------------------------------------------------------------------ consumers

    async def subscribe(
        self,
        topic: str | list[str] | re.Pattern[str],
        subscription_name: str,
        consumer_type: ConsumerType = ConsumerType.Exclusive,
        schema: Any = None,
        message_listener: Any = None,
        receiver_queue_size: int = 1000,
        max_total_receiver_queue_size_across_partitions: int = 50000,
        consumer_name: str | None = None,
        unacked_messages_timeout_ms: int | None = None,
        broker_consumer_stats_cache_time_ms: int = 30000,
        negative_ack_redelivery_delay_ms: int = 60000,
        is_read_compacted: bool = False,
        properties: dict[str, str] | None = None,
        pattern_auto_discovery_period: int = 60,
        initial_position: InitialPosition = InitialPosition.Latest,
        crypto_key_reader: Any = None,
        replicate_subscription_state_enabled: bool = False,
        max_pending_chunked_message: int = 10,
        auto_ack_oldest_chunked_message_on_queue_full: bool = False,
        start_message_id_inclusive: bool = False,
        batch_receive_policy: BatchReceivePolicy | None = None,
        key_shared_policy: ConsumerKeySharedPolicy | None = None,
        batch_index_ack_enabled: bool = False,
        regex_subscription_mode: RegexSubscriptionMode = RegexSubscriptionMode.PersistentOnly,
        dead_letter_policy: ConsumerDeadLetterPolicy | None = None,
        crypto_failure_action: Any = None,
        retry_enable: bool = False,
        ack_grouping_time_ms: int = 100,
        priority_level: int = 0,
    ) -> ConsumerBase:
        """A consumer of ``topic``: a name, a list of names, or a compiled pattern over a
        namespace's topics. ``message_listener(consumer, message)`` is the synchronous
        facade's; here read with ``receive``."""
        self._check_open()
        _unsupported(
            schema=schema,
            message_listener=message_listener,
            crypto_key_reader=crypto_key_reader,
            replicate_subscription_state_enabled=replicate_subscription_state_enabled,
        )
        config = ConsumerConfig(
            subscription_name=subscription_name,
            consumer_type=consumer_type,
            receiver_queue_size=receiver_queue_size,
            max_total_receiver_queue_size_across_partitions=(
                max_total_receiver_queue_size_across_partitions
            ),
            consumer_name=consumer_name,
            unacked_messages_timeout_ms=unacked_messages_timeout_ms,
            negative_ack_redelivery_delay_ms=negative_ack_redelivery_delay_ms,
            properties=dict(properties or {}),
            pattern_auto_discovery_period=pattern_auto_discovery_period,
            initial_position=initial_position,
            start_message_id_inclusive=start_message_id_inclusive,
            batch_receive_policy=batch_receive_policy,
            key_shared_policy=key_shared_policy,
            batch_index_ack_enabled=batch_index_ack_enabled,
            regex_subscription_mode=regex_subscription_mode,
            dead_letter_policy=dead_letter_policy,
            retry_enable=retry_enable,
            ack_grouping_time_ms=ack_grouping_time_ms,
            priority_level=priority_level,
            is_read_compacted=is_read_compacted,
        )
        consumer: ConsumerBase
        if isinstance(topic, re.Pattern):
            consumer = MultiTopicsConsumer(self, [], config, pattern=topic, name=topic.pattern)
            await consumer.start()
        else:
            topics = [_topic(t) for t in ([topic] if isinstance(topic, str) else topic)]
            if not topics:
                raise InvalidConfigurationError("subscribe needs at least one topic")
            if config.retry_enable:
                retry = self._retry_topic(topics[0], config)
                if retry not in topics:
                    topics.append(retry)
            consumer = await self._subscribe_topics(topics, config)
        self._handles.add(consumer)
        return consumer

    def _retry_topic(self, topic: str, config: ConsumerConfig) -> str:
        policy = config.dead_letter_policy
        assert policy is not None
        return _topic(policy.retry_letter_topic or f"{topic}-{config.subscription_name}-RETRY")

    async def _subscribe_topics(self, topics: list[str], config: ConsumerConfig) -> ConsumerBase:
        if len(topics) == 1:
            if await self.lookup.partitions(topics[0]) <= 0:
                consumer = TopicConsumer(self, topics[0], config)
                try:
                    await consumer.connect_first()
                except BaseException:
                    await consumer.close()
                    raise
                return consumer
        multi = MultiTopicsConsumer(
            self, topics, config, name=topics[0] if len(topics) == 1 else None
        )
        await multi.start()
        return multi

    async def create_reader(
        self,
        topic: str,
        start_message_id: MessageId,
        schema: Any = None,
        reader_listener: Any = None,
        receiver_queue_size: int = 1000,
        reader_name: str | None = None,
        subscription_role_prefix: str | None = None,
        is_read_compacted: bool = False,
        crypto_key_reader: Any = None,
        start_message_id_inclusive: bool = False,
        crypto_failure_action: Any = None,
    ) -> Reader:
        """A reader of ``topic`` from ``start_message_id`` (``MessageId.earliest``,
        ``MessageId.latest`` or a message's id)."""
        self._check_open()
        _unsupported(
            schema=schema,
            reader_listener=reader_listener,
            crypto_key_reader=crypto_key_reader,
        )
        if not isinstance(start_message_id, MessageId):
            raise InvalidConfigurationError("start_message_id must be a MessageId")
        name = _topic(topic)
        if await self.lookup.partitions(name) > 0:
            raise NotAllowedError(f"{name} is partitioned: read one of its partitions")
        prefix = subscription_role_prefix or "reader"
        config = ConsumerConfig(
            subscription_name=f"{prefix}-{secrets.token_hex(5)}",
            consumer_type=ConsumerType.Exclusive,
            receiver_queue_size=receiver_queue_size,
            consumer_name=reader_name,
            start_message_id_inclusive=start_message_id_inclusive,
            durable=False,
            start_message_id=start_message_id,
            is_read_compacted=is_read_compacted,
            initial_position=(
                InitialPosition.Earliest
                if start_message_id == MessageId.earliest
                else InitialPosition.Latest
            ),
        )
        consumer = TopicConsumer(self, name, config)
        try:
            await consumer.connect_first()
        except BaseException:
            await consumer.close()
            raise
        reader = Reader(consumer)
        self._handles.add(consumer)
        return reader

    async def get_topic_partitions(self, topic: str) -> list[str]:
        """The partitions of ``topic`` (the topic itself if it is not partitioned)."""
        self._check_open()
        name = _topic(topic)
        partitions = await self.lookup.partitions(name)
        return [name] if partitions <= 0 else [f"{name}-partition-{i}" for i in range(partitions)]

    async def close(self) -> None:
        """Close every producer, consumer and reader, then the connections."""
        if self.closed:
            return
        self.closed = True
        for handle in list(self._handles):
            try:
                await handle.close()
            except Exception as exc:  # close the rest regardless
                log.warning("closing %r: %s", handle, exc)
        self._handles.clear()
        await self.pool.close()
