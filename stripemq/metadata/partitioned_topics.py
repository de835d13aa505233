"""Where a partitioned topic's partition count lives, and how it is encoded.

A partitioned topic ``t`` with ``n`` partitions is served as ``n`` ordinary topics
``t-partition-0`` ... ``t-partition-<n-1>``. Its node
``/stripemq/partitioned-topics/<tenant>/<ns>/persistent/<topic>`` holds Pulsar's
PartitionedTopicMetadata JSON: ``{"partitions": n}``, with the topic's ``properties`` when it
was made with some. The broker writes it; readers that are not the broker (Spark) read it
with this module, which is why it sits below the broker.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from stripemq.metadata.api import MetadataStore
from stripemq.proto.topic_name import TopicName

ROOT = "/stripemq/partitioned-topics"


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
