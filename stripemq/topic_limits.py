"""Pulsar's count limits on a topic: producers, consumers, subscriptions and the messages
consumers may hold unacknowledged (0: no limit).

Each is a broker setting that a namespace policy overrides and a topic-level policy
overrides in turn. The three levels name the same limit differently (``maxProducersPerTopic``
in broker.conf and the namespaces API, ``max_producers_per_topic`` in the namespace's
policies, ``maxProducers`` in the topics API and ``maxProducerPerTopic`` in its record);
``Limit`` keeps every name of each in one place, so the admin API, its CLI and the policy
records are all made from one table (``broker.policies`` parses and writes them). It sits
outside the broker package because the admin CLI, which must start without the broker's
modules, builds its commands from it too.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LimitNames:
    """How one limit is named at each level (REST paths, JSON fields, CLI)."""

    setting: str  # BrokerConfig attribute (broker.conf's name is the namespace path)
    namespace_path: str  # /admin/v2/namespaces/{tenant}/{ns}/<path>, broker.conf's name
    namespace_field: str  # in the namespace's Policies document
    namespace_flag: tuple[str, str]  # pulsar-admin namespaces set-<...> option
    topic_path: str  # /admin/v2/persistent/{tenant}/{ns}/{topic}/<path>
    topic_field: str  # in the topic's TopicPolicies document
    topic_flag: tuple[str, str]  # pulsar-admin topicPolicies set-<...> option
    topic_value: str  # what the topic-level validation message calls the value
    default: int  # the broker's default
    namespace_command: str  # pulsar-admin namespaces set-/get-/remove-<command>
    topic_command: str  # pulsar-admin topicPolicies set-/get-/remove-<command>
    # pulsar-admin topics' own names (its older topic-level commands): the first, then
    # its aliases; and the option, where they differ from topicPolicies'.
    topics_commands: tuple[str, ...] = ()
    topics_flag: tuple[str, str] | None = None

    @property
    def topics_cli(self) -> tuple[tuple[str, ...], tuple[str, str]]:
        """``pulsar-admin topics``' commands for this limit and their option."""
        return self.topics_commands or (self.topic_command,), self.topics_flag or self.topic_flag


class Limit(enum.Enum):
    """The limits, each with its names."""

    MAX_PRODUCERS = LimitNames(
        setting="max_producers_per_topic",
        namespace_path="maxProducersPerTopic",
        namespace_field="max_producers_per_topic",
        namespace_flag=("-p", "--max-producers-per-topic"),
        topic_path="maxProducers",
        topic_field="maxProducerPerTopic",
        topic_flag=("-p", "--max-producers"),
        topic_value="maxProducers",
        default=0,
        namespace_command="max-producers-per-topic",
        topic_command="max-producers",
        topics_commands=("max-producers", "maxProducers"),
    )
    MAX_CONSUMERS = LimitNames(
        setting="max_consumers_per_topic",
        namespace_path="maxConsumersPerTopic",
        namespace_field="max_consumers_per_topic",
        namespace_flag=("-c", "--max-consumers-per-topic"),
        topic_path="maxConsumers",
        topic_field="maxConsumerPerTopic",
        topic_flag=("-c", "--max-consumers"),
        topic_value="maxConsumers",
        default=0,
        namespace_command="max-consumers-per-topic",
        topic_command="max-consumers",
    )
    MAX_CONSUMERS_PER_SUBSCRIPTION = LimitNames(
        setting="max_consumers_per_subscription",
        namespace_path="maxConsumersPerSubscription",
        namespace_field="max_consumers_per_subscription",
        namespace_flag=("-c", "--max-consumers-per-subscription"),
        topic_path="maxConsumersPerSubscription",
        topic_field="maxConsumersPerSubscription",
        topic_flag=("-c", "--max-consumers-per-subscription"),
        topic_value="maxConsumersPerSubscription",
        default=0,
        namespace_command="max-consumers-per-subscription",
        topic_command="max-consumers-per-subscription",
    )
    MAX_UNACKED_PER_CONSUMER = LimitNames(
        setting="max_unacked_messages_per_consumer",
        namespace_path="maxUnackedMessagesPerConsumer",
        namespace_field="max_unacked_messages_per_consumer",
        namespace_flag=("-c", "--max-unacked-messages-per-topic"),  # sic: pulsar-admin's flag
        topic_path="maxUnackedMessagesOnConsumer",
        topic_field="maxUnackedMessagesOnConsumer",
        topic_flag=("-m", "--maxNum"),
        topic_value="maxUnackedNum",
        default=50_000,
        namespace_command="max-unacked-messages-per-consumer",
        topic_command="max-unacked-messages-per-consumer",
        topics_commands=("max-unacked-messages-per-consumer", "max-unacked-messages-on-consumer"),
    )
    MAX_UNACKED_PER_SUBSCRIPTION = LimitNames(
        setting="max_unacked_messages_per_subscription",
        namespace_path="maxUnackedMessagesPerSubscription",
        namespace_field="max_unacked_messages_per_subscription",
        namespace_flag=("-c", "--max-unacked-messages-per-subscription"),
        topic_path="maxUnackedMessagesOnSubscription",
        topic_field="maxUnackedMessagesOnSubscription",
        topic_flag=("-m", "--maxNum"),
        topic_value="maxUnackedNum",
        default=200_000,
        namespace_command="max-unacked-messages-per-subscription",
        topic_command="max-unacked-messages-per-subscription",
        topics_commands=(
            "max-unacked-messages-per-subscription",
            "max-unacked-messages-on-subscription",
        ),
    )
    MAX_SUBSCRIPTIONS = LimitNames(
        setting="max_subscriptions_per_topic",
        namespace_path="maxSubscriptionsPerTopic",
        namespace_field="max_subscriptions_per_topic",
        namespace_flag=("-m", "--max-subscriptions-per-topic"),
        topic_path="maxSubscriptionsPerTopic",
        topic_field="maxSubscriptionsPerTopic",
        topic_flag=("-s", "--max-subscriptions-per-topic"),
        topic_value="maxSubscriptionsPerTopic",
        default=0,
        namespace_command="max-subscriptions-per-topic",
        topic_command="max-subscriptions-per-topic",
        topics_commands=("max-subscriptions",),
        topics_flag=("-m", "--max-subscriptions-per-topic"),
    )

    @property
    def names(self) -> LimitNames:
        names: LimitNames = self.value
        return names


def broker_limits(config: Any) -> dict[Limit, int]:
    """The broker's own limits, from its settings (a ``BrokerConfig``)."""
    return {limit: int(getattr(config, limit.names.setting)) for limit in Limit}


def default_limits() -> dict[Limit, int]:
    return {limit: limit.names.default for limit in Limit}
