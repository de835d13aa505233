"""Values given to helm/stripemq: bad ones fail at render time with a message that says
what to change (from values.schema.json, or from a ``fail`` in the templates for what a
schema cannot express), and good variants render to the right ``STRIPEMQ_*`` variables.

The templates' own checks stand behind the schema (``helm install --skip-schema-validation``
bypasses it), so they are also run on a copy of the chart without values.schema.json.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml
from helm_chart import CHART, NAMESPACE, RELEASE, config_maps, documents, of_kind

from stripemq.bookie.autorecovery.config import AutoRecoveryConfig
from stripemq.broker.config import BrokerConfig
from stripemq.config import load_config

COMPONENTS = ("zookeeper", "bookkeeper", "autorecovery", "broker", "toolset")
ZK_HOSTS = [
    f"stripemq-zookeeper-{i}.stripemq-zookeeper.{NAMESPACE}.svc.cluster.local:2181"
    for i in range(3)
]
ZK_URL = "zk://" + ",".join(ZK_HOSTS)
EXTERNAL = "zk-a.example:2181,zk-b.example:2181"


def _refused(values: dict[str, Any], chart: Path = CHART) -> str:
    """The message with which rendering ``values`` fails."""
    with helm_python.Chart.load(chart) as loaded, pytest.raises(helm_python.HelmError) as failed:
        loaded.render(values, name=RELEASE, namespace=NAMESPACE)
    return str(failed.value)


@pytest.fixture(scope="module")
def schemaless_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the chart without values.schema.json: only the templates check."""
    copy = tmp_path_factory.mktemp("chart") / CHART.name
    shutil.copytree(CHART, copy)
    (copy / "values.schema.json").unlink()
    return copy


def _broker_config(values: dict[str, Any]) -> dict[str, str]:
    return config_maps(documents(values))["stripemq-broker"]


# --- refused by the schema -----------------------------------------------------------------


@pytest.mark.parametrize("component", COMPONENTS)
def test_negative_replicas_are_refused(component: str) -> None:
    message = _refused({component: {"replicaCount": -1}})
    assert f"/{component}/replicaCount" in message and "minimum" in message


@pytest.mark.parametrize("component", ["zookeeper", "bookkeeper", "broker"])
def test_no_replicas_of_a_needed_component_is_refused(component: str) -> None:
    """Zero ZooKeeper servers, bookies or brokers: turn the component off instead."""
    message = _refused({component: {"replicaCount": 0}})
    assert f"/{component}/replicaCount" in message and "minimum" in message


def test_a_replica_count_given_as_text_is_refused() -> None:
    assert "/bookkeeper/replicaCount" in _refused({"bookkeeper": {"replicaCount": "4"}})


@pytest.mark.parametrize("tag", ["", None], ids=["empty", "missing"])
@pytest.mark.parametrize("image", ["zookeeper", "bookie", "autorecovery", "broker", "toolset"])
def test_a_missing_image_tag_is_refused(image: str, tag: str | None) -> None:
    message = _refused({"images": {image: {"tag": tag}}})  # None deletes the key in Helm
    assert f"/images/{image}" in message and "tag" in message


def test_an_unquoted_image_tag_is_refused() -> None:
    """``tag: 0.1`` in YAML is a number; the schema asks for the string."""
    assert "/images/broker/tag" in _refused({"images": {"broker": {"tag": 0.1}}})


def test_a_bad_affinity_type_is_refused() -> None:
    message = _refused({"bookkeeper": {"affinity": {"type": "requiredDuringScheduling"}}})
    assert "/bookkeeper/affinity/type" in message


def test_a_metadata_prefix_without_a_leading_slash_is_refused() -> None:
    assert "/metadataPrefix" in _refused({"metadataPrefix": "stripemq-a"})


def test_a_config_data_value_must_be_a_scalar() -> None:
    message = _refused({"broker": {"configData": {"max_message_size": {"bytes": 1}}}})
    assert "/broker/configData/max_message_size" in message


def test_a_cluster_name_must_be_usable_as_a_label_value() -> None:
    """The cluster name is the pods' ``cluster`` label: Kubernetes takes no ':' there."""
    assert "clusterName" in _refused({"clusterName": "east:1"})


# --- refused by the templates --------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"managed_ledger_default_ack_quorum": 3}, "ack quorum (3) <= write quorum (2)"),
        (
            {"managedLedgerDefaultWriteQuorum": 3, "managedLedgerDefaultAckQuorum": 1},
            "write quorum (3) <= ensemble size (2)",
        ),
        ({"managedLedgerDefaultAckQuorum": 0}, "1 <= ack quorum (0)"),
    ],
    ids=["ack-over-write", "write-over-ensemble", "no-ack"],
)
def test_quorums_out_of_order_are_refused(config: dict[str, Any], expected: str) -> None:
    message = _refused({"broker": {"configData": config}})
    assert "broker.configData: need 1 <= ack quorum" in message and expected in message


def test_an_ensemble_larger_than_the_bookies_is_refused() -> None:
    values = {
        "bookkeeper": {"replicaCount": 3},
        "broker": {
            "configData": {
                "managedLedgerDefaultEnsembleSize": 4,
                "managedLedgerDefaultWriteQuorum": 3,
                "managedLedgerDefaultAckQuorum": 2,
            }
        },
    }
    message = _refused(values)
    assert "the ensemble size (4) is larger than bookkeeper.replicaCount (3)" in message


def test_an_ensemble_may_equal_the_bookies() -> None:
    config = {"managed_ledger_default_ensemble_size": 3, "managed_ledger_default_write_quorum": 3}
    data = _broker_config({"bookkeeper": {"replicaCount": 3}, "broker": {"configData": config}})
    assert data["STRIPEMQ_MANAGED_LEDGER_DEFAULT_ENSEMBLE_SIZE"] == "3"


@pytest.mark.parametrize(
    ("component", "key", "role"),
    [
        ("broker", "no_such_setting", "broker"),
        ("broker", "bookie_port", "broker"),  # a setting, but of another role
        ("bookkeeper", "managedLedgerDefaultEnsembleSize", "bookie"),
        ("autorecovery", "brokerServicePort", "autorecovery"),
        ("zookeeper", "journal_sync_data", "zookeeper"),
    ],
)
def test_an_unknown_config_data_key_is_refused(component: str, key: str, role: str) -> None:
    message = _refused({component: {"configData": {key: 1}}})
    assert f"{component}.configData.{key}: no {role} setting has that name" in message
    assert f"stripemq {role} --print-config" in message


@pytest.mark.parametrize(
    ("component", "key", "variable", "where"),
    [
        ("broker", "broker_service_port", "STRIPEMQ_BROKER_SERVICE_PORT", "broker.ports.pulsar"),
        ("broker", "webServicePort", "STRIPEMQ_WEB_SERVICE_PORT", "broker.ports.http"),
        ("broker", "advertisedAddress", "STRIPEMQ_ADVERTISED_ADDRESS", "the pod's DNS name"),
        ("broker", "clusterName", "STRIPEMQ_CLUSTER_NAME", "clusterName"),
        ("broker", "metadata_service_uri", "STRIPEMQ_METADATA_SERVICE_URI", "metadataPrefix"),
        ("bookkeeper", "bookiePort", "STRIPEMQ_BOOKIE_PORT", "bookkeeper.ports.bookie"),
        ("bookkeeper", "journalDirectory", "STRIPEMQ_JOURNAL_DIRECTORY", "journal volume"),
        ("bookkeeper", "advertised_address", "STRIPEMQ_ADVERTISED_ADDRESS", "the bookie id"),
        ("autorecovery", "stats_http_port", "STRIPEMQ_STATS_HTTP_PORT", "autorecovery.ports"),
        ("zookeeper", "clientPort", "STRIPEMQ_CLIENT_PORT", "zookeeper.ports.client"),
        ("zookeeper", "server_id", "STRIPEMQ_SERVER_ID", "the pod's ordinal"),
        ("zookeeper", "servers", "STRIPEMQ_SERVERS", "zookeeper.replicaCount"),
    ],
)
def test_a_setting_the_chart_manages_is_refused(
    component: str, key: str, variable: str, where: str
) -> None:
    message = _refused({component: {"configData": {key: "1"}}})
    assert f"{component}.configData.{key}: the chart sets {variable} itself" in message
    assert where in message


def test_one_setting_named_twice_is_refused() -> None:
    config = {"managedLedgerMaxEntriesPerLedger": 10, "managed_ledger_max_entries_per_ledger": 20}
    message = _refused({"broker": {"configData": config}})
    assert "broker.configData: " in message and "name the same setting" in message
    assert "managedLedgerMaxEntriesPerLedger" in message
    assert "managed_ledger_max_entries_per_ledger" in message


def test_no_zookeeper_needs_an_external_one() -> None:
    message = _refused({"components": {"zookeeper": False}})
    assert "components.zookeeper is false: set pulsar_metadata.userProvidedZookeepers" in message


def test_the_templates_refuse_a_missing_image_tag(schemaless_chart: Path) -> None:
    message = _refused({"images": {"bookie": {"tag": ""}}}, schemaless_chart)
    assert "images.bookie.tag is required" in message


def test_the_templates_refuse_a_bad_affinity_type(schemaless_chart: Path) -> None:
    values = {"zookeeper": {"affinity": {"type": "sometimes"}}}
    message = _refused(values, schemaless_chart)
    assert 'zookeeper.affinity.type "sometimes"' in message
    assert "requiredDuringSchedulingIgnoredDuringExecution" in message


def test_the_templates_refuse_a_prefix_without_a_slash(schemaless_chart: Path) -> None:
    message = _refused({"metadataPrefix": "stripemq-a"}, schemaless_chart)
    assert 'metadataPrefix "stripemq-a" must start with /' in message


# --- good variants -------------------------------------------------------------------------


def test_a_pulsar_named_key_becomes_its_stripemq_variable() -> None:
    values = {
        "broker": {
            "configData": {
                "managedLedgerDefaultEnsembleSize": 3,
                "managedLedgerDefaultWriteQuorum": 3,
                "brokerDeduplicationEnabled": True,
            }
        },
        "autorecovery": {"configData": {"lostBookieRecoveryDelay": 30}},
    }
    docs = documents(values)
    data = config_maps(docs)
    broker = data["stripemq-broker"]
    assert broker["STRIPEMQ_MANAGED_LEDGER_DEFAULT_ENSEMBLE_SIZE"] == "3"
    assert broker["STRIPEMQ_MANAGED_LEDGER_DEFAULT_WRITE_QUORUM"] == "3"
    assert broker["STRIPEMQ_BROKER_DEDUPLICATION_ENABLED"] == "true"
    config = load_config(BrokerConfig, environ=broker)
    assert config.managed_ledger_default_ensemble_size == 3
    assert config.broker_deduplication_enabled is True
    recovery = load_config(AutoRecoveryConfig, environ=data["stripemq-recovery"])
    assert recovery.lost_bookie_recovery_delay_s == 30
    # The brokers wait for as many bookies as one ensemble takes.
    (broker_set,) = [
        s for s in of_kind(docs, "StatefulSet") if s["metadata"]["name"] == "stripemq-broker"
    ]
    (wait,) = broker_set["spec"]["template"]["spec"]["initContainers"]
    assert wait["command"][-2:] == ["--bookies", "3"]


@pytest.mark.parametrize(
    ("given", "rendered"),
    [
        (5242880, "5242880"),  # a large integer, not 5.24288e+06
        (123456789012, "123456789012"),
        ("5242880", "5242880"),
        (1024, "1024"),
    ],
    ids=["large", "larger", "text", "small"],
)
def test_numbers_render_as_written(given: Any, rendered: str) -> None:
    data = _broker_config({"broker": {"configData": {"maxMessageSize": given}}})
    assert data["STRIPEMQ_MAX_MESSAGE_SIZE"] == rendered


def test_numbers_from_a_values_file_render_as_written() -> None:
    """A values file's numbers reach the templates as floats: still the integer."""
    values = yaml.safe_load("broker:\n  configData:\n    max_message_size: 5242880\n")
    assert _broker_config(values)["STRIPEMQ_MAX_MESSAGE_SIZE"] == "5242880"


def test_fractions_and_booleans_render_as_written() -> None:
    values = {
        "autorecovery": {"configData": {"add_entry_timeout_s": 2.5}},
        "bookkeeper": {"configData": {"journalSyncData": False}},
    }
    docs = documents(values)
    data = config_maps(docs)["stripemq-recovery"]
    assert data["STRIPEMQ_ADD_ENTRY_TIMEOUT_S"] == "2.5"
    assert load_config(AutoRecoveryConfig, environ=data).add_entry_timeout_s == 2.5
    assert config_maps(docs)["stripemq-bookie"]["STRIPEMQ_JOURNAL_SYNC_DATA"] == "false"


def _metadata_urls(docs: list[dict[str, Any]]) -> set[str]:
    urls = {
        data["STRIPEMQ_METADATA_SERVICE_URI"]
        for data in config_maps(docs).values()
        if "STRIPEMQ_METADATA_SERVICE_URI" in data
    }
    (job,) = of_kind(docs, "Job")
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    urls.add(command[command.index("--metadata-store") + 1])
    (wait,) = job["spec"]["template"]["spec"]["initContainers"]
    urls.add(wait["command"][wait["command"].index("--metadata") + 1])
    return urls


def test_the_default_metadata_store_is_the_charts_zookeeper() -> None:
    assert _metadata_urls(documents({})) == {ZK_URL}


def test_an_external_zookeeper_is_the_metadata_store() -> None:
    values = {
        "components": {"zookeeper": False},
        "pulsar_metadata": {"userProvidedZookeepers": EXTERNAL},
    }
    docs = documents(values)
    assert _metadata_urls(docs) == {f"zk://{EXTERNAL}"}
    assert not [d for d in docs if d["metadata"]["name"].endswith("-zookeeper")]


@pytest.mark.parametrize("external", [False, True])
def test_the_metadata_prefix_is_appended(external: bool) -> None:
    values: dict[str, Any] = {"metadataPrefix": "/stripemq-a"}
    if external:
        values["components"] = {"zookeeper": False}
        values["pulsar_metadata"] = {"userProvidedZookeepers": EXTERNAL}
    hosts = EXTERNAL if external else ",".join(ZK_HOSTS)
    assert _metadata_urls(documents(values)) == {f"zk://{hosts}/stripemq-a"}


def test_the_cluster_name_reaches_the_brokers_and_the_job() -> None:
    docs = documents({"clusterName": "east"})
    assert config_maps(docs)["stripemq-broker"]["STRIPEMQ_CLUSTER_NAME"] == "east"
    (job,) = of_kind(docs, "Job")
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--cluster") + 1] == "east"


# --- what the chart decides for the operator ------------------------------------------------


@pytest.mark.parametrize("servers", [2, 4])
def test_an_even_zookeeper_ensemble_is_refused(servers: int) -> None:
    message = _refused({"zookeeper": {"replicaCount": servers}})
    assert f"zookeeper.replicaCount {servers}: use an odd number" in message


@pytest.mark.parametrize("component", ["bookkeeper", "autorecovery"])
def test_statistics_cannot_be_switched_off_under_the_probes(component: str) -> None:
    message = _refused({component: {"configData": {"enableStatistics": False}}})
    assert "STRIPEMQ_ENABLE_STATISTICS itself" in message and "probe" in message


def test_the_charts_own_defaults_give_way_to_configdata_by_either_name() -> None:
    data = config_maps(documents())
    assert data["stripemq-recovery"]["STRIPEMQ_LOST_BOOKIE_RECOVERY_DELAY_S"] == "300"
    assert data["stripemq-zookeeper"]["STRIPEMQ_HEAP_MB"] == "256"
    data = config_maps(
        documents(
            {
                "autorecovery": {"configData": {"lostBookieRecoveryDelay": 60}},
                "zookeeper": {"configData": {"heap_mb": 1024}},
            }
        )
    )
    assert data["stripemq-recovery"]["STRIPEMQ_LOST_BOOKIE_RECOVERY_DELAY_S"] == "60"
    assert data["stripemq-zookeeper"]["STRIPEMQ_HEAP_MB"] == "1024"


def _jobs(values: dict[str, Any], *, is_install: bool) -> list[str]:
    with helm_python.Chart.load(CHART) as loaded:
        rendered = loaded.render(
            values,
            name=RELEASE,
            namespace=NAMESPACE,
            is_install=is_install,
            is_upgrade=not is_install,
        )
    docs = [
        doc
        for path, text in rendered.items()
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    ]
    return [doc["metadata"]["name"] for doc in of_kind(docs, "Job")]


def test_the_init_job_is_rendered_at_install_or_when_asked() -> None:
    assert _jobs({}, is_install=True) == ["stripemq-pulsar-init"]
    assert _jobs({}, is_install=False) == []  # an upgrade: a Job cannot be changed in place
    assert _jobs({"initialize": True}, is_install=False) == ["stripemq-pulsar-init"]


def _bookie_init_containers(values: dict[str, Any]) -> list[str]:
    (bookies,) = [
        s
        for s in of_kind(documents(values), "StatefulSet")
        if s["metadata"]["name"] == "stripemq-bookie"
    ]
    return [c["name"] for c in bookies["spec"]["template"]["spec"]["initContainers"]]


def test_a_bookies_cookie_is_forgotten_only_with_ephemeral_volumes() -> None:
    """With persistent volumes a bookie back empty must be refused (its cookie); with
    emptyDir every restart is empty, and the chart starts it afresh, as Pulsar's does."""
    assert _bookie_init_containers({}) == ["wait-zookeeper-ready"]
    off = {"volumes": {"persistence": False}}
    assert _bookie_init_containers(off) == ["wait-zookeeper-ready", "delete-cookie"]
