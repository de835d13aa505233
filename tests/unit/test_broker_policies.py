"""``stripemq.broker.policies``: the policy records, sans-IO. A body's missing fields take
the defaults of Pulsar's DTOs; a document of the wrong shape (a map that is not an object,
clusters that are not a list of names) is an ``InvalidPolicyError``, never a TypeError."""

from __future__ import annotations

from typing import Any

import pytest

from stripemq.broker.policies import (
    AutoTopicCreationOverride,
    BacklogQuota,
    BacklogQuotaPolicy,
    DelayedDeliveryPolicies,
    DispatchRate,
    InactiveTopicDeleteMode,
    InactiveTopicPolicies,
    InvalidPolicyError,
    PersistencePolicies,
    Policies,
    PolicyArgumentError,
    PublishRate,
    QuorumBounds,
    RetentionPolicies,
    TopicType,
    bundle_boundaries,
    parse_bool,
    parse_int,
)


def test_missing_fields_take_pulsars_dto_defaults() -> None:
    assert PublishRate.parse({}) == PublishRate(-1, -1)
    assert PublishRate.parse({"publishThrottlingRateInMsg": 10}) == PublishRate(10, -1)
    assert DispatchRate.parse({"dispatchThrottlingRateInMsg": 10}) == DispatchRate(10, -1, 1, False)
    assert DispatchRate.parse({"dispatchThrottlingRateInByte": None}) == DispatchRate()
    assert RetentionPolicies.parse({}) == RetentionPolicies(0, 0)
    assert BacklogQuota.parse({"policy": "producer_exception"}) == BacklogQuota(
        -1, -1, BacklogQuotaPolicy.PRODUCER_EXCEPTION
    )
    assert AutoTopicCreationOverride.parse({}) == AutoTopicCreationOverride(
        False, TopicType.NON_PARTITIONED, None
    )


@pytest.mark.parametrize(
    ("parse", "body"),
    [
        (PublishRate.parse, {"publishThrottlingRateInMsg": "fast"}),
        (PublishRate.parse, [1]),
        (DispatchRate.parse, {"ratePeriodInSecond": 0}),
        (DispatchRate.parse, {"relativeToPublishRate": "yes"}),
        (RetentionPolicies.parse, {"retentionTimeInMinutes": 10}),  # size 0, time not
        (AutoTopicCreationOverride.parse, {"allowAutoTopicCreation": "true"}),
        (AutoTopicCreationOverride.parse, {"allowAutoTopicCreation": True,
                                           "topicType": "partitioned"}),
        (AutoTopicCreationOverride.parse, {"topicType": "partitioned", "defaultNumPartitions": 0}),
    ],
)  # fmt: skip
def test_bad_bodies_are_invalid(parse: Any, body: object) -> None:
    with pytest.raises(InvalidPolicyError):
        parse(body)


@pytest.mark.parametrize(
    "doc",
    [
        {"replication_clusters": 5},
        {"replication_clusters": "standalone"},
        {"replication_clusters": ["a", 1]},
        {"backlog_quota_map": [1]},
        {"publishMaxMessageRate": [1]},
        {"clusterDispatchRate": "x"},
        {"subscriptionDispatchRate": 3},
        {"bundles": "many"},
        {"bundles": 0},
    ],
)
def test_documents_of_the_wrong_shape_are_invalid(doc: dict[str, Any]) -> None:
    with pytest.raises(InvalidPolicyError):
        Policies.from_json(doc)


def test_documents_read_back_what_they_wrote() -> None:
    policies = Policies(
        bundles=8,
        replication_clusters=("east", "west"),
        retention=RetentionPolicies(60, 100),
        message_ttl_in_seconds=30,
        publish_rates={"east": PublishRate(5, -1)},
        dispatch_rates={"east": DispatchRate(7)},
        auto_topic_creation=AutoTopicCreationOverride(True, TopicType.PARTITIONED, 3),
        persistence=PersistencePolicies(3, 2, 2, 0.5),
        delayed_delivery=DelayedDeliveryPolicies(500, False, 60_000),
    )
    assert Policies.from_json(policies.to_json()) == policies
    assert (
        Policies.from_json({"replication_clusters": None, "backlog_quota_map": None}) == Policies()
    )
    assert bundle_boundaries(4) == [
        "0x00000000",
        "0x40000000",
        "0x80000000",
        "0xc0000000",
        "0xffffffff",
    ]


def test_a_refused_value_is_shown_as_the_json_it_came_as() -> None:
    with pytest.raises(InvalidPolicyError, match=r"must be an integer, not true$"):
        parse_int(True, "message TTL")
    with pytest.raises(InvalidPolicyError, match=r"must be true or false, not null$"):
        parse_bool(None, "deduplication")
    deep: list[Any] = []
    for _ in range(20_000):  # deeper than the JSON encoder goes: still a refusal, not a bug
        deep = [deep]
    with pytest.raises(InvalidPolicyError, match="nested too deeply"):
        parse_int(deep, "message TTL")


def test_persistence_is_checked_as_pulsar_checks_it() -> None:
    bounds = QuorumBounds(3, 3, 2)
    body = {"bookkeeperEnsemble": 3, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 2}
    parsed = PersistencePolicies.parse(body, bounds)
    assert parsed == PersistencePolicies(3, 2, 2, 0.0)  # the rate left out: no throttle
    assert parsed.to_json() == {**body, "managedLedgerMaxMarkDeleteRate": 0.0}
    ledgers = PersistencePolicies(3, 2, 1, 4.0).for_ledgers()
    assert (ledgers.ensemble_size, ledgers.write_quorum_size, ledgers.ack_quorum_size) == (3, 2, 1)
    assert ledgers.mark_delete_interval_ms == 250
    assert parsed.for_ledgers().mark_delete_interval_ms == 0
    tiny = PersistencePolicies(1, 1, 1, 1e-310).for_ledgers()
    assert tiny.mark_delete_interval_ms == 2**31 - 1  # no overflow
    refusals = [
        ({**body, "bookkeeperEnsemble": 4}, "Bookkeeper-Ensemble must be <= 3 and > 0."),
        ({}, "Bookkeeper-Ensemble must be <= 3 and > 0."),  # Jackson's 0
        ({**body, "bookkeeperWriteQuorum": 0}, "Bookkeeper-WriteQuorum must be <= 3 and > 0."),
        ({**body, "bookkeeperAckQuorum": 3}, "Bookkeeper-AckQuorum must be <= 2 and > 0."),
        (
            {**body, "bookkeeperWriteQuorum": 1},
            "Bookkeeper Ensemble (3) >= WriteQuorum (1) >= AckQuorum (2)",
        ),
        (
            {**body, "managedLedgerMaxMarkDeleteRate": -1},
            "managedLedgerMaxMarkDeleteRate must be 0 or more",
        ),
    ]
    for bad, reason in refusals:
        with pytest.raises(PolicyArgumentError) as refused:
            PersistencePolicies.parse(bad, bounds)
        assert str(refused.value) == reason
    for bad_type in (
        [3, 2, 2],
        {**body, "bookkeeperEnsemble": "3"},
        {**body, "managedLedgerMaxMarkDeleteRate": "x"},
    ):
        with pytest.raises(InvalidPolicyError):
            PersistencePolicies.parse(bad_type, bounds)


def test_delayed_delivery_policies_take_pulsars_fields() -> None:
    body = {"tickTime": 250, "active": True, "maxDeliveryDelayInMillis": 10_000}
    assert DelayedDeliveryPolicies.parse(body) == DelayedDeliveryPolicies(250, True, 10_000)
    assert DelayedDeliveryPolicies.parse(body).to_json() == body
    assert DelayedDeliveryPolicies.parse({}) == DelayedDeliveryPolicies(0, False, 0)
    for bad in ({"tickTime": -1}, {"active": "yes"}, {"maxDeliveryDelayInMillis": -5}, [1]):
        with pytest.raises(InvalidPolicyError):
            DelayedDeliveryPolicies.parse(bad)


def test_inactive_topic_policies_take_pulsars_fields() -> None:
    body = {
        "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
        "maxInactiveDurationSeconds": 120,
        "deleteWhileInactive": True,
    }
    parsed = InactiveTopicPolicies.parse(body)
    assert parsed.mode is InactiveTopicDeleteMode.DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP
    assert parsed.to_json() == body
    assert Policies.from_json(Policies(inactive_topic_policies=parsed).to_json()) == Policies(
        inactive_topic_policies=parsed
    )
    for bad in (
        {**body, "inactiveTopicDeleteMode": "delete_always"},
        {**body, "maxInactiveDurationSeconds": -1},
        {**body, "deleteWhileInactive": "yes"},
    ):
        with pytest.raises(InvalidPolicyError):
            InactiveTopicPolicies.parse(bad)
