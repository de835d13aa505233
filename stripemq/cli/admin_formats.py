"""The values ``stripemq admin`` reads from its command line, in pulsar-admin's formats
(sans-IO: strings in, numbers and REST paths out; nothing here touches the network).

- Sizes (``-s/--size``, ``-l/--limit``): an integer with an optional unit ``k``, ``m``,
  ``g`` or ``t`` (either case, powers of 1024), bytes without one: ``4096``, ``100K``,
  ``10M``, ``16G``, ``2T``; ``-1`` (unlimited) passes through.
- Relative times (``-t/--time``, ``-ttl``, ``-lt``, ``--expireTime``): an integer with an
  optional unit ``s``, ``m``, ``h``, ``d``, ``w`` or ``y`` (365 days), seconds without one:
  ``120``, ``10m``, ``3h``, ``2d``, ``5w``; ``-1`` passes through.
- Message ids (``-m/--messageId``): ``ledgerId:entryId``, or ``earliest`` / ``latest``.
- Namespaces are ``tenant/namespace``; topics are Pulsar's names, short forms included
  (``orders`` is ``persistent://public/default/orders``), and become REST paths with every
  component URL-encoded.
"""

from __future__ import annotations

import re
from typing import NamedTuple
from urllib.parse import quote

from stripemq.proto.topic_name import InvalidTopicNameError, TopicName, is_valid_name

KIB = 1024
_SIZE_UNITS = {"k": KIB, "m": KIB**2, "g": KIB**3, "t": KIB**4}
_TIME_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400, "y": 365 * 86_400}
_INTEGER = re.compile(r"^[+-]?\d+$")
# MessageId.latest and MessageId.earliest as Pulsar's Java client writes them.
LATEST = (2**63 - 1, 2**63 - 1)
EARLIEST = (-1, -1)


class ArgumentFormatError(ValueError):
    """A command-line value that is not in the expected format (nothing was sent)."""


def parse_size(text: str) -> int:
    """Bytes for a size such as ``10G`` (``-1`` stays ``-1``)."""
    value = text.strip()
    unit = _SIZE_UNITS.get(value[-1:].lower()) if value else None
    digits = value[:-1] if unit else value
    if not _INTEGER.match(digits):
        raise ArgumentFormatError(
            f"invalid size {text!r}: valid formats are 4096, 100K, 10M, 16G, 2T (or -1)"
        )
    return int(digits) * (unit or 1)


def parse_relative_seconds(text: str) -> int:
    """Seconds for a relative time such as ``3d`` (``-1`` stays ``-1``)."""
    value = text.strip()
    if not value:
        raise ArgumentFormatError("a time cannot be empty")
    last = value[-1]
    if last.isalpha():
        factor = _TIME_UNITS.get(last.lower())
        if factor is None:
            raise ArgumentFormatError(
                f"invalid time unit {last!r} in {text!r}: use s, m, h, d, w or y"
            )
        digits = value[:-1]
    else:
        factor, digits = 1, value
    if not _INTEGER.match(digits):
        raise ArgumentFormatError(
            f"invalid time {text!r}: valid formats are 120, 10m, 3h, 2d, 5w (or -1)"
        )
    return int(digits) * factor


def parse_relative_millis(text: str) -> int:
    """Milliseconds for a relative time such as ``10m``."""
    return parse_relative_seconds(text) * 1000


def retention_minutes(seconds: int) -> int:
    """``retentionTimeInMinutes`` for ``-t``: whole minutes, ``-1`` kept (as pulsar-admin)."""
    return -1 if seconds == -1 else _truncate(seconds, 60)


def retention_megabytes(size: int) -> int:
    """``retentionSizeInMB`` for ``-s``: whole MiB, ``-1`` kept (as pulsar-admin)."""
    return -1 if size == -1 else _truncate(size, KIB**2)


def _truncate(value: int, unit: int) -> int:
    """``value / unit`` rounded toward zero, as Java's integer division (``-5s`` is 0 min,
    not -1, which would mean infinite)."""
    return value // unit if value >= 0 else -(-value // unit)


def parse_message_id(text: str, *, allow_named: bool = True) -> tuple[int, int]:
    """``(ledgerId, entryId)`` for ``ledgerId:entryId`` (or ``earliest`` / ``latest``)."""
    value = text.strip()
    if allow_named and value == "latest":
        return LATEST
    if allow_named and value == "earliest":
        return EARLIEST
    parts = value.split(":")
    if len(parts) < 2 or not all(_INTEGER.match(p) for p in parts[:2]):
        named = "'earliest', 'latest' or " if allow_named else ""
        raise ArgumentFormatError(f"invalid message id {text!r}: expected {named}ledgerId:entryId")
    return int(parts[0]), int(parts[1])


def message_id_body(
    ledger_id: int, entry_id: int, *, partition: int = -1, excluded: bool = False
) -> dict[str, object]:
    """Pulsar's ResetCursorData for a message id (create-subscription, reset-cursor)."""
    return {
        "ledgerId": ledger_id,
        "entryId": entry_id,
        "partitionIndex": partition,
        "isExcluded": excluded,
        "batchIndex": -1,
    }


def split_list(values: list[str] | None) -> list[str]:
    """``-c a,b -c c`` as ``[a, b, c]`` (pulsar-admin's comma splitter, repeatable)."""
    return [item.strip() for value in values or () for item in value.split(",") if item.strip()]


def parse_key_values(values: list[str] | None) -> dict[str, str]:
    """``-p a=b -p c=d`` (or ``a=b,c=d``) as a dict."""
    result: dict[str, str] = {}
    for item in split_list(values):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ArgumentFormatError(f"invalid property {item!r}: expected key=value")
        result[key] = value
    return result


def check_name(kind: str, name: str) -> str:
    """A tenant or cluster name, refused before anything is sent if Pulsar would refuse it."""
    if not is_valid_name(name):
        raise ArgumentFormatError(f"invalid {kind} name {name!r}")
    return name


class Namespace(NamedTuple):
    """``tenant/namespace`` (a NamedTuple rather than a dataclass: quicker to import)."""

    tenant: str
    name: str

    @classmethod
    def parse(cls, text: str) -> Namespace:
        tenant, sep, name = text.partition("/")
        if not sep or "/" in name or not is_valid_name(tenant) or not is_valid_name(name):
            raise ArgumentFormatError(f"invalid namespace {text!r}: expected <tenant>/<namespace>")
        return cls(tenant, name)

    @property
    def path(self) -> str:
        """``tenant/namespace`` URL-encoded, as it goes into a REST path."""
        return f"{quote(self.tenant, safe='')}/{quote(self.name, safe='')}"

    def __str__(self) -> str:
        return f"{self.tenant}/{self.name}"


def parse_topic(text: str) -> TopicName:
    """``text`` completed as Pulsar completes it (``orders`` is
    ``persistent://public/default/orders``); ``ArgumentFormatError`` if it is no topic."""
    try:
        return TopicName.parse(text)
    except InvalidTopicNameError as exc:
        raise ArgumentFormatError(str(exc)) from None


def metadata_store_url(text: str) -> str:
    """A metadata store URL as Pulsar writes it (``zk:host:2181/chroot``, or a bare
    ``host:2181`` for ``--zookeeper``) in stripemq's form (``zk://host:2181/chroot``)."""
    value = text.strip()
    if not value:
        raise ArgumentFormatError("the metadata store URL is empty")
    if "://" in value:
        return value
    if value.startswith("zk:"):
        return "zk://" + value[3:]
    if value.startswith(("local:", "memory:")):
        scheme, _, rest = value.partition(":")
        return f"{scheme}://{rest}"
    return "zk://" + value
