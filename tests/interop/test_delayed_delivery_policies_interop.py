"""Delayed delivery as a namespace or topic policy, with the official ``pulsar-client``
against a real ``stripemq standalone``, set over REST as pulsar-admin sets it: a delay past
the maximum is refused with NotAllowed, delays switched off deliver at once (what was held
too), and switched on again hold messages until their time."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pulsar
import pytest

import stripemq.client as smq
from stripemq.testing.polling import until_blocking
from stripemq.testing.rest import rest
from stripemq.testing.standalone import StandaloneProcess

pytestmark = pytest.mark.integration


@pytest.fixture
def topic(standalone: StandaloneProcess) -> Iterator[str]:
    name = f"delayed-{uuid.uuid4().hex[:8]}"
    assert rest(standalone.web_url, "PUT", f"/admin/v2/persistent/public/default/{name}")[0] == 204
    yield f"persistent://public/default/{name}"


def set_delayed_delivery(standalone: StandaloneProcess, topic: str, **policy: object) -> None:
    path = "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/delayedDelivery"
    body = {"tickTime": 100, "active": True, "maxDeliveryDelayInMillis": 0, **policy}
    assert rest(standalone.web_url, "POST", path, body)[0] == 204


def test_a_delay_past_the_topics_maximum_is_refused(
    standalone: StandaloneProcess, topic: str
) -> None:
    """With stripemq's client: the official C++ client answers every send error but a
    checksum one by reconnecting and sending again, so it never reports this refusal
    (Pulsar's Java client fails the send with NotAllowedException, as stripemq's does)."""
    set_delayed_delivery(standalone, topic, maxDeliveryDelayInMillis=3000)
    client = smq.Client(standalone.service_url)
    try:

        def refused() -> bool:  # once the broker serving the topic has applied the policy
            producer = client.create_producer(topic, batching_enabled=False)
            try:
                producer.send(b"too late", deliver_after=timedelta(seconds=60))
            except smq.NotAllowedError as exc:
                assert "Exceeds max allowed delivery delay of 3000 milliseconds" in str(exc)
                return True
            finally:
                producer.close()
            return False

        until_blocking(refused, timeout=10)
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"in time", deliver_after=timedelta(seconds=1))  # within the maximum
        producer.close()
    finally:
        client.close()


def test_delays_switched_off_and_on_on_a_live_subscription(
    standalone: StandaloneProcess, client: pulsar.Client, topic: str
) -> None:
    consumer = client.subscribe(topic, "work", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"held", deliver_after=timedelta(seconds=600))
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=500)  # held for ten minutes
    set_delayed_delivery(standalone, topic, active=False)
    held = consumer.receive(timeout_millis=10_000)  # released by the change
    assert held.data() == b"held"
    consumer.acknowledge(held)
    producer.send(b"at once", deliver_after=timedelta(seconds=600))
    assert consumer.receive(timeout_millis=10_000).data() == b"at once"
    set_delayed_delivery(standalone, topic, active=True)

    def held_again() -> bool:  # once the broker has applied it, a delayed message waits
        sent = time.time()
        producer.send(b"later", deliver_after=timedelta(seconds=2))
        try:
            early = consumer.receive(timeout_millis=1000)
        except pulsar.Timeout:
            later = consumer.receive(timeout_millis=15_000)
            assert later.data() == b"later" and time.time() - sent >= 1.9
            return True
        consumer.acknowledge(early)  # delivered at once: not applied yet, try again
        return False

    until_blocking(held_again, timeout=20)
    producer.close()
    consumer.close()
