"""``/admin/v2/brokers``: Pulsar's brokers resource.

- ``GET /admin/v2/brokers`` and ``/admin/v2/brokers/{cluster}``: the active brokers, as
  Pulsar names them (``host:webport``), from their registrations under
  ``/stripemq/brokers``. Another cluster's are asked of that cluster: 307 to its
  ``serviceUrl`` (Pulsar's ``validateClusterOwnership``); 404 for an unknown cluster.
- ``GET .../configuration/runtime``: this broker's settings by their Pulsar names
  (``clusterName``, ``webServicePort``, ...), values as strings, as Pulsar answers them.
- ``GET .../configuration`` and ``.../configuration/values``: the settings that may be
  changed while the broker runs (none: every setting is read at start-up), and the values
  they were given; ``POST``/``DELETE .../configuration/{name}[/{value}]`` is 412, as Pulsar
  answers for a setting that is not dynamic.
- ``GET .../internal-configuration``: where the metadata lives (Pulsar's
  ``InternalConfigurationData``); ``GET .../backlog-quota-check`` runs the backlog-quota
  check over this broker's topics now (204).
- ``GET .../leaderBroker``: the elected leader (``stripemq.broker.leader``) as Pulsar's
  ``{"serviceUrl": <web URL>, "brokerId": ...}``.
- ``GET .../health``: produces a heartbeat message to this broker's heartbeat topic
  (``persistent://pulsar/<host:webport>/healthcheck``, Pulsar's V2 heartbeat namespace, made
  when first needed) and reads it back from storage; ``ok`` (text), or 500 with the reason.
- ``GET .../ready``: ``ok`` once the broker serves, 503 before.
- ``GET .../version``: the stripemq version (text).
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from importlib import metadata as package_metadata

from aiohttp import web

from stripemq.bookie.client.ledger_manager import LEDGERS_ROOT
from stripemq.broker.admin.rest import (
    AdminContext,
    RestError,
    name_in_path,
    not_found,
    ok_json,
    precondition_failed,
    redirect_to,
)
from stripemq.broker.cluster_metadata import read_cluster
from stripemq.broker.config import BrokerConfig
from stripemq.broker.leader import current_leader, lookup_id
from stripemq.broker.namespaces import TenantInfo, create_namespace, create_tenant
from stripemq.broker.ownership import registered_brokers
from stripemq.broker.service import BrokerService
from stripemq.clock import now_ms
from stripemq.errors import NodeExistsError, StripeMQError
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import encode_entry, parse_entry
from stripemq.proto.topic_name import TopicName

HEARTBEAT_TENANT = "pulsar"
HEALTH_CHECK_TOPIC = "healthcheck"
HEALTH_CHECK_TIMEOUT_S = 10.0


def package_version() -> str:
    try:
        return package_metadata.version("stripemq")
    except package_metadata.PackageNotFoundError:
        return "unknown"


def runtime_configuration(config: BrokerConfig) -> dict[str, str]:
    """Pulsar's ``/brokers/configuration/runtime``: each setting that has a Pulsar name, its
    value as a string as Java prints it (``true``, ``8080``); unset ones left out."""
    answer = {}
    for item in dataclasses.fields(config):
        name = item.metadata.get("pulsar_name")
        value = getattr(config, item.name)
        if name is None or value is None:
            continue
        answer[name] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return answer


def internal_configuration(metadata_url: str) -> dict[str, str | None]:
    """Pulsar's ``InternalConfigurationData``: brokers, ledgers and bookies share one
    metadata store (ledgers under ``/ledgers``)."""
    zookeeper = None
    if metadata_url.startswith("zk://"):
        zookeeper = metadata_url.removeprefix("zk://")
    return {
        "zookeeperServers": zookeeper,
        "configurationStoreServers": zookeeper,
        "ledgersRootPath": LEDGERS_ROOT,
        "bookkeeperMetadataServiceUri": metadata_url,
        "stateStorageServiceUrl": None,
        "metadataStoreUrl": metadata_url,
        "configurationMetadataStoreUrl": metadata_url,
    }


def heartbeat_topic(web_url: str, fallback_id: str) -> TopicName:
    """This broker's heartbeat topic, in Pulsar's V2 heartbeat namespace."""
    host = lookup_id(web_url, fallback_id)
    return TopicName("persistent", HEARTBEAT_TENANT, host, HEALTH_CHECK_TOPIC)


class Brokers:
    def __init__(self, ctx: AdminContext) -> None:
        self.ctx = ctx

    async def _active(self) -> list[str]:
        registrations = await registered_brokers(self.ctx.store)
        return sorted(lookup_id(r.info.web_url, r.info.broker_id) for r in registrations)

    async def list_brokers(self, request: web.Request) -> web.Response:
        return ok_json(await self._active())

    async def list_cluster_brokers(self, request: web.Request) -> web.Response:
        cluster = name_in_path(request, "cluster")
        if cluster != self.ctx.cluster:
            data, _ = await read_cluster(self.ctx.store, cluster)  # 404 if unknown
            if not data.service_url:
                raise precondition_failed(f"Cluster {cluster} has no service URL to ask")
            raise redirect_to(data.service_url, request)
        return ok_json(await self._active())

    async def runtime_configuration(self, request: web.Request) -> web.Response:
        return ok_json(runtime_configuration(self.ctx.config))

    async def dynamic_configuration_names(self, request: web.Request) -> web.Response:
        return ok_json([])

    async def dynamic_configuration_values(self, request: web.Request) -> web.Response:
        return ok_json({})

    async def update_dynamic_configuration(self, request: web.Request) -> web.Response:
        raise precondition_failed(
            f"Can't update non-dynamic configuration {request.match_info['name']!r}: "
            "every setting is read when the broker starts"
        )

    async def backlog_quota_check(self, request: web.Request) -> web.Response:
        """Run the backlog-quota check over this broker's topics now (Pulsar's
        ``monitorBacklogQuota``), without waiting for its next round."""
        await self.ctx.service.policy_checks.check_backlog_quotas()
        return web.Response(status=204)

    async def internal_configuration(self, request: web.Request) -> web.Response:
        return ok_json(internal_configuration(self.ctx.config.metadata_service_uri))

    async def leader_broker(self, request: web.Request) -> web.Response:
        leader = await current_leader(self.ctx.store)
        if leader is None:
            raise not_found("No leader broker is elected")
        return ok_json(leader.to_json())

    async def ready(self, request: web.Request) -> web.Response:
        if self.ctx.get_service() is None:
            raise RestError(503, "the broker is not ready")
        return web.Response(text="ok")

    async def version(self, request: web.Request) -> web.Response:
        return web.Response(text=package_version())

    async def health(self, request: web.Request) -> web.Response:
        service = self.ctx.service
        topic = heartbeat_topic(self.ctx.web_url, service.me.broker_id)
        try:
            await asyncio.wait_for(self._heartbeat(service, topic), HEALTH_CHECK_TIMEOUT_S)
        except TimeoutError:
            raise RestError(
                500, f"health check on {topic} timed out after {HEALTH_CHECK_TIMEOUT_S:.0f}s"
            ) from None
        except StripeMQError as exc:
            raise RestError(500, f"health check on {topic} failed: {exc}") from None
        return web.Response(text="ok")

    async def _heartbeat(self, service: BrokerService, topic: TopicName) -> None:
        """Store a message on the heartbeat topic and read it back from storage, as a
        reader would."""
        await self._heartbeat_namespace(service, topic)
        served = await service.get_topic(topic)
        payload = f"healthcheck-{uuid.uuid4().hex}".encode()
        metadata = pb.MessageMetadata(
            producer_name=f"health-check-{service.me.broker_id}",
            sequence_id=0,
            publish_time=now_ms(),
        )
        position = await served.publish(encode_entry(metadata, payload))
        entries = await served.ml.read_entries(position, 1)
        if not entries or entries[0].position != position:
            raise RestError(500, f"health check message {position} could not be read back")
        _metadata, read_back, problem = parse_entry(entries[0].data)
        if read_back != payload:
            raise RestError(500, f"health check message {position} read back wrong: {problem}")

    async def _heartbeat_namespace(self, service: BrokerService, topic: TopicName) -> None:
        """The heartbeat tenant, namespace and topic, made the first time."""
        store = service.store
        try:
            await create_tenant(store, HEARTBEAT_TENANT, TenantInfo((), (self.ctx.cluster,)))
        except NodeExistsError:
            pass
        try:
            await create_namespace(store, topic.namespace_name, clusters=(self.ctx.cluster,))
        except NodeExistsError:
            pass
        try:
            await service.create_topic(topic)
        except NodeExistsError:
            pass


def add_routes(router: web.UrlDispatcher, ctx: AdminContext) -> None:
    """Add this resource's routes to ``router``."""
    r = Brokers(ctx)
    router.add_get("/admin/v2/brokers", r.list_brokers)
    router.add_get("/admin/v2/brokers/leaderBroker", r.leader_broker)
    router.add_get("/admin/v2/brokers/health", r.health)
    router.add_get("/admin/v2/brokers/ready", r.ready)
    router.add_get("/admin/v2/brokers/version", r.version)
    router.add_get("/admin/v2/brokers/configuration/runtime", r.runtime_configuration)
    router.add_get("/admin/v2/brokers/configuration", r.dynamic_configuration_names)
    router.add_get("/admin/v2/brokers/configuration/values", r.dynamic_configuration_values)
    update = r.update_dynamic_configuration
    router.add_post("/admin/v2/brokers/configuration/{name}/{value}", update)
    router.add_delete("/admin/v2/brokers/configuration/{name}", update)
    router.add_get("/admin/v2/brokers/internal-configuration", r.internal_configuration)
    router.add_get("/admin/v2/brokers/backlog-quota-check", r.backlog_quota_check)
    router.add_get("/admin/v2/brokers/{cluster}", r.list_cluster_brokers)
