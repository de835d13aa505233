"""A namespace's ``encryption_required``, as a topic enforces it: producers that will not
encrypt and messages without encryption keys are refused with Pulsar's MetadataError."""

from __future__ import annotations

from typing import cast

import pytest
from ledger_fakes import FakeBookKeeper

from stripemq.bookie.client import BookKeeper
from stripemq.broker.namespace_policies import EffectivePolicies
from stripemq.broker.topic import PersistentTopic
from stripemq.errors import BrokerError
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.managed_ledger.managed_ledger import ManagedLedger
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.topic_name import TopicName


async def test_unencrypted_producers_and_messages_are_refused(store: MetadataStore) -> None:
    name = TopicName.parse("persistent://acme/secret/orders")
    bk = cast(BookKeeper, FakeBookKeeper())
    ml = ManagedLedger(name.managed_ledger_name, store, bk, ManagedLedgerConfig())
    await ml.open(create=True)
    topic = PersistentTopic(name, ml)
    plain = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    topic.check_encrypted_producer(False)  # not required yet
    topic.check_encrypted_message(plain)
    await topic.apply_policies(EffectivePolicies(encryption_required=True))
    with pytest.raises(BrokerError) as refused:
        topic.check_encrypted_producer(False)
    assert refused.value.server_error == pb.MetadataError
    assert str(refused.value) == "Encryption is required in persistent://acme/secret/orders"
    topic.check_encrypted_producer(True)
    with pytest.raises(BrokerError) as refused:
        topic.check_encrypted_message(plain)
    assert str(refused.value) == "Messages must be encrypted"
    sealed = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
    sealed.encryption_keys.add(key="orders-key", value=b"wrapped")
    topic.check_encrypted_message(sealed)
    await topic.close()
