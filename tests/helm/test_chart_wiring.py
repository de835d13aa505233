"""Wiring of helm/stripemq that neither ``helm lint`` nor kubernetes-validate checks, for
every value set of ``helm_chart.VALUE_SETS``: selectors select pods, Services and probes
name declared ports, the ports and addresses the processes are given are the ones their
pods declare, URLs name rendered Services or StatefulSet pods, every ``STRIPEMQ_*``
variable is a real setting of the process that reads it, every container command parses
with the real ``stripemq`` parser, and references between objects resolve.

A pod's role is its main container's command (``stripemq <role>``); its settings dataclass
comes from ``stripemq.cli.main.role_configs()``, and what the chart hands a role is loaded
with the real loader (``stripemq.config.load_config``), so a value of the wrong type fails
here as it would in the pod.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest
from helm_chart import (
    NAMESPACE,
    VALUE_SETS,
    config_maps,
    containers,
    documents,
    environment,
    of_kind,
    pod_templates,
)

from stripemq.cli.admin import ADMIN_URL_ENV
from stripemq.cli.client import SERVICE_URL_ENV
from stripemq.cli.main import build_parser, role_configs
from stripemq.cli.wait import METADATA_ENV
from stripemq.config import ENV_PREFIX, describe, load_config
from stripemq.errors import StripeMQError

Doc = dict[str, Any]

# The settings of each role that are ports it listens on, and the setting of the address
# those ports are bound to. Every ``*_port`` and ``*_port_tls`` setting of a role must be
# listed here, so a new one is classified (a listening port the pod must declare, or not).
# An unset one (None: the TLS ports while TLS is off) opens no port.
LISTEN_PORTS: dict[str, tuple[str, ...]] = {
    "broker": (
        "broker_service_port",
        "web_service_port",
        "broker_service_port_tls",
        "web_service_port_tls",
    ),
    "bookie": ("bookie_port", "binary_add_port", "stats_http_port"),
    "autorecovery": ("stats_http_port",),
    "zookeeper": ("client_port", "peer_port", "leader_election_port", "stats_http_port"),
}
BIND_ADDRESS: dict[str, str] = {
    "broker": "bind_address",
    "bookie": "bookie_host",
    "autorecovery": "stats_http_address",
    "zookeeper": "client_port_address",
}
# What the role keeps on disk: these directories must be on a mounted volume.
STORAGE: dict[str, Any] = {
    "bookie": lambda config: [config.journal_dir, config.ledger_dir],
    "zookeeper": lambda config: [config.data_dir, config.data_log_dir or config.data_dir],
}
# The container port name a URL scheme must reach.
SCHEME_PORT = {"zk": "client", "pulsar": "pulsar", "http": "http"}
# The toolset's shell reads these (stripemq admin, stripemq client); `sleep` reads nothing.
# The CLI's defaults, and the metadata store for `stripemq autorecovery --status`.
TOOLSET_VARIABLES = {ADMIN_URL_ENV, SERVICE_URL_ENV, METADATA_ENV}
# Commands that read only the metadata store's variable (init containers run them).
METADATA_TOOLS = ("wait", "shell")
URL = re.compile(r"\b(?:zk|pulsar|http)://[^\s\"']+")


@functools.cache
def _documents(value_set: str) -> list[Doc]:
    return documents(VALUE_SETS[value_set])


@pytest.fixture(params=list(VALUE_SETS), ids=list(VALUE_SETS))
def value_set(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def docs(value_set: str) -> list[Doc]:
    return _documents(value_set)


def _name(doc: Doc) -> str:
    return f"{doc['kind']}/{doc['metadata']['name']}"


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _label_selector(selector: Doc) -> dict[str, str]:
    assert set(selector) == {"matchLabels"}, f"only matchLabels is modelled: {selector}"
    return dict(selector["matchLabels"])


def _selected(docs: list[Doc], selector: dict[str, str]) -> list[tuple[Doc, Doc]]:
    return [
        (workload, template)
        for workload, template in pod_templates(docs)
        if _selects(selector, template["metadata"].get("labels", {}))
    ]


def _container_ports(template: Doc) -> dict[str, int]:
    """Port name (or its number as text, for an unnamed port) -> number, of the pod's
    containers."""
    ports: dict[str, int] = {}
    for container in template["spec"]["containers"]:
        for port in container.get("ports", []):
            ports[port.get("name", str(port["containerPort"]))] = port["containerPort"]
    return ports


def _resolve_port(port: int | str, ports: dict[str, int]) -> int | None:
    """A port reference (a name, or a number) -> the declared number, None if undeclared."""
    if isinstance(port, int):
        return port if port in ports.values() else None
    return ports.get(port)


@dataclass
class Process:
    """A container that runs a stripemq server role, with what the chart hands it."""

    workload: Doc
    template: Doc
    container: Doc
    role: str
    pod_name: str
    env: dict[str, str]
    config: Any


def _pod_name(workload: Doc) -> str:
    return f"{workload['metadata']['name']}-0"  # a StatefulSet's first pod; a stand-in else


def _env(docs: list[Doc], workload: Doc, container: Doc) -> dict[str, str]:
    pod = {"name": _pod_name(workload), "namespace": workload["metadata"]["namespace"]}
    return environment(docs, container, pod)


def _role(container: Doc) -> str | None:
    command = [*container.get("command", []), *container.get("args", [])]
    if len(command) >= 2 and command[0] == "stripemq" and command[1] in role_configs():
        return str(command[1])
    return None


def _processes(docs: list[Doc]) -> Iterator[Process]:
    for workload, template in pod_templates(docs):
        for container in template["spec"]["containers"]:
            role = _role(container)
            if role is None:
                continue
            env = _env(docs, workload, container)
            try:
                config = load_config(role_configs()[role], environ=env)
            except StripeMQError as exc:
                pytest.fail(f"{_name(workload)}: stripemq {role} refuses its settings: {exc}")
            yield Process(workload, template, container, role, _pod_name(workload), env, config)


def _role_variables(role: str) -> set[str]:
    return {ENV_PREFIX + item.name.upper() for item in describe(role_configs()[role])}


def _service_port(service: Doc, port: int) -> Doc | None:
    return next((p for p in service["spec"]["ports"] if p["port"] == port), None)


# --- selectors ----------------------------------------------------------------------------


def test_workload_selectors_select_their_own_pods(docs: list[Doc]) -> None:
    for workload, template in pod_templates(docs):
        if workload["kind"] == "Job":
            continue  # a Job's selector is generated
        selector = _label_selector(workload["spec"]["selector"])
        assert _selects(selector, template["metadata"]["labels"]), _name(workload)
        others = [w for w, _ in _selected(docs, selector) if w is not workload]
        assert others == [], f"{_name(workload)} also selects the pods of {others}"


def test_every_service_selects_pods(docs: list[Doc]) -> None:
    for service in of_kind(docs, "Service"):
        selected = _selected(docs, service["spec"]["selector"])
        assert selected, f"{_name(service)} selects no pod template"


def test_statefulsets_name_a_headless_service_of_their_pods(docs: list[Doc]) -> None:
    services = {s["metadata"]["name"]: s for s in of_kind(docs, "Service")}
    for statefulset in of_kind(docs, "StatefulSet"):
        name = statefulset["spec"]["serviceName"]
        service = services.get(name)
        assert service is not None, f"{_name(statefulset)}: no Service {name}"
        assert service["spec"].get("clusterIP") == "None", f"{_name(service)} is not headless"
        labels = statefulset["spec"]["template"]["metadata"]["labels"]
        assert _selects(service["spec"]["selector"], labels), _name(statefulset)


def test_pod_disruption_budgets_select_pods(docs: list[Doc]) -> None:
    for pdb in of_kind(docs, "PodDisruptionBudget"):
        selected = _selected(docs, _label_selector(pdb["spec"]["selector"]))
        assert len(selected) == 1, f"{_name(pdb)} selects {[_name(w) for w, _ in selected]}"
        workload, _ = selected[0]
        replicas = workload["spec"]["replicas"]
        unavailable = pdb["spec"]["maxUnavailable"]
        assert isinstance(unavailable, int) and 0 < unavailable, _name(pdb)
        if _main_role(workload) == "zookeeper" and replicas >= 3:
            # A voluntary disruption never breaks the ensemble's quorum.
            assert replicas - unavailable > replicas // 2, _name(pdb)


# --- ports --------------------------------------------------------------------------------


def test_service_target_ports_are_container_ports(docs: list[Doc]) -> None:
    for service in of_kind(docs, "Service"):
        selected = _selected(docs, service["spec"]["selector"])
        headless = service["spec"].get("clusterIP") == "None"
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            for workload, template in selected:
                number = _resolve_port(target, _container_ports(template))
                assert number is not None, f"{_name(service)} {target}: not in {_name(workload)}"
                if headless:  # clients connect to the pods directly, at the Service's port
                    assert number == port["port"], f"{_name(service)} port {port}"


def test_probe_ports_are_the_containers_own(docs: list[Doc]) -> None:
    for workload, template in pod_templates(docs):
        for container in containers(template):
            own = {
                p.get("name", str(p["containerPort"])): p["containerPort"]
                for p in container.get("ports", [])
            }
            for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
                probe = container.get(kind)
                if probe is None:
                    continue
                handler = probe.get("httpGet") or probe.get("tcpSocket") or probe.get("grpc")
                assert handler is not None, f"{_name(workload)} {kind}: no port to check"
                assert _resolve_port(handler["port"], own) is not None, (
                    f"{_name(workload)} {container['name']} {kind}: port {handler['port']} "
                    f"is not one of {own}"
                )


def test_processes_listen_where_their_pods_declare(docs: list[Doc]) -> None:
    """The role's listening ports are exactly the container's ports, on every interface."""
    for process in _processes(docs):
        where = f"{_name(process.workload)} (stripemq {process.role})"
        listening = {getattr(process.config, name) for name in LISTEN_PORTS[process.role]}
        listening.discard(None)
        declared = {p["containerPort"] for p in process.container.get("ports", [])}
        assert listening == declared, f"{where}: listens on {listening}, declares {declared}"
        port_settings = {
            item.name
            for item in describe(type(process.config))
            if item.name.endswith(("_port", "_port_tls"))
        }
        assert port_settings == set(LISTEN_PORTS[process.role]), (
            f"{process.role}: classify its port settings in LISTEN_PORTS: {port_settings}"
        )
        address = getattr(process.config, BIND_ADDRESS[process.role])
        assert address == "0.0.0.0", f"{where}: binds {address}, unreachable from the pod's IP"


def test_every_port_variable_is_a_declared_port(docs: list[Doc]) -> None:
    for workload, template in pod_templates(docs):
        for container in template["spec"]["containers"]:
            declared = {p["containerPort"] for p in container.get("ports", [])}
            for variable, value in _env(docs, workload, container).items():
                if variable.startswith(ENV_PREFIX) and variable.endswith("_PORT"):
                    assert int(value) in declared, f"{_name(workload)} {variable}={value}"


def test_scrape_annotations_name_the_http_port(docs: list[Doc], value_set: str) -> None:
    scraped = VALUE_SETS[value_set].get("prometheus", {}).get("scrape", True)
    for workload, template in pod_templates(docs):
        annotations = template["metadata"].get("annotations", {})
        scrape = annotations.get("prometheus.io/scrape")
        assert scrape in ("true", "false"), f"{_name(workload)}: prometheus.io/scrape {scrape!r}"
        http = _container_ports(template).get("http")
        # Every pod that serves HTTP serves /metrics there, and is scraped by default.
        assert scrape == ("true" if http is not None and scraped else "false"), _name(workload)
        if scrape == "true":
            assert annotations.get("prometheus.io/port") == str(http), _name(workload)
            assert annotations.get("prometheus.io/path") == "/metrics", _name(workload)


# --- addresses ----------------------------------------------------------------------------


@dataclass
class Target:
    """Where a host:port of a URL lands."""

    service: Doc
    template: Doc  # the pod template behind the Service
    container_port: int


def _cluster_domain(value_set: str) -> str:
    return str(VALUE_SETS[value_set].get("clusterDomain", "cluster.local"))


def _resolve(docs: list[Doc], value_set: str, host: str, port: int) -> Target:
    """The Service (or StatefulSet pod, by its DNS name) ``host`` names, and the container
    port that ``port`` reaches there; fails the test when there is none."""
    services = {s["metadata"]["name"]: s for s in of_kind(docs, "Service")}
    domain = _cluster_domain(value_set)
    service_forms = {
        name: {
            name,
            f"{name}.{NAMESPACE}",
            f"{name}.{NAMESPACE}.svc",
            f"{name}.{NAMESPACE}.svc.{domain}",
        }
        for name in services
    }
    service = next((services[n] for n, forms in service_forms.items() if host in forms), None)
    if service is None:
        pod, _, rest = host.partition(".")
        service = services.get(rest.removesuffix(f".{NAMESPACE}.svc.{domain}"))
        assert service is not None and rest.endswith(f".{NAMESPACE}.svc.{domain}"), (
            f"{host}: neither a rendered Service nor a StatefulSet pod's DNS name"
        )
        assert service["spec"].get("clusterIP") == "None", f"{host}: pod DNS needs headless"
        statefulsets = [
            s
            for s in of_kind(docs, "StatefulSet")
            if s["spec"]["serviceName"] == service["metadata"]["name"]
        ]
        pods = {
            f"{s['metadata']['name']}-{i}"
            for s in statefulsets
            for i in range(s["spec"]["replicas"])
        }
        assert pod in pods, f"{host}: no such pod (the StatefulSet's pods are {sorted(pods)})"
    declared = _service_port(service, port)
    assert declared is not None, f"{host}:{port}: {_name(service)} does not expose {port}"
    (_, template), *_ = _selected(docs, service["spec"]["selector"])
    number = _resolve_port(declared.get("targetPort", port), _container_ports(template))
    assert number is not None
    return Target(service, template, number)


def _hosts(url: str) -> tuple[str, list[tuple[str, int]]]:
    """(scheme, [(host, port)]) of a URL; a zk:// URL may list several hosts."""
    scheme, _, rest = url.partition("://")
    netloc = rest.split("/", 1)[0]
    result = []
    for item in netloc.split(","):
        parts = urlsplit(f"//{item}")
        assert parts.hostname and parts.port, f"{url}: {item} has no host:port"
        result.append((parts.hostname, parts.port))
    return scheme, result


def _urls(docs: list[Doc]) -> Iterator[tuple[str, str]]:
    """(where, URL) for every URL in a container's environment, command or args."""
    for workload, template in pod_templates(docs):
        for container in containers(template):
            where = f"{_name(workload)} {container['name']}"
            texts = [*_env(docs, workload, container).values()]
            texts += [*container.get("command", []), *container.get("args", [])]
            for text in texts:
                for match in URL.finditer(text):
                    yield where, match.group(0)


def test_urls_name_rendered_services_and_pods(docs: list[Doc], value_set: str) -> None:
    external = VALUE_SETS[value_set].get("pulsar_metadata", {}).get("userProvidedZookeepers")
    found = list(_urls(docs))
    assert found
    for where, url in found:
        scheme, hosts = _hosts(url)
        for host, port in hosts:
            if scheme == "zk" and external:
                assert f"{host}:{port}" in external.split(","), f"{where}: {url}"
                continue
            target = _resolve(docs, value_set, host, port)
            wanted = _container_ports(target.template).get(SCHEME_PORT[scheme])
            assert target.container_port == wanted, (
                f"{where}: {url} reaches port {target.container_port}, not the "
                f"{SCHEME_PORT[scheme]} port {wanted}"
            )


def test_every_component_uses_one_metadata_store_and_cluster(docs: list[Doc]) -> None:
    stores = {str(p.config.metadata_service_uri) for p in _processes(docs) if p.role != "zookeeper"}
    clusters = {str(p.config.cluster_name) for p in _processes(docs) if p.role == "broker"}
    for workload, template in pod_templates(docs):
        for container in containers(template):
            args = _parsed(container)
            if args is None:
                continue
            if args.command == "initialize-cluster-metadata":
                stores.add(args.metadata_store)
                clusters.add(args.cluster)
            elif args.command in METADATA_TOOLS:
                env = _env(docs, workload, container)
                stores.add(args.metadata or env.get(METADATA_ENV))
    assert len(stores) == 1, stores
    assert len(clusters) == 1, clusters


def test_advertised_addresses_are_the_pods_own_dns_names(docs: list[Doc], value_set: str) -> None:
    """A bookie's id and a broker's lookup answers are its pod's stable DNS name."""
    for process in _processes(docs):
        address = getattr(process.config, "advertised_address", "absent")
        if process.role in ("bookie", "broker"):
            assert address, f"{_name(process.workload)}: no advertised address"
            assert process.workload["kind"] == "StatefulSet"
            service = process.workload["spec"]["serviceName"]
            domain = _cluster_domain(value_set)
            assert address == f"{process.pod_name}.{service}.{NAMESPACE}.svc.{domain}"
            for port in process.container["ports"]:
                _resolve(docs, value_set, address, port["containerPort"])


def test_zookeeper_servers_are_the_statefulsets_pods(docs: list[Doc], value_set: str) -> None:
    for process in _processes(docs):
        if process.role != "zookeeper":
            continue
        statefulset = process.workload
        replicas = statefulset["spec"]["replicas"]
        service = statefulset["spec"]["serviceName"]
        domain = _cluster_domain(value_set)
        name = statefulset["metadata"]["name"]
        wanted = [f"{name}-{i}.{service}.{NAMESPACE}.svc.{domain}" for i in range(replicas)]
        assert process.config.servers == wanted
        for host in process.config.servers:
            _resolve(docs, value_set, host, process.config.peer_port)
            _resolve(docs, value_set, host, process.config.leader_election_port)


# --- settings -----------------------------------------------------------------------------


def test_every_variable_is_a_setting_of_its_reader(docs: list[Doc]) -> None:
    """ConfigMap data is read by the main container of the pods that use it (and by their
    ``stripemq wait`` and ``stripemq shell`` init containers, which read only the metadata
    URL); container env by that container."""
    users: dict[str, set[str]] = {}  # ConfigMap -> the roles reading it
    for workload, template in pod_templates(docs):
        for container in containers(template):
            reads = _reads(container)
            for source in container.get("envFrom", []):
                users.setdefault(source["configMapRef"]["name"], set()).add(reads)
            for item in container.get("env", []):
                if item["name"].startswith(ENV_PREFIX):
                    assert item["name"] in _variables(reads), (
                        f"{_name(workload)} {container['name']}: {item['name']} is no setting "
                        f"of {reads}"
                    )
    for name, data in config_maps(docs).items():
        readers = users.get(name)
        assert readers, f"ConfigMap/{name} is used by no container"
        mains = readers - {"metadata tool"}
        assert len(mains) == 1, f"ConfigMap/{name} is read by {readers}"
        (reader,) = mains
        for variable in data:
            assert variable in _variables(reader), f"ConfigMap/{name}: {variable} ({reader})"


def _reads(container: Doc) -> str:
    """What reads a container's variables: a role, a ``metadata tool`` (``stripemq wait``,
    ``stripemq shell``), ``toolset`` or ``nothing``."""
    command = container.get("command", [])
    if command[:1] == ["sleep"]:
        return "toolset"
    args = _parsed(container)
    assert args is not None, container
    if args.command in role_configs():
        return str(args.command)
    if args.command in METADATA_TOOLS:
        return "metadata tool"
    return "nothing"


def _variables(reader: str) -> set[str]:
    if reader == "toolset":
        return TOOLSET_VARIABLES
    if reader == "metadata tool":
        return {METADATA_ENV}
    if reader == "nothing":
        return set()
    return _role_variables(reader)


def test_settings_dataclasses_give_every_chart_role(docs: list[Doc]) -> None:
    roles = {_role(c) for _, t in pod_templates(docs) for c in t["spec"]["containers"]}
    assert roles - {None} <= set(role_configs()), roles
    assert {"zookeeper", "bookie", "broker", "autorecovery"} <= set(role_configs())


def test_toolset_gets_the_admin_and_service_urls(docs: list[Doc]) -> None:
    for workload, template in pod_templates(docs):
        for container in template["spec"]["containers"]:
            if _reads(container) == "toolset":
                env = _env(docs, workload, container)
                assert set(env) >= TOOLSET_VARIABLES, _name(workload)


def test_wait_containers_know_the_metadata_store(docs: list[Doc]) -> None:
    bookies = sum(
        s["spec"]["replicas"] for s in of_kind(docs, "StatefulSet") if _main_role(s) == "bookie"
    )
    for workload, template in pod_templates(docs):
        for container in containers(template):
            args = _parsed(container)
            if args is None or args.command != "wait":
                continue
            env = _env(docs, workload, container)
            assert args.metadata or env.get(METADATA_ENV), _name(workload)
            if bookies:
                assert args.bookies <= bookies, f"{_name(workload)} waits for {args.bookies}"


def _main_role(workload: Doc) -> str | None:
    return _role(workload["spec"]["template"]["spec"]["containers"][0])


# --- commands -----------------------------------------------------------------------------


@functools.cache
def _parser() -> argparse.ArgumentParser:
    return build_parser()


def _parsed(container: Doc) -> Any:
    """The container's command parsed by the real ``stripemq`` parser; None for `sleep`."""
    command = [*container.get("command", []), *container.get("args", [])]
    if command == ["sleep", "infinity"]:
        return None
    assert command[:1] == ["stripemq"], f"{container['name']}: {command}"
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            return _parser().parse_args(command[1:])
    except SystemExit:
        message = errors.getvalue().strip().splitlines()[-1:]
        pytest.fail(f"{container['name']}: `{' '.join(command)}` does not parse: {message}")


def test_every_command_is_a_stripemq_subcommand(docs: list[Doc]) -> None:
    seen = set()
    for workload, template in pod_templates(docs):
        for container in template["spec"].get("initContainers", []):
            assert _parsed(container).command in METADATA_TOOLS, _name(workload)
        for container in template["spec"]["containers"]:
            args = _parsed(container)
            seen.add("sleep" if args is None else args.command)
            if args is None:
                assert _reads(container) == "toolset"
    assert "initialize-cluster-metadata" in seen, seen


def test_a_wrong_flag_fails_to_parse() -> None:
    """The command check can fail."""
    with pytest.raises(pytest.fail.Exception):
        _parsed({"name": "x", "command": ["stripemq", "wait", "--ensemble", "2"]})
    with pytest.raises(pytest.fail.Exception):
        _parsed({"name": "x", "command": ["stripemq", "brokers"]})


# --- references ---------------------------------------------------------------------------


def test_referenced_config_maps_and_secrets_exist(docs: list[Doc]) -> None:
    maps = config_maps(docs)
    secrets = {s["metadata"]["name"]: s for s in of_kind(docs, "Secret")}

    def check(kind: str, name: str, key: str | None, where: str) -> None:
        found: dict[str, Any] = maps if kind == "ConfigMap" else secrets
        assert name in found, f"{where}: no {kind}/{name}"
        if key is not None:
            data = found[name] if kind == "ConfigMap" else found[name].get("data", {})
            assert key in data, f"{where}: {kind}/{name} has no key {key}"

    for workload, template in pod_templates(docs):
        where = _name(workload)
        for container in containers(template):
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    check("ConfigMap", source["configMapRef"]["name"], None, where)
                if "secretRef" in source:
                    check("Secret", source["secretRef"]["name"], None, where)
            for item in container.get("env", []):
                ref = item.get("valueFrom", {})
                if "configMapKeyRef" in ref:
                    check(
                        "ConfigMap",
                        ref["configMapKeyRef"]["name"],
                        ref["configMapKeyRef"]["key"],
                        where,
                    )
                if "secretKeyRef" in ref:
                    check("Secret", ref["secretKeyRef"]["name"], ref["secretKeyRef"]["key"], where)
        for volume in template["spec"].get("volumes", []):
            if "configMap" in volume:
                check("ConfigMap", volume["configMap"]["name"], None, where)
            if "secret" in volume:
                check("Secret", volume["secret"]["secretName"], None, where)


def test_env_references_are_defined_before_use(docs: list[Doc]) -> None:
    for workload, template in pod_templates(docs):
        for container in containers(template):
            where = f"{_name(workload)} {container['name']}"
            from_config_maps = set(_env(docs, workload, {"envFrom": container.get("envFrom", [])}))
            defined: list[str] = []
            for item in container.get("env", []):
                for name in re.findall(r"\$\(([^)]*)\)", str(item.get("value", ""))):
                    assert name in defined, f"{where}: {item['name']} uses $({name})"
                assert item["name"] not in defined, f"{where}: {item['name']} twice"
                assert item["name"] not in from_config_maps, (
                    f"{where}: {item['name']} is both in env and in an envFrom ConfigMap"
                )
                defined.append(item["name"])
            for word in [*container.get("command", []), *container.get("args", [])]:
                for name in re.findall(r"\$\(([^)]*)\)", word):
                    assert name in defined or name in from_config_maps, f"{where}: $({name})"


def test_volume_mounts_name_volumes_and_storage_is_on_them(docs: list[Doc]) -> None:
    for workload, template in pod_templates(docs):
        volumes = {v["name"] for v in template["spec"].get("volumes", [])}
        volumes |= {c["metadata"]["name"] for c in workload["spec"].get("volumeClaimTemplates", [])}
        for container in containers(template):
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes, f"{_name(workload)}: no volume {mount['name']}"
    for process in _processes(docs):
        store = STORAGE.get(process.role)
        if store is None:
            continue
        mounts = [m["mountPath"].rstrip("/") for m in process.container.get("volumeMounts", [])]
        for directory in store(process.config):
            assert any(directory == m or directory.startswith(m + "/") for m in mounts), (
                f"{_name(process.workload)}: {directory} is on no volume (mounts: {mounts})"
            )


# --- labels and scheduling -----------------------------------------------------------------

# https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set
LABEL_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


def _label_sets(docs: list[Doc]) -> Iterator[tuple[str, dict[str, str]]]:
    for doc in docs:
        yield _name(doc), doc["metadata"].get("labels", {})
        for _, template in pod_templates([doc]):
            yield f"{_name(doc)} pod", template["metadata"].get("labels", {})
        for service in of_kind([doc], "Service"):
            yield f"{_name(doc)} selector", service["spec"]["selector"]


def test_labels_and_names_are_valid(docs: list[Doc]) -> None:
    for where, labels in _label_sets(docs):
        for key, value in labels.items():
            assert LABEL_NAME.match(key) and len(key.rpartition("/")[2]) <= 63, f"{where}: {key}"
            assert isinstance(value, str) and LABEL_VALUE.match(value), f"{where}: {key}={value!r}"
    for service in of_kind(docs, "Service"):
        assert DNS_LABEL.match(service["metadata"]["name"]), _name(service)
    for statefulset in of_kind(docs, "StatefulSet"):
        # Its pods carry controller-revision-hash=<name>-<10 characters>, a label value.
        assert len(statefulset["metadata"]["name"]) <= 52, _name(statefulset)


def test_anti_affinity_terms_select_the_pods_own_kind(docs: list[Doc]) -> None:
    for workload, template in pod_templates(docs):
        anti = template["spec"].get("affinity", {}).get("podAntiAffinity", {})
        terms = [
            *anti.get("requiredDuringSchedulingIgnoredDuringExecution", []),
            *(
                t["podAffinityTerm"]
                for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution", [])
            ),
        ]
        for term in terms:
            selector = _label_selector(term["labelSelector"])
            assert _selects(selector, template["metadata"]["labels"]), _name(workload)
            assert [w for w, _ in _selected(docs, selector)] == [workload], _name(workload)


@pytest.mark.parametrize("value_set", ["defaults", "replicas", "config-data"])
def test_zookeeper_and_bookies_spread_over_nodes_by_default(value_set: str) -> None:
    for workload, template in pod_templates(_documents(value_set)):
        if _main_role(workload) in ("zookeeper", "bookie"):
            anti = template["spec"]["affinity"]["podAntiAffinity"]
            (term,) = anti["requiredDuringSchedulingIgnoredDuringExecution"]
            assert term["topologyKey"] == "kubernetes.io/hostname", _name(workload)


def test_anti_affinity_can_be_turned_off() -> None:
    for workload, template in pod_templates(_documents("no-persistence")):
        assert "affinity" not in template["spec"], _name(workload)
