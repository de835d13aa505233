"""Finding the broker that serves a topic (LOOKUP, following redirects), a topic's
partition count, and a namespace's topics: the binary-protocol lookup service.

A client on TLS (``pulsar+ssl://``) follows an answer's ``brokerServiceUrlTls``, one on
plain TCP its ``brokerServiceUrl``. An answer without a TLS URL to a TLS client (a broker
with no TLS port) is a configuration that no retry mends: ``InvalidConfigurationError``."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from stripemq.client.connection import ClientConnection
from stripemq.client.pool import ConnectionPool, ServiceAddresses, address_of
from stripemq.errors import ConnectError, InvalidConfigurationError, TopicLookupError
from stripemq.proto import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)

MAX_REDIRECTS = 20


@dataclass(frozen=True)
class BrokerAddress:
    logical: str  # host:port the broker calls itself
    physical: str  # host:port to dial (the service address when proxied)


class LookupService:
    def __init__(self, pool: ConnectionPool, service: ServiceAddresses) -> None:
        self.pool = pool
        self.service = service

    async def _service_connection(self) -> ClientConnection:
        address = self.service.current()
        try:
            return await self.pool.get(address)
        except ConnectError:
            self.service.failed(address)
            raise

    async def lookup(self, topic: str) -> BrokerAddress:
        """The broker that owns ``topic`` (asking another after each redirect).

        Raises:
            TopicLookupError: no broker was named, or the redirects did not end.
            InvalidConfigurationError: a TLS client was named a broker without TLS.
            ConnectError, AuthenticationError: as ``ConnectionPool.get``.
        """
        connection = await self._service_connection()
        authoritative = False
        for _ in range(MAX_REDIRECTS):
            request_id = connection.new_request_id()
            response = await connection.request(
                pb.CommandLookupTopic(
                    topic=topic, request_id=request_id, authoritative=authoritative
                ),
                request_id,
            )
            body = response.lookupTopicResponse
            url = body.brokerServiceUrlTls if self.service.tls else body.brokerServiceUrl
            if not url:
                if self.service.tls and body.brokerServiceUrl:
                    raise InvalidConfigurationError(
                        f"lookup of {topic} named {body.brokerServiceUrl}, which has no TLS "
                        f"URL: a pulsar+ssl:// client needs brokers with a TLS port"
                    )
                raise TopicLookupError(f"lookup of {topic} named no broker")
            address = address_of(url)
            if body.response == pb.CommandLookupTopicResponse.Connect:
                proxied = body.proxy_through_service_url
                return BrokerAddress(address, connection.physical_address if proxied else address)
            authoritative = body.authoritative
            log.debug("lookup of %s redirected to %s", topic, address)
            connection = await self.pool.get(address)
        raise TopicLookupError(f"lookup of {topic} redirected more than {MAX_REDIRECTS} times")

    async def partitions(self, topic: str) -> int:
        """How many partitions ``topic`` has (0: not partitioned)."""
        connection = await self._service_connection()
        request_id = connection.new_request_id()
        response = await connection.request(
            pb.CommandPartitionedTopicMetadata(topic=topic, request_id=request_id), request_id
        )
        return response.partitionMetadataResponse.partitions

    async def topics_of_namespace(self, namespace: str, mode: int) -> list[str]:
        connection = await self._service_connection()
        request_id = connection.new_request_id()
        response = await connection.request(
            pb.CommandGetTopicsOfNamespace(namespace=namespace, request_id=request_id, mode=mode),  # type: ignore[arg-type]
            request_id,
        )
        return list(response.getTopicsOfNamespaceResponse.topics)
