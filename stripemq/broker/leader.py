"""Leader broker election (Pulsar's ``LeaderElectionService``).

One broker of a cluster is the leader: the one whose ephemeral node ``/stripemq/leader``
exists. Every broker tries to create that node when it starts, and again each time the
node disappears (its owner stopped or lost its metadata session); whoever creates it is the
leader, every other broker watches it. ``/admin/v2/brokers/leaderBroker`` reads the node.

This is Pulsar's scheme (one well-known node, first come first served), not the sequential
queue of the bookie auditor (``stripemq.bookie.autorecovery.auditor``): with brokers a
change of leader wakes every follower at once, which is harmless for a handful of brokers
and keeps the node readable as "the leader" by anyone.

The node holds Pulsar's ``LeaderBroker`` JSON (``serviceUrl``: the leader's web service
URL, ``brokerId``) plus a token telling this broker's own node from a stale one of an
earlier run with the same id.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit

from stripemq.errors import MetadataError, NodeExistsError, SessionLostError
from stripemq.metadata import MetadataStore, WatchEvent
from stripemq.retry import Backoff

log = logging.getLogger(__name__)

LEADER_PATH = "/stripemq/leader"


@dataclass(frozen=True)
class LeaderBroker:
    """Who leads: Pulsar's ``LeaderBroker`` (``serviceUrl`` is the HTTP one)."""

    service_url: str
    broker_id: str

    def to_json(self) -> dict[str, str]:
        return {"serviceUrl": self.service_url, "brokerId": self.broker_id}

    @classmethod
    def decode(cls, raw: bytes) -> LeaderBroker | None:
        """What a leader wrote (``None`` for bytes no leader could have written)."""
        try:
            doc = json.loads(raw)
            return cls(str(doc["serviceUrl"]), str(doc.get("brokerId", "")))
        except (ValueError, KeyError, TypeError):
            return None


def lookup_id(web_url: str, fallback: str) -> str:
    """How Pulsar names a broker: ``host:webport`` (``fallback`` without a web URL)."""
    parts = urlsplit(web_url)
    if parts.hostname and parts.port:
        return f"{parts.hostname}:{parts.port}"
    return fallback


async def current_leader(store: MetadataStore) -> LeaderBroker | None:
    """The elected leader, if any broker is."""
    found = await store.get(LEADER_PATH)
    return LeaderBroker.decode(found[0]) if found is not None else None


class LeaderElection:
    """This broker's part in the election: ``start()``, later ``stop()``."""

    def __init__(self, store: MetadataStore, me: LeaderBroker) -> None:
        self.store = store
        self.me = me
        self.elected = asyncio.Event()
        self._token = uuid.uuid4().hex
        self._task: asyncio.Task[None] | None = None

    @property
    def is_leader(self) -> bool:
        return self.elected.is_set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def stop(self, *, release: bool = True) -> None:
        """Leave the election; a leader gives the node up (``release``) so another takes
        over at once. Without ``release`` nothing is written (the session is gone)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        was_leader = self.elected.is_set()
        self.elected.clear()
        if release:
            # Even if not (yet) told so: a create cut short by the cancellation may have
            # made the node.
            found = None
            with contextlib.suppress(MetadataError):
                found = await self.store.get(LEADER_PATH)
            if found is not None and self._is_mine(found[0]):
                with contextlib.suppress(MetadataError):  # gone already, or with the session
                    await self.store.delete(LEADER_PATH, found[1].version)
        if was_leader:
            log.info("%s is no longer the leader broker", self.me.broker_id)

    def _encode(self) -> bytes:
        return json.dumps({**self.me.to_json(), "token": self._token}).encode()

    def _is_mine(self, raw: bytes) -> bool:
        try:
            return bool(json.loads(raw).get("token") == self._token)
        except (ValueError, AttributeError):
            return False

    async def _run(self) -> None:
        backoff = Backoff(initial=0.2, maximum=5.0)
        while True:
            try:
                await self._elect_once()
                backoff.reset()
            except SessionLostError:
                self.elected.clear()
                log.warning("leader election of %s: metadata session lost", self.me.broker_id)
                return
            except MetadataError as exc:
                self.elected.clear()
                log.warning("leader election of %s failed (%s); retrying", self.me.broker_id, exc)
                await backoff.sleep()

    async def _elect_once(self) -> None:
        """Try to take the node; then wait until it is gone (a leader waits as a follower
        does: its node goes only with its session, or when someone deletes it)."""
        gone = asyncio.Event()

        def on_change(_event: WatchEvent) -> None:
            gone.set()

        handle = self.store.watch(LEADER_PATH, on_change)
        try:
            try:
                await self.store.create(LEADER_PATH, self._encode(), ephemeral=True)
            except NodeExistsError:
                pass
            # Cleared before the read: a delete (and re-create) after it still wakes us,
            # at worst once more than needed (our own create's event).
            gone.clear()
            found = await self.store.get(LEADER_PATH)
            if found is None:
                return  # gone meanwhile: try again
            if self._is_mine(found[0]):
                if not self.elected.is_set():
                    self.elected.set()
                    log.info("%s is the leader broker", self.me.broker_id)
            else:
                if self.elected.is_set():
                    log.warning("%s lost the leadership", self.me.broker_id)
                self.elected.clear()
            # Armed before the read above: a change after it wakes us.
            if await self.store.exists(LEADER_PATH) is not None:
                await gone.wait()
        finally:
            handle.cancel()
