"""``stripemq admin`` as a user runs it (``python -m stripemq admin ...``, a child process)
against a real ``stripemq standalone``: every command, its output, and its errors."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from stripemq.client import Client
from stripemq.metadata import MetadataStore
from stripemq.testing.polling import until_blocking
from stripemq.testing.ports import free_port
from stripemq.testing.standalone import StandaloneProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    process = StandaloneProcess(tmp_path_factory.mktemp("admin-cli") / "data")
    asyncio.run(process.start())
    try:
        yield process
    finally:
        process.terminate()


class Cli:
    """Runs ``stripemq admin`` against one web URL."""

    def __init__(self, url: str) -> None:
        self.url = url

    def run(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "stripemq", "admin", "--admin-url", self.url, *args]
        return subprocess.run(
            command, capture_output=True, text=True, timeout=120, check=False, env=env
        )

    def ok(self, *args: str) -> str:
        done = self.run(*args)
        assert done.returncode == 0, f"{args}: {done.returncode}\n{done.stdout}{done.stderr}"
        return done.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args))

    def lines(self, *args: str) -> list[str]:
        return self.ok(*args).splitlines()

    def fails(self, *args: str, status: int | None = None) -> str:
        """The command fails with the server's reason and the URL it used; its stderr."""
        done = self.run(*args)
        assert done.returncode == 1, f"{args}: {done.returncode}\n{done.stdout}{done.stderr}"
        assert self.url in done.stderr, done.stderr
        if status is not None:
            assert f"HTTP {status}" in done.stderr, done.stderr
        return done.stderr


@pytest.fixture
def cli(standalone: StandaloneProcess) -> Cli:
    return Cli(standalone.web_url)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_clusters(cli: Cli, standalone: StandaloneProcess) -> None:
    assert "standalone" in cli.lines("clusters", "list")
    current = cli.lines("clusters", "list", "--current")  # the broker's runtime clusterName
    assert "standalone(*)" in current and "standalone" not in current
    data = cli.json("clusters", "get", "standalone")
    assert data["brokerServiceUrl"] == standalone.service_url
    assert data["serviceUrl"] == standalone.web_url

    name = unique("east")
    cli.ok(
        "clusters", "create", name, "--url", "http://east:8080", "--broker-url", "pulsar://e:6650"
    )
    assert cli.json("clusters", "get", name)["serviceUrl"] == "http://east:8080"
    cli.ok("clusters", "update", name, "--url", "http://east2:8080")
    assert cli.json("clusters", "get", name)["serviceUrl"] == "http://east2:8080"
    cli.fails("clusters", "create", name, "--url", "http://x", status=409)
    cli.ok("clusters", "delete", name)
    assert name not in cli.lines("clusters", "list")
    cli.fails("clusters", "get", name, status=404)


def test_tenants(cli: Cli) -> None:
    tenant = unique("acme")
    cli.ok("tenants", "create", tenant, "-r", "ops", "-c", "standalone")
    assert tenant in cli.lines("tenants", "list")
    assert cli.json("tenants", "get", tenant) == {
        "adminRoles": ["ops"],
        "allowedClusters": ["standalone"],
    }
    cli.ok("tenants", "update", tenant, "--admin-roles", "ops,dev")
    info = cli.json("tenants", "get", tenant)
    assert sorted(info["adminRoles"]) == ["dev", "ops"]
    assert info["allowedClusters"] == ["standalone"]  # kept: not given
    stderr = cli.fails("tenants", "create", tenant, status=409)
    assert f"PUT {cli.url}/admin/v2/tenants/{tenant}" in stderr
    cli.ok("tenants", "delete", tenant)
    cli.fails("tenants", "get", tenant, status=404)

    defaulted = unique("all")  # no -c: every cluster there is
    cli.ok("tenants", "create", defaulted)
    assert "standalone" in cli.json("tenants", "get", defaulted)["allowedClusters"]
    cli.ok("tenants", "delete", defaulted)


@pytest.fixture
def namespace(cli: Cli) -> Iterator[str]:
    tenant = unique("t")
    cli.ok("tenants", "create", tenant, "-c", "standalone")
    name = f"{tenant}/ns"
    cli.ok("namespaces", "create", name)
    yield name
    cli.run("namespaces", "delete", name, "--force")
    cli.run("tenants", "delete", tenant, "--force")


def test_namespaces(cli: Cli, namespace: str) -> None:
    tenant = namespace.split("/")[0]
    assert cli.lines("namespaces", "list", tenant) == [namespace]
    assert "bundles" in cli.json("namespaces", "policies", namespace)
    assert cli.lines("namespaces", "topics", namespace) == []
    cli.fails("namespaces", "create", namespace, status=409)
    cli.fails("namespaces", "policies", f"{tenant}/nosuch", status=404)
    cli.ok("namespaces", "unload", namespace)
    cli.ok("namespaces", "clear-backlog", namespace, "--force")
    unconfirmed = cli.run("namespaces", "clear-backlog", namespace)  # stdin: nothing
    assert unconfirmed.returncode == 1 and "not confirmed" in unconfirmed.stderr

    other = f"{tenant}/other"
    cli.ok("namespaces", "create", other, "-b", "8", "-c", "standalone")
    assert cli.json("namespaces", "policies", other)["bundles"]["numBundles"] == 8
    cli.ok("namespaces", "delete", other)
    assert cli.lines("namespaces", "list", tenant) == [namespace]


def test_namespace_policies(cli: Cli, namespace: str) -> None:
    cli.ok("namespaces", "set-retention", namespace, "-s", "10G", "-t", "3d")
    assert cli.json("namespaces", "get-retention", namespace) == {
        "retentionTimeInMinutes": 3 * 24 * 60,
        "retentionSizeInMB": 10 * 1024,
    }
    cli.ok("namespaces", "remove-retention", namespace)
    assert cli.ok("namespaces", "get-retention", namespace).strip() in ("null", "")

    cli.ok("namespaces", "set-message-ttl", namespace, "-ttl", "1h")
    assert cli.ok("namespaces", "get-message-ttl", namespace).strip() == "3600"
    cli.ok("namespaces", "remove-message-ttl", namespace)
    assert cli.ok("namespaces", "get-message-ttl", namespace).strip() in ("null", "0", "")

    cli.ok("namespaces", "set-backlog-quota", namespace, "-l", "500M", "-p", "producer_exception")
    cli.ok(
        "namespaces",
        "set-backlog-quota",
        namespace,
        "-lt",
        "2h",
        "-p",
        "consumer_backlog_eviction",
        "-t",
        "message_age",
    )
    quotas = cli.json("namespaces", "get-backlog-quotas", namespace)
    assert quotas["destination_storage"]["limitSize"] == 500 * 1024**2
    assert quotas["destination_storage"]["policy"] == "producer_exception"
    assert quotas["message_age"]["limitTime"] == 7200
    cli.ok("namespaces", "remove-backlog-quota", namespace, "-t", "message_age")
    assert "message_age" not in (cli.json("namespaces", "get-backlog-quotas", namespace) or {})

    cli.ok("namespaces", "set-deduplication", namespace, "--enable")
    assert cli.ok("namespaces", "get-deduplication", namespace).strip() == "true"
    cli.ok("namespaces", "set-deduplication", namespace, "-d")
    assert cli.ok("namespaces", "get-deduplication", namespace).strip() == "false"
    cli.ok("namespaces", "remove-deduplication", namespace)

    cli.ok("namespaces", "set-publish-rate", namespace, "-m", "100", "-b", "1048576")
    assert cli.json("namespaces", "get-publish-rate", namespace) == {
        "publishThrottlingRateInMsg": 100,
        "publishThrottlingRateInByte": 1048576,
    }
    cli.ok("namespaces", "remove-publish-rate", namespace)

    cli.ok("namespaces", "set-dispatch-rate", namespace, "-md", "50", "-bd", "4096", "-dt", "2")
    rate = cli.json("namespaces", "get-dispatch-rate", namespace)
    assert rate["dispatchThrottlingRateInMsg"] == 50
    assert rate["dispatchThrottlingRateInByte"] == 4096
    assert rate["ratePeriodInSecond"] == 2
    cli.ok("namespaces", "remove-dispatch-rate", namespace)

    cli.ok("namespaces", "set-subscription-dispatch-rate", namespace, "-md", "7")
    assert (
        cli.json("namespaces", "get-subscription-dispatch-rate", namespace)[
            "dispatchThrottlingRateInMsg"
        ]
        == 7
    )
    cli.ok("namespaces", "remove-subscription-dispatch-rate", namespace)

    cli.ok("namespaces", "set-auto-topic-creation", namespace, "-e", "-t", "partitioned", "-n", "3")
    assert cli.json("namespaces", "get-auto-topic-creation", namespace) == {
        "allowAutoTopicCreation": True,
        "topicType": "partitioned",
        "defaultNumPartitions": 3,
    }
    cli.ok("namespaces", "remove-auto-topic-creation", namespace)

    policies = cli.json("namespaces", "policies", namespace)
    assert policies["retention_policies"] is None or "retention_policies" in policies

    # Bad values: refused by the CLI (exit 2, nothing sent) or by the broker (exit 1).
    assert (
        cli.run("namespaces", "set-retention", namespace, "-s", "10X", "-t", "1d").returncode == 2
    )
    cli.fails("namespaces", "set-message-ttl", namespace, "-ttl", "-5")
    cli.fails(
        "namespaces", "set-retention", f"{namespace.split('/')[0]}/nosuch", "-s", "1G", "-t", "1h"
    )


def produce(service_url: str, topic: str, count: int) -> None:
    client = Client(service_url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(count):
            producer.send(f"message {i}".encode(), properties={"n": str(i)})
        producer.close()
    finally:
        client.close()


def backlog(cli: Cli, topic: str, subscription: str) -> int:
    return int(cli.json("topics", "stats", topic)["subscriptions"][subscription]["msgBacklog"])


def test_topics_and_subscriptions(cli: Cli, namespace: str, standalone: StandaloneProcess) -> None:
    topic = f"persistent://{namespace}/orders"
    cli.ok("topics", "create", topic)
    assert cli.lines("topics", "list", namespace) == [topic]
    cli.ok("topics", "create-subscription", topic, "-s", "audit", "-m", "earliest")
    cli.ok("topics", "create-subscription", topic, "-s", "late")  # at the latest message
    assert sorted(cli.lines("topics", "subscriptions", topic)) == ["audit", "late"]
    produce(standalone.service_url, topic, 5)

    stats = cli.json("topics", "stats", topic)
    assert stats["msgInCounter"] == 5
    assert stats["subscriptions"]["audit"]["msgBacklog"] == 5
    internal = cli.json("topics", "stats-internal", topic)
    assert internal["entriesAddedCounter"] == 5
    last = cli.json("topics", "last-message-id", topic)
    assert last["entryId"] >= 4

    peeked = cli.ok("topics", "peek-messages", topic, "-s", "audit", "-n", "2")
    assert peeked.count("Message ID: ") == 2
    assert "Publish time: " in peeked and "Properties:" in peeked
    assert '"n" : "0"' in peeked and '"n" : "1"' in peeked
    assert "|message 0" in peeked and "|message 1" in peeked
    assert "|message 2" not in peeked
    assert backlog(cli, topic, "audit") == 5  # peeking consumes nothing

    cli.ok("topics", "skip", topic, "-s", "audit", "-n", "2")
    until_blocking(lambda: backlog(cli, topic, "audit") == 3, "2 messages skipped", timeout=20)
    cli.ok("topics", "expire-messages", topic, "-s", "audit", "-t", "1h")  # none that old
    assert backlog(cli, topic, "audit") == 3
    cli.ok("topics", "reset-cursor", topic, "-s", "audit", "-m", "earliest")
    until_blocking(lambda: backlog(cli, topic, "audit") == 5, "reset to earliest", timeout=20)
    cli.ok("topics", "clear-backlog", topic, "-s", "audit")
    until_blocking(lambda: backlog(cli, topic, "audit") == 0, "backlog cleared", timeout=20)
    cli.ok("topics", "reset-cursor", topic, "-s", "audit", "-t", "10m")
    until_blocking(lambda: backlog(cli, topic, "audit") == 5, "reset 10 minutes back", timeout=20)
    cli.ok("topics", "expire-messages", topic, "-s", "audit", "-t", "0")
    until_blocking(lambda: backlog(cli, topic, "audit") == 0, "all expired", timeout=20)
    first = f"{last['ledgerId']}:{last['entryId'] - 4}"
    cli.ok("topics", "reset-cursor", topic, "-s", "audit", "-m", first)
    until_blocking(lambda: backlog(cli, topic, "audit") == 5, "reset to the first id", timeout=20)
    # Expiry up to a message id (POST .../expireMessages with a ResetCursorData body).
    third = f"{last['ledgerId']}:{last['entryId'] - 2}"
    cli.ok("topics", "expire-messages", topic, "-s", "audit", "-p", third, "-e")
    until_blocking(lambda: backlog(cli, topic, "audit") == 3, "2 expired by id", timeout=20)
    cli.ok("topics", "expire-messages", topic, "-s", "audit", "-p", third)
    until_blocking(lambda: backlog(cli, topic, "audit") == 2, "3 expired by id", timeout=20)
    beyond = f"{last['ledgerId']}:{last['entryId'] + 10}"
    cli.fails("topics", "expire-messages", topic, "-s", "audit", "-p", beyond, status=412)
    cli.ok("topics", "reset-cursor", topic, "-s", "audit", "-m", "earliest")
    until_blocking(lambda: backlog(cli, topic, "audit") == 5, "reset to earliest", timeout=20)

    table = cli.ok("topics", "stats", topic, "-o", "table")
    assert "msgInCounter" in table and "subscriptions" in table

    assert cli.ok("topics", "lookup", topic).strip() == standalone.service_url
    cli.ok("topics", "unload", topic)
    assert cli.json("topics", "stats", topic)["msgInCounter"] in (0, 5)  # reloaded on use
    cli.ok("topics", "unsubscribe", topic, "-s", "late")
    assert cli.lines("topics", "subscriptions", topic) == ["audit"]
    cli.fails("topics", "unsubscribe", topic, "-s", "late", status=404)
    cli.fails("topics", "peek-messages", topic, "-s", "late", status=404)
    terminated = cli.ok("topics", "terminate", topic)
    assert terminated.startswith("Topic successfully terminated at ")
    cli.ok("topics", "delete", topic, "-f")
    assert topic not in cli.lines("topics", "list", namespace)
    cli.fails("topics", "stats", topic, status=404)


def test_partitioned_topics(cli: Cli, namespace: str) -> None:
    topic = f"persistent://{namespace}/parts"
    # With properties the command sends Pulsar's PartitionedTopicMetadata object.
    cli.ok("topics", "create-partitioned-topic", topic, "-p", "2", "-m", "team=billing,tier=1")
    assert cli.json("topics", "get-partitioned-topic-metadata", topic) == {
        "partitions": 2,
        "properties": {"team": "billing", "tier": "1"},
    }
    cli.fails("topics", "create", f"{topic}-partition-5", status=412)  # beyond its partitions
    cli.fails("topics", "create-partitioned-topic", f"{topic}-0", "-p", "0", status=406)
    assert cli.lines("topics", "list-partitioned-topics", namespace) == [topic]
    cli.ok("topics", "update-partitioned-topic", topic, "-p", "3")
    assert cli.json("topics", "get-partitioned-topic-metadata", topic)["partitions"] == 3
    cli.fails("topics", "update-partitioned-topic", topic, "-p", "1", status=422)  # cannot shrink
    stats = cli.json("topics", "partitioned-stats", topic, "--per-partition")
    assert len(stats["partitions"]) == 3
    cli.ok("topics", "partitioned-stats-internal", topic)
    cli.fails("topics", "create-partitioned-topic", topic, "-p", "2", status=409)
    cli.ok("topics", "delete-partitioned-topic", topic)
    assert cli.lines("topics", "list-partitioned-topics", namespace) == []
    plain = f"persistent://{namespace}/plain"
    cli.ok("topics", "create", plain)
    assert cli.json("topics", "get-partitioned-topic-metadata", plain)["partitions"] == 0
    cli.ok("topics", "delete", plain)


def test_namespace_unsubscribe_deletes_a_subscription_from_every_topic(
    cli: Cli, namespace: str
) -> None:
    """POST /namespaces/{t}/{ns}/unsubscribe/{sub}: each bundle's owner deletes it."""
    topics = [f"persistent://{namespace}/u{i}" for i in range(4)]
    for topic in topics:
        # A topic not made yet is made by create-subscription (auto creation allows it).
        cli.ok("topics", "create-subscription", topic, "-s", "gone")
        cli.ok("topics", "create-subscription", topic, "-s", "kept")
    cli.ok("namespaces", "unsubscribe", namespace, "-s", "gone")
    for topic in topics:
        assert cli.lines("topics", "subscriptions", topic) == ["kept"]


def test_deleting_a_namespace_with_topics_is_refused(cli: Cli, namespace: str) -> None:
    cli.ok("topics", "create", f"persistent://{namespace}/keep")
    cli.fails("namespaces", "delete", namespace, status=409)
    assert namespace in cli.lines("namespaces", "list", namespace.split("/")[0])


def test_brokers(cli: Cli, standalone: StandaloneProcess) -> None:
    address = standalone.web_url.removeprefix("http://")
    assert any(address in line for line in cli.lines("brokers", "list"))
    assert any(address in line for line in cli.lines("brokers", "list", "standalone"))
    assert address in cli.ok("brokers", "leader-broker")
    assert cli.ok("brokers", "healthcheck").strip() == "ok"
    assert cli.ok("brokers", "version").strip()


def test_short_topic_names_and_the_environment(cli: Cli, standalone: StandaloneProcess) -> None:
    short = unique("short")
    env = {**os.environ, "STRIPEMQ_ADMIN_URL": standalone.web_url}
    done = subprocess.run(
        [sys.executable, "-m", "stripemq", "admin", "topics", "create", short],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert f"persistent://public/default/{short}" in cli.lines("topics", "list", "public/default")
    cli.ok("topics", "delete", f"public/default/{short}")


def test_an_unreachable_broker_fails_fast_with_its_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = Cli(url).run("tenants", "list")
    assert done.returncode == 1
    assert "cannot reach the broker" in done.stderr and url in done.stderr


async def test_commands_follow_redirects_to_the_owning_broker(
    metadata_url: str, store: MetadataStore, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Asked of the broker that does not own the topic, each command follows the 307 to
    the owner with its method and body."""
    from stripemq.cli.admin_http import AdminClient
    from stripemq.testing.broker import broker_pair_on_bookies, owner_url

    settings = {
        "managed_ledger_default_ensemble_size": 2,
        "managed_ledger_default_write_quorum": 2,
        "managed_ledger_default_ack_quorum": 2,
    }
    base = tmp_path_factory.mktemp("admin-cli-pair")
    async with broker_pair_on_bookies(metadata_url, base, settings, bookies=2) as pair:
        topic = f"persistent://public/default/{unique('moved')}"
        await asyncio.to_thread(produce, pair[0].service_url, topic, 3)
        owner = await owner_url(store, topic)
        (other,) = [b for b in pair if b.service_url != owner]
        (owning,) = [b for b in pair if b.service_url == owner]
        cli = Cli(other.web_url)

        answer = await asyncio.to_thread(
            AdminClient(other.web_url).get, f"/admin/v2/{topic.replace('://', '/')}/stats"
        )
        assert answer.url.startswith(owning.web_url)  # it was redirected

        def run_all() -> None:
            cli.ok("topics", "create-subscription", topic, "-s", "audit", "-m", "earliest")
            assert cli.json("topics", "stats", topic)["subscriptions"]["audit"]["msgBacklog"] == 3
            cli.ok("topics", "skip", topic, "-s", "audit", "-n", "1")
            until_blocking(lambda: backlog(cli, topic, "audit") == 2, "skipped", timeout=20)
            assert "|message 1" in cli.ok("topics", "peek-messages", topic, "-s", "audit")
            cli.ok("topics", "reset-cursor", topic, "-s", "audit", "-m", "earliest")
            until_blocking(lambda: backlog(cli, topic, "audit") == 3, "reset", timeout=20)
            cli.ok("topics", "unsubscribe", topic, "-s", "audit")
            assert cli.lines("topics", "subscriptions", topic) == []

        await asyncio.to_thread(run_all)
