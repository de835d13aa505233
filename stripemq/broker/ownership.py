"""Which broker serves which topics: namespace bundles, ownership nodes, registration.

A namespace's topics are split by the CRC32 of their name into hash-range *bundles*
(four by default, as in Pulsar). A broker serves a bundle while it holds the bundle's
ephemeral ownership node; the node disappears with the broker's metadata session, and
the next lookup assigns the bundle to the least-loaded registered broker.
"""

from __future__ import annotations

import json
import logging
import uuid
import zlib
from dataclasses import dataclass

from stripemq.errors import BadVersionError, NodeExistsError, NotFoundError
from stripemq.metadata import MetadataStore
from stripemq.proto.topic_name import TopicName

log = logging.getLogger(__name__)

OWNERSHIP_ROOT = "/stripemq/ownership"
BROKERS_ROOT = "/stripemq/brokers"
DEFAULT_BUNDLES = 4
FULL_RANGE = 1 << 32


@dataclass(frozen=True)
class Bundle:
    """``[start, end)`` of the 32-bit hash space of one namespace."""

    namespace: str
    start: int
    end: int

    @property
    def name(self) -> str:
        return f"0x{self.start:08x}_0x{min(self.end, FULL_RANGE - 1):08x}"

    @property
    def path(self) -> str:
        return f"{OWNERSHIP_ROOT}/{self.namespace}/{self.name}"

    def contains(self, topic: TopicName) -> bool:
        """Whether ``topic`` falls in this bundle (whatever the namespace's bundle count)."""
        return topic.namespace_name == self.namespace and self.start <= _hash(topic) < self.end


def _hash(topic: TopicName) -> int:
    return zlib.crc32(str(topic).encode()) & 0xFFFFFFFF


def bundle_of(topic: TopicName, bundles: int = DEFAULT_BUNDLES) -> Bundle:
    """The bundle a topic falls in when its namespace is split in ``bundles`` (the
    namespace's ``Policies.bundles``; partitions of one topic may fall in different ones)."""
    key = _hash(topic)
    width = FULL_RANGE // bundles
    index = min(key // width, bundles - 1)
    end = FULL_RANGE if index == bundles - 1 else (index + 1) * width
    return Bundle(topic.namespace_name, index * width, end)


@dataclass(frozen=True)
class BrokerInfo:
    """What a broker registers about itself (its registration and ownership nodes): its
    ``pulsar://`` and ``http://`` URLs, and its ``pulsar+ssl://`` and ``https://`` ones
    ("" when it has no such TLS listener, and in nodes written before there were any)."""

    broker_id: str  # host:port
    service_url: str
    web_url: str = ""
    service_url_tls: str = ""
    web_url_tls: str = ""

    @classmethod
    def decode(cls, raw: bytes) -> BrokerInfo | None:
        """What ``encode`` wrote (``None`` for a node nobody could have written)."""
        try:
            doc = json.loads(raw)
            service_url = str(doc["service_url"])
            broker_id = str(doc.get("broker_id") or service_url.split("://", 1)[-1])
            return cls(
                broker_id,
                service_url,
                str(doc.get("web_url") or ""),
                str(doc.get("service_url_tls") or ""),
                str(doc.get("web_url_tls") or ""),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def encode(self, bundles: int = 0, instance: str = "") -> bytes:
        return json.dumps(
            {
                "broker_id": self.broker_id,
                "service_url": self.service_url,
                "web_url": self.web_url,
                "service_url_tls": self.service_url_tls,
                "web_url_tls": self.web_url_tls,
                "bundles": bundles,
                "instance": instance,
            }
        ).encode()


def instance_of(raw: bytes) -> str:
    """The ``instance`` a node written by ``BrokerInfo.encode`` names ("" if none)."""
    try:
        return str(json.loads(raw).get("instance", ""))
    except (ValueError, TypeError, AttributeError):
        return ""


@dataclass(frozen=True)
class Registration:
    """A registered broker and how many bundles it owned when it last said so."""

    info: BrokerInfo
    bundles: int

    @classmethod
    def decode(cls, raw: bytes) -> Registration | None:
        info = BrokerInfo.decode(raw)
        if info is None:
            return None
        try:
            bundles = int(json.loads(raw).get("bundles", 0))
        except (ValueError, TypeError, AttributeError):
            bundles = 0
        return cls(info, bundles)


async def registered_brokers(store: MetadataStore) -> list[Registration]:
    """Every broker registered now (their ephemeral nodes), unreadable nodes left out."""
    found = []
    for child in await store.children(BROKERS_ROOT):
        node = await store.get(f"{BROKERS_ROOT}/{child}")
        registration = Registration.decode(node[0]) if node is not None else None
        if registration is not None:
            found.append(registration)
    return found


async def find_broker(store: MetadataStore, service_url: str) -> BrokerInfo | None:
    """The registration of the broker serving on ``service_url``, if it is registered."""
    for registration in await registered_brokers(store):
        if registration.info.service_url == service_url:
            return registration.info
    return None


class Ownership:
    """This broker's registration and the bundles it owns, on one metadata session.

    Its nodes carry a random ``instance`` id. A node with this broker's id but another
    instance is left from an earlier life of this broker (killed and restarted on the same
    address before its old session expired). Pulsar's locks do the same check on the
    session: such a node is deleted and created again, since it would vanish with the old
    session while this broker still served the bundle, and another broker would take it.
    """

    def __init__(self, store: MetadataStore, me: BrokerInfo) -> None:
        self.store = store
        self.me = me
        self.owned: set[Bundle] = set()
        self.instance = uuid.uuid4().hex

    def _encode(self, bundles: int = 0) -> bytes:
        return self.me.encode(bundles, self.instance)

    async def register(self) -> None:
        await self._put_registration()

    async def _put_registration(self) -> None:
        path = f"{BROKERS_ROOT}/{self.me.broker_id}"
        while True:
            try:
                await self.store.create(path, self._encode(len(self.owned)), ephemeral=True)
                return
            except NodeExistsError:
                if not await self._remove_if_left_from_earlier_life(path):
                    await self.store.put(path, self._encode(len(self.owned)))
                    return

    async def _remove_if_left_from_earlier_life(self, path: str) -> bool:
        """Delete ``path`` if an earlier life of this broker wrote it; whether the caller
        should try creating it again (also when it was gone meanwhile)."""
        found = await self.store.get(path)
        if found is None:
            return True
        raw, stat = found
        info = BrokerInfo.decode(raw)
        if info is None or info.broker_id != self.me.broker_id:
            return False
        if instance_of(raw) == self.instance:
            return False  # ours, from this session
        log.info("removing %s, left by an earlier life of this broker", path)
        try:
            await self.store.delete(path, stat.version)
        except (NotFoundError, BadVersionError):
            pass
        return True

    async def owner_of(self, bundle: Bundle) -> str | None:
        """The service URL of the broker owning ``bundle``, if any."""
        owner = await self.owner_info(bundle)
        return owner.service_url if owner is not None else None

    async def owner_info(self, bundle: Bundle) -> BrokerInfo | None:
        """The broker owning ``bundle`` (its service and web URLs), if any."""
        found = await self.store.get(bundle.path)
        if found is None:
            return None
        return BrokerInfo.decode(found[0])

    async def try_acquire(self, bundle: Bundle) -> str:
        """Take the bundle if nobody has it; returns the owner's service URL either way."""
        return (await self.acquire(bundle)).service_url

    async def acquire(self, bundle: Bundle) -> BrokerInfo:
        """Take the bundle if nobody has it; returns its owner either way."""
        if bundle in self.owned:
            return self.me
        try:
            await self.store.create(bundle.path, self._encode(), ephemeral=True)
        except NodeExistsError:
            if await self._remove_if_left_from_earlier_life(bundle.path):
                return await self.acquire(bundle)  # stale, or released meanwhile
            owner = await self.owner_info(bundle)
            if owner is not None:
                return owner
            return await self.acquire(bundle)  # released meanwhile
        self.owned.add(bundle)
        log.info("now owning bundle %s/%s", bundle.namespace, bundle.name)
        await self._put_registration()
        return self.me

    async def release(self, bundle: Bundle) -> None:
        self.owned.discard(bundle)
        try:
            await self.store.delete(bundle.path)
        except NotFoundError:
            pass
        await self._put_registration()

    async def release_all(self) -> None:
        """A clean shutdown: give up every bundle and the registration."""
        for bundle in list(self.owned):
            self.owned.discard(bundle)
            try:
                await self.store.delete(bundle.path)
            except NotFoundError:
                pass
        try:
            await self.store.delete(f"{BROKERS_ROOT}/{self.me.broker_id}")
        except NotFoundError:
            pass

    async def least_loaded_broker(self) -> str:
        """The service URL of the registered broker owning the fewest bundles."""
        return (await self.least_loaded()).service_url

    async def least_loaded(self) -> BrokerInfo:
        """The registered broker owning the fewest bundles (by service URL among equals);
        this one if none is registered."""
        registrations = await registered_brokers(self.store)
        if not registrations:
            return self.me
        return min(registrations, key=lambda r: (r.bundles, r.info.service_url)).info
