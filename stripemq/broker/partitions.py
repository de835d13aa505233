"""Partitioned topics: how many partitions a topic has, kept in the metadata store.

A partitioned topic ``t`` with ``n`` partitions is served as ``n`` ordinary topics
``t-partition-0`` ... ``t-partition-<n-1>``; clients ask PARTITIONED_METADATA first. Its
node holds Pulsar's PartitionedTopicMetadata JSON: ``{"partitions": n}``, with the topic's
``properties`` when it was made with some. A partitioned topic has 1 to ``MAX_PARTITIONS``
partitions (Pulsar's ``maxNumPartitionsPerPartitionedTopic``), and their number only grows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from stripemq.errors import NodeExistsError, StripeMQError
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.topic_name import InvalidTopicNameError, TopicName

ROOT = "/stripemq/partitioned-topics"
MAX_PARTITIONS = 10_000


class PartitionedTopicExistsError(StripeMQError):
    server_error = pb.NotAllowedError


@dataclass(frozen=True)
class PartitionedTopicMetadata:
    """Pulsar's PartitionedTopicMetadata: the partition count and the topic's properties."""

    partitions: int
    properties: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"partitions": self.partitions}
        if self.properties:
            doc["properties"] = dict(self.properties)
        return doc

    def encode(self) -> bytes:
        return json.dumps(self.to_json()).encode()

    @classmethod
    def decode(cls, raw: bytes) -> PartitionedTopicMetadata | None:
        """What a node holds (``None`` for a node nobody could have written)."""
        try:
            doc = json.loads(raw)
            properties = doc.get("properties") or {}
            return cls(
                int(doc["partitions"]), {str(k): str(v) for k, v in dict(properties).items()}
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def partitions_path(topic: TopicName) -> str:
    return (
        f"{ROOT}/{topic.tenant}/{topic.namespace}/{topic.domain}/{quote(topic.local_name, safe='')}"
    )


async def read_partitioned_metadata(
    store: MetadataStore, topic: TopicName
) -> tuple[PartitionedTopicMetadata, int] | None:
    """The metadata of ``topic`` (the partitioned topic of a partition) and the version
    of its node; ``None`` for a topic that is not partitioned."""
    found = await store.get(partitions_path(topic.partitioned_topic))
    if found is None:
        return None
    metadata = PartitionedTopicMetadata.decode(found[0])
    return (metadata, found[1].version) if metadata is not None else None


async def partition_count(store: MetadataStore, topic: TopicName) -> int:
    """Partitions of ``topic``; 0 for a topic that is not partitioned."""
    found = await read_partitioned_metadata(store, topic)
    return found[0].partitions if found is not None else 0


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
