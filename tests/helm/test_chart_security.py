"""helm/stripemq's security values (``auth.*``, ``tls.*``, ``broker.ports.pulsarssl`` and
``broker.ports.https``), rendered offline.

With authentication on, the brokers mount the Secret holding the key tokens are checked
with (read-only) and their ``token_secret_key`` / ``token_public_key`` name that file as
``file:///...``; the toolset mounts its token and its CLI is pointed at it. With TLS on, the
brokers mount their certificate and the CA, listen on the two TLS ports besides the plain
ones (which the probes and Prometheus keep using), both broker Services expose them, and the
toolset and the init Job use the TLS URLs. Each file a setting names is checked to be a key
of a mounted Secret, and what the broker is handed is loaded with the real loader.

The Secrets are made by the operator (the Pulsar chart's names by default), so they are not
rendered. Off (the default) the chart renders exactly what it rendered before these values
existed. The security value sets also pass ``kubernetes-validate --strict``, ``helm lint
--strict`` and the wiring checks of ``test_chart_wiring`` (all of them but the one that
wants referenced Secrets rendered; the references are checked here instead).
"""

from __future__ import annotations

import copy
import functools
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import helm_python
import kubernetes_validate
import pytest
import test_chart_wiring as wiring
from helm_chart import (
    CHART,
    NAMESPACE,
    RELEASE,
    VALUE_SETS,
    config_maps,
    containers,
    documents,
    environment,
    of_kind,
    pod_templates,
    render,
)

from stripemq.broker.config import BrokerConfig
from stripemq.config import load_config

Doc = dict[str, Any]

# What the toolset sets for the CLI's --auth-params and --tls-trust-certs-file-path, named
# as its other defaults are (STRIPEMQ_ADMIN_URL, STRIPEMQ_SERVICE_URL).
AUTH_PARAMS_ENV = "STRIPEMQ_AUTH_PARAMS"
TLS_TRUST_ENV = "STRIPEMQ_TLS_TRUST_CERTS_FILE_PATH"

# The broker variables the security values set; none of them is set by default.
SECURITY_VARIABLES = {
    "STRIPEMQ_BROKER_SERVICE_PORT_TLS",
    "STRIPEMQ_WEB_SERVICE_PORT_TLS",
    "STRIPEMQ_TLS_CERTIFICATE_FILE_PATH",
    "STRIPEMQ_TLS_KEY_FILE_PATH",
    "STRIPEMQ_TLS_TRUST_CERTS_FILE_PATH",
    "STRIPEMQ_AUTHENTICATION_ENABLED",
    "STRIPEMQ_AUTHENTICATION_PROVIDERS",
    "STRIPEMQ_AUTHORIZATION_ENABLED",
    "STRIPEMQ_SUPER_USER_ROLES",
    "STRIPEMQ_TOKEN_SECRET_KEY",
    "STRIPEMQ_TOKEN_PUBLIC_KEY",
    "STRIPEMQ_TOKEN_PUBLIC_ALG",
}
TLS = {"tls": {"enabled": True, "broker": {"enabled": True}}}
SECURITY_SETS: dict[str, dict[str, Any]] = {
    # Pulsar's symmetric-key setup, every Secret under the Pulsar chart's name.
    "secret-key": {
        "auth": {
            "authentication": {"enabled": True, "jwt": {"usingSecretKey": True}},
            "authorization": {"enabled": True},
        }
    },
    # A key pair, Secrets of the operator's own naming, authentication only.
    "public-key": {
        "auth": {
            "authentication": {
                "enabled": True,
                "jwt": {
                    "publicAlg": "ES256",
                    "publicKeySecret": "broker-jwt-public",
                    "clientTokenSecret": "toolset-jwt",
                },
            }
        }
    },
    "tls": TLS,
    "tls-and-auth": {
        **TLS,
        "auth": {
            "authentication": {"enabled": True},
            "authorization": {"enabled": True},
            "superUsers": {"client": "ops", "monitoring": "prometheus", "proxy": ""},
        },
        "broker": {"ports": {"pulsarssl": 16651, "https": 18443}, "replicaCount": 2},
    },
}


@functools.cache
def _documents(value_set: str) -> list[Doc]:
    return documents(SECURITY_SETS[value_set])


def _workload(docs: list[Doc], name: str) -> Doc:
    (found,) = [
        d
        for d in docs
        if d["kind"] in ("StatefulSet", "Deployment", "Job") and d["metadata"]["name"] == name
    ]
    return found


def _main(docs: list[Doc], name: str) -> tuple[Doc, Doc]:
    """(pod template, main container) of workload ``name``."""
    template = _workload(docs, name)["spec"]["template"]
    return template, template["spec"]["containers"][0]


def _env(docs: list[Doc], name: str) -> dict[str, str]:
    _, container = _main(docs, name)
    return environment(docs, container, {"name": f"{name}-0", "namespace": NAMESPACE})


def _broker_config(docs: list[Doc]) -> BrokerConfig:
    return load_config(BrokerConfig, environ=_env(docs, "stripemq-broker"))


def _mounted_secret(template: Doc, container: Doc, path: str) -> tuple[str, str]:
    """(Secret name, key) whose content the file ``path`` of ``container`` is: the
    read-only mount holding the path, and the item of its Secret volume projected there."""
    volumes = {v["name"]: v for v in template["spec"].get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        prefix = mount["mountPath"].rstrip("/") + "/"
        if not path.startswith(prefix):
            continue
        assert mount.get("readOnly") is True, f"{mount['name']} is mounted writable"
        secret = volumes[mount["name"]]["secret"]
        items = [i for i in secret["items"] if i["path"] == path.removeprefix(prefix)]
        assert len(items) == 1, f"{path}: not one item of {secret}"
        return secret["secretName"], items[0]["key"]
    raise AssertionError(f"{path} is on no mount of {container['name']}")


def _file_url_path(url: str) -> str:
    parts = urlsplit(url)
    assert parts.scheme == "file" and not parts.netloc, url
    return parts.path


def _secret_volumes(docs: list[Doc]) -> Iterator[tuple[str, Doc]]:
    """(workload name, volume) for every Secret volume of every pod."""
    for workload, template in pod_templates(docs):
        for volume in template["spec"].get("volumes", []):
            if "secret" in volume:
                yield workload["metadata"]["name"], volume


def _ports(container: Doc) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container.get("ports", [])}


def _service_ports(docs: list[Doc], name: str) -> dict[str, tuple[int, Any]]:
    (service,) = [s for s in of_kind(docs, "Service") if s["metadata"]["name"] == name]
    return {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}


# --- off by default ------------------------------------------------------------------------


@pytest.mark.parametrize("value_set", list(VALUE_SETS))
def test_the_default_value_sets_render_no_security(value_set: str) -> None:
    docs = documents(VALUE_SETS[value_set])
    assert list(_secret_volumes(docs)) == []
    for workload, template in pod_templates(docs):
        name = workload["metadata"]["name"]
        if name in ("stripemq-broker", "stripemq-toolset"):
            assert "volumes" not in template["spec"], name
        for container in containers(template):
            if name in ("stripemq-broker", "stripemq-toolset"):
                assert "volumeMounts" not in container, name
            assert not {"pulsarssl", "https"} & set(_ports(container)), name
    for name, data in config_maps(docs).items():
        assert not SECURITY_VARIABLES & set(data), name
        assert AUTH_PARAMS_ENV not in data, name
    for service in of_kind(docs, "Service"):
        assert not {"pulsarssl", "https"} & {p["name"] for p in service["spec"]["ports"]}


@pytest.mark.parametrize(
    "values",
    [
        {"tls": {"broker": {"enabled": True}}},  # both switches are needed, as in Pulsar
        {"tls": {"enabled": True}},
        {"tls": {"caSecret": "ca"}, "auth": {"superUsers": {"client": "ops"}}},
        {"auth": {"authentication": {"jwt": {"usingSecretKey": True}}}},
    ],
    ids=["tls-broker-only", "tls-only", "names-only", "jwt-only"],
)
def test_security_values_without_their_switches_change_nothing(values: dict[str, Any]) -> None:
    assert render(values) == render({})


# --- token authentication ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value_set", "setting", "secret", "key"),
    [
        ("secret-key", "token_secret_key", "stripemq-token-symmetric-key", "SECRETKEY"),
        ("public-key", "token_public_key", "broker-jwt-public", "PUBLICKEY"),
        ("tls-and-auth", "token_public_key", "stripemq-token-asymmetric-key", "PUBLICKEY"),
    ],
)
def test_the_brokers_read_the_token_key_from_its_mounted_secret(
    value_set: str, setting: str, secret: str, key: str
) -> None:
    docs = _documents(value_set)
    config = _broker_config(docs)
    assert config.authentication_enabled is True
    assert config.authentication_providers == ["token"]
    other = {"token_secret_key", "token_public_key"} - {setting}
    assert getattr(config, other.pop()) is None  # one key, as the broker demands
    template, broker = _main(docs, "stripemq-broker")
    path = _file_url_path(getattr(config, setting))
    assert _mounted_secret(template, broker, path) == (secret, key)


def test_the_public_key_algorithm_is_the_values() -> None:
    assert _broker_config(_documents("public-key")).token_public_alg == "ES256"
    assert _broker_config(_documents("tls-and-auth")).token_public_alg == "RS256"
    secret_key = config_maps(_documents("secret-key"))["stripemq-broker"]
    assert "STRIPEMQ_TOKEN_PUBLIC_ALG" not in secret_key


def test_authorization_names_every_super_user_once() -> None:
    config = _broker_config(_documents("secret-key"))
    assert config.authorization_enabled is True
    assert config.super_user_roles == ["admin", "broker-admin"]
    # Roles of the operator's own naming join; an empty one names none.
    config = _broker_config(_documents("tls-and-auth"))
    assert config.super_user_roles == ["broker-admin", "ops", "prometheus"]
    values = {"auth": {**SECURITY_SETS["secret-key"]["auth"], "superUsers": {"x": "admin"}}}
    roles = config_maps(documents(values))["stripemq-broker"]["STRIPEMQ_SUPER_USER_ROLES"]
    assert roles == "admin,broker-admin"


def test_authentication_alone_leaves_authorization_off() -> None:
    config = _broker_config(_documents("public-key"))
    assert config.authorization_enabled is False
    assert config.super_user_roles == []


@pytest.mark.parametrize(
    ("value_set", "secret"),
    [
        ("secret-key", "stripemq-token-admin"),
        ("public-key", "toolset-jwt"),
        ("tls-and-auth", "stripemq-token-ops"),
    ],
)
def test_the_toolset_presents_its_mounted_token(value_set: str, secret: str) -> None:
    docs = _documents(value_set)
    env = _env(docs, "stripemq-toolset")
    template, toolset = _main(docs, "stripemq-toolset")
    path = _file_url_path(env[AUTH_PARAMS_ENV])
    assert _mounted_secret(template, toolset, path) == (secret, "TOKEN")


def test_only_the_brokers_and_the_toolset_mount_secrets() -> None:
    docs = _documents("tls-and-auth")
    mounting = {name for name, _ in _secret_volumes(docs)}
    assert mounting == {"stripemq-broker", "stripemq-toolset"}
    for _, template in pod_templates(docs):
        for container in template["spec"].get("initContainers", []):
            assert "volumeMounts" not in container  # `stripemq wait` reads no secret


@pytest.mark.parametrize("value_set", list(SECURITY_SETS))
def test_secrets_are_mounted_read_only_and_readable_by_the_group_only(value_set: str) -> None:
    docs = _documents(value_set)
    volumes = list(_secret_volumes(docs))
    assert volumes
    for name, volume in volumes:
        assert volume["secret"]["defaultMode"] == 0o440, name
        assert volume["secret"]["items"], name  # a missing key fails the pod's start
    for _, template in pod_templates(docs):
        for container in containers(template):
            for mount in container.get("volumeMounts", []):
                secret = {v["name"]: v for v in template["spec"].get("volumes", [])}.get(
                    mount["name"], {}
                )
                if "secret" in secret:
                    assert mount.get("readOnly") is True, mount


def test_the_probes_stay_on_the_plain_http_port() -> None:
    """What they hit is unchanged: /admin/v2/brokers/ready and /health, over http."""
    _, default_broker = _main(documents({}), "stripemq-broker")
    for value_set in SECURITY_SETS:
        _, broker = _main(_documents(value_set), "stripemq-broker")
        for probe in ("livenessProbe", "readinessProbe"):
            assert broker[probe] == default_broker[probe], (value_set, probe)
            assert broker[probe]["httpGet"]["port"] == "http"


# --- TLS -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value_set", "pulsarssl", "https"), [("tls", 6651, 8443), ("tls-and-auth", 16651, 18443)]
)
def test_tls_ports_are_listened_on_declared_and_exposed(
    value_set: str, pulsarssl: int, https: int
) -> None:
    docs = _documents(value_set)
    config = _broker_config(docs)
    assert (config.broker_service_port_tls, config.web_service_port_tls) == (pulsarssl, https)
    assert (config.broker_service_port, config.web_service_port) == (6650, 8080)  # still open
    _, broker = _main(docs, "stripemq-broker")
    assert _ports(broker) == {"http": 8080, "pulsar": 6650, "pulsarssl": pulsarssl, "https": https}
    for service in ("stripemq-broker", "stripemq-broker-headless"):
        assert _service_ports(docs, service) == {
            "http": (8080, "http"),
            "pulsar": (6650, "pulsar"),
            "pulsarssl": (pulsarssl, "pulsarssl"),
            "https": (https, "https"),
        }


@pytest.mark.parametrize(
    ("values", "cert", "ca"),
    [
        (TLS, "stripemq-tls-broker", "stripemq-tls-broker"),
        (
            {"tls": {"enabled": True, "broker": {"enabled": True, "certSecret": "c"}}},
            "c",
            "c",
        ),
        (
            {"tls": {"enabled": True, "broker": {"enabled": True}, "caSecret": "root-ca"}},
            "stripemq-tls-broker",
            "root-ca",
        ),
    ],
    ids=["pulsar-names", "cert-secret", "ca-secret"],
)
def test_the_brokers_read_their_certificate_and_ca_from_mounted_secrets(
    values: dict[str, Any], cert: str, ca: str
) -> None:
    docs = documents(values)
    config = _broker_config(docs)
    template, broker = _main(docs, "stripemq-broker")
    assert config.tls_certificate_file_path and config.tls_key_file_path
    assert config.tls_trust_certs_file_path
    assert _mounted_secret(template, broker, config.tls_certificate_file_path) == (cert, "tls.crt")
    assert _mounted_secret(template, broker, config.tls_key_file_path) == (cert, "tls.key")
    assert _mounted_secret(template, broker, config.tls_trust_certs_file_path) == (ca, "ca.crt")
    assert config.tls_require_trusted_client_cert_on_connect is False
    # The toolset trusts the brokers by the same CA.
    env = _env(docs, "stripemq-toolset")
    template, toolset = _main(docs, "stripemq-toolset")
    assert _mounted_secret(template, toolset, env[TLS_TRUST_ENV]) == (ca, "ca.crt")


def test_client_certificates_are_required_only_when_configdata_says_so() -> None:
    values = copy.deepcopy(TLS)
    values["broker"] = {"configData": {"tlsRequireTrustedClientCertOnConnect": True}}
    assert _broker_config(documents(values)).tls_require_trusted_client_cert_on_connect is True


def _resolved_port_name(docs: list[Doc], url: str) -> str:
    """The name of the container port ``url``'s host and port reach."""
    parts = urlsplit(url)
    assert parts.hostname and parts.port, url
    target = wiring._resolve(docs, "defaults", parts.hostname, parts.port)
    ports = wiring._container_ports(target.template)
    (name,) = [n for n, number in ports.items() if number == target.container_port]
    return name


@pytest.mark.parametrize("value_set", ["tls", "tls-and-auth"])
def test_the_toolset_and_the_cluster_record_use_the_tls_urls(value_set: str) -> None:
    docs = _documents(value_set)
    env = _env(docs, "stripemq-toolset")
    assert env["STRIPEMQ_ADMIN_URL"].startswith("https://")
    assert env["STRIPEMQ_SERVICE_URL"].startswith("pulsar+ssl://")
    assert _resolved_port_name(docs, env["STRIPEMQ_ADMIN_URL"]) == "https"
    assert _resolved_port_name(docs, env["STRIPEMQ_SERVICE_URL"]) == "pulsarssl"
    _, job = _main(docs, "stripemq-pulsar-init")
    args = wiring._parsed(job)
    assert _resolved_port_name(docs, args.web_service_url) == "http"
    assert _resolved_port_name(docs, args.broker_service_url) == "pulsar"
    assert _resolved_port_name(docs, args.web_service_url_tls) == "https"
    assert _resolved_port_name(docs, args.broker_service_url_tls) == "pulsarssl"


def test_without_tls_the_cluster_record_has_no_tls_urls() -> None:
    _, job = _main(_documents("secret-key"), "stripemq-pulsar-init")
    args = wiring._parsed(job)
    assert (args.web_service_url_tls, args.broker_service_url_tls) == ("", "")


def test_notes_name_the_tls_urls_and_the_token_secrets() -> None:
    notes = render(SECURITY_SETS["tls-and-auth"])["stripemq/templates/NOTES.txt"]
    assert f"pulsar+ssl://stripemq-broker.{NAMESPACE}.svc.cluster.local:16651" in notes
    assert f"https://stripemq-broker.{NAMESPACE}.svc.cluster.local:18443" in notes
    assert "stripemq-token-asymmetric-key" in notes and "stripemq-token-ops" in notes
    assert "--auth-params" in notes
    assert "--auth-params" not in render({})["stripemq/templates/NOTES.txt"]


# --- refused values ------------------------------------------------------------------------


def _refused(values: dict[str, Any], chart: Path = CHART) -> str:
    with helm_python.Chart.load(chart) as loaded, pytest.raises(helm_python.HelmError) as failed:
        loaded.render(values, name=RELEASE, namespace=NAMESPACE)
    return str(failed.value)


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"tsl": {"enabled": True}}, "'tsl'"),
        ({"auth": {"authentification": {"enabled": True}}}, "/auth"),
        ({"auth": {"authentication": {"enable": True}}}, "/auth/authentication"),
        ({"auth": {"authentication": {"jwt": {"usingSecretkey": True}}}}, "/jwt"),
        ({"auth": {"authentication": {"jwt": {"publicKeySecrets": "k"}}}}, "/jwt"),
        ({"auth": {"authorization": {"enable": True}}}, "/auth/authorization"),
        ({"tls": {"broker": {"certSecrets": "x"}}}, "/tls/broker"),
        ({"tls": {"ca": "x"}}, "/tls"),
        ({"broker": {"ports": {"pulsarSsl": 6651}}}, "/broker/ports"),
    ],
    ids=[
        "tsl",
        "authentification",
        "enable",
        "usingSecretkey",
        "publicKeySecrets",
        "authorization-enable",
        "certSecrets",
        "tls-ca",
        "pulsarSsl",
    ],
)
def test_the_schema_refuses_misspelt_keys(values: dict[str, Any], where: str) -> None:
    message = _refused(values)
    assert where in message and "additional properties" in message


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"auth": {"authentication": {"provider": "oauth2"}}}, "/auth/authentication/provider"),
        ({"auth": {"authentication": {"enabled": "true"}}}, "/auth/authentication/enabled"),
        ({"auth": {"authentication": {"jwt": {"publicAlg": "HS256"}}}}, "/jwt/publicAlg"),
        ({"auth": {"authentication": {"jwt": {"secretKeySecret": "My_Key"}}}}, "/jwt/secretKey"),
        ({"auth": {"superUsers": {"client": "a,b"}}}, "/auth/superUsers/client"),
        ({"auth": {"superUsers": {"ops": 1}}}, "/auth/superUsers/ops"),
        ({"tls": {"caSecret": "CA"}}, "/tls/caSecret"),
        ({"broker": {"ports": {"https": 70000}}}, "/broker/ports/https"),
    ],
    ids=[
        "provider",
        "enabled-text",
        "alg",
        "secret-name",
        "role-comma",
        "role-number",
        "ca-name",
        "port",
    ],
)
def test_the_schema_refuses_bad_values(values: dict[str, Any], where: str) -> None:
    assert where in _refused(values)


@pytest.fixture(scope="module")
def schemaless_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the chart without values.schema.json: only the templates check."""
    copy_ = tmp_path_factory.mktemp("chart") / CHART.name
    shutil.copytree(CHART, copy_)
    (copy_ / "values.schema.json").unlink()
    return copy_


@pytest.mark.parametrize("schema", [True, False], ids=["schema", "templates"])
def test_authorization_needs_authentication(schema: bool, schemaless_chart: Path) -> None:
    message = _refused(
        {"auth": {"authorization": {"enabled": True}}}, CHART if schema else schemaless_chart
    )
    assert "auth.authorization.enabled needs auth.authentication.enabled" in message


def test_the_templates_refuse_another_provider(schemaless_chart: Path) -> None:
    values = {"auth": {"authentication": {"enabled": True, "provider": "oauth2"}}}
    message = _refused(values, schemaless_chart)
    assert 'auth.authentication.provider "oauth2": the one provider is jwt' in message


def test_a_client_role_unusable_in_a_secret_name_asks_for_the_secret() -> None:
    values = {"auth": {"authentication": {"enabled": True}, "superUsers": {"client": "Admin"}}}
    message = _refused(values)
    assert "auth.authentication.jwt.clientTokenSecret" in message
    assert '"stripemq-token-Admin" is no Kubernetes Secret name' in message
    values["auth"]["authentication"]["jwt"] = {"clientTokenSecret": "admin-token"}
    _, toolset = _main(documents(values), "stripemq-toolset")
    assert toolset["volumeMounts"]


@pytest.mark.parametrize(
    ("key", "variable", "where"),
    [
        ("brokerServicePortTls", "STRIPEMQ_BROKER_SERVICE_PORT_TLS", "broker.ports.pulsarssl"),
        ("web_service_port_tls", "STRIPEMQ_WEB_SERVICE_PORT_TLS", "broker.ports.https"),
        ("tlsCertificateFilePath", "STRIPEMQ_TLS_CERTIFICATE_FILE_PATH", "tls.broker.certSecret"),
        ("tls_key_file_path", "STRIPEMQ_TLS_KEY_FILE_PATH", "tls.broker.certSecret"),
        ("tlsTrustCertsFilePath", "STRIPEMQ_TLS_TRUST_CERTS_FILE_PATH", "tls.caSecret"),
        ("authenticationEnabled", "STRIPEMQ_AUTHENTICATION_ENABLED", "auth.authentication.enabled"),
        ("authenticationProviders", "STRIPEMQ_AUTHENTICATION_PROVIDERS", "provider"),
        ("authorization_enabled", "STRIPEMQ_AUTHORIZATION_ENABLED", "auth.authorization.enabled"),
        ("superUserRoles", "STRIPEMQ_SUPER_USER_ROLES", "auth.superUsers"),
        ("tokenSecretKey", "STRIPEMQ_TOKEN_SECRET_KEY", "jwt.secretKeySecret"),
        ("token_public_key", "STRIPEMQ_TOKEN_PUBLIC_KEY", "jwt.publicKeySecret"),
        ("tokenPublicAlg", "STRIPEMQ_TOKEN_PUBLIC_ALG", "jwt.publicAlg"),
    ],
)
def test_security_settings_the_chart_sets_are_refused_in_config_data(
    key: str, variable: str, where: str
) -> None:
    """Also with security off: a key in a ConfigMap, or a port no pod declares, is no way."""
    message = _refused({"broker": {"configData": {key: "1"}}})
    assert f"broker.configData.{key}: the chart sets {variable} itself" in message
    assert where in message


@pytest.mark.parametrize(
    ("key", "value", "attribute"),
    [
        ("tokenAuthClaim", "role", "token_auth_claim"),
        ("token_audience_claim", "aud", "token_audience_claim"),
        ("tokenAudience", "stripemq", "token_audience"),
        ("anonymousUserRole", "anonymous", "anonymous_user_role"),
        ("authenticationRefreshCheckSeconds", 30, "authentication_refresh_check_seconds"),
        ("authenticateMetricsEndpoint", True, "authenticate_metrics_endpoint"),
    ],
)
def test_the_other_token_settings_go_through_config_data(
    key: str, value: Any, attribute: str
) -> None:
    values = copy.deepcopy(SECURITY_SETS["secret-key"])
    values["broker"] = {"configData": {key: value}}
    assert getattr(_broker_config(documents(values)), attribute) == value


# --- the chart's other checks, on the security value sets ----------------------------------


@pytest.mark.parametrize("version", ["1.29.0", "1.33.0"])
@pytest.mark.parametrize("value_set", list(SECURITY_SETS))
def test_security_value_sets_are_valid_kubernetes(value_set: str, version: str) -> None:
    problems = []
    for doc in _documents(value_set):
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{doc['kind']}/{doc['metadata']['name']}: {exc.message}")
    assert problems == []


@pytest.mark.parametrize("value_set", list(SECURITY_SETS))
def test_security_value_sets_lint_clean(value_set: str) -> None:
    result = helm_python.lint(CHART, SECURITY_SETS[value_set], strict=True, namespace=NAMESPACE)
    assert result["errors"] == []
    assert [m for m in result["messages"] if m["severity"] >= 2] == []


def _reader_check(docs: list[Doc], monkeypatch: pytest.MonkeyPatch) -> None:
    """Every variable is a setting of its reader; the toolset's CLI also reads the two
    security defaults."""
    variables = wiring.TOOLSET_VARIABLES | {AUTH_PARAMS_ENV, TLS_TRUST_ENV}
    monkeypatch.setattr(wiring, "TOOLSET_VARIABLES", variables)
    wiring.test_every_variable_is_a_setting_of_its_reader(docs)


# The checks of test_chart_wiring, each run as it is on the default value sets (those that
# read their value set's values read "defaults": these sets change no domain, ZooKeeper or
# scraping). test_referenced_config_maps_and_secrets_exist is left out: the Secrets are the
# operator's; the tests above check each reference.
WIRING_CHECKS: dict[str, Callable[[list[Doc], pytest.MonkeyPatch], None]] = {
    "selectors": lambda docs, _: wiring.test_workload_selectors_select_their_own_pods(docs),
    "services-select": lambda docs, _: wiring.test_every_service_selects_pods(docs),
    "headless": lambda docs, _: wiring.test_statefulsets_name_a_headless_service_of_their_pods(
        docs
    ),
    "pdb": lambda docs, _: wiring.test_pod_disruption_budgets_select_pods(docs),
    "target-ports": lambda docs, _: wiring.test_service_target_ports_are_container_ports(docs),
    "probe-ports": lambda docs, _: wiring.test_probe_ports_are_the_containers_own(docs),
    "listen": lambda docs, _: wiring.test_processes_listen_where_their_pods_declare(docs),
    "port-variables": lambda docs, _: wiring.test_every_port_variable_is_a_declared_port(docs),
    "scrape": lambda docs, _: wiring.test_scrape_annotations_name_the_http_port(docs, "defaults"),
    "urls": lambda docs, _: wiring.test_urls_name_rendered_services_and_pods(docs, "defaults"),
    "one-store": lambda docs, _: wiring.test_every_component_uses_one_metadata_store_and_cluster(
        docs
    ),
    "advertised": lambda docs, _: wiring.test_advertised_addresses_are_the_pods_own_dns_names(
        docs, "defaults"
    ),
    "readers": _reader_check,
    "toolset-urls": lambda docs, _: wiring.test_toolset_gets_the_admin_and_service_urls(docs),
    "commands": lambda docs, _: wiring.test_every_command_is_a_stripemq_subcommand(docs),
    "env-order": lambda docs, _: wiring.test_env_references_are_defined_before_use(docs),
    "mounts": lambda docs, _: wiring.test_volume_mounts_name_volumes_and_storage_is_on_them(docs),
    "labels": lambda docs, _: wiring.test_labels_and_names_are_valid(docs),
}


@pytest.mark.parametrize("check", list(WIRING_CHECKS))
@pytest.mark.parametrize("value_set", list(SECURITY_SETS))
def test_security_value_sets_pass_the_wiring_checks(
    value_set: str, check: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    WIRING_CHECKS[check](_documents(value_set), monkeypatch)


def test_the_listen_check_sees_an_undeclared_tls_port() -> None:
    """The wiring check can fail here: a TLS port the pod does not declare."""
    docs = copy.deepcopy(_documents("tls"))
    _, broker = _main(docs, "stripemq-broker")
    broker["ports"] = [p for p in broker["ports"] if p["name"] != "https"]
    with pytest.raises(AssertionError, match="listens on"):
        wiring.test_processes_listen_where_their_pods_declare(docs)


# --- a fix made on the way ------------------------------------------------------------------


def test_broker_service_annotations_render_on_the_client_service_only() -> None:
    """broker.service.annotations used to break the broker Services' template."""
    docs = documents({"broker": {"service": {"annotations": {"example.com/lb": "internal"}}}})
    services = {s["metadata"]["name"]: s for s in of_kind(docs, "Service")}
    assert services["stripemq-broker"]["metadata"]["annotations"] == {"example.com/lb": "internal"}
    assert "annotations" not in services["stripemq-broker-headless"]["metadata"]
    assert _service_ports(docs, "stripemq-broker") == _service_ports(
        docs, "stripemq-broker-headless"
    )
