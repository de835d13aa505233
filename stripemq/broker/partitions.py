"""Partitioned topics: how many partitions a topic has, kept in the metadata store.

A partitioned topic ``t`` with ``n`` partitions is served as ``n`` ordinary topics
``t-partition-0`` ... ``t-partition-<n-1>``; clients ask PARTITIONED_METADATA first. Its
node holds Pulsar's PartitionedTopicMetadata JSON: ``{"partitions": n}``, with the topic's
``properties`` when it was made with some. A partitioned topic has 1 to ``MAX_PARTITIONS``
partitions (Pulsar's ``maxNumPartitionsPerPartitionedTopic``), and their number only grows.
"""

from __future__ import annotations

from collections.abc import Mapping

from stripemq.errors import NodeExistsError, StripeMQError
from stripemq.metadata import MetadataStore
from stripemq.metadata.partitioned_topics import (
    ROOT,
    PartitionedTopicMetadata,
    partition_count,
    partitions_path,
    read_partitioned_metadata,
)
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.topic_name import InvalidTopicNameError, TopicName

MAX_PARTITIONS = 10_000

# The node's layout and codec live below the broker (Spark reads them too); re-exported here.
__all__ = [
    "MAX_PARTITIONS",
    "ROOT",
    "PartitionedTopicExistsError",
    "PartitionedTopicMetadata",
    "create_partitioned_topic",
    "partition_count",
    "partitions_path",
    "read_partitioned_metadata",
    "update_partition_count",
]


class PartitionedTopicExistsError(StripeMQError):
    server_error = pb.NotAllowedError


async def create_partitioned_topic(
    store: MetadataStore,
    topic: TopicName,
    partitions: int,
    properties: Mapping[str, str] | None = None,
) -> None:
    """Declare ``topic`` partitioned into ``partitions`` (its partitions open on first use).

    Raises:
        InvalidTopicNameError: ``topic`` is a partition, or the count is out of bounds.
        PartitionedTopicExistsError: it is partitioned already.
    """
    if topic.partition_index >= 0:
        raise InvalidTopicNameError(f"{topic} is a partition, not a topic")
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise InvalidTopicNameError(f"{partitions} partitions: need 1 to {MAX_PARTITIONS}")
    metadata = PartitionedTopicMetadata(partitions, dict(properties or {}))
    try:
        await store.create(partitions_path(topic), metadata.encode())
    except NodeExistsError:
        raise PartitionedTopicExistsError(f"{topic} is already partitioned") from None


async def update_partition_count(
    store: MetadataStore, topic: TopicName, metadata: PartitionedTopicMetadata, version: int
) -> None:
    """Store ``metadata`` (a grown partition count) if the node is still at ``version``.

    Raises:
        BadVersionError: it changed meanwhile.
        NotFoundError: the partitioned topic was deleted meanwhile.
    """
    await store.put(partitions_path(topic), metadata.encode(), version)
