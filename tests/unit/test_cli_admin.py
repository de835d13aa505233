"""``stripemq admin``'s commands: for every command the HTTP method, path, query and body it
sends, what it prints and how it fails, against a fake broker (``admin_fakes``) that records
what it gets and answers as told. The formats, the output layout and the HTTP client have
their own test files (``test_cli_admin_formats.py``, ``_output.py``, ``_http.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from admin_fakes import Answer, FakeBroker, answer_json

from stripemq.cli import admin
from stripemq.cli.admin_formats import LATEST


@pytest.fixture(scope="module")
def shared_broker() -> Iterator[FakeBroker]:
    server = FakeBroker()
    yield server
    server.close()


@pytest.fixture
def broker(shared_broker: FakeBroker, monkeypatch: pytest.MonkeyPatch) -> FakeBroker:
    shared_broker.seen.clear()
    shared_broker.routes.clear()
    monkeypatch.delenv(admin.ADMIN_URL_ENV, raising=False)
    return shared_broker


def run(broker: FakeBroker, *argv: str) -> int:
    return admin.main(["--admin-url", broker.url, *argv])


# --- commands -> requests -----------------------------------------------------------------

NS = "/admin/v2/namespaces/acme/billing"
TOPIC = "/admin/v2/persistent/acme/billing/orders"
SUB = f"{TOPIC}/subscription/audit"
SCHEMAS = "/admin/v2/schemas/acme/billing/orders"
ANY = object()

# (argv, method, path, query, body) for commands that send one request.
COMMANDS: list[tuple[list[str], str, str, dict[str, str], Any]] = [
    (["clusters", "list"], "GET", "/admin/v2/clusters", {}, None),
    (["clusters", "get", "east"], "GET", "/admin/v2/clusters/east", {}, None),
    (
        ["clusters", "create", "east", "--url", "http://e:8080", "--broker-url", "pulsar://e:6650"],
        "PUT",
        "/admin/v2/clusters/east",
        {},
        {"serviceUrl": "http://e:8080", "brokerServiceUrl": "pulsar://e:6650"},
    ),
    (
        ["clusters", "update", "east", "--url-secure", "https://e", "--broker-url-secure", "x"],
        "POST",
        "/admin/v2/clusters/east",
        {},
        {"serviceUrlTls": "https://e", "brokerServiceUrlTls": "x"},
    ),
    (["clusters", "delete", "east"], "DELETE", "/admin/v2/clusters/east", {}, None),
    (["tenants", "list"], "GET", "/admin/v2/tenants", {}, None),
    (["tenants", "get", "acme"], "GET", "/admin/v2/tenants/acme", {}, None),
    (
        ["tenants", "create", "acme", "-r", "ops,dev", "-c", "east", "--allowed-clusters", "west"],
        "PUT",
        "/admin/v2/tenants/acme",
        {},
        {"adminRoles": ["ops", "dev"], "allowedClusters": ["east", "west"]},
    ),
    (
        ["tenants", "update", "acme", "--admin-roles", "ops", "-c", "east"],
        "POST",
        "/admin/v2/tenants/acme",
        {},
        {"adminRoles": ["ops"], "allowedClusters": ["east"]},
    ),
    (["tenants", "delete", "acme"], "DELETE", "/admin/v2/tenants/acme", {}, None),
    (
        ["tenants", "delete", "acme", "-f"],
        "DELETE",
        "/admin/v2/tenants/acme",
        {"force": "true"},
        None,
    ),
    (["namespaces", "list", "acme"], "GET", "/admin/v2/namespaces/acme", {}, None),
    (["namespaces", "topics", "acme/billing"], "GET", f"{NS}/topics", {}, None),
    (["namespaces", "policies", "acme/billing"], "GET", NS, {}, None),
    (["namespaces", "create", "acme/billing"], "PUT", NS, {}, {}),
    (
        ["namespaces", "create", "acme/billing", "-b", "8", "-c", "east"],
        "PUT",
        NS,
        {},
        {"bundles": {"numBundles": 8}, "replication_clusters": ["east"]},
    ),
    (["namespaces", "delete", "acme/billing"], "DELETE", NS, {}, None),
    (["namespaces", "delete", "acme/billing", "--force"], "DELETE", NS, {"force": "true"}, None),
    (["namespaces", "permissions", "acme/billing"], "GET", f"{NS}/permissions", {}, None),
    (
        [
            "namespaces",
            "grant-permission",
            "acme/billing",
            "--role",
            "app",
            "--actions",
            "produce,consume",
        ],
        "POST",
        f"{NS}/permissions/app",
        {},
        ["produce", "consume"],
    ),
    (
        ["namespaces", "revoke-permission", "acme/billing", "--role", "app"],
        "DELETE",
        f"{NS}/permissions/app",
        {},
        None,
    ),
    (
        ["namespaces", "set-retention", "acme/billing", "-s", "10G", "-t", "3d"],
        "POST",
        f"{NS}/retention",
        {},
        {"retentionTimeInMinutes": 4320, "retentionSizeInMB": 10240},
    ),
    (
        ["namespaces", "set-retention", "acme/billing", "--size", "-1", "--time", "-1"],
        "POST",
        f"{NS}/retention",
        {},
        {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
    ),
    (["namespaces", "get-retention", "acme/billing"], "GET", f"{NS}/retention", {}, None),
    (["namespaces", "remove-retention", "acme/billing"], "DELETE", f"{NS}/retention", {}, None),
    (
        ["namespaces", "set-message-ttl", "acme/billing", "-ttl", "1h"],
        "POST",
        f"{NS}/messageTTL",
        {},
        3600,
    ),
    (
        ["namespaces", "set-message-ttl", "acme/billing", "--messageTTL", "90"],
        "POST",
        f"{NS}/messageTTL",
        {},
        90,
    ),
    (["namespaces", "get-message-ttl", "acme/billing"], "GET", f"{NS}/messageTTL", {}, None),
    (["namespaces", "remove-message-ttl", "acme/billing"], "DELETE", f"{NS}/messageTTL", {}, None),
    (
        ["namespaces", "set-subscription-expiration-time", "acme/billing", "-t", "120"],
        "POST",
        f"{NS}/subscriptionExpirationTime",
        {},
        120,
    ),
    (
        ["namespaces", "get-subscription-expiration-time", "acme/billing"],
        "GET",
        f"{NS}/subscriptionExpirationTime",
        {},
        None,
    ),
    (
        ["namespaces", "remove-subscription-expiration-time", "acme/billing"],
        "DELETE",
        f"{NS}/subscriptionExpirationTime",
        {},
        None,
    ),
    (
        [
            "namespaces",
            "set-backlog-quota",
            "acme/billing",
            "-l",
            "500M",
            "-p",
            "producer_exception",
        ],
        "POST",
        f"{NS}/backlogQuota",
        {"backlogQuotaType": "destination_storage"},
        {
            "limitSize": 500 * 1024**2,
            "limit": 500 * 1024**2,
            "limitTime": -1,
            "policy": "producer_exception",
        },
    ),
    (
        [
            "namespaces",
            "set-backlog-quota",
            "acme/billing",
            "-lt",
            "2h",
            "--policy",
            "consumer_backlog_eviction",
            "--type",
            "message_age",
        ],
        "POST",
        f"{NS}/backlogQuota",
        {"backlogQuotaType": "message_age"},
        {"limitSize": -1, "limitTime": 7200, "policy": "consumer_backlog_eviction"},
    ),
    (
        ["namespaces", "get-backlog-quotas", "acme/billing"],
        "GET",
        f"{NS}/backlogQuotaMap",
        {},
        None,
    ),
    (
        ["namespaces", "remove-backlog-quota", "acme/billing", "-t", "message_age"],
        "DELETE",
        f"{NS}/backlogQuota",
        {"backlogQuotaType": "message_age"},
        None,
    ),
    (
        ["namespaces", "set-deduplication", "acme/billing", "--enable"],
        "POST",
        f"{NS}/deduplication",
        {},
        True,
    ),
    (
        ["namespaces", "set-deduplication", "acme/billing", "-d"],
        "POST",
        f"{NS}/deduplication",
        {},
        False,
    ),
    (["namespaces", "get-deduplication", "acme/billing"], "GET", f"{NS}/deduplication", {}, None),
    (
        ["namespaces", "remove-deduplication", "acme/billing"],
        "DELETE",
        f"{NS}/deduplication",
        {},
        None,
    ),
    (
        ["namespaces", "set-publish-rate", "acme/billing", "-m", "100", "-b", "1024"],
        "POST",
        f"{NS}/publishRate",
        {},
        {"publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": 1024},
    ),
    (
        ["namespaces", "set-publish-rate", "acme/billing", "--msg-publish-rate", "5"],
        "POST",
        f"{NS}/publishRate",
        {},
        {"publishThrottlingRateInMsg": 5, "publishThrottlingRateInByte": -1},
    ),
    (["namespaces", "get-publish-rate", "acme/billing"], "GET", f"{NS}/publishRate", {}, None),
    (
        ["namespaces", "remove-publish-rate", "acme/billing"],
        "DELETE",
        f"{NS}/publishRate",
        {},
        None,
    ),
    (
        ["namespaces", "set-dispatch-rate", "acme/billing", "-md", "50", "-bd", "4096", "-dt", "2"],
        "POST",
        f"{NS}/dispatchRate",
        {},
        {
            "dispatchThrottlingRateInMsg": 50,
            "dispatchThrottlingRateInByte": 4096,
            "ratePeriodInSecond": 2,
            "relativeToPublishRate": False,
        },
    ),
    (["namespaces", "get-dispatch-rate", "acme/billing"], "GET", f"{NS}/dispatchRate", {}, None),
    (
        ["namespaces", "remove-dispatch-rate", "acme/billing"],
        "DELETE",
        f"{NS}/dispatchRate",
        {},
        None,
    ),
    (
        [
            "namespaces",
            "set-subscription-dispatch-rate",
            "acme/billing",
            "--msg-dispatch-rate",
            "7",
            "-rp",
        ],
        "POST",
        f"{NS}/subscriptionDispatchRate",
        {},
        {
            "dispatchThrottlingRateInMsg": 7,
            "dispatchThrottlingRateInByte": -1,
            "ratePeriodInSecond": 1,
            "relativeToPublishRate": True,
        },
    ),
    (
        ["namespaces", "get-subscription-dispatch-rate", "acme/billing"],
        "GET",
        f"{NS}/subscriptionDispatchRate",
        {},
        None,
    ),
    (
        [
            "namespaces",
            "set-auto-topic-creation",
            "acme/billing",
            "-e",
            "-t",
            "partitioned",
            "-n",
            "4",
        ],
        "POST",
        f"{NS}/autoTopicCreation",
        {},
        {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 4},
    ),
    (
        ["namespaces", "set-auto-topic-creation", "acme/billing", "--disable"],
        "POST",
        f"{NS}/autoTopicCreation",
        {},
        {"allowAutoTopicCreation": False, "topicType": "non-partitioned"},
    ),
    (
        ["namespaces", "get-auto-topic-creation", "acme/billing"],
        "GET",
        f"{NS}/autoTopicCreation",
        {},
        None,
    ),
    (
        ["namespaces", "remove-auto-topic-creation", "acme/billing"],
        "DELETE",
        f"{NS}/autoTopicCreation",
        {},
        None,
    ),
    (["namespaces", "unload", "acme/billing"], "PUT", f"{NS}/unload", {}, None),
    (
        ["namespaces", "unload", "acme/billing", "-b", "0x00000000_0x40000000"],
        "PUT",
        f"{NS}/0x00000000_0x40000000/unload",
        {},
        None,
    ),
    (
        ["namespaces", "clear-backlog", "acme/billing", "--force"],
        "POST",
        f"{NS}/clearBacklog",
        {},
        None,
    ),
    (
        ["namespaces", "clear-backlog", "acme/billing", "-force", "-s", "audit"],
        "POST",
        f"{NS}/clearBacklog/audit",
        {},
        None,
    ),
    (
        ["namespaces", "unsubscribe", "acme/billing", "-s", "audit"],
        "POST",
        f"{NS}/unsubscribe/audit",
        {},
        None,
    ),
    (["topics", "list", "acme/billing"], "GET", "/admin/v2/persistent/acme/billing", {}, None),
    (
        ["topics", "list", "acme/billing", "-td", "persistent", "-ist"],
        "GET",
        "/admin/v2/persistent/acme/billing",
        {"includeSystemTopic": "true"},
        None,
    ),
    (
        ["namespaces", "topics", "acme/billing", "--include-system-topic"],
        "GET",
        f"{NS}/topics",
        {"includeSystemTopic": "true"},
        None,
    ),
    (
        ["topics", "list-partitioned-topics", "acme/billing"],
        "GET",
        "/admin/v2/persistent/acme/billing/partitioned",
        {},
        None,
    ),
    (["topics", "create", "acme/billing/orders"], "PUT", TOPIC, {}, None),
    (
        ["topics", "create", "persistent://acme/billing/orders", "-m", "owner=ops"],
        "PUT",
        TOPIC,
        {},
        {"owner": "ops"},
    ),
    (
        ["topics", "create", "orders"],
        "PUT",
        "/admin/v2/persistent/public/default/orders",
        {},
        None,
    ),
    (
        ["topics", "create-partitioned-topic", "acme/billing/orders", "-p", "4"],
        "PUT",
        f"{TOPIC}/partitions",
        {},
        4,
    ),
    (
        [
            "topics",
            "create-partitioned-topic",
            "acme/billing/orders",
            "--partitions",
            "2",
            "-m",
            "a=b",
        ],
        "PUT",
        f"{TOPIC}/partitions",
        {},
        {"partitions": 2, "properties": {"a": "b"}},
    ),
    (
        ["topics", "update-partitioned-topic", "acme/billing/orders", "-p", "8"],
        "POST",
        f"{TOPIC}/partitions",
        {},
        8,
    ),
    (
        ["topics", "update-partitioned-topic", "acme/billing/orders", "-p", "8", "-f"],
        "POST",
        f"{TOPIC}/partitions",
        {"force": "true"},
        8,
    ),
    (
        ["topics", "get-partitioned-topic-metadata", "acme/billing/orders"],
        "GET",
        f"{TOPIC}/partitions",
        {},
        None,
    ),
    (["topics", "delete", "acme/billing/orders"], "DELETE", TOPIC, {}, None),
    (["topics", "delete", "acme/billing/orders", "-f"], "DELETE", TOPIC, {"force": "true"}, None),
    (["topics", "delete", "acme/billing/orders", "-d"], "DELETE", TOPIC, {}, None),
    (
        ["topics", "delete-partitioned-topic", "acme/billing/orders", "--force"],
        "DELETE",
        f"{TOPIC}/partitions",
        {"force": "true"},
        None,
    ),
    (["topics", "stats", "acme/billing/orders"], "GET", f"{TOPIC}/stats", {}, None),
    (
        ["topics", "stats", "acme/billing/orders", "-gpb", "-etb"],
        "GET",
        f"{TOPIC}/stats",
        {"getPreciseBacklog": "true", "getEarliestTimeInBacklog": "true"},
        None,
    ),
    (
        ["topics", "stats-internal", "acme/billing/orders"],
        "GET",
        f"{TOPIC}/internalStats",
        {},
        None,
    ),
    (
        ["topics", "partitioned-stats", "acme/billing/orders", "--per-partition"],
        "GET",
        f"{TOPIC}/partitioned-stats",
        {"perPartition": "true"},
        None,
    ),
    (
        ["topics", "partitioned-stats", "acme/billing/orders"],
        "GET",
        f"{TOPIC}/partitioned-stats",
        {"perPartition": "false"},
        None,
    ),
    (
        ["topics", "partitioned-stats-internal", "acme/billing/orders"],
        "GET",
        f"{TOPIC}/partitioned-internalStats",
        {},
        None,
    ),
    (
        ["topics", "subscriptions", "acme/billing/orders"],
        "GET",
        f"{TOPIC}/subscriptions",
        {},
        None,
    ),
    (
        ["topics", "create-subscription", "acme/billing/orders", "-s", "audit"],
        "PUT",
        SUB,
        {},
        {
            "ledgerId": LATEST[0],
            "entryId": LATEST[1],
            "partitionIndex": -1,
            "isExcluded": False,
            "batchIndex": -1,
        },
    ),
    (
        ["topics", "create-subscription", "acme/billing/orders", "-s", "audit", "-m", "earliest"],
        "PUT",
        SUB,
        {},
        {
            "ledgerId": -1,
            "entryId": -1,
            "partitionIndex": -1,
            "isExcluded": False,
            "batchIndex": -1,
        },
    ),
    (
        [
            "topics",
            "create-subscription",
            "acme/billing/orders",
            "--subscription",
            "audit",
            "--messageId",
            "5:9",
        ],
        "PUT",
        SUB,
        {},
        {"ledgerId": 5, "entryId": 9, "partitionIndex": -1, "isExcluded": False, "batchIndex": -1},
    ),
    (
        ["topics", "unsubscribe", "acme/billing/orders", "-s", "audit"],
        "DELETE",
        SUB,
        {},
        None,
    ),
    (
        ["topics", "unsubscribe", "acme/billing/orders", "-s", "audit", "-f"],
        "DELETE",
        SUB,
        {"force": "true"},
        None,
    ),
    (
        ["topics", "clear-backlog", "acme/billing/orders", "-s", "audit"],
        "POST",
        f"{SUB}/skip_all",
        {},
        None,
    ),
    (
        ["topics", "skip", "acme/billing/orders", "-s", "audit", "-n", "10"],
        "POST",
        f"{SUB}/skip/10",
        {},
        None,
    ),
    (
        ["topics", "skip", "acme/billing/orders", "--subscription", "audit", "--count", "3"],
        "POST",
        f"{SUB}/skip/3",
        {},
        None,
    ),
    (
        ["topics", "expire-messages", "acme/billing/orders", "-s", "audit", "-t", "1h"],
        "POST",
        f"{SUB}/expireMessages/3600",
        {},
        None,
    ),
    (
        ["topics", "expire-messages", "acme/billing/orders", "-s", "audit", "--expireTime", "30"],
        "POST",
        f"{SUB}/expireMessages/30",
        {},
        None,
    ),
    (
        ["topics", "expire-messages", "acme/billing/orders", "-s", "audit", "-p", "4:2", "-e"],
        "POST",
        f"{SUB}/expireMessages",
        {},
        {"ledgerId": 4, "entryId": 2, "partitionIndex": -1, "isExcluded": True, "batchIndex": -1},
    ),
    (
        ["topics", "expire-messages-all-subscriptions", "acme/billing/orders", "-t", "2m"],
        "POST",
        f"{TOPIC}/all_subscription/expireMessages/120",
        {},
        None,
    ),
    (
        ["topics", "reset-cursor", "acme/billing/orders", "-s", "audit", "-m", "3:1"],
        "POST",
        f"{SUB}/resetcursor",
        {},
        {"ledgerId": 3, "entryId": 1, "partitionIndex": -1, "isExcluded": False, "batchIndex": -1},
    ),
    (
        [
            "topics",
            "reset-cursor",
            "acme/billing/orders",
            "-s",
            "audit",
            "--messageId",
            "earliest",
            "-e",
        ],
        "POST",
        f"{SUB}/resetcursor",
        {},
        {"ledgerId": -1, "entryId": -1, "partitionIndex": -1, "isExcluded": True, "batchIndex": -1},
    ),
    (
        ["topics", "last-message-id", "acme/billing/orders"],
        "GET",
        f"{TOPIC}/lastMessageId",
        {},
        None,
    ),
    (["topics", "unload", "acme/billing/orders"], "PUT", f"{TOPIC}/unload", {}, None),
    (
        ["topics", "lookup", "acme/billing/orders"],
        "GET",
        "/lookup/v2/topic/persistent/acme/billing/orders",
        {},
        None,
    ),
    (["brokers", "list"], "GET", "/admin/v2/brokers", {}, None),
    (["brokers", "list", "standalone"], "GET", "/admin/v2/brokers/standalone", {}, None),
    (["brokers", "leader-broker"], "GET", "/admin/v2/brokers/leaderBroker", {}, None),
    (["brokers", "healthcheck"], "GET", "/admin/v2/brokers/health", {}, None),
    (["brokers", "version"], "GET", "/admin/v2/brokers/version", {}, None),
    (
        ["brokers", "get-runtime-config"],
        "GET",
        "/admin/v2/brokers/configuration/runtime",
        {},
        None,
    ),
    (
        ["brokers", "get-internal-config"],
        "GET",
        "/admin/v2/brokers/internal-configuration",
        {},
        None,
    ),
    (["brokers", "list-dynamic-config"], "GET", "/admin/v2/brokers/configuration", {}, None),
    (
        ["brokers", "backlog-quota-check"],
        "GET",
        "/admin/v2/brokers/backlog-quota-check",
        {},
        None,
    ),
    (
        ["brokers", "get-all-dynamic-config"],
        "GET",
        "/admin/v2/brokers/configuration/values",
        {},
        None,
    ),
    (
        ["brokers", "update-dynamic-config", "-c", "maxMessageSize", "-v", "1024"],
        "POST",
        "/admin/v2/brokers/configuration/maxMessageSize/1024",
        {},
        None,
    ),
    (
        ["brokers", "delete-dynamic-config", "--config", "maxMessageSize"],
        "DELETE",
        "/admin/v2/brokers/configuration/maxMessageSize",
        {},
        None,
    ),
    (
        ["topics", "get-message-by-id", "acme/billing/orders", "-l", "3", "-e", "7"],
        "GET",
        f"{TOPIC}/ledger/3/entry/7",
        {},
        None,
    ),
    (
        ["namespaces", "set-schema-compatibility-strategy", "acme/billing", "-c", "backward"],
        "PUT",
        f"{NS}/schemaCompatibilityStrategy",
        {},
        "BACKWARD",
    ),
    (
        ["namespaces", "get-schema-compatibility-strategy", "acme/billing"],
        "GET",
        f"{NS}/schemaCompatibilityStrategy",
        {},
        None,
    ),
    (
        ["namespaces", "set-is-allow-auto-update-schema", "acme/billing", "--disable"],
        "POST",
        f"{NS}/isAllowAutoUpdateSchema",
        {},
        False,
    ),
    (
        ["namespaces", "get-is-allow-auto-update-schema", "acme/billing"],
        "GET",
        f"{NS}/isAllowAutoUpdateSchema",
        {},
        None,
    ),
    (
        ["namespaces", "set-schema-validation-enforce", "acme/billing", "-e"],
        "POST",
        f"{NS}/schemaValidationEnforced",
        {},
        True,
    ),
    (
        ["namespaces", "set-compaction-threshold", "acme/billing", "-t", "10M"],
        "PUT",
        f"{NS}/compactionThreshold",
        {},
        10 * 1024 * 1024,
    ),
    (
        ["namespaces", "get-compaction-threshold", "acme/billing"],
        "GET",
        f"{NS}/compactionThreshold",
        {},
        None,
    ),
    (
        ["namespaces", "remove-compaction-threshold", "acme/billing"],
        "DELETE",
        f"{NS}/compactionThreshold",
        {},
        None,
    ),
    (
        ["topicPolicies", "set-compaction-threshold", "acme/billing/orders", "-t", "1G"],
        "POST",
        f"{TOPIC}/compactionThreshold",
        {},
        1024**3,
    ),
    (
        ["topicPolicies", "get-compaction-threshold", "acme/billing/orders", "-ap"],
        "GET",
        f"{TOPIC}/compactionThreshold",
        {"applied": "true"},
        None,
    ),
    (["topics", "compact", "acme/billing/orders"], "PUT", f"{TOPIC}/compaction", {}, None),
    (
        ["namespaces", "set-max-producers-per-topic", "acme/billing", "-p", "3"],
        "POST",
        f"{NS}/maxProducersPerTopic",
        {},
        3,
    ),
    (
        [
            "namespaces",
            "set-max-unacked-messages-per-consumer",
            "acme/billing",
            "--max-unacked-messages-per-topic",
            "100",
        ],
        "POST",
        f"{NS}/maxUnackedMessagesPerConsumer",
        {},
        100,
    ),
    (
        ["namespaces", "set-max-subscriptions-per-topic", "acme/billing", "-m", "4"],
        "POST",
        f"{NS}/maxSubscriptionsPerTopic",
        {},
        4,
    ),
    (
        ["namespaces", "get-max-consumers-per-subscription", "acme/billing"],
        "GET",
        f"{NS}/maxConsumersPerSubscription",
        {},
        None,
    ),
    (
        ["namespaces", "remove-max-consumers-per-topic", "acme/billing"],
        "DELETE",
        f"{NS}/maxConsumersPerTopic",
        {},
        None,
    ),
    (
        ["topicPolicies", "set-max-producers", "acme/billing/orders", "-p", "2"],
        "POST",
        f"{TOPIC}/maxProducers",
        {},
        2,
    ),
    (
        [
            "topicPolicies",
            "set-max-unacked-messages-per-subscription",
            "acme/billing/orders",
            "-m",
            "500",
        ],
        "POST",
        f"{TOPIC}/maxUnackedMessagesOnSubscription",
        {},
        500,
    ),
    (
        ["topicPolicies", "set-max-subscriptions-per-topic", "acme/billing/orders", "-s", "9"],
        "POST",
        f"{TOPIC}/maxSubscriptionsPerTopic",
        {},
        9,
    ),
    (
        ["topicPolicies", "get-max-consumers", "acme/billing/orders", "-ap"],
        "GET",
        f"{TOPIC}/maxConsumers",
        {"applied": "true"},
        None,
    ),
    (
        ["namespaces", "get-schema-validation-enforce", "acme/billing", "-ap"],
        "GET",
        f"{NS}/schemaValidationEnforced",
        {"applied": "true"},
        None,
    ),
    (
        ["namespaces", "set-persistence", "acme/billing", "-e", "3", "-w", "2", "-a", "2"],
        "POST",
        f"{NS}/persistence",
        {},
        {
            "bookkeeperEnsemble": 3,
            "bookkeeperWriteQuorum": 2,
            "bookkeeperAckQuorum": 2,
            "managedLedgerMaxMarkDeleteRate": 0.0,
        },
    ),
    (
        ["namespaces", "set-persistence", "acme/billing", "-r", "1"],
        "POST",
        f"{NS}/persistence",
        {},
        {
            "bookkeeperEnsemble": 2,
            "bookkeeperWriteQuorum": 2,
            "bookkeeperAckQuorum": 2,
            "managedLedgerMaxMarkDeleteRate": 1.0,
        },
    ),
    (["namespaces", "get-persistence", "acme/billing"], "GET", f"{NS}/persistence", {}, None),
    (
        [
            "namespaces",
            "set-inactive-topic-policies",
            "acme/billing",
            "-e",
            "-t",
            "1h",
            "-m",
            "delete_when_subscriptions_caught_up",
        ],
        "POST",
        f"{NS}/inactiveTopicPolicies",
        {},
        {
            "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
            "maxInactiveDurationSeconds": 3600,
            "deleteWhileInactive": True,
        },
    ),
    (
        ["topics", "get-inactive-topic-policies", "acme/billing/orders", "-ap"],
        "GET",
        f"{TOPIC}/inactiveTopicPolicies",
        {"applied": "true"},
        None,
    ),
    # pulsar-admin topics' own topic-level commands, some under names of their own.
    (
        ["topics", "set-max-subscriptions", "acme/billing/orders", "-m", "7"],
        "POST",
        f"{TOPIC}/maxSubscriptionsPerTopic",
        {},
        7,
    ),
    (
        ["topics", "set-maxProducers", "acme/billing/orders", "-p", "2"],
        "POST",
        f"{TOPIC}/maxProducers",
        {},
        2,
    ),
    (
        ["topics", "set-max-unacked-messages-on-consumer", "acme/billing/orders", "-m", "9"],
        "POST",
        f"{TOPIC}/maxUnackedMessagesOnConsumer",
        {},
        9,
    ),
    (
        ["topics", "get-max-unacked-messages-per-subscription", "acme/billing/orders", "-ap"],
        "GET",
        f"{TOPIC}/maxUnackedMessagesOnSubscription",
        {"applied": "true"},
        None,
    ),
    (
        ["topics", "set-message-ttl", "acme/billing/orders", "-t", "60"],
        "POST",
        f"{TOPIC}/messageTTL",
        {"messageTTL": "60"},
        None,
    ),
    (
        ["topics", "get-backlog-quotas", "acme/billing/orders"],
        "GET",
        f"{TOPIC}/backlogQuotaMap",
        {},
        None,
    ),
    (
        ["topics", "remove-persistence", "acme/billing/orders"],
        "DELETE",
        f"{TOPIC}/persistence",
        {},
        None,
    ),
    (
        ["namespaces", "set-max-topics-per-namespace", "acme/billing", "-t", "100"],
        "POST",
        f"{NS}/maxTopicsPerNamespace",
        {},
        100,
    ),
    (
        ["namespaces", "remove-max-topics-per-namespace", "acme/billing"],
        "DELETE",
        f"{NS}/maxTopicsPerNamespace",
        {},
        None,
    ),
    (
        ["namespaces", "set-encryption-required", "acme/billing", "-e"],
        "POST",
        f"{NS}/encryptionRequired",
        {},
        True,
    ),
    (
        ["namespaces", "get-encryption-required", "acme/billing"],
        "GET",
        f"{NS}/encryptionRequired",
        {},
        None,
    ),
    (
        ["namespaces", "set-subscription-types-enabled", "acme/billing", "-t", "Shared,failover"],
        "POST",
        f"{NS}/subscriptionTypesEnabled",
        {},
        ["Shared", "Failover"],
    ),
    (
        [
            "topicPolicies",
            "set-subscription-types-enabled",
            "acme/billing/orders",
            "--types",
            "Key_Shared",
        ],
        "POST",
        f"{TOPIC}/subscriptionTypesEnabled",
        {},
        ["Key_Shared"],
    ),
    (
        ["topicPolicies", "get-subscription-types-enabled", "acme/billing/orders", "-ap"],
        "GET",
        f"{TOPIC}/subscriptionTypesEnabled",
        {"applied": "true"},
        None,
    ),
    (
        ["namespaces", "set-delayed-delivery", "acme/billing", "-e", "-t", "2s", "-md", "1h"],
        "POST",
        f"{NS}/delayedDelivery",
        {},
        {"active": True, "tickTime": 2000, "maxDeliveryDelayInMillis": 3_600_000},
    ),
    (
        ["topicPolicies", "set-delayed-delivery", "acme/billing/orders", "--disable"],
        "POST",
        f"{TOPIC}/delayedDelivery",
        {},
        {"active": False, "tickTime": 1000, "maxDeliveryDelayInMillis": 0},
    ),
    (
        ["topicPolicies", "get-delayed-delivery", "acme/billing/orders", "-ap"],
        "GET",
        f"{TOPIC}/delayedDelivery",
        {"applied": "true"},
        None,
    ),
    (
        ["namespaces", "remove-delayed-delivery", "acme/billing"],
        "DELETE",
        f"{NS}/delayedDelivery",
        {},
        None,
    ),
    (
        ["namespaces", "remove-persistence", "acme/billing"],
        "DELETE",
        f"{NS}/persistence",
        {},
        None,
    ),
    (
        [
            "topicPolicies",
            "set-persistence",
            "acme/billing/orders",
            "--bookkeeper-ensemble",
            "2",
            "--bookkeeper-write-quorum",
            "2",
            "--bookkeeper-ack-quorum",
            "1",
            "--ml-mark-delete-max-rate",
            "2.5",
        ],
        "POST",
        f"{TOPIC}/persistence",
        {},
        {
            "bookkeeperEnsemble": 2,
            "bookkeeperWriteQuorum": 2,
            "bookkeeperAckQuorum": 1,
            "managedLedgerMaxMarkDeleteRate": 2.5,
        },
    ),
    (
        ["topicPolicies", "get-persistence", "acme/billing/orders", "-ap"],
        "GET",
        f"{TOPIC}/persistence",
        {"applied": "true"},
        None,
    ),
    (
        ["topicPolicies", "set-retention", "acme/billing/orders", "-t", "3h", "-s", "1G"],
        "POST",
        f"{TOPIC}/retention",
        {},
        {"retentionTimeInMinutes": 180, "retentionSizeInMB": 1024},
    ),
    (
        ["topicPolicies", "get-retention", "acme/billing/orders", "-ap"],
        "GET",
        f"{TOPIC}/retention",
        {"applied": "true"},
        None,
    ),
    (  # as given: the broker refuses a partition (412)
        ["topicPolicies", "get-message-ttl", "acme/billing/orders-partition-2"],
        "GET",
        f"{TOPIC}-partition-2/messageTTL",
        {},
        None,
    ),
    (
        ["topicPolicies", "get-backlog-quota", "acme/billing/orders", "-ap"],
        "GET",
        f"{TOPIC}/backlogQuotaMap",
        {"applied": "true"},
        None,
    ),
    (
        ["topicPolicies", "set-message-ttl", "acme/billing/orders", "-t", "2m", "-g"],
        "POST",
        f"{TOPIC}/messageTTL",
        {"messageTTL": "120"},
        None,
    ),
    (
        ["topicPolicies", "set-deduplication", "acme/billing/orders", "--enable"],
        "POST",
        f"{TOPIC}/deduplicationEnabled",
        {},
        True,
    ),
    (
        ["topicPolicies", "remove-deduplication", "acme/billing/orders"],
        "DELETE",
        f"{TOPIC}/deduplicationEnabled",
        {},
        None,
    ),
    (
        ["topicPolicies", "get-backlog-quota", "acme/billing/orders"],
        "GET",
        f"{TOPIC}/backlogQuotaMap",
        {},
        None,
    ),
    (
        ["topicPolicies", "set-schema-compatibility-strategy", "acme/billing/orders", "-s", "full"],
        "PUT",
        f"{TOPIC}/schemaCompatibilityStrategy",
        {},
        "FULL",
    ),
    (
        ["topicPolicies", "set-dispatch-rate", "acme/billing/orders", "-md", "10"],
        "POST",
        f"{TOPIC}/dispatchRate",
        {},
        {
            "dispatchThrottlingRateInMsg": 10,
            "dispatchThrottlingRateInByte": -1,
            "ratePeriodInSecond": 1,
            "relativeToPublishRate": False,
        },
    ),
    (
        ["topics", "set-schema-validation-enforce", "acme/billing/orders", "-e"],
        "POST",
        f"{TOPIC}/schemaValidationEnforced",
        {},
        True,
    ),
    (
        ["topics", "get-schema-validation-enforce", "acme/billing/orders"],
        "GET",
        f"{TOPIC}/schemaValidationEnforced",
        {},
        None,
    ),
    (
        ["schemas", "delete", "acme/billing/orders-partition-1", "-f"],
        "DELETE",
        f"{SCHEMAS}/schema",
        {"force": "true"},
        None,
    ),
]


@pytest.mark.parametrize(
    ("argv", "method", "path", "query", "body"),
    COMMANDS,
    ids=[" ".join(c[0][:2]) for c in COMMANDS],
)
def test_each_command_sends_pulsars_request(
    broker: FakeBroker,
    argv: list[str],
    method: str,
    path: str,
    query: dict[str, str],
    body: Any,
) -> None:
    assert run(broker, *argv) == 0
    (seen,) = broker.seen
    assert (seen.method, seen.path, seen.query) == (method, path, query)
    assert seen.json() == body
    if body is not None:
        assert seen.headers["content-type"] == "application/json"


def test_reset_cursor_by_time_goes_back_from_now(broker: FakeBroker) -> None:
    import time

    before = int(time.time() * 1000)
    assert (
        run(broker, "topics", "reset-cursor", "acme/billing/orders", "-s", "audit", "-t", "10m")
        == 0
    )
    after = int(time.time() * 1000)
    (seen,) = broker.seen
    prefix = f"{SUB}/resetcursor/"
    assert seen.method == "POST" and seen.path.startswith(prefix)
    timestamp = int(seen.path[len(prefix) :])
    assert before - 600_000 <= timestamp <= after - 600_000


def test_tenant_create_defaults_to_every_cluster(broker: FakeBroker) -> None:
    broker.on("GET", "/admin/v2/clusters", answer_json(["east", "west"]))
    assert run(broker, "tenants", "create", "acme") == 0
    assert [(s.method, s.path) for s in broker.seen] == [
        ("GET", "/admin/v2/clusters"),
        ("PUT", "/admin/v2/tenants/acme"),
    ]
    assert broker.seen[1].json() == {"adminRoles": [], "allowedClusters": ["east", "west"]}


def test_tenant_update_keeps_what_is_not_given(broker: FakeBroker) -> None:
    current = {"adminRoles": ["ops"], "allowedClusters": ["east"]}
    broker.on("GET", "/admin/v2/tenants/acme", answer_json(current))
    assert run(broker, "tenants", "update", "acme", "-c", "east,west") == 0
    assert broker.seen[-1].method == "POST"
    assert broker.seen[-1].json() == {"adminRoles": ["ops"], "allowedClusters": ["east", "west"]}


def test_clusters_list_current_marks_this_cluster(broker: FakeBroker, capsys: Any) -> None:
    broker.on("GET", "/admin/v2/clusters", answer_json(["east", "standalone"]))
    broker.on(
        "GET", "/admin/v2/brokers/configuration/runtime", answer_json({"clusterName": "standalone"})
    )
    assert run(broker, "clusters", "list", "--current") == 0
    assert capsys.readouterr().out == "east\nstandalone(*)\n"


def test_terminate_prints_the_last_message_id(broker: FakeBroker, capsys: Any) -> None:
    broker.on(
        "POST",
        f"{TOPIC}/terminate",
        answer_json({"ledgerId": 9, "entryId": 4, "partitionIndex": -1}),
    )
    assert run(broker, "topics", "terminate", "acme/billing/orders") == 0
    assert broker.seen[0].method == "POST"
    assert capsys.readouterr().out == "Topic successfully terminated at 9:4:-1\n"


def test_compact_requests_compaction(broker: FakeBroker, capsys: Any) -> None:
    broker.on("PUT", f"{TOPIC}/compaction", Answer(204))
    assert run(broker, "topics", "compact", "acme/billing/orders") == 0
    assert broker.seen[0].method == "PUT"
    out = capsys.readouterr().out
    assert out == "Topic compaction requested for persistent://acme/billing/orders\n"


@pytest.mark.parametrize(
    ("status", "printed"),
    [
        (
            "NOT_RUN",
            "Compaction has not been run for persistent://acme/billing/orders since broker startup",
        ),
        ("RUNNING", "Compaction is currently running"),
        ("SUCCESS", "Compaction was a success"),
    ],
)
def test_compaction_status_says_how_it_went(
    broker: FakeBroker, capsys: Any, status: str, printed: str
) -> None:
    broker.on("GET", f"{TOPIC}/compaction", answer_json({"status": status, "lastError": ""}))
    assert run(broker, "topics", "compaction-status", "acme/billing/orders") == 0
    assert capsys.readouterr().out == printed + "\n"


def test_compaction_status_waits_and_a_failure_is_an_error(
    broker: FakeBroker, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin, "COMPACTION_POLL_S", 0.0)
    broker.on(
        "GET",
        f"{TOPIC}/compaction",
        answer_json({"status": "RUNNING", "lastError": ""}),
        answer_json({"status": "ERROR", "lastError": "bookies are gone"}),
    )
    assert run(broker, "topics", "compaction-status", "-w", "acme/billing/orders") == 1
    assert len(broker.seen) == 2
    assert "Error compacting: bookies are gone" in capsys.readouterr().err


def test_peek_reads_positions_until_there_are_no_more(broker: FakeBroker, capsys: Any) -> None:
    def message(entry: int, body: bytes) -> Answer:
        headers = {"X-Pulsar-Message-ID": f"3:{entry}", "X-Pulsar-publish-time": "1000"}
        return Answer(200, body, headers)

    broker.on("GET", f"{SUB}/position/1", message(0, b"first"))
    broker.on("GET", f"{SUB}/position/2", message(1, b"second"))
    broker.on("GET", f"{SUB}/position/3", Answer(404, b'{"reason":"Message not found"}'))
    assert (
        run(broker, "topics", "peek-messages", "acme/billing/orders", "-s", "audit", "-n", "5") == 0
    )
    assert [s.path for s in broker.seen] == [f"{SUB}/position/{n}" for n in (1, 2, 3)]
    out = capsys.readouterr().out
    assert out.startswith("Message ID: 3:0\nPublish time: 1000\n")
    assert "Message ID: 3:1" in out and "|second" in out

    broker.seen.clear()
    assert run(broker, "topics", "peek-messages", "acme/billing/orders", "-s", "audit") == 0
    assert [s.path for s in broker.seen] == [f"{SUB}/position/1"]  # -n defaults to 1


def test_examine_message_and_get_message_by_id(broker: FakeBroker, capsys: Any) -> None:
    headers = {"X-Pulsar-Message-ID": "3:7", "X-Pulsar-publish-time": "1000"}
    broker.on("GET", f"{TOPIC}/examinemessage", Answer(200, b"newest", headers))
    assert run(broker, "topics", "examine-message", "acme/billing/orders") == 0
    assert broker.seen[-1].query == {"initialPosition": "latest", "messagePosition": "1"}
    out = capsys.readouterr().out
    assert out.startswith("Message ID: 3:7\nPublish time: 1000\n") and "|newest" in out
    args = ["examine-message", "acme/billing/orders", "-i", "earliest", "-m", "4"]
    assert run(broker, "topics", *args) == 0
    assert broker.seen[-1].query == {"initialPosition": "earliest", "messagePosition": "4"}
    capsys.readouterr()

    broker.on("GET", f"{TOPIC}/ledger/3/entry/7", Answer(200, b"that one", headers))
    assert (
        run(broker, "topics", "get-message-by-id", "acme/billing/orders", "-l", "3", "-e", "7") == 0
    )
    assert "|that one" in capsys.readouterr().out
    broker.on("GET", f"{TOPIC}/ledger/3/entry/8", Answer(404, b'{"reason":"Message not found"}'))
    assert (
        run(broker, "topics", "get-message-by-id", "acme/billing/orders", "-l", "3", "-e", "8") == 1
    )
    assert "Message not found" in capsys.readouterr().err


def test_peek_of_an_empty_subscription_prints_nothing(broker: FakeBroker, capsys: Any) -> None:
    broker.on("GET", f"{SUB}/position/1", Answer(404, b'{"reason":"Message not found"}'))
    broker.on("GET", f"{TOPIC}/subscriptions", answer_json(["audit"]))
    assert run(broker, "topics", "peek-messages", "acme/billing/orders", "-s", "audit") == 0
    assert capsys.readouterr().out == ""


def test_peek_of_an_unknown_subscription_fails(broker: FakeBroker, capsys: Any) -> None:
    broker.on("GET", f"{SUB}/position/1", Answer(404, b'{"reason":"Subscription not found"}'))
    broker.on("GET", f"{TOPIC}/subscriptions", answer_json(["other"]))
    assert run(broker, "topics", "peek-messages", "acme/billing/orders", "-s", "audit") == 1
    assert "Subscription not found" in capsys.readouterr().err


def test_clear_backlog_asks_first(
    broker: FakeBroker, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    assert run(broker, "namespaces", "clear-backlog", "acme/billing") == 1  # not done
    assert broker.seen == []
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # no one to answer: not done either
    assert run(broker, "namespaces", "clear-backlog", "acme/billing") == 1
    assert "not confirmed" in capsys.readouterr().err
    assert broker.seen == []
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    assert run(broker, "namespaces", "clear-backlog", "acme/billing") == 0
    assert [(s.method, s.path) for s in broker.seen] == [("POST", f"{NS}/clearBacklog")]


def test_delete_cluster_with_all_deletes_its_data(broker: FakeBroker) -> None:
    broker.on("GET", "/admin/v2/tenants", answer_json(["acme"]))
    broker.on("GET", "/admin/v2/namespaces/acme", answer_json(["acme/billing"]))
    broker.on(
        "GET",
        "/admin/v2/persistent/acme/billing/partitioned",
        answer_json(["persistent://acme/billing/p"]),
    )
    broker.on(
        "GET", "/admin/v2/persistent/acme/billing", answer_json(["persistent://acme/billing/t"])
    )
    assert run(broker, "clusters", "delete", "east", "-a") == 0
    deletes = [(s.path, s.query) for s in broker.seen if s.method == "DELETE"]
    assert deletes == [
        ("/admin/v2/persistent/acme/billing/p/partitions", {"force": "true"}),
        ("/admin/v2/persistent/acme/billing/t", {"force": "true"}),
        (NS, {"force": "true"}),
        ("/admin/v2/tenants/acme", {}),
        ("/admin/v2/clusters/east", {}),
    ]


# --- output through the command ------------------------------------------------------------


def test_lists_print_one_per_line(broker: FakeBroker, capsys: Any) -> None:
    broker.on("GET", "/admin/v2/tenants", answer_json(["public", "acme"]))
    assert run(broker, "tenants", "list") == 0
    assert capsys.readouterr().out == "public\nacme\n"
    broker.on("GET", "/admin/v2/tenants", answer_json([]))
    assert run(broker, "tenants", "list") == 0
    assert capsys.readouterr().out == ""


def test_objects_print_as_pretty_json(broker: FakeBroker, capsys: Any) -> None:
    info = {"adminRoles": [], "allowedClusters": ["standalone"]}
    broker.on("GET", "/admin/v2/tenants/public", answer_json(info))
    assert run(broker, "tenants", "get", "public") == 0
    out = capsys.readouterr().out
    assert out == '{\n  "adminRoles" : [ ],\n  "allowedClusters" : [ "standalone" ]\n}\n'
    assert json.loads(out) == info


def test_unset_policies_print_null_and_writes_print_nothing(
    broker: FakeBroker, capsys: Any
) -> None:
    broker.on("GET", f"{NS}/messageTTL", Answer(204))
    assert run(broker, "namespaces", "get-message-ttl", "acme/billing") == 0
    assert capsys.readouterr().out == "null\n"
    assert run(broker, "namespaces", "set-message-ttl", "acme/billing", "-ttl", "10") == 0
    assert capsys.readouterr().out == ""


def test_text_answers_print_as_text(broker: FakeBroker, capsys: Any) -> None:
    broker.on("GET", "/admin/v2/brokers/version", Answer(200, b"4.0.0-stripemq"))
    broker.on("GET", "/admin/v2/brokers/health", Answer(200, b"ok"))
    broker.on(
        "GET",
        "/lookup/v2/topic/persistent/public/default/t",
        answer_json({"brokerUrl": "pulsar://b:6650"}),
    )
    assert run(broker, "brokers", "version") == 0
    assert run(broker, "brokers", "healthcheck") == 0
    assert run(broker, "topics", "lookup", "t") == 0
    assert capsys.readouterr().out == "4.0.0-stripemq\nok\npulsar://b:6650\n"


def test_table_output(broker: FakeBroker, capsys: Any) -> None:
    broker.on("GET", "/admin/v2/tenants", answer_json(["public", "acme"]))
    assert run(broker, "-o", "table", "tenants", "list") == 0
    out = capsys.readouterr().out
    assert "tenant" in out and "public" in out and "acme" in out
    broker.on("GET", "/admin/v2/tenants/acme", answer_json({"adminRoles": ["ops"]}))
    assert run(broker, "tenants", "get", "acme", "--output", "table") == 0  # after the command
    out = capsys.readouterr().out
    assert "adminRoles" in out and '["ops"]' in out
    stats_doc = {"subscriptions": {"audit": {"msgBacklog": 7, "consumers": [{"c": "x"}]}}}
    broker.on("GET", f"{TOPIC}/stats", answer_json(stats_doc))
    assert run(broker, "-o", "table", "topics", "stats", "acme/billing/orders") == 0
    out = capsys.readouterr().out
    assert "subscriptions.audit.msgBacklog" in out and "7" in out
    assert "subscriptions.audit.consumers[0].c" in out
    stats = [{"name": "a", "n": 1}, {"name": "b", "n": 2}]
    broker.on("GET", "/admin/v2/brokers", answer_json(stats))
    assert run(broker, "-o", "table", "brokers", "list") == 0
    out = capsys.readouterr().out
    assert "name" in out and "n" in out and "b" in out


# --- errors, redirects, where the broker is ------------------------------------------------


def test_an_error_prints_the_reason_and_the_url(broker: FakeBroker, capsys: Any) -> None:
    broker.on("PUT", "/admin/v2/tenants/acme", Answer(409, b'{"reason":"Tenant already exists"}'))
    broker.on("GET", "/admin/v2/clusters", answer_json(["standalone"]))
    assert run(broker, "tenants", "create", "acme") == 1
    err = capsys.readouterr().err
    assert "Tenant already exists" in err
    assert "HTTP 409" in err and f"PUT {broker.url}/admin/v2/tenants/acme" in err


def test_an_error_without_a_json_reason_still_says_what(broker: FakeBroker, capsys: Any) -> None:
    broker.on("GET", "/admin/v2/tenants/x", Answer(412, b""))
    assert run(broker, "tenants", "get", "x") == 1
    assert "Precondition Failed (HTTP 412, GET" in capsys.readouterr().err
    broker.on("GET", "/admin/v2/tenants/y", Answer(500, b"broker exploded"))
    assert run(broker, "tenants", "get", "y") == 1
    assert "broker exploded (HTTP 500" in capsys.readouterr().err


def test_an_unreachable_broker_fails_with_its_url(capsys: Any) -> None:
    from stripemq.testing.ports import free_port

    url = f"http://127.0.0.1:{free_port()}"
    assert admin.main(["--admin-url", url, "tenants", "list"]) == 1
    err = capsys.readouterr().err
    assert "cannot reach the broker" in err and f"GET {url}/admin/v2/tenants" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["namespaces", "set-retention", "acme/billing", "-s", "10X", "-t", "3d"],
        ["namespaces", "set-retention", "acme/billing", "-s", "10G", "-t", "3q"],
        ["namespaces", "set-message-ttl", "acme/billing", "-ttl", "soon"],
        ["namespaces", "set-backlog-quota", "acme/billing", "-p", "producer_exception"],
        ["namespaces", "set-backlog-quota", "acme/billing", "-l", "1G", "-p", "drop_everything"],
        [
            "namespaces",
            "set-backlog-quota",
            "acme/billing",
            "-l",
            "1G",
            "-p",
            "producer_exception",
            "-t",
            "x",
        ],
        [
            "namespaces",
            "set-backlog-quota",
            "acme/billing",
            "-p",
            "producer_exception",
            "-t",
            "message_age",
        ],
        ["namespaces", "set-deduplication", "acme/billing"],
        ["namespaces", "set-deduplication", "acme/billing", "-e", "-d"],
        ["namespaces", "set-auto-topic-creation", "acme/billing", "-e", "-t", "partitioned"],
        ["namespaces", "set-auto-topic-creation", "acme/billing", "-e", "-t", "weird"],
        ["namespaces", "create", "nonamespace"],
        ["namespaces", "policies", "a/b/c"],
        ["topics", "stats", "a/b"],
        ["topics", "reset-cursor", "t", "-s", "s"],
        ["topics", "reset-cursor", "t", "-s", "s", "-m", "nope"],
        ["topics", "expire-messages", "t", "-s", "s"],
        ["topics", "expire-messages", "t", "-s", "s", "-t", "1h", "-p", "1:2"],
        ["topics", "peek-messages", "non-persistent://a/b/c", "-s", "s"],
        ["topics", "skip", "t", "-s", "s", "-n", "-3"],
        ["tenants", "get", "bad name"],
        ["namespaces", "set-schema-compatibility-strategy", "acme/billing", "-c", "sideways"],
        ["namespaces", "set-is-allow-auto-update-schema", "acme/billing"],
        ["schemas", "get", "acme/billing/orders", "-v", "1", "-a"],
        ["schemas", "get", "acme/billing/orders", "-v", "-1"],
        ["schemas", "upload", "acme/billing/orders", "-f", "/nonexistent/schema.json"],
        ["namespaces", "set-persistence", "acme/billing", "-e", "0"],
        ["namespaces", "set-persistence", "acme/billing", "-r", "-1"],
        ["topicPolicies", "set-persistence", "acme/billing/orders", "-a", "-2"],
        ["namespaces", "set-delayed-delivery", "acme/billing", "-t", "1s"],
        [
            "namespaces",
            "set-inactive-topic-policies",
            "acme/billing",
            "-t",
            "1h",
            "-m",
            "delete_when_no_subscriptions",
        ],
        [
            "namespaces",
            "set-inactive-topic-policies",
            "acme/billing",
            "-e",
            "-t",
            "1h",
            "-m",
            "delete_always",
        ],
        ["namespaces", "set-subscription-types-enabled", "acme/billing", "-t", "Shared,Broadcast"],
        ["namespaces", "set-delayed-delivery", "acme/billing", "-e", "-t", "soon"],
    ],
)
def test_bad_arguments_are_refused_before_anything_is_sent(
    broker: FakeBroker, argv: list[str], capsys: Any
) -> None:
    assert run(broker, *argv) == 2
    assert broker.seen == []
    assert capsys.readouterr().err.startswith("stripemq admin: error: ")


@pytest.mark.parametrize(
    "argv",
    [
        ["tenants"],
        ["tenants", "get"],
        ["namespaces", "set-retention", "acme/billing", "-s", "1G"],
        ["topics", "create-partitioned-topic", "t"],
        ["topics", "skip", "t", "-s", "s"],
        ["nosuchgroup", "list"],
    ],
)
def test_incomplete_command_lines_exit_2(broker: FakeBroker, argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        run(broker, *argv)
    assert exited.value.code == 2
    assert broker.seen == []


def test_redirects_are_followed_with_method_and_body(broker: FakeBroker) -> None:
    other = FakeBroker()
    try:
        target = f"{other.url}{NS}/retention"
        broker.on("POST", f"{NS}/retention", Answer(307, b"", {"Location": target}))
        argv = ["namespaces", "set-retention", "acme/billing", "-s", "1G", "-t", "1h"]
        assert run(broker, *argv) == 0
        (moved,) = other.seen
        assert (moved.method, moved.path) == ("POST", f"{NS}/retention")
        assert moved.json() == {"retentionTimeInMinutes": 60, "retentionSizeInMB": 1024}
        # A relative Location, on a DELETE with a query.
        broker.on("DELETE", TOPIC, Answer(307, b"", {"Location": f"{TOPIC}-moved?force=true"}))
        assert run(broker, "topics", "delete", "acme/billing/orders", "-f") == 0
        assert (broker.seen[-1].method, broker.seen[-1].path) == ("DELETE", f"{TOPIC}-moved")
        assert broker.seen[-1].query == {"force": "true"}
    finally:
        other.close()


def test_endless_redirects_end_in_an_error(broker: FakeBroker, capsys: Any) -> None:
    broker.on("GET", "/admin/v2/tenants", Answer(307, b"", {"Location": "/admin/v2/tenants"}))
    assert run(broker, "tenants", "list") == 1
    assert "redirects" in capsys.readouterr().err


def test_the_admin_url_comes_from_the_option_the_environment_or_the_default(
    broker: FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker.on("GET", "/admin/v2/tenants", answer_json(["public"]))
    monkeypatch.setenv(admin.ADMIN_URL_ENV, broker.url)
    assert admin.main(["tenants", "list"]) == 0
    assert len(broker.seen) == 1
    monkeypatch.setenv(admin.ADMIN_URL_ENV, "http://127.0.0.1:1")
    assert admin.main(["tenants", "list", "--admin-url", broker.url]) == 0  # option wins
    assert len(broker.seen) == 2
    monkeypatch.delenv(admin.ADMIN_URL_ENV)
    args = admin.build_admin_parser().parse_args(["tenants", "list"])
    assert admin.admin_url(args) == "http://127.0.0.1:8080"


def test_admin_starts_without_the_roles_modules() -> None:
    """``stripemq admin`` must not import grpc, the broker or the bookie (start-up time)."""
    code = (
        "import sys\n"
        "from stripemq.cli.main import main\n"
        "for words in (['tenants', 'list'], ['topics', 'stats', 'a/b/c']):\n"
        "    try:\n"
        "        main(['admin', '--admin-url', 'http://127.0.0.1:1', *words])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = [m for m in ('grpc', 'aiohttp', 'kazoo', 'stripemq.broker', 'stripemq.bookie',\n"
        "    'stripemq.client', 'rich') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_the_stripemq_parser_lists_admin_and_initialize() -> None:
    from stripemq.cli.main import build_parser

    parser = build_parser()
    args = parser.parse_args(["admin", "topics", "stats", "t"])
    assert args.handler is admin._topics_stats
    args = parser.parse_args(
        ["initialize-cluster-metadata", "-c", "east", "-md", "zk:h:2181", "-uw", "http://h"]
    )
    assert (args.cluster, args.metadata_store, args.web_service_url) == (
        "east",
        "zk:h:2181",
        "http://h",
    )


GET_SCHEMA = {
    "version": 2,
    "type": "AVRO",
    "timestamp": 1700000000000,
    "data": '{"type":"record","name":"Order","fields":[]}',
    "properties": {"owner": "shop"},
}


def test_schemas_get_prints_the_schema_info_with_its_version(
    broker: FakeBroker, capsys: Any
) -> None:
    broker.on("GET", f"{SCHEMAS}/schema", answer_json(GET_SCHEMA))
    assert run(broker, "schemas", "get", "persistent://acme/billing/orders") == 0
    assert json.loads(capsys.readouterr().out) == {
        "version": 2,
        "schemaInfo": {
            "name": "orders",
            "schema": {"type": "record", "name": "Order", "fields": []},
            "type": "AVRO",
            "timestamp": 1700000000000,
            "properties": {"owner": "shop"},
        },
    }
    broker.on("GET", f"{SCHEMAS}/schema/2", answer_json(GET_SCHEMA))
    assert run(broker, "schemas", "get", "acme/billing/orders", "--version", "2") == 0
    assert json.loads(capsys.readouterr().out)["type"] == "AVRO"
    broker.on("GET", f"{SCHEMAS}/schemas", answer_json({"getSchemaResponses": [GET_SCHEMA]}))
    assert run(broker, "schemas", "get", "acme/billing/orders", "-a") == 0
    assert json.loads(capsys.readouterr().out)["version"] == 2


def test_schemas_upload_and_compatibility_send_the_file(
    broker: FakeBroker, capsys: Any, tmp_path: Any
) -> None:
    payload = {"type": "STRING", "schema": "", "properties": {"a": "b"}}
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(payload))
    broker.on("POST", f"{SCHEMAS}/schema", answer_json({"version": {"version": 0}}))
    assert run(broker, "schemas", "upload", "acme/billing/orders", "-f", str(path)) == 0
    assert broker.seen[-1].json() == payload
    assert capsys.readouterr().out == ""
    verdict = {"compatibility": False, "schemaCompatibilityStrategy": "FULL"}
    broker.on("POST", f"{SCHEMAS}/compatibility", answer_json(verdict))
    assert run(broker, "schemas", "compatibility", "acme/billing/orders", "-f", str(path)) == 0
    assert json.loads(capsys.readouterr().out) == verdict


def test_the_cli_knows_pulsars_schema_strategies() -> None:
    """The CLI imports no broker module (it starts fast); its list must not drift."""
    from stripemq.broker.schema import CompatibilityStrategy

    assert admin.SCHEMA_STRATEGIES == tuple(s.value for s in CompatibilityStrategy)
