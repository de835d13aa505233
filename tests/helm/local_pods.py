"""The pods of a rendered chart as local processes on 127.0.0.1, started as a kubelet would.

``translate(documents, namespace=..., root=...)`` reads the Kubernetes objects Helm rendered
and returns a ``LocalCluster``: one ``LocalPod`` per pod the cluster would run, each with its
containers' command lines and environments first resolved as Kubernetes resolves them (the
``kube_*`` fields) and then mapped onto this machine (``argv``, ``env``).

Pods: ``<name>-<i>`` for ``i < replicas`` of every StatefulSet and Deployment (a Deployment's
pods are really ``<name>-<hash>-<random>``; ordinals keep them apart), ``<name>-0`` for a
Job (one completion). A container whose command is ``sleep infinity`` (the toolset) is not
started: ``LocalCluster.exec`` runs commands with its environment, as ``kubectl exec``
would. Other workload kinds, and commands other than ``stripemq ...``, are refused.

Environment, in the kubelet's order: ``envFrom`` ConfigMaps (values as they are), then
``env`` in order: ``value`` with ``$(VAR)`` expanded from the variables defined before it,
``valueFrom.fieldRef`` (``metadata.name`` is the pod's name, ``metadata.namespace``,
``status.podIP`` is 127.0.0.1) and ``valueFrom.configMapKeyRef``. ``command`` and ``args``
are expanded from the whole environment. Expansion follows Kubernetes: ``$(NAME)`` of an
undefined name stays as it is, ``$$`` is one ``$``. Service links (``<SVC>_SERVICE_HOST``
...) exist only for Services with a cluster IP; the translator refuses to guess them, so a
Service with one needs ``enableServiceLinks: false`` in the pods.

Network: every declared ``containerPort`` of a pod gets its own free local port. The host
names that exist in the cluster map to 127.0.0.1:

- ``<pod>.<service>[.<namespace>[.svc[.<cluster domain>]]]`` for a StatefulSet pod whose
  ``serviceName`` is a headless Service selecting it; ``<pod-host>:<port>`` becomes
  ``127.0.0.1:<local port of that containerPort>``;
- ``<service>[.<namespace>[.svc[.<cluster domain>]]]``; ``<service-host>:<port>`` goes to the
  first selected pod (workload order, then ordinal), Service port -> targetPort (by name or
  number) -> that pod's local port.

In every env value and argument a ``host:port`` whose host is a name must be one of those
(IP literals and ``localhost`` stay), and becomes ``127.0.0.1:<local port>``; a bare known
host (a whole comma- or space-separated item, or a URL's host) becomes ``127.0.0.1``; an env
var ``STRIPEMQ_*_PORT`` holding one of the pod's containerPorts becomes its local port (one
holding any other port is refused: the process would listen on that very port here). Bare
names of two different pods in one value are refused: both would become 127.0.0.1 and lose
which is which. A value that is an absolute path maps into the pod's directory: under one
of the container's ``volumeMounts`` to ``<root>/<pod>/volumes/<volume>`` (emptyDir and
volumeClaimTemplates alike), else into the container's own filesystem,
``<root>/<pod>/containers/<container>/rootfs`` (listed in ``outside_volumes``: data a server
keeps there is lost with the container). ``<root>/<pod>/workdir`` is the image's working
directory. Whatever still looks like a cluster host name (a ``.svc`` label, the cluster
domain, ``<x>.<service>`` of no pod) raises ``TranslationError``: that is a chart bug or a
case this module does not model, never something to pass through.

Running (``LocalCluster``): ``start`` launches every pod's first container at once; ``tick``
moves each pod on (an init container that exited 0 starts the next, the last starts the main
container) and raises ``PodFailure`` when a container exits when it should not (init
container with a non-zero code, a server at all, a Job's container with a non-zero code).
Readiness is each container's ``readinessProbe`` (``httpGet`` on its mapped port) answering
200; a pod without one is ready once running; a Job's pod once it succeeded. Output of every
container goes to ``<root>/logs/<pod>.<container>.log`` (``logs`` shows their tails).
``stop`` ends the pods in the reverse order they became ready: SIGTERM to each process
group started, SIGKILL after a grace period.
"""

from __future__ import annotations

import enum
import ipaddress
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import stripemq
from stripemq.testing.polling import until_blocking
from stripemq.testing.ports import free_port

LOCALHOST = "127.0.0.1"
SOURCE_ROOT = Path(stripemq.__file__).resolve().parents[1]
WORKLOADS = ("StatefulSet", "Deployment", "Job")
PORT_VARIABLE = re.compile(r"^STRIPEMQ_(?:\w+_)?PORT$")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST = rf"{_LABEL}(?:\.{_LABEL})*"
HOST_PORT = re.compile(rf"(?<![\w.-])({_HOST}):(\d+)(?![\w])")
DOTTED_NAME = re.compile(rf"(?<![\w.-])({_LABEL}(?:\.{_LABEL})+)(?![\w-])")
URL_HOST = re.compile(rf"^([A-Za-z][A-Za-z0-9+.-]*://)({_HOST})(/.*)?$")
ITEM_SEPARATORS = re.compile(r"([,\s;]+)")
TAIL_LINES = 60


class TranslationError(Exception):
    """The rendered objects cannot be run locally the way Kubernetes would run them."""


class PodFailure(AssertionError):
    """A local pod's container ended when it should not have."""


# ---------------------------------------------------------------- Kubernetes' $(VAR) expansion


def expand(text: str, lookup: Callable[[str], str | None]) -> str:
    """``text`` with ``$(NAME)`` replaced as Kubernetes does for env values, command and
    args: a defined name gives its value, an undefined one stays ``$(NAME)``, ``$$`` gives
    ``$``, an unclosed ``$(`` and a ``$`` before anything else stay as they are."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        following = text[i + 1]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "(":
            close = text.find(")", i + 2)
            if close < 0:
                out.append("$(")
                i += 2
                continue
            name = text[i + 2 : close]
            value = lookup(name)
            out.append(f"$({name})" if value is None else value)
            i = close + 1
        else:
            out.append("$" + following)
            i += 2
    return "".join(out)


# ---------------------------------------------------------------- the translated pods


@dataclass(frozen=True)
class HttpProbe:
    """An ``httpGet`` probe, on the pod's local port."""

    path: str
    port: int
    timeout: float  # timeoutSeconds


class PodPhase(enum.Enum):
    PENDING = "pending"  # nothing started yet
    INITIALIZING = "initializing"  # an init container runs
    RUNNING = "running"  # the main containers run
    SUCCEEDED = "succeeded"  # a Job's containers all exited 0
    STOPPED = "stopped"  # stop() ended it


@dataclass
class LocalContainer:
    """One container of a pod: as the cluster would run it, and as it runs here."""

    pod: str
    name: str
    init: bool
    kube_argv: list[str]  # command + args after Kubernetes' expansion
    kube_env: dict[str, str]  # the environment the container sees in the cluster
    argv: list[str]  # the local command line ([] for sleep infinity: not started)
    env: dict[str, str]  # the container's variables, mapped onto this machine
    mounts: dict[str, Path]  # mountPath -> local directory
    outside_volumes: list[str]  # absolute paths in env or args under no mount
    rootfs: Path  # stands for the container's own filesystem (paths under no mount)
    readiness: HttpProbe | None
    liveness: HttpProbe | None
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def runnable(self) -> bool:
        return bool(self.argv)

    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def log_tail(self, lines: int = TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return "(no output)"
        return "\n".join(text.splitlines()[-lines:]) or "(no output)"


@dataclass
class LocalPod:
    """One pod: its ports, directory and containers."""

    name: str
    kind: str
    workload: str
    ordinal: int
    labels: dict[str, str]
    annotations: dict[str, str]
    ports: dict[int, int]  # containerPort -> local port
    port_names: dict[str, int]  # port name -> containerPort
    directory: Path
    init_containers: list[LocalContainer] = field(default_factory=list)
    containers: list[LocalContainer] = field(default_factory=list)
    phase: PodPhase = PodPhase.PENDING
    next_init: int = 0  # index of the init container to start next

    @property
    def workdir(self) -> Path:
        return self.directory / "workdir"

    def local_port(self, port: int | str) -> int:
        """The local port of a containerPort given by number or name.

        Raises:
            TranslationError: the pod declares no such port.
        """
        number = self.port_names.get(port) if isinstance(port, str) else port
        if isinstance(port, str) and port.isdigit():
            number = int(port)
        if number is None or number not in self.ports:
            raise TranslationError(
                f"pod {self.name}: no containerPort {port!r} (declared: "
                f"{sorted(self.ports)} named {sorted(self.port_names)})"
            )
        return self.ports[number]

    def container(self, name: str) -> LocalContainer:
        for container in self.all_containers():
            if container.name == name:
                return container
        raise KeyError(f"pod {self.name} has no container {name!r}")

    def all_containers(self) -> list[LocalContainer]:
        return [*self.init_containers, *self.containers]


# ---------------------------------------------------------------- translation


@dataclass(frozen=True)
class _Service:
    name: str
    headless: bool
    selector: dict[str, str]
    ports: dict[int, int | str]  # port -> targetPort


@dataclass
class _ContainerFiles:
    rootfs: Path
    mounts: dict[str, Path] = field(default_factory=dict)
    outside_volumes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _PodHost:
    pod: LocalPod


@dataclass(frozen=True)
class _ServiceHost:
    service: _Service


def _metadata(doc: Mapping[str, Any]) -> dict[str, Any]:
    return dict(doc.get("metadata") or {})


class _Translator:
    def __init__(
        self,
        documents: list[dict[str, Any]],
        namespace: str,
        cluster_domain: str,
        root: Path,
        allocate_port: Callable[[], int],
    ) -> None:
        self.namespace = namespace
        self.cluster_domain = cluster_domain
        self.root = root
        self.allocate_port = allocate_port
        self.config_maps: dict[str, dict[str, str]] = {}
        self.services: dict[str, _Service] = {}
        self.workloads: list[dict[str, Any]] = []
        for doc in documents:
            kind, meta = doc.get("kind"), _metadata(doc)
            if meta.get("namespace", namespace) != namespace:
                raise TranslationError(
                    f"{kind} {meta.get('name')} is in namespace {meta.get('namespace')!r}, "
                    f"not {namespace!r}"
                )
            if kind == "ConfigMap":
                data = doc.get("data") or {}
                self.config_maps[meta["name"]] = {k: str(v) for k, v in data.items()}
            elif kind == "Service":
                spec = doc["spec"]
                ports = {
                    int(p["port"]): p.get("targetPort", p["port"]) for p in spec.get("ports", [])
                }
                self.services[meta["name"]] = _Service(
                    meta["name"],
                    spec.get("clusterIP") == "None",
                    dict(spec.get("selector") or {}),
                    ports,
                )
            elif kind in WORKLOADS:
                self.workloads.append(doc)
            elif kind in ("DaemonSet", "CronJob", "Pod", "ReplicaSet"):
                raise TranslationError(f"{kind} {meta.get('name')}: not modelled here")
        self.pods: list[LocalPod] = []
        self.hosts: dict[str, _PodHost | _ServiceHost] = {}

    # -------------------------------------------------------- pods, ports, names

    def make_pods(self) -> None:
        for workload in self.workloads:
            kind, name = workload["kind"], _metadata(workload)["name"]
            spec = workload["spec"]
            if kind == "Job":
                count = 1
                if int(spec.get("parallelism", 1)) != 1 or int(spec.get("completions", 1)) != 1:
                    raise TranslationError(f"Job {name}: only one completion is modelled")
            else:
                count = int(spec.get("replicas", 1))
            template = spec["template"]
            meta = _metadata(template)
            for ordinal in range(count):
                pod_name = f"{name}-{ordinal}"
                ports: dict[int, int] = {}
                names: dict[str, int] = {}
                pod_spec = template["spec"]
                for container in [
                    *pod_spec.get("initContainers", []),
                    *pod_spec["containers"],
                ]:
                    for port in container.get("ports", []):
                        if port.get("protocol", "TCP") != "TCP":
                            raise TranslationError(f"pod {pod_name}: only TCP ports are modelled")
                        number = int(port["containerPort"])
                        ports.setdefault(number, self.allocate_port())
                        if "name" in port:
                            names[port["name"]] = number
                self.pods.append(
                    LocalPod(
                        name=pod_name,
                        kind=kind,
                        workload=name,
                        ordinal=ordinal,
                        labels={k: str(v) for k, v in (meta.get("labels") or {}).items()},
                        annotations={k: str(v) for k, v in (meta.get("annotations") or {}).items()},
                        ports=ports,
                        port_names=names,
                        directory=self.root / pod_name,
                    )
                )

    def selected(self, service: _Service) -> list[LocalPod]:
        if not service.selector:
            return []
        return [
            pod
            for pod in self.pods
            if all(pod.labels.get(k) == v for k, v in service.selector.items())
        ]

    def _suffixes(self, name: str) -> list[str]:
        ns = self.namespace
        return [name, f"{name}.{ns}", f"{name}.{ns}.svc", f"{name}.{ns}.svc.{self.cluster_domain}"]

    def make_hosts(self) -> None:
        linked = [
            _metadata(w)["name"]
            for w in self.workloads
            if w["spec"]["template"]["spec"].get("enableServiceLinks", True)
        ]
        for service in self.services.values():
            if not service.headless and linked:
                raise TranslationError(
                    f"Service {service.name} has a cluster IP: its service-link variables "
                    "(<SVC>_SERVICE_HOST, <SVC>_PORT, ...) would be in the pods of "
                    f"{linked}; they are not modelled: give those pods "
                    "enableServiceLinks: false, or make the Service headless"
                )
            for host in self._suffixes(service.name):
                self.hosts[host] = _ServiceHost(service)
        for workload in self.workloads:
            if workload["kind"] != "StatefulSet":
                continue
            governing = self.services.get(workload["spec"].get("serviceName", ""))
            if governing is None or not governing.headless:
                continue  # no DNS names for its pods: references to them fail below
            chosen = {pod.name for pod in self.selected(governing)}
            for pod in self.pods:
                if pod.workload == _metadata(workload)["name"] and pod.name in chosen:
                    for host in self._suffixes(f"{pod.name}.{governing.name}"):
                        self.hosts[host] = _PodHost(pod)

    def host_port(self, where: str, host: str, port: int) -> int:
        """The local port ``host:port`` reaches."""
        target = self.hosts[host]
        if isinstance(target, _PodHost):
            return target.pod.local_port(port)
        service = target.service
        if port not in service.ports:
            raise TranslationError(
                f"{where}: {host}:{port}: Service {service.name} has no port {port} "
                f"(ports {sorted(service.ports)})"
            )
        pods = self.selected(service)
        if not pods:
            raise TranslationError(f"{where}: {host}:{port}: Service {service.name} selects no pod")
        return pods[0].local_port(service.ports[port])

    # -------------------------------------------------------- values

    def _looks_like_cluster_host(self, name: str) -> bool:
        labels = name.lower().split(".")
        if all(label.isdigit() for label in labels):
            return False
        return (
            "svc" in labels
            or name.lower().endswith("." + self.cluster_domain)
            or self.namespace in labels[1:]
            or any(label in self.services for label in labels[1:])
        )

    def localize(
        self,
        where: str,
        pod: LocalPod,
        files: _ContainerFiles,
        value: str,
        variable: str | None = None,
    ) -> str:
        """An env value or argument as the local process needs it (module docstring)."""
        if variable is not None and PORT_VARIABLE.match(variable) and value.strip().isdigit():
            port = int(value)
            if port == 0:
                return value
            if port not in pod.ports:
                raise TranslationError(
                    f"{where}: {variable}={value} is no containerPort of pod {pod.name} "
                    f"({sorted(pod.ports)}): the process would listen on {port} itself"
                )
            return str(pod.ports[port])
        if value.startswith("/"):
            return str(self.local_path(files, value))

        def replace_host_port(match: re.Match[str]) -> str:
            host, port = match.group(1), int(match.group(2))
            if host in self.hosts:
                return f"{LOCALHOST}:{self.host_port(where, host, port)}"
            if host == "localhost" or _is_ip(host):
                return match.group(0)
            raise TranslationError(f"{where}: {host}:{port} names no host of this release")

        value = HOST_PORT.sub(replace_host_port, value)
        pieces = ITEM_SEPARATORS.split(value)
        bare_pods: set[str] = set()
        for index, piece in enumerate(pieces):
            if index % 2:
                continue  # a separator
            url = URL_HOST.match(piece)
            host = url.group(2) if url else piece
            target = self.hosts.get(host)
            if target is None:
                continue
            if isinstance(target, _PodHost):
                bare_pods.add(target.pod.name)
            pieces[index] = f"{url.group(1)}{LOCALHOST}{url.group(3) or ''}" if url else LOCALHOST
        if len(bare_pods) > 1:
            raise TranslationError(
                f"{where}: {value!r} names pods {sorted(bare_pods)} without ports: all would "
                "be 127.0.0.1 here, and nothing would tell them apart"
            )
        value = "".join(pieces)
        for match in DOTTED_NAME.finditer(value):
            if self._looks_like_cluster_host(match.group(1)):
                raise TranslationError(
                    f"{where}: {match.group(1)!r} looks like a cluster host name but is no "
                    "pod or Service of this release"
                )
        return value

    def local_path(self, files: _ContainerFiles, path: str) -> Path:
        """Where ``path`` of the container lies here: in its volume's directory, else in the
        container's own filesystem (noted in ``files.outside_volumes``)."""
        for mount_path in sorted(files.mounts, key=len, reverse=True):
            base = mount_path.rstrip("/")
            if path == base or path.startswith(base + "/"):
                return files.mounts[mount_path] / path[len(base) :].lstrip("/")
        files.outside_volumes.append(path)
        return files.rootfs / path.lstrip("/")

    # -------------------------------------------------------- containers

    def kube_environment(
        self, where: str, pod: LocalPod, container: Mapping[str, Any]
    ) -> dict[str, str]:
        env: dict[str, str] = {}
        for source in container.get("envFrom", []):
            prefix = source.get("prefix", "")
            if "configMapRef" in source:
                ref = source["configMapRef"]
                data = self.config_maps.get(ref["name"])
                if data is None:
                    if ref.get("optional"):
                        continue
                    raise TranslationError(f"{where}: envFrom ConfigMap {ref['name']} is missing")
                for key, value in data.items():
                    if re.fullmatch(r"[-._a-zA-Z][-._a-zA-Z0-9]*", prefix + key):
                        env[prefix + key] = value
            else:
                raise TranslationError(f"{where}: envFrom {sorted(source)} is not modelled")
        for item in container.get("env", []):
            name = item["name"]
            if "valueFrom" in item:
                env[name] = self.value_from(where, pod, item["valueFrom"])
            else:
                env[name] = expand(str(item.get("value", "")), env.get)
        return env

    def value_from(self, where: str, pod: LocalPod, source: Mapping[str, Any]) -> str:
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            fields = {
                "metadata.name": pod.name,
                "metadata.namespace": self.namespace,
                "status.podIP": LOCALHOST,
            }
            if path not in fields:
                raise TranslationError(f"{where}: fieldRef {path} is not modelled")
            return fields[path]
        if "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            data = self.config_maps.get(ref["name"], {})
            if ref["key"] not in data:
                raise TranslationError(f"{where}: ConfigMap {ref['name']} has no {ref['key']}")
            return data[ref["key"]]
        raise TranslationError(f"{where}: valueFrom {sorted(source)} is not modelled")

    def probe(self, where: str, pod: LocalPod, probe: Mapping[str, Any] | None) -> HttpProbe | None:
        if probe is None:
            return None
        get = probe.get("httpGet")
        if get is None:
            raise TranslationError(f"{where}: only httpGet probes are modelled: {sorted(probe)}")
        if get.get("host") or get.get("scheme", "HTTP") != "HTTP":
            raise TranslationError(f"{where}: a probe's host or HTTPS is not modelled")
        timeout = float(probe.get("timeoutSeconds", 1))
        return HttpProbe(get.get("path", "/"), pod.local_port(get["port"]), timeout)

    def container(
        self,
        pod: LocalPod,
        volumes: Mapping[str, Path],
        spec: Mapping[str, Any],
        init: bool,
    ) -> LocalContainer:
        where = f"pod {pod.name} container {spec['name']}"
        files = _ContainerFiles(pod.directory / "containers" / spec["name"] / "rootfs")
        for mount in spec.get("volumeMounts", []):
            if mount["name"] not in volumes:
                raise TranslationError(f"{where}: volumeMount {mount['name']} names no volume")
            files.mounts[mount["mountPath"]] = volumes[mount["name"]]
        kube_env = self.kube_environment(where, pod, spec)
        kube_argv = [expand(str(a), kube_env.get) for a in [*spec.get("command", [])]]
        kube_argv += [expand(str(a), kube_env.get) for a in spec.get("args", [])]
        if not kube_argv:
            raise TranslationError(f"{where}: no command: the image's own is not modelled")
        env = {
            name: self.localize(f"{where} env {name}", pod, files, value, name)
            for name, value in kube_env.items()
        }
        if kube_argv == ["sleep", "infinity"]:
            argv: list[str] = []
        elif kube_argv[0] == "stripemq":
            argv = [sys.executable, "-m", "stripemq"] + [
                self.localize(f"{where} argument {i}", pod, files, arg)
                for i, arg in enumerate(kube_argv[1:], start=1)
            ]
        else:
            raise TranslationError(f"{where}: command {kube_argv[0]!r} is not modelled")
        return LocalContainer(
            pod=pod.name,
            name=spec["name"],
            init=init,
            kube_argv=kube_argv,
            kube_env=kube_env,
            argv=argv,
            env=env,
            mounts=files.mounts,
            outside_volumes=files.outside_volumes,
            rootfs=files.rootfs,
            readiness=self.probe(where, pod, spec.get("readinessProbe")),
            liveness=self.probe(where, pod, spec.get("livenessProbe")),
            log_path=self.root / "logs" / f"{pod.name}.{spec['name']}.log",
        )

    def fill_pods(self) -> None:
        for workload in self.workloads:
            name = _metadata(workload)["name"]
            template_spec = workload["spec"]["template"]["spec"]
            claims = [
                _metadata(claim)["name"]
                for claim in workload["spec"].get("volumeClaimTemplates", [])
            ]
            declared = [v["name"] for v in template_spec.get("volumes", [])] + claims
            for pod in (p for p in self.pods if p.workload == name):
                volumes = {volume: pod.directory / "volumes" / volume for volume in declared}
                pod.init_containers = [
                    self.container(pod, volumes, spec, init=True)
                    for spec in template_spec.get("initContainers", [])
                ]
                pod.containers = [
                    self.container(pod, volumes, spec, init=False)
                    for spec in template_spec["containers"]
                ]


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def translate(
    documents: list[dict[str, Any]],
    *,
    namespace: str,
    root: Path,
    cluster_domain: str = "cluster.local",
    allocate_port: Callable[[], int] = free_port,
) -> LocalCluster:
    """The pods ``documents`` describe, ready to start under ``root`` (module docstring).

    Raises:
        TranslationError: something the cluster would run cannot be mapped onto this machine.
    """
    translator = _Translator(documents, namespace, cluster_domain, root, allocate_port)
    translator.make_pods()
    translator.make_hosts()
    translator.fill_pods()
    return LocalCluster(translator.pods, root)


# ---------------------------------------------------------------- running


def http_get(port: int, path: str, timeout: float = 5.0) -> tuple[int | None, str]:
    """(status, body) of ``GET http://127.0.0.1:<port><path>``; status None if no answer."""
    try:
        with urllib.request.urlopen(f"http://{LOCALHOST}:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return None, ""


class LocalCluster:
    """The translated pods, started, watched and stopped as a kubelet would."""

    def __init__(self, pods: list[LocalPod], root: Path) -> None:
        self.pods = pods
        self.root = root
        self._ready: dict[str, None] = {}  # pods by the order they became ready
        self._logs: list[IO[bytes]] = []

    def pod(self, name: str) -> LocalPod:
        for pod in self.pods:
            if pod.name == name:
                return pod
        raise KeyError(f"no pod {name!r}: {[p.name for p in self.pods]}")

    def pods_of(self, workload: str) -> list[LocalPod]:
        return [pod for pod in self.pods if pod.workload == workload]

    def local_environment(self, pod: LocalPod, container: LocalContainer) -> dict[str, str]:
        """The process environment: this one without STRIPEMQ_* variables, the source tree
        on PYTHONPATH (the image installs the package), HOSTNAME, then the container's."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("STRIPEMQ_")}
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(SOURCE_ROOT), os.environ.get("PYTHONPATH", "")) if p
        )
        env["PYTHONUNBUFFERED"] = "1"
        env["HOSTNAME"] = pod.name
        env.update(container.env)
        return env

    # -------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Every pod's first container, all at once."""
        for pod in self.pods:
            pod.workdir.mkdir(parents=True, exist_ok=True)
            for container in pod.all_containers():
                for directory in [*container.mounts.values(), container.rootfs]:
                    directory.mkdir(parents=True, exist_ok=True)
        for pod in self.pods:
            self._advance(pod)

    def _spawn(self, pod: LocalPod, container: LocalContainer) -> None:
        container.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(container.log_path, "ab")  # closed by stop()
        self._logs.append(log)
        container.process = subprocess.Popen(
            container.argv,
            env=self.local_environment(pod, container),
            cwd=pod.workdir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def _advance(self, pod: LocalPod) -> None:
        """Start what comes next in ``pod``; ``PodFailure`` if a container failed."""
        if pod.phase in (PodPhase.SUCCEEDED, PodPhase.STOPPED):
            return
        if pod.phase is PodPhase.PENDING:
            pod.phase = PodPhase.INITIALIZING
        while pod.phase is PodPhase.INITIALIZING:
            if pod.next_init > 0:
                previous = pod.init_containers[pod.next_init - 1]
                code = previous.exit_code()
                if code is None:
                    return
                if code != 0:
                    raise PodFailure(self._failure(pod, previous, f"exited with {code}"))
            if pod.next_init < len(pod.init_containers):
                self._spawn(pod, pod.init_containers[pod.next_init])
                pod.next_init += 1
                continue
            for container in pod.containers:
                if container.runnable:
                    self._spawn(pod, container)
            pod.phase = PodPhase.RUNNING
        if pod.phase is PodPhase.RUNNING:
            codes = [c.exit_code() for c in pod.containers if c.runnable]
            for container, code in zip(
                [c for c in pod.containers if c.runnable], codes, strict=True
            ):
                if code is not None and (pod.kind != "Job" or code != 0):
                    raise PodFailure(self._failure(pod, container, f"exited with {code}"))
            if pod.kind == "Job" and codes and all(code == 0 for code in codes):
                pod.phase = PodPhase.SUCCEEDED

    def _failure(self, pod: LocalPod, container: LocalContainer, what: str) -> str:
        return (
            f"pod {pod.name} container {container.name} ({' '.join(container.kube_argv)}) "
            f"{what}; its log:\n{container.log_tail()}"
        )

    def tick(self) -> None:
        """Move every pod on; ``PodFailure`` if a container failed."""
        for pod in self.pods:
            self._advance(pod)

    def is_ready(self, pod: LocalPod) -> bool:
        """The pod's readiness as Kubernetes would report it (a Job's pod: it succeeded)."""
        if pod.name in self._ready:
            return True
        if pod.kind == "Job":
            ready = pod.phase is PodPhase.SUCCEEDED
        else:
            ready = pod.phase is PodPhase.RUNNING and all(
                http_get(c.readiness.port, c.readiness.path, c.readiness.timeout)[0] == 200
                for c in pod.containers
                if c.readiness is not None
            )
        if ready:
            self._ready[pod.name] = None
        return ready

    def unready(self) -> list[str]:
        return [pod.name for pod in self.pods if not self.is_ready(pod)]

    def wait_ready(self, timeout: float) -> None:
        """Until every pod is ready (``PodFailure`` at once if one fails)."""

        def ready() -> bool:
            self.tick()
            return not self.unready()

        try:
            until_blocking(ready, "every pod is ready", timeout=timeout, interval=0.1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: still not ready: {self.unready()}") from None

    def stop(self, grace: float = 10.0, first: Sequence[str] = ()) -> None:
        """Stop every pod, one at a time: those of the workloads ``first`` (in that order),
        then the others in the reverse order they became ready (those never ready first).
        Each running container's process group gets SIGTERM, and SIGKILL for what is left
        of it after ``grace`` seconds.

        A kubelet deleting a release signals every pod at once; then the brokers wait for
        bookies and ZooKeeper that are already gone until their grace period ends. Going in
        order, as an operator scaling down would, keeps the test short."""
        never_ready = [pod for pod in self.pods if pod.name not in self._ready]
        order = [*never_ready, *(self.pod(name) for name in reversed(self._ready))]
        ranks = {workload: rank for rank, workload in enumerate(first)}
        order.sort(key=lambda pod: ranks.get(pod.workload, len(ranks)))  # stable
        for pod in order:
            running = [
                c.process
                for c in pod.all_containers()
                if c.process is not None and c.process.poll() is None
            ]
            for process in running:
                with suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            for process in running:
                with suppress(subprocess.TimeoutExpired):
                    process.wait(max(0.0, deadline - time.monotonic()))
            for process in running:
                # The whole group: children (ZooKeeper's JVM) may outlive their parent.
                with suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            pod.phase = PodPhase.STOPPED
        for log in self._logs:
            log.close()
        self._logs.clear()

    # -------------------------------------------------------- kubectl exec / logs

    def exec(
        self, pod_name: str, command: list[str], timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """``kubectl exec <pod> -- <command>`` with the pod's first container's environment
        (``stripemq ...`` runs as ``python -m stripemq ...``)."""
        pod = self.pod(pod_name)
        container = pod.containers[0]
        argv = list(command)
        if argv[:1] == ["stripemq"]:
            argv = [sys.executable, "-m", "stripemq", *argv[1:]]
        pod.workdir.mkdir(parents=True, exist_ok=True)
        return subprocess.run(
            argv,
            env=self.local_environment(pod, container),
            cwd=pod.workdir,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def logs(self, lines: int = TAIL_LINES) -> str:
        """The last ``lines`` of every started container's output."""
        parts = []
        for pod in self.pods:
            for container in pod.all_containers():
                if container.process is None:
                    continue
                parts.append(
                    f"----- {pod.name} / {container.name} (exit {container.exit_code()}): "
                    f"{' '.join(container.kube_argv)}\n{container.log_tail(lines)}"
                )
        return "\n".join(parts)

    @contextmanager
    def logs_on_failure(self) -> Iterator[None]:
        """Attach every container's log tail to an exception raised inside."""
        try:
            yield
        except BaseException as exc:
            exc.add_note(f"\nlocal pods' logs ({self.root / 'logs'}):\n{self.logs()}")
            raise
