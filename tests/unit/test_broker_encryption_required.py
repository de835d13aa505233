"""A namespace's ``encryption_required``, as a topic enforces it: producers that will not
encrypt are refused (and disconnected when it is switched on), and a producer that said it
encrypts has its messages without encryption keys refused, with Pulsar's MetadataError."""

from __future__ import annotations

from typing import cast

import pytest
from ledger_fakes import FakeBookKeeper

from stripemq.bookie.client import BookKeeper
from stripemq.broker.namespace_policies import EffectivePolicies
from stripemq.broker.topic import MessageSink, PersistentTopic, Producer
from stripemq.errors import BrokerError
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.managed_ledger.managed_ledger import ManagedLedger
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.topic_name import TopicName
from stripemq.testing.sinks import NullSink


async def test_unencrypted_producers_and_messages_are_refused(store: MetadataStore) -> None:
    name = TopicName.parse("persistent://acme/secret/orders")
    bk = cast(BookKeeper, FakeBookKeeper())
    ml = ManagedLedger(name.managed_ledger_name, store, bk, ManagedLedgerConfig())
    await ml.open(create=True)
    topic = PersistentTopic(name, ml)
    plain_sink, sealed_sink = Closed(), Closed()
    plain = Producer(1, "plain", topic, cast(MessageSink, plain_sink))
    sealed = Producer(2, "sealed", topic, cast(MessageSink, sealed_sink), encrypted=True)
    await topic.add_producer(plain)
    await topic.add_producer(sealed)
    topic.check_encrypted_producer(False)  # not required yet
    await topic.apply_policies(EffectivePolicies(encryption_required=True))
    assert plain_sink.closed == [1] and sealed_sink.closed == []  # disconnected, as Pulsar
    with pytest.raises(BrokerError) as refused:
        topic.check_encrypted_producer(False)
    assert refused.value.server_error == pb.MetadataError
    assert str(refused.value) == "Encryption is required in persistent://acme/secret/orders"
    topic.check_encrypted_producer(True)
    clear = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    with pytest.raises(BrokerError) as refused:
        topic.check_encrypted_message(sealed, clear)  # it said it encrypts
    assert str(refused.value) == "Messages must be encrypted"
    keyed = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
    keyed.encryption_keys.add(key="orders-key", value=b"wrapped")
    topic.check_encrypted_message(sealed, keyed)
    await topic.close()


class Closed(NullSink):
    """A producer's connection: which producers the broker closed."""

    def __init__(self) -> None:
        self.closed: list[int] = []

    def close_producer(self, producer_id: int) -> None:  # type: ignore[override]
        self.closed.append(producer_id)
