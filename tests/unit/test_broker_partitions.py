"""``stripemq.broker.partitions``: a partitioned topic's metadata node (Pulsar's
PartitionedTopicMetadata, properties included), its bounds, and growing it by
compare-and-set."""

from __future__ import annotations

import pytest

from stripemq.broker.partitions import (
    MAX_PARTITIONS,
    PartitionedTopicExistsError,
    PartitionedTopicMetadata,
    create_partitioned_topic,
    partition_count,
    read_partitioned_metadata,
    update_partition_count,
)
from stripemq.errors import BadVersionError
from stripemq.metadata import MetadataStore
from stripemq.proto.topic_name import InvalidTopicNameError, TopicName

TOPIC = TopicName.parse("persistent://public/default/pt")


async def test_metadata_with_properties_is_kept_and_grown(store: MetadataStore) -> None:
    assert await partition_count(store, TOPIC) == 0
    await create_partitioned_topic(store, TOPIC, 2, {"team": "billing"})
    found = await read_partitioned_metadata(store, TOPIC.partition(1))  # its partition too
    assert found is not None
    metadata, version = found
    assert metadata == PartitionedTopicMetadata(2, {"team": "billing"})
    assert metadata.to_json() == {"partitions": 2, "properties": {"team": "billing"}}
    await update_partition_count(
        store, TOPIC, PartitionedTopicMetadata(3, metadata.properties), version
    )
    assert await partition_count(store, TOPIC) == 3
    with pytest.raises(BadVersionError):  # changed since that version
        await update_partition_count(store, TOPIC, PartitionedTopicMetadata(4), version)
    with pytest.raises(PartitionedTopicExistsError):
        await create_partitioned_topic(store, TOPIC, 2)


@pytest.mark.parametrize("count", [0, -1, MAX_PARTITIONS + 1])
async def test_counts_out_of_bounds_are_refused(store: MetadataStore, count: int) -> None:
    with pytest.raises(InvalidTopicNameError):
        await create_partitioned_topic(store, TOPIC, count)
    with pytest.raises(InvalidTopicNameError):  # a partition is not a topic to partition
        await create_partitioned_topic(store, TOPIC.partition(0), 2)


def test_nodes_nobody_could_have_written_read_as_none() -> None:
    assert PartitionedTopicMetadata.decode(b'{"partitions": 3}') == PartitionedTopicMetadata(3)
    for raw in (b"", b"[]", b'{"partitions": "x"}', b'{"properties": {}}', b"{"):
        assert PartitionedTopicMetadata.decode(raw) is None, raw
