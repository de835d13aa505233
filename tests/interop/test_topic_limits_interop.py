"""Topic limits with the official ``pulsar-client`` against a real ``stripemq standalone``,
set over REST as pulsar-admin sets them: a producer or subscription past a limit is refused
with Pulsar's errors, and a Shared consumer at its unacked limit gets no more until it
acknowledges."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pulsar
import pytest

from stripemq.testing.polling import until_blocking
from stripemq.testing.rest import rest
from stripemq.testing.standalone import StandaloneProcess

pytestmark = pytest.mark.integration


@pytest.fixture
def topic(standalone: StandaloneProcess) -> Iterator[str]:
    name = f"limited-{uuid.uuid4().hex[:8]}"
    assert rest(standalone.web_url, "PUT", f"/admin/v2/persistent/public/default/{name}")[0] == 204
    yield f"persistent://public/default/{name}"


def set_topic_limit(standalone: StandaloneProcess, topic: str, path: str, value: int) -> None:
    """Set a topic-level limit and wait until the broker applies it."""
    base = "/admin/v2/persistent/" + topic.removeprefix("persistent://")
    assert rest(standalone.web_url, "POST", f"{base}/{path}", value)[0] == 204
    until_blocking(
        lambda: rest(standalone.web_url, "GET", f"{base}/{path}?applied=true")[1] == value,
        timeout=10,
    )


def test_a_producer_past_the_topics_limit_is_refused(
    standalone: StandaloneProcess, client: pulsar.Client, topic: str
) -> None:
    set_topic_limit(standalone, topic, "maxProducers", 1)
    first = client.create_producer(topic)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    first.close()
    client.create_producer(topic).close()  # room again


def test_a_subscription_past_the_topics_limit_is_refused(
    standalone: StandaloneProcess, client: pulsar.Client, topic: str
) -> None:
    set_topic_limit(standalone, topic, "maxSubscriptionsPerTopic", 1)
    client.subscribe(topic, "first").close()
    with pytest.raises(pulsar.NotAllowedError):
        client.subscribe(topic, "second")
    client.subscribe(topic, "first").close()  # the existing one comes back


def test_a_consumer_past_the_subscriptions_limit_is_refused(
    standalone: StandaloneProcess, client: pulsar.Client, topic: str
) -> None:
    set_topic_limit(standalone, topic, "maxConsumersPerSubscription", 1)
    client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)


def test_a_shared_consumer_at_its_unacked_limit_waits_for_its_acks(
    standalone: StandaloneProcess, client: pulsar.Client, topic: str
) -> None:
    set_topic_limit(standalone, topic, "maxUnackedMessagesOnConsumer", 4)
    consumer = client.subscribe(
        topic,
        "s",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(f"m{i}".encode())
    held = [consumer.receive(5000) for _ in range(4)]
    with pytest.raises(pulsar.Timeout):
        consumer.receive(1000)  # blocked: four unacknowledged
    stats_path = "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/stats"
    stats = rest(standalone.web_url, "GET", stats_path)[1]
    (consumer_stats,) = stats["subscriptions"]["s"]["consumers"]
    assert consumer_stats["blockedConsumerOnUnackedMsgs"] is True
    for message in held[:2]:
        consumer.acknowledge(message)  # two held: half, so more come
    more = [consumer.receive(5000) for _ in range(2)]
    got = [m.data().decode() for m in held + more]
    assert sorted(got) == sorted(f"m{i}" for i in range(6))


def test_refused_readers_leave_no_subscription_behind(
    standalone: StandaloneProcess, client: pulsar.Client, topic: str
) -> None:
    """A reader past the topic's consumer limit is refused, and its subscription goes
    with it (else they would pile up, and count against maxSubscriptionsPerTopic)."""
    set_topic_limit(standalone, topic, "maxConsumers", 1)
    client.subscribe(topic, "only")
    for _ in range(3):
        with pytest.raises(pulsar.ConsumerBusy):
            client.create_reader(topic, pulsar.MessageId.earliest)
    path = "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/subscriptions"
    assert rest(standalone.web_url, "GET", path)[1] == ["only"]


def test_a_subscription_type_the_topic_does_not_enable_is_refused(
    standalone: StandaloneProcess, client: pulsar.Client, topic: str
) -> None:
    base = "/admin/v2/persistent/" + topic.removeprefix("persistent://")
    path = f"{base}/subscriptionTypesEnabled"
    assert rest(standalone.web_url, "POST", path, ["Shared"])[0] == 204

    def exclusive_refused() -> bool:  # once the serving broker has applied it
        try:
            client.subscribe(topic, "solo", consumer_type=pulsar.ConsumerType.Exclusive).close()
        except pulsar.NotAllowedError:
            return True
        return False

    until_blocking(exclusive_refused, timeout=10)
    client.subscribe(topic, "team", consumer_type=pulsar.ConsumerType.Shared).close()
    assert rest(standalone.web_url, "DELETE", path)[0] == 204
    until_blocking(lambda: not exclusive_refused(), timeout=10)
