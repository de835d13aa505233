"""Backlog quota decisions (sans-IO): when a topic's backlog is over its quota, and what
the broker does about it.

A topic's backlog is what its slowest subscription has not acknowledged. Two quotas limit
it (Pulsar's ``BacklogQuotaType``):

- ``destination_storage``: the backlog's bytes, estimated as the bytes after the slowest
  subscription's mark-delete position (``LedgerChain.size_after``, as Pulsar's
  ``getEstimatedBacklogSize``). Exceeded when the backlog is *at or above* ``limitSize``.
- ``message_age``: the age of the oldest unacknowledged message, by its publish time.
  Exceeded when it was published more than ``limitTime`` seconds ago (0 or -1: no limit).

Past a quota, the policy decides (Pulsar's ``BacklogQuotaManager``):

- ``producer_request_hold`` and ``producer_exception``: the periodic check disconnects the
  topic's producers, and a producer (new, or reconnecting) is refused while the quota stays
  exceeded: with ``ProducerBlockedQuotaExceededError`` (hold: the client keeps retrying, its
  sends wait in its queue) or ``ProducerBlockedQuotaExceededException`` (exception: the
  client fails its pending sends).
- ``consumer_backlog_eviction``: the slowest subscriptions are moved forward, as if they had
  acknowledged the oldest messages, until the backlog is down to 90 % of the quota (by
  bytes), or until no message older than 90 % of the age limit is left (by age). Producers
  are never refused.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from stripemq.broker.policies import BacklogQuota, BacklogQuotaPolicy
from stripemq.broker.publish_time import EntrySequence
from stripemq.managed_ledger.ledger_chain import LedgerChain
from stripemq.managed_ledger.position import Position
from stripemq.proto import pulsar_api_pb2 as pb

# Eviction aims below the limit, so that the next check does not evict again at once
# (Pulsar's reduction factor).
EVICTION_TARGET = 0.9


class QuotaAction(enum.Enum):
    """What the periodic check does to a topic past a quota."""

    DISCONNECT_PRODUCERS = "disconnect_producers"
    EVICT = "evict"


def size_exceeded(quota: BacklogQuota, backlog_bytes: int) -> bool:
    """Whether ``backlog_bytes`` are at or over the quota's ``limitSize`` (-1: no limit)."""
    return quota.limit_size >= 0 and backlog_bytes >= quota.limit_size


def age_exceeded(quota: BacklogQuota, oldest_publish_ms: int | None, now_ms: int) -> bool:
    """Whether the oldest unacknowledged message, published at ``oldest_publish_ms``
    (``None``: there is none), is older than the quota's ``limitTime`` seconds."""
    if quota.limit_time <= 0 or oldest_publish_ms is None:
        return False
    return now_ms > oldest_publish_ms + quota.limit_time * 1000


def refusal_code(quota: BacklogQuota) -> pb.ServerError | None:
    """The error a producer gets while ``quota`` is exceeded (``None``: it is admitted)."""
    if quota.policy is BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD:
        return pb.ProducerBlockedQuotaExceededError
    if quota.policy is BacklogQuotaPolicy.PRODUCER_EXCEPTION:
        return pb.ProducerBlockedQuotaExceededException
    return None


def action_for(quota: BacklogQuota) -> QuotaAction:
    """What the periodic check does when ``quota`` is exceeded."""
    if quota.policy is BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION:
        return QuotaAction.EVICT
    return QuotaAction.DISCONNECT_PRODUCERS


def eviction_target_bytes(quota: BacklogQuota) -> int:
    return int(quota.limit_size * EVICTION_TARGET)


def eviction_target_age_s(quota: BacklogQuota) -> float:
    return quota.limit_time * EVICTION_TARGET


def slowest(mark_deletes: Iterable[Position]) -> Position | None:
    """The mark-delete position furthest behind (``None``: no cursors)."""
    return min(mark_deletes, default=None)


def backlog_bytes(chain: LedgerChain, mark_deletes: Iterable[Position]) -> int:
    """The topic's estimated backlog: bytes after the slowest mark-delete position."""
    position = slowest(mark_deletes)
    return 0 if position is None else chain.size_after(position)


def eviction_position(chain: LedgerChain, target_bytes: int) -> Position | None:
    """The first entry whose following bytes are at most ``target_bytes``: a cursor whose
    mark-delete position is before it must be moved to it for the backlog to be under the
    target. ``None`` when the chain holds no entry."""
    entries = EntrySequence.over(chain)
    if not entries:
        return None
    # size_after only falls as the position moves on: find the first index it allows.
    lo, hi = 0, len(entries) - 1  # the last entry is always allowed (nothing after it)
    while lo < hi:
        middle = (lo + hi) // 2
        if chain.size_after(entries.position(middle)) <= target_bytes:
            hi = middle
        else:
            lo = middle + 1
    return entries.position(lo)


def cursors_to_evict(
    chain: LedgerChain, mark_deletes: dict[str, Position], target_bytes: int
) -> dict[str, Position]:
    """The cursors to move, and where to (their new mark-delete position), so that the
    backlog is at most ``target_bytes``; cursors already past that point stay."""
    if backlog_bytes(chain, mark_deletes.values()) <= target_bytes:
        return {}
    to = eviction_position(chain, target_bytes)
    if to is None:
        return {}
    return {name: to for name, position in mark_deletes.items() if position < to}
