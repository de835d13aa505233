"""One client connection: the asyncio driver of a ``ServerSession``.

The session (``stripemq.proto.server_session``) holds the protocol: the handshake, PING,
which producer and consumer ids exist and where each command goes. This class moves bytes
between the socket and the session, serves the requests the session hands over, and owns
what needs a loop: backpressure on SENDs, keep-alive, and pausing consumers while the
client does not take what is written.

Malformed frames close this connection only; a request the broker refuses gets ERROR (or
SEND_ERROR) with the protocol's code; nothing a client sends can stop the broker.

With security on (``BrokerSecurity``), CONNECT must carry valid credentials, every lookup,
producer and subscription is checked against the role's rights, and credentials that expire
are refreshed with AUTH_CHALLENGE (or the connection is closed, for a client that cannot
refresh). A connection's refusals are logged once, not once per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeAlias

from google.protobuf.message import Message

from stripemq.broker import limits
from stripemq.broker.dedup import DupStatus
from stripemq.broker.delayed_delivery import check_delivery_delay
from stripemq.broker.dispatch import ConsumerSlot
from stripemq.broker.schema import SchemaData, decode_version, encode_version, schema_id
from stripemq.broker.security import BrokerSecurity
from stripemq.broker.service import BrokerService
from stripemq.broker.stats import record_publish
from stripemq.broker.topic import Consumer, Producer, Subscription
from stripemq.errors import (
    AuthenticationError,
    AuthorizationError,
    BrokerError,
    IncompatibleSchemaError,
    ManagedLedgerError,
    StripeMQError,
    server_error_of,
)
from stripemq.managed_ledger.position import Position
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import (
    DEFAULT_MAX_MESSAGE_SIZE,
    Frame,
    ProtocolError,
    encode_command,
    encode_payload_command,
)
from stripemq.proto.initial_position import InitialPosition
from stripemq.proto.server_session import (
    CONSUMER_COMMANDS,
    REQUESTS,
    ClientConnected,
    ClientRefused,
    ConsumerCommand,
    CredentialsRefreshed,
    HandleKind,
    MalformedCommand,
    Request,
    SendReceived,
    ServerEvent,
    ServerSession,
    UnsupportedCommand,
)
from stripemq.proto.session import Keepalive, Liveness
from stripemq.proto.topic_name import TopicName, is_valid_name
from stripemq.security.authentication import AuthenticatedRole
from stripemq.security.authorization import Need

log = logging.getLogger(__name__)

# Subscription types a consumer may read compacted on (Pulsar's rule).
COMPACTED_READ_TYPES = frozenset({pb.CommandSubscribe.Exclusive, pb.CommandSubscribe.Failover})
EARLIEST = Position(-1, -1)  # "the first entry kept", in a reader's or seek's message id
_MAX_ID = (1 << 63) - 1


def start_position(message_id: pb.MessageIdData) -> Position | None:
    """Where a reader or seek starts: ``EARLIEST``, ``None`` for the latest, or the entry.

    The clients' sentinels: earliest is (-1, -1) (all bits set on the wire), latest is
    (Long.MAX, Long.MAX).
    """
    if message_id.ledgerId >= (1 << 64) - 1 or message_id.entryId >= (1 << 64) - 1:
        return EARLIEST
    if message_id.ledgerId >= _MAX_ID:
        return None
    return Position(message_id.ledgerId, message_id.entryId)


SERVER_VERSION = "stripemq"
# Sends in flight on one connection before the broker stops reading it
# (Pulsar's maxPendingPublishRequestsPerConnection); reading resumes at half.
DEFAULT_MAX_PENDING_PUBLISHES = 1000
# Bytes written to a client and not yet taken by its socket past which its consumers get
# nothing more until that drains (Pulsar skips consumers whose channel is not writable):
# a client that asks for messages and never reads them cannot grow the broker's memory.
MAX_UNSENT_BYTES = 1024 * 1024


def _schema_of(
    body: pb.CommandProducer | pb.CommandSubscribe | pb.CommandGetOrCreateSchema,
) -> SchemaData | None:
    """The schema a command carries (``None``: bytes). A type number Pulsar does not
    define never gets here: it parses as unset, and the frame decoder refuses a command
    that lacks a required field."""
    return SchemaData.from_proto(body.schema) if body.HasField("schema") else None


def generate_producer_name() -> str:
    """A name for a producer that brought none: unique across brokers and restarts, since
    deduplication tells producers apart by name."""
    return f"{SERVER_VERSION}-{uuid.uuid4().hex}"


# What the session hands over to be served; each names its type and request id.
Served: TypeAlias = Request | SendReceived[Producer] | ConsumerCommand[Consumer]


class ServerConnection:
    """Serves one client until it leaves or misbehaves."""

    def __init__(
        self,
        service: BrokerService,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        keepalive_s: float = 30.0,
        max_pending_publishes: int = DEFAULT_MAX_PENDING_PUBLISHES,
        security: BrokerSecurity | None = None,
    ) -> None:
        self.service = service
        self.security = security
        # Who the client is (None: authentication is off), and since when fresh credentials
        # are awaited (AUTH_CHALLENGE sent, no answer yet).
        self.principal: AuthenticatedRole | None = None
        self._supports_auth_refresh = False
        self._challenged_at: float | None = None
        self._expiry_watch: asyncio.Task[None] | None = None
        self._refusal_logged = False
        self.max_pending_publishes = max_pending_publishes
        self.keepalive = Keepalive(keepalive_s, asyncio.get_running_loop().time())
        self.reader = reader
        self.writer = writer
        self.max_message_size = max_message_size
        self.peer = writer.get_extra_info("peername")
        self.session: ServerSession[Producer, Consumer] = ServerSession(
            SERVER_VERSION,
            max_message_size=max_message_size,
            authenticate=(
                security.authenticate if security is not None and security.authenticating else None
            ),
        )
        self._tasks: set[asyncio.Task[Any]] = set()
        # The tasks serving PRODUCER requests, by producer id, until they are answered.
        self._creating_producers: dict[int, asyncio.Task[Any]] = {}
        self._refused_senders: set[str] = set()  # producers whose refused SEND was logged
        # Backpressure: SENDs stored but not yet receipted, and whether reading may go on.
        self.pending_publishes = 0
        self._publish_window = asyncio.Event()
        self._publish_window.set()
        # Publish throttling: cleared while a topic published to here is over its publish
        # rate, until its limiter allows more (Pulsar's disableCnxAutoRead).
        self._publish_rate_ok = asyncio.Event()
        self._publish_rate_ok.set()
        self._throttle_timer: asyncio.TimerHandle | None = None
        self._draining: asyncio.Task[None] | None = None  # consumers wait for the socket
        # Frames written in one turn of the event loop leave in one socket write.
        self._unsent: list[bytes] = []
        self._unsent_bytes = 0
        self._write_scheduled = False
        # drain() returns below a quarter of the limit: dispatch resumes before the socket
        # runs dry.
        writer.transport.set_write_buffer_limits(high=MAX_UNSENT_BYTES, low=MAX_UNSENT_BYTES // 4)
        # The session's REQUESTS, served with their bodies (coroutines run as tasks).
        self._requests: dict[int, Callable[[Any], Awaitable[None] | None]] = {
            pb.BaseCommand.PARTITIONED_METADATA: self._on_partitioned_metadata,
            pb.BaseCommand.LOOKUP: self._on_lookup,
            pb.BaseCommand.GET_TOPICS_OF_NAMESPACE: self._on_topics_of_namespace,
            pb.BaseCommand.PRODUCER: self._on_producer,
            pb.BaseCommand.CLOSE_PRODUCER: self._on_close_producer,
            pb.BaseCommand.SUBSCRIBE: self._on_subscribe,
            pb.BaseCommand.CLOSE_CONSUMER: self._on_close_consumer,
            pb.BaseCommand.UNSUBSCRIBE: self._on_unsubscribe,
            pb.BaseCommand.SEEK: self._on_seek,
            pb.BaseCommand.GET_SCHEMA: self._on_get_schema,
            pb.BaseCommand.GET_OR_CREATE_SCHEMA: self._on_get_or_create_schema,
        }
        # The session's CONSUMER_COMMANDS, served with their consumer and body.
        self._consumer_commands: dict[int, Callable[[Any, Any], Awaitable[None] | None]] = {
            pb.BaseCommand.FLOW: self._on_flow,
            pb.BaseCommand.ACK: self._on_ack,
            pb.BaseCommand.REDELIVER_UNACKNOWLEDGED_MESSAGES: self._on_redeliver,
            pb.BaseCommand.GET_LAST_MESSAGE_ID: self._on_get_last_message_id,
        }
        # The session decides what is served; a command it routes here must have a handler.
        assert self._requests.keys() == REQUESTS, "handlers out of step with the session"
        assert self._consumer_commands.keys() == CONSUMER_COMMANDS, "handlers out of step"

    @property
    def connected(self) -> bool:
        return self.session.connected

    @property
    def producers(self) -> dict[int, Producer]:
        """The producers on this connection, by id (the session's registry)."""
        return self.session.producers

    @property
    def consumers(self) -> dict[int, Consumer]:
        """The consumers on this connection, by id (the session's registry)."""
        return self.session.consumers

    # ------------------------------------------------------------------ the loop

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        keepalive = asyncio.ensure_future(self._keepalive())
        try:
            while data := await self.reader.read(256 * 1024):
                self.keepalive.heard(loop.time())
                for frame in self.session.feed(data):
                    if not self._publish_window.is_set():
                        await self._publish_window.wait()  # stop reading till receipts go out
                    if not self._publish_rate_ok.is_set():
                        await self._publish_rate_ok.wait()  # a publish rate is exceeded
                    if self.writer.is_closing():
                        return
                    event = self.session.receive_frame(frame)
                    self._flush()
                    if event is not None:
                        self._act(event)
        except ProtocolError as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            keepalive.cancel()
            await self._cleanup()

    async def _keepalive(self) -> None:
        """PING a quiet client every interval; one that stays silent for two is dead."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.keepalive.interval_s)
            now = loop.time()
            if not self._publish_window.is_set() or not self._publish_rate_ok.is_set():
                # Not reading (backpressure or throttling): the client's silence is ours.
                # Pulsar too times out only connections it reads.
                self.keepalive.heard(now)
                continue
            liveness = self.keepalive.check(now)
            if liveness is Liveness.DEAD:
                quiet = self.keepalive.quiet_for(now)
                log.warning("no word from %s in %.0fs: closing the connection", self.peer, quiet)
                self.writer.close()
                return
            if liveness is Liveness.PING and self.session.connected:
                self.session.ping()
                self._flush()

    async def _watch_credentials(self, check_s: float) -> None:
        """Every ``check_s``: credentials that expired are refreshed with AUTH_CHALLENGE;
        a client that cannot refresh, or does not answer within a check, is dropped."""
        while self.principal is not None and not self.writer.is_closing():
            await asyncio.sleep(check_s)
            principal = self.principal
            if principal is None or not principal.expired(time.time()):
                continue
            now = asyncio.get_running_loop().time()
            if not self._supports_auth_refresh:
                self._drop("its credentials expired and it cannot refresh them")
                return
            if self._challenged_at is None:
                self._challenged_at = now
                self.session.challenge()
                self._flush()
            elif now - self._challenged_at >= check_s:
                self._drop("it did not refresh its expired credentials")
                return

    def _drop(self, why: str) -> None:
        log.info("closing connection from %s (role %s): %s", self.peer, self._role(), why)
        self._write_unsent()
        self.writer.close()

    def _role(self) -> str | None:
        return self.principal.role if self.principal is not None else None

    def _act(self, event: ServerEvent) -> None:
        """Serve what the session handed over; a request's refusal is answered here, and a
        coroutine's in its task."""
        if isinstance(event, ClientConnected):
            log.debug(
                "%s connected (%s, v%d)", self.peer, event.client_version, event.protocol_version
            )
            self._authenticated(event.principal, event.supports_auth_refresh)
            return
        if isinstance(event, ClientRefused):
            log.warning("refused connection from %s: %s", self.peer, event.reason)
            self._write_unsent()
            self.writer.close()
            return
        if isinstance(event, CredentialsRefreshed):
            self._refreshed(event.principal)
            return
        if isinstance(event, UnsupportedCommand):
            log.info(
                "unsupported command %s from %s", pb.BaseCommand.Type.Name(event.kind), self.peer
            )
            return
        if isinstance(event, MalformedCommand):
            log.info("%s from %s lacks its body", pb.BaseCommand.Type.Name(event.kind), self.peer)
            return
        try:
            result = self._serve(event)
        except (StripeMQError, ValueError) as exc:
            self._refuse(event, exc)
            return
        except Exception as exc:
            self._refuse_for_bug(event, exc)
            return
        if result is not None:
            task = asyncio.ensure_future(self._guard(event, result))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _serve(self, event: Served) -> Awaitable[None] | None:
        if isinstance(event, Request):
            return self._requests[event.kind](event.body)
        if isinstance(event, SendReceived):
            self._on_send(event.producer, event.command, event.frame)
            return None
        return self._consumer_commands[event.kind](event.consumer, event.body)

    def _authenticated(self, principal: AuthenticatedRole | None, refreshes: bool) -> None:
        self.principal = principal
        self._supports_auth_refresh = refreshes
        self._watch_expiry()

    def _watch_expiry(self) -> None:
        """Start watching the credentials' expiry, once, as soon as they have one."""
        principal = self.principal
        if principal is None or principal.expires_at is None or self._expiry_watch is not None:
            return
        assert self.security is not None
        task = asyncio.ensure_future(self._watch_credentials(self.security.refresh_check_s))
        self._expiry_watch = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _refreshed(self, principal: AuthenticatedRole) -> None:
        """Fresh credentials: they must prove the same role (Pulsar's rule)."""
        if self.principal is not None and principal.role != self.principal.role:
            self._drop(f"refreshed credentials are for another role, {principal.role}")
            return
        log.debug("%s refreshed its credentials", self.peer)
        self._challenged_at = None
        self.principal = principal
        self._watch_expiry()  # the first credentials may not have expired at all

    async def _authorize(self, need: Need, topic: TopicName) -> None:
        """Raise ``AuthorizationError`` unless the client's role may ``need`` on ``topic``."""
        if self.security is not None:
            await self.security.check(need, self.principal, topic.namespace_name)

    async def _guard(self, event: Served, work: Awaitable[None]) -> None:
        """Run a request; a refusal or storage failure becomes ERROR for its request id,
        and so does a bug: every request gets an answer."""
        try:
            await work
        except (StripeMQError, ValueError) as exc:
            self._refuse(event, exc)
        except Exception as exc:
            self._refuse_for_bug(event, exc)

    def _refuse_for_bug(self, event: Served, exc: Exception) -> None:
        """A handler failed in a way nobody planned for: log it, and still answer."""
        log.exception("%s from %s failed", pb.BaseCommand.Type.Name(event.kind), self.peer)
        self._refuse(event, BrokerError(pb.UnknownError, f"internal error: {exc!r}"))

    def _refuse(self, event: Served, exc: BaseException) -> None:
        request_id = event.request_id
        what = pb.BaseCommand.Type.Name(event.kind)
        if isinstance(exc, (AuthenticationError, AuthorizationError)):
            # Once per connection: a client retrying a refused request floods nothing.
            level = logging.DEBUG if self._refusal_logged else logging.WARNING
            self._refusal_logged = True
            log.log(level, "%s from %s (role %s) refused: %s", what, self.peer, self._role(), exc)
        else:
            log.info("%s from %s refused: %s", what, self.peer, exc)
        if request_id is None:
            return
        self.session.refuse(event.kind, request_id, server_error_of(exc), str(exc))
        self._flush()

    def write(self, message: Message) -> None:
        self._send_bytes(encode_command(message))

    def _flush(self) -> None:
        """Write what the session queued (its own answers)."""
        data = self.session.data_to_send()
        if data:
            self._send_bytes(data)

    def _send_bytes(self, data: bytes) -> None:
        """Queue ``data`` for the socket: what is queued in one turn of the event loop (a
        read's receipts, a dispatch round's messages) goes out in one write, one syscall."""
        if self.writer.is_closing():
            return
        self._unsent.append(data)
        self._unsent_bytes += len(data)
        if not self._write_scheduled:
            self._write_scheduled = True
            asyncio.get_running_loop().call_soon(self._write_unsent)

    def _write_unsent(self) -> None:
        self._write_scheduled = False
        unsent, self._unsent, self._unsent_bytes = self._unsent, [], 0
        if unsent and not self.writer.is_closing():
            self.writer.write(unsent[0] if len(unsent) == 1 else b"".join(unsent))

    def _buffered_bytes(self) -> int:
        """Bytes written but not yet taken by the client, queued ones included."""
        return self.writer.transport.get_write_buffer_size() + self._unsent_bytes

    # ------------------------------------------------------------------ discovery

    async def _on_partitioned_metadata(self, body: pb.CommandPartitionedTopicMetadata) -> None:
        topic = TopicName.parse(body.topic)
        await self._authorize(Need.LOOKUP, topic)
        partitions = await self.service.partitions(topic)
        self.write(
            pb.CommandPartitionedTopicMetadataResponse(
                partitions=partitions,
                request_id=body.request_id,
                response=pb.CommandPartitionedTopicMetadataResponse.Success,
            )
        )

    async def _on_lookup(self, body: pb.CommandLookupTopic) -> None:
        topic = TopicName.parse(body.topic)
        await self._authorize(Need.LOOKUP, topic)
        owner = await self.service.lookup_broker(topic, body.authoritative)
        url = owner.service_url
        here = url == self.service.service_url
        self.write(
            pb.CommandLookupTopicResponse(
                brokerServiceUrl=url,
                brokerServiceUrlTls=owner.service_url_tls or None,
                response=(
                    pb.CommandLookupTopicResponse.Connect
                    if here
                    else pb.CommandLookupTopicResponse.Redirect
                ),
                request_id=body.request_id,
                authoritative=True,
            )
        )

    async def _on_topics_of_namespace(self, body: pb.CommandGetTopicsOfNamespace) -> None:
        topics = []
        tenant, _, local = body.namespace.partition("/")
        if not (is_valid_name(tenant) and is_valid_name(local)):
            raise BrokerError(pb.InvalidTopicName, f"invalid namespace {body.namespace!r}")
        if self.security is not None:
            await self.security.check(Need.LOOKUP, self.principal, body.namespace)
        if body.mode != pb.CommandGetTopicsOfNamespace.NON_PERSISTENT:
            topics = await self.service.topics_of_namespace(body.namespace)
        self.write(
            pb.CommandGetTopicsOfNamespaceResponse(
                request_id=body.request_id, topics=topics, filtered=False, changed=True
            )
        )

    # ------------------------------------------------------------------ producing

    async def _on_producer(self, body: pb.CommandProducer) -> None:
        limits.check_producer(body, len(self.producers))  # sizes and counts, before all else
        existing = self.producers.get(body.producer_id)
        if existing is not None and existing.topic.name == str(TopicName.parse(body.topic)):
            self._producer_success(body, existing)  # a retried PRODUCER: done already
            return
        with self._reserved("producer", body.producer_id):
            task = asyncio.current_task()
            assert task is not None
            self._creating_producers[body.producer_id] = task
            try:
                await self._create_producer(body)
            finally:
                self._creating_producers.pop(body.producer_id, None)

    async def _create_producer(self, body: pb.CommandProducer) -> None:
        if body.producer_id in self.producers:
            raise BrokerError(pb.ProducerBusy, f"producer id {body.producer_id} is in use")
        name_of_topic = TopicName.parse(body.topic)
        await self._authorize(Need.PRODUCE, name_of_topic)
        if body.initial_subscription_name:
            await self._authorize(Need.CONSUME, name_of_topic)  # it makes a subscription
        topic = await self.service.get_topic(name_of_topic)
        topic.check_encrypted_producer(body.encrypted)
        name = body.producer_name or generate_producer_name()
        if body.initial_subscription_name and body.initial_subscription_name not in (
            topic.subscriptions
        ):
            # Created before the producer (a dead-letter topic's), so that nothing it
            # publishes is lost before a consumer first subscribes.
            await topic.subscribe(body.initial_subscription_name, None, InitialPosition.Earliest)
        version = await topic.add_schema(_schema_of(body))
        producer = Producer(body.producer_id, name, topic, self, body.producer_access_mode)
        producer.schema_version = version
        producer.encrypted = body.encrypted
        producer.stats.describe_client(self.peer, self.session.client_version, body.metadata)
        queued = functools.partial(self._producer_queued, body, name)
        await topic.add_producer(producer, on_queued=queued)
        self.producers[body.producer_id] = producer
        self._producer_success(body, producer)

    def _producer_queued(self, body: pb.CommandProducer, name: str) -> None:
        """A WaitForExclusive producer waits for the topic's producers to go: its client
        hears so (``producer_ready`` false) and waits on, rather than timing out."""
        log.info("%s: producer %s waits for exclusive access to %s", self.peer, name, body.topic)
        self.write(
            pb.CommandProducerSuccess(
                request_id=body.request_id, producer_name=name, producer_ready=False
            )
        )

    def _producer_success(self, body: pb.CommandProducer, producer: Producer) -> None:
        dedup = producer.topic.dedup
        last = dedup.last_sequence_id(producer.name) if dedup is not None else -1
        success = pb.CommandProducerSuccess(
            request_id=body.request_id, producer_name=producer.name, last_sequence_id=last
        )
        if producer.schema_version is not None:
            success.schema_version = encode_version(producer.schema_version)
        self.write(success)

    @contextlib.contextmanager
    def _reserved(self, kind: HandleKind, handle_id: int) -> Iterator[None]:
        """Hold a producer or consumer id while its request is handled (taken before the
        first await, so a repeated id cannot slip in meanwhile); a second request for it
        meanwhile is told to retry (ServiceNotReady, as Pulsar answers)."""
        if not self.session.reserve(kind, handle_id):
            raise BrokerError(pb.ServiceNotReady, f"{kind} {handle_id} is being created")
        try:
            yield
        finally:
            self.session.release(kind, handle_id)

    def _on_send(self, producer: Producer, body: pb.CommandSend, frame: Frame) -> None:
        """A SEND the session routed to ``producer``, its entry usable."""
        assert frame.entry is not None
        try:
            limits.check_send(frame.metadata)
            check_delivery_delay(frame.metadata, producer.topic.delayed_delivery)
            producer.topic.check_encrypted_message(producer, frame.metadata)
        except BrokerError as exc:
            return self._send_error(body, server_error_of(exc), str(exc))
        messages = limits.messages_in_send(body)  # bounded: one count for rates and stats
        self._count_publish(producer, messages, frame.entry)
        dedup = producer.topic.dedup
        if dedup is not None:
            status = dedup.check(producer.name, body.sequence_id, body.highest_sequence_id)
            if status is DupStatus.DUPLICATE:
                self._receipt(producer, body, None)  # stored before: acknowledged again
                return None
            if status is DupStatus.IN_FLIGHT:
                return self._send_error(
                    body, pb.PersistenceError, "an earlier copy is still being stored"
                )
        # Queued now, in frame order: the managed ledger stores entries and completes them
        # in the order it is called, so receipts go out in the order the SENDs came.
        try:
            append = producer.topic.publish(frame.entry)
        except StripeMQError as exc:
            if dedup is not None:
                dedup.failed(producer.name, body.sequence_id)
            # Once per producer at WARNING: a client resending in a loop floods nothing.
            level = logging.DEBUG if producer.name in self._refused_senders else logging.WARNING
            self._refused_senders.add(producer.name)
            log.log(
                level,
                "%s: SEND %d of producer %s on %s refused: %s",
                self.peer,
                body.sequence_id,
                producer.name,
                producer.topic.name,
                exc,
            )
            return self._send_error(body, server_error_of(exc), str(exc))
        if body.is_chunk:
            producer.topic.stats.chunk_published = True
        self.pending_publishes += 1
        if self.pending_publishes >= self.max_pending_publishes:
            self._publish_window.clear()
        stored = functools.partial(
            self._published, producer, body, messages, len(frame.entry), time.monotonic()
        )
        append.add_done_callback(stored)
        return None

    def _count_publish(self, producer: Producer, messages: int, entry: bytes) -> None:
        """Count a SEND of ``messages`` messages against its topic's publish rate; past it,
        stop reading this connection until the rate allows more (what was read is still
        stored)."""
        limiter = producer.topic.publish_limiter
        if limiter is None:
            return
        limiter.spend(messages, len(entry))
        delay = limiter.delay()
        if delay <= 0 or not self._publish_rate_ok.is_set():
            return
        self._publish_rate_ok.clear()
        loop = asyncio.get_running_loop()
        self._throttle_timer = loop.call_later(delay, self._end_throttling)

    @property
    def publish_throttled(self) -> bool:
        """Whether reading is paused because a topic published to here is over its rate."""
        return not self._publish_rate_ok.is_set()

    def _end_throttling(self) -> None:
        self._throttle_timer = None
        self._publish_rate_ok.set()

    def publish_rate_changed(self) -> None:
        """A topic published to here has a new publish rate: stop waiting for the old
        one's timer. The next SEND is measured against the new rate (and pauses reading
        again if the topic is still over it)."""
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
            self._end_throttling()

    def _published(
        self,
        producer: Producer,
        body: pb.CommandSend,
        messages: int,
        size: int,
        started: float,
        append: asyncio.Future[Position],
    ) -> None:
        """SEND_RECEIPT or SEND_ERROR for a stored (or failed) entry, counted in the stats
        once stored; called in SEND order."""
        self.pending_publishes -= 1
        if self.pending_publishes <= self.max_pending_publishes // 2:
            self._publish_window.set()
        dedup = producer.topic.dedup
        error = append.exception() if not append.cancelled() else None
        if append.cancelled() or error is not None:
            if dedup is not None:
                dedup.failed(producer.name, body.sequence_id)
            reason = error if error is not None else ManagedLedgerError("append cancelled")
            self._send_error(body, server_error_of(reason), str(reason))
            return
        position = append.result()
        record_publish(producer, messages, size, (time.monotonic() - started) * 1000)
        if dedup is not None:
            highest = max(body.sequence_id, body.highest_sequence_id)
            dedup.stored(producer.name, highest, position)
        self._receipt(producer, body, position)

    def _receipt(self, producer: Producer, body: pb.CommandSend, position: Position | None) -> None:
        """SEND_RECEIPT; a duplicate's carries (-1, -1) as Pulsar's broker does."""
        unknown = (1 << 64) - 1
        self.write(
            pb.CommandSendReceipt(
                producer_id=body.producer_id,
                sequence_id=body.sequence_id,
                highest_sequence_id=body.highest_sequence_id,
                message_id=pb.MessageIdData(
                    ledgerId=position.ledger_id if position is not None else unknown,
                    entryId=position.entry_id if position is not None else unknown,
                    partition=producer.topic.topic_name.partition_index,
                ),
            )
        )

    @property
    def is_active(self) -> bool:
        return not self.writer.is_closing()

    def _send_error(self, body: pb.CommandSend, code: pb.ServerError, message: str) -> None:
        self.session.refuse_send(body, code, message)
        self._flush()

    async def _on_close_producer(self, body: pb.CommandCloseProducer) -> None:
        creating = self._creating_producers.get(body.producer_id)
        if creating is not None:  # withdrawn while it waits (WaitForExclusive, say)
            creating.cancel()
        producer = self.producers.pop(body.producer_id, None)
        if producer is not None:
            await producer.topic.remove_producer(producer)
        self.write(pb.CommandSuccess(request_id=body.request_id))

    def close_producer(self, producer_id: int) -> None:
        """Tell the client its producer was closed by the broker (fenced out)."""
        self.session.close_producer(producer_id)
        self._flush()

    # ------------------------------------------------------------------ schemas

    async def _on_get_schema(self, body: pb.CommandGetSchema) -> None:
        """The topic's schema, or the version asked for (read from the registry: the topic
        need not be served here, nor exist)."""
        name_of_topic = TopicName.parse(body.topic)
        await self._authorize(Need.LOOKUP, name_of_topic)
        registry, sid = self.service.schemas, schema_id(name_of_topic)
        if body.HasField("schema_version"):
            try:
                stored = await registry.get(sid, decode_version(body.schema_version))
            except ValueError as exc:
                raise IncompatibleSchemaError(f"Invalid schema version: {exc}") from None
        else:
            stored = await registry.latest(sid)
        if stored is None:
            raise BrokerError(pb.TopicNotFound, f"Topic not found or no-schema {name_of_topic}")
        self.write(
            pb.CommandGetSchemaResponse(
                request_id=body.request_id,
                schema=stored.schema.to_proto(str(name_of_topic)),
                schema_version=encode_version(stored.version),
            )
        )

    async def _on_get_or_create_schema(self, body: pb.CommandGetOrCreateSchema) -> None:
        """Register a schema for an existing topic as a producer's would be (a multi-topic
        producer asks before sending to another topic) and answer its version."""
        name_of_topic = TopicName.parse(body.topic)
        await self._authorize(Need.PRODUCE, name_of_topic)
        topic = await self.service.open_existing(name_of_topic)
        version = await topic.add_schema(_schema_of(body))
        self.write(
            pb.CommandGetOrCreateSchemaResponse(
                request_id=body.request_id,
                schema_version=encode_version(version) if version is not None else b"",
            )
        )

    # ------------------------------------------------------------------ consuming

    async def _on_subscribe(self, body: pb.CommandSubscribe) -> None:
        limits.check_subscribe(body, len(self.consumers))  # sizes and counts, before all else
        if body.consumer_id in self.consumers:
            raise BrokerError(pb.ConsumerBusy, f"consumer id {body.consumer_id} is in use")
        with self._reserved("consumer", body.consumer_id):
            await self._create_consumer(body)

    async def _create_consumer(self, body: pb.CommandSubscribe) -> None:
        name_of_topic = TopicName.parse(body.topic)
        await self._authorize(Need.CONSUME, name_of_topic)
        topic = await self.service.get_topic(name_of_topic)
        await topic.add_consumer_schema(_schema_of(body))
        initial = InitialPosition(body.initialPosition)
        meta = body.keySharedMeta if body.HasField("keySharedMeta") else None
        sticky = meta is not None and meta.keySharedMode == pb.STICKY
        ranges = [(r.start, r.end) for r in meta.hashRanges] if meta is not None else None
        topic.check_subscription_type(body.subType)
        if body.read_compacted and body.subType not in COMPACTED_READ_TYPES:
            raise BrokerError(
                pb.NotAllowedError,
                "readCompacted only allowed on failover or exclusive subscriptions",
            )
        if body.read_compacted:
            # Opened now: nothing is awaited between subscribing and adding the consumer.
            await topic.compaction.compacted()
        from_earliest = initial is InitialPosition.Earliest
        if body.durable:
            created = body.subscription not in topic.ml.cursors
            from_earliest = from_earliest and created
            subscription = await topic.subscribe(body.subscription, body.subType, initial, sticky)
        else:
            start = (
                start_position(body.start_message_id)
                if body.HasField("start_message_id")
                else (EARLIEST if initial is InitialPosition.Earliest else None)
            )
            from_earliest = start == EARLIEST
            subscription = topic.subscribe_non_durable(body.subscription, body.subType, start)
        if body.read_compacted and from_earliest:
            subscription.read_compacted_from_earliest()
        slot = ConsumerSlot(body.consumer_id, body.consumer_name, body.priority_level)
        slot.writable = self._draining is None
        consumer = Consumer(slot, self, subscription, read_compacted=body.read_compacted)
        consumer.stats.describe_client(self.peer, self.session.client_version, body.metadata)
        self.consumers[body.consumer_id] = consumer
        try:
            subscription.add_consumer(consumer, ranges)
        except BaseException:
            self.consumers.pop(body.consumer_id, None)
            await topic.drop_if_unused(subscription)  # a refused reader's goes with it
            raise
        self.write(pb.CommandSuccess(request_id=body.request_id))

    def send_active_change(self, consumer_id: int, is_active: bool) -> None:
        self.write(pb.CommandActiveConsumerChange(consumer_id=consumer_id, is_active=is_active))

    def send_message(
        self,
        consumer_id: int,
        message_id: pb.MessageIdData,
        redelivery_count: int,
        entry: bytes,
        ack_set: list[int] | None = None,
    ) -> None:
        if self.writer.is_closing():
            return
        command = pb.CommandMessage(consumer_id=consumer_id, message_id=message_id)
        if redelivery_count:
            command.redelivery_count = redelivery_count
        if ack_set:
            command.ack_set.extend(ack_set)
        self._send_bytes(encode_payload_command(command, entry))
        if self._draining is None and self._buffered_bytes() > MAX_UNSENT_BYTES:
            for consumer in self.consumers.values():
                consumer.slot.writable = False
            self._draining = asyncio.ensure_future(self._resume_when_drained())

    def flush_messages(self) -> None:
        """The round's messages go out now, one write: the consumer need not wait for
        the rest of this loop turn (the other connections' work) to hear of them."""
        self._write_unsent()

    async def _resume_when_drained(self) -> None:
        """Once the client has taken what was written, its consumers may get more."""
        try:
            self._write_unsent()  # drain() waits only for what the transport holds
            await self.writer.drain()
        except ConnectionError:
            return  # the connection is going: its cleanup removes the consumers
        finally:
            self._draining = None
        for consumer in list(self.consumers.values()):
            consumer.slot.writable = True
            consumer.subscription.wake()

    def _consumer(self, consumer_id: int) -> Consumer:
        consumer = self.consumers.get(consumer_id)
        if consumer is None:
            raise BrokerError(pb.ConsumerNotFound, f"no consumer {consumer_id}")
        return consumer

    def _on_flow(self, consumer: Consumer, body: pb.CommandFlow) -> None:
        granted = limits.permits_to_grant(consumer.slot.permits, body.messagePermits)
        consumer.subscription.flow(consumer, granted)

    def _on_ack(self, consumer: Consumer | None, body: pb.CommandAck) -> None:
        """An ACK: its bounds first, then its consumer (``None``: not on this connection)."""
        error: BaseException | None = None
        try:
            limits.check_ack(body)  # counts, ids and batch sizes, before anything is built
            if consumer is None:
                raise BrokerError(pb.ConsumerNotFound, f"no consumer {body.consumer_id}")
            consumer.subscription.ack(consumer, body)
        except (StripeMQError, ValueError) as exc:
            error = exc
            log.info("ack from %s refused: %s", self.peer, exc)
        if error is None:
            self.session.answer_ack(body, None, "")
        else:
            self.session.answer_ack(body, server_error_of(error), str(error))
        self._flush()

    def _on_redeliver(
        self, consumer: Consumer, body: pb.CommandRedeliverUnacknowledgedMessages
    ) -> None:
        limits.check_redeliver(body)
        consumer.subscription.redeliver(consumer, body.message_ids)

    async def _on_close_consumer(self, body: pb.CommandCloseConsumer) -> None:
        consumer = self.consumers.pop(body.consumer_id, None)
        if consumer is not None:
            consumer.subscription.remove_consumer(consumer)
            await consumer.subscription.persist_acks()  # its acks hold once close returns
            await consumer.subscription.topic.drop_if_unused(consumer.subscription)
        self.write(pb.CommandSuccess(request_id=body.request_id))

    async def _on_seek(self, body: pb.CommandSeek) -> None:
        consumer = self._consumer(body.consumer_id)
        subscription = consumer.subscription
        to_earliest = False
        if body.HasField("message_id"):
            limits.check_seek_id(body.message_id)
            position = start_position(body.message_id)
            if position is None:
                position = subscription.topic.ml.chain.write_position()
            elif position == EARLIEST:
                to_earliest = True
                position = subscription.topic.ml.chain.first_position()
        elif body.HasField("message_publish_time"):
            position = await subscription.topic.find_by_publish_time(body.message_publish_time)
        else:
            raise BrokerError(pb.NotAllowedError, "a seek needs a message id or a publish time")
        if to_earliest and consumer.read_compacted:
            await subscription.topic.compaction.compacted()  # opened before the seek
        disconnected = subscription.seek(position)
        if to_earliest and consumer.read_compacted:
            subscription.read_compacted_from_earliest()
        # The consumers are closed before the seek is answered, as Pulsar's resetCursor
        # does: the C++ client then resubscribes from the position sought; answered first,
        # it resubscribes after the last message it had and filters out what it is sent.
        for other in disconnected:
            other.sink.close_consumer(other.slot.consumer_id)
        self.write(pb.CommandSuccess(request_id=body.request_id))

    def close_consumer(self, consumer_id: int) -> None:
        """Tell the client its consumer is closed by the broker (it reconnects)."""
        self.session.close_consumer(consumer_id)
        self._flush()

    def send_reached_end_of_topic(self, consumer_id: int) -> None:
        """The consumer's topic is terminated and it has acknowledged everything there is
        (told only to clients that understand it)."""
        if not self.session.understands_reached_end_of_topic:
            log.debug(
                "%s: consumer %d reached the end of its topic; %s is not told (it would close "
                "the connection)",
                self.peer,
                consumer_id,
                self.session.client_version,
            )
            return
        self.write(pb.CommandReachedEndOfTopic(consumer_id=consumer_id))

    async def _on_unsubscribe(self, body: pb.CommandUnsubscribe) -> None:
        consumer = self._consumer(body.consumer_id)
        subscription: Subscription = consumer.subscription
        if len(subscription.consumers) > 1:
            raise BrokerError(pb.ConsumerBusy, "other consumers are still subscribed")
        subscription.remove_consumer(consumer)
        self.consumers.pop(body.consumer_id, None)
        await subscription.topic.unsubscribe(subscription.name)
        self.write(pb.CommandSuccess(request_id=body.request_id))

    async def _on_get_last_message_id(
        self, consumer: Consumer, body: pb.CommandGetLastMessageId
    ) -> None:
        topic = consumer.subscription.topic
        last, batch_index = await topic.last_message_id(consumer.read_compacted)
        last_id = pb.MessageIdData(
            ledgerId=max(last.ledger_id, 0),
            entryId=last.entry_id & ((1 << 64) - 1),
            partition=topic.topic_name.partition_index,
        )
        if batch_index >= 0:
            last_id.batch_index = batch_index
        md = consumer.subscription.cursor.mark_delete_position
        self.write(
            pb.CommandGetLastMessageIdResponse(
                request_id=body.request_id,
                last_message_id=last_id,
                consumer_mark_delete_position=pb.MessageIdData(
                    ledgerId=max(md.ledger_id, 0), entryId=md.entry_id & ((1 << 64) - 1)
                ),
            )
        )

    # ------------------------------------------------------------------ cleanup

    async def _cleanup(self) -> None:
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
            self._throttle_timer = None
        # Requests still being handled first: none may add a producer or consumer after.
        tasks = list(self._tasks)
        if self._draining is not None:
            tasks.append(self._draining)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.session.close()
        consumers = list(self.consumers.values())
        self.consumers.clear()
        for consumer in consumers:
            consumer.subscription.remove_consumer(consumer)
            with contextlib.suppress(StripeMQError):
                await consumer.subscription.topic.drop_if_unused(consumer.subscription)
        producers = list(self.producers.values())
        self.producers.clear()
        for producer in producers:
            with contextlib.suppress(StripeMQError):
                await producer.topic.remove_producer(producer)
        self._write_unsent()  # the last answers, before the socket closes
        self.writer.close()
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            await self.writer.wait_closed()
