"""Partitioned topics: how many partitions a topic has, kept in the metadata store.

A partitioned topic ``t`` with ``n`` partitions is served as ``n`` ordinary topics
``t-partition-0`` ... ``t-partition-<n-1>``; clients ask PARTITIONED_METADATA first.
"""

from __future__ import annotations

import json
from urllib.parse import quote

from stripemq.errors import NodeExistsError, StripeMQError
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.topic_name import InvalidTopicNameError, TopicName

ROOT = "/stripemq/partitioned-topics"


class PartitionedTopicExistsError(StripeMQError):
    server_error = pb.NotAllowedError


def partitions_path(topic: TopicName) -> str:
    return (
        f"{ROOT}/{topic.tenant}/{topic.namespace}/{topic.domain}/{quote(topic.local_name, safe='')}"
    )


async def partition_count(store: MetadataStore, topic: TopicName) -> int:
    """Partitions of ``topic``; 0 for a topic that is not partitioned."""
    found = await store.get(partitions_path(topic.partitioned_topic))
    if found is None:
        return 0
    try:
        return int(json.loads(found[0])["partitions"])
    except (ValueError, KeyError, TypeError):
        return 0


async def create_partitioned_topic(store: MetadataStore, topic: TopicName, partitions: int) -> None:
    """Declare ``topic`` partitioned into ``partitions`` (its partitions open on first use)."""
    if topic.partition_index >= 0:
        raise InvalidTopicNameError(f"{topic} is a partition, not a topic")
    if not 1 <= partitions <= 10_000:
        raise InvalidTopicNameError(f"{partitions} partitions: need 1 to 10000")
    try:
        await store.create(partitions_path(topic), json.dumps({"partitions": partitions}).encode())
    except NodeExistsError:
        raise PartitionedTopicExistsError(f"{topic} is already partitioned") from None
