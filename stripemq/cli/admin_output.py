"""What ``stripemq admin`` prints, the way pulsar-admin prints it (sans-IO: values in,
text out).

- A list prints one item per line (a list of objects: each object in turn).
- An object prints as pretty JSON in Jackson's default layout, which pulsar-admin uses:
  two-space indents, ``"key" : value``, arrays on one line (``[ "a", "b" ]``), ``{ }`` and
  ``[ ]`` when empty.
- A string prints as it is; a number or a boolean as JSON; an unset value as ``null``.
- ``-o table`` renders the same value as a table with ``rich`` (imported only then).
- A peeked message prints as pulsar-admin's ``peek-messages`` does: its id, publish and
  event times, properties, then a hex dump of the payload in netty's ``prettyHexDump``
  layout.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

_HEX_HEADER = (
    "         +-------------------------------------------------+\n"
    "         |  0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f |\n"
    "+--------+-------------------------------------------------+----------------+"
)
_HEX_FOOTER = "+--------+-------------------------------------------------+----------------+"
# Between two messages: the dashes, then an empty line (Java's println of "-----\n").
PEEK_SEPARATOR = "-------------------------------------------------------------------------\n\n"


class Text(NamedTuple):
    """Output printed verbatim (a command's own sentence, not a value)."""

    text: str


def format_json(value: Any, level: int = 0) -> str:
    """``value`` as Jackson's DefaultPrettyPrinter writes it."""
    if isinstance(value, Mapping):
        if not value:
            return "{ }"
        inner = "  " * (level + 1)
        fields = ",\n".join(
            f"{inner}{json.dumps(str(k), ensure_ascii=False)} : {format_json(v, level + 1)}"
            for k, v in value.items()
        )
        return "{\n" + fields + "\n" + "  " * level + "}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[ ]"
        return "[ " + ", ".join(format_json(v, level) for v in value) + " ]"
    return json.dumps(value, ensure_ascii=False)


def render(value: Any) -> str:
    """What pulsar-admin's ``print`` writes for ``value`` (no trailing newline)."""
    if isinstance(value, Text):
        return value.text
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return "\n".join(render(item) for item in value)
    return format_json(value)


def render_table(value: Any, label: str = "value") -> Any:
    """A ``rich`` renderable for ``value`` (``-o table``): a list becomes rows (a list of
    objects: one column per key), an object one row per leaf (``flatten``), anything else a
    plain line."""
    from rich.table import Table

    if isinstance(value, Text) or not isinstance(value, (Mapping, list, tuple)):
        return render(value)
    table = Table(show_lines=False)
    if isinstance(value, Mapping):
        table.add_column("key", style="bold")
        table.add_column("value")
        for key, item in flatten(value):
            table.add_row(key, _cell(item))
        return table
    rows = list(value)
    if rows and all(isinstance(row, Mapping) for row in rows):
        columns: list[str] = []
        for row in rows:
            columns.extend(str(k) for k in row if str(k) not in columns)
        for column in columns:
            table.add_column(column)
        for row in rows:
            table.add_row(*(_cell(row.get(column)) for column in columns))
        return table
    table.add_column(label)
    for row in rows:
        table.add_row(_cell(row))
    return table


def flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """An object's leaves as ``(dotted.path, value)`` rows (``subscriptions.audit.msgBacklog``,
    ``publishers[0].producerName``); an empty object or list is a leaf of its own."""
    if isinstance(value, Mapping) and value:
        rows: list[tuple[str, Any]] = []
        for key, item in value.items():
            rows.extend(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return rows
    if isinstance(value, (list, tuple)) and any(isinstance(v, (Mapping, list)) for v in value):
        rows = []
        for index, item in enumerate(value):
            rows.extend(flatten(item, f"{prefix}[{index}]"))
        return rows
    return [(prefix, value)]


def _cell(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (Mapping, list, tuple)):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return json.dumps(value)


def hex_dump(data: bytes) -> str:
    """``data`` in netty's ``ByteBufUtil.prettyHexDump`` layout (empty for no bytes)."""
    if not data:
        return ""
    lines = [_HEX_HEADER]
    for offset in range(0, len(data), 16):
        row = data[offset : offset + 16]
        pad = 16 - len(row)
        hex_part = "".join(f" {byte:02x}" for byte in row) + "   " * pad
        text_part = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in row) + " " * pad
        lines.append(f"|{offset:08x}|{hex_part} |{text_part}|")
    lines.append(_HEX_FOOTER)
    return "\n".join(lines)


class PeekedMessage:
    """One message as the peek endpoint describes it (headers) and carries it (payload)."""

    def __init__(
        self,
        ledger_id: int,
        entry_id: int,
        *,
        batch_index: int = -1,  # >= 0 for a message of a batch
        publish_time: int = 0,  # ms since the epoch
        event_time: int = 0,
        deliver_at_time: int = 0,
        properties: dict[str, str] | None = None,
        payload: bytes = b"",
    ) -> None:
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.batch_index = batch_index
        self.publish_time = publish_time
        self.event_time = event_time
        self.deliver_at_time = deliver_at_time
        self.properties = dict(properties or {})
        self.payload = payload


def render_peeked(messages: Sequence[PeekedMessage]) -> str:
    """pulsar-admin's ``peek-messages`` output for ``messages``."""
    blocks = []
    for message in messages:
        lines = []
        if message.batch_index >= 0:
            lines.append(
                f"Batch Message ID: {message.ledger_id}:{message.entry_id}:{message.batch_index}"
            )
        else:
            lines.append(f"Message ID: {message.ledger_id}:{message.entry_id}")
        lines.append(f"Publish time: {message.publish_time}")
        lines.append(f"Event time: {message.event_time}")
        if message.deliver_at_time:
            lines.append(f"Deliver at time: {message.deliver_at_time}")
        if message.properties:
            lines.append("Properties:")
            lines.append(format_json(message.properties))
        lines.append(hex_dump(message.payload))
        blocks.append("\n".join(lines))
    return ("\n" + PEEK_SEPARATOR).join(blocks)


def format_message_id(doc: Any) -> str:
    """A MessageId JSON (``ledgerId``, ``entryId``, ``partitionIndex``, ``batchIndex``) as
    Pulsar's ``MessageIdImpl.toString`` writes it (``ledger:entry:partition[:batch]``)."""
    if not isinstance(doc, Mapping):
        return str(doc)
    text = f"{doc.get('ledgerId')}:{doc.get('entryId')}:{doc.get('partitionIndex', -1)}"
    batch = doc.get("batchIndex", -1)
    if isinstance(batch, int) and batch >= 0:
        text += f":{batch}"
    return text


def decode_peek(headers: Sequence[tuple[str, str]], payload: bytes) -> list[PeekedMessage]:
    """The messages of one peek answer (``.../subscription/{sub}/position/{n}``): its
    ``X-Pulsar-*`` headers describe the entry; a batch entry (``X-Pulsar-num-batch-message``)
    carries its messages one after another, each a 4-byte size, a SingleMessageMetadata and
    the payload, and becomes one message per batch index (ids print as ``ledger:entry:batch``,
    as pulsar-admin prints them)."""
    first = PeekedMessage(0, 0)
    batch_size = 0
    for name, value in headers:
        key = name.lower()
        if key == "x-pulsar-message-id":
            parts = value.split(":")
            if len(parts) >= 2 and all(p.lstrip("-").isdigit() for p in parts[:2]):
                first.ledger_id, first.entry_id = int(parts[0]), int(parts[1])
        elif key == "x-pulsar-publish-time":
            first.publish_time = _time_ms(value)
        elif key == "x-pulsar-event-time":
            first.event_time = _time_ms(value)
        elif key == "x-pulsar-deliver-at-time":
            first.deliver_at_time = _time_ms(value)
        elif key == "x-pulsar-num-batch-message":
            batch_size = int(value) if value.strip().isdigit() else 0
        elif key == "x-pulsar-property":  # newer brokers: all properties as one JSON object
            try:
                doc = json.loads(value)
            except ValueError:
                doc = None
            if isinstance(doc, dict):
                first.properties.update({str(k): str(v) for k, v in doc.items()})
        elif key.startswith("x-pulsar-property-"):
            first.properties[name[len("x-pulsar-property-") :]] = value
    if batch_size > 0:
        batch = _split_batch(first, payload, batch_size)
        if batch is not None:
            return batch
    first.payload = payload
    return [first]


def _time_ms(value: str) -> int:
    """A time header: milliseconds, or an ISO-8601 instant (Pulsar's DateFormatter)."""
    text = value.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    from datetime import datetime

    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return 0


def _split_batch(entry: PeekedMessage, data: bytes, count: int) -> list[PeekedMessage] | None:
    """The messages of a batch payload, or None when ``data`` is not one (then the entry is
    shown whole)."""
    from stripemq.proto.frames import ProtocolError, decode_batch  # for a batch only: quick start

    try:
        batch = decode_batch(data, count)
    except ProtocolError:
        return None
    return [
        PeekedMessage(
            entry.ledger_id,
            entry.entry_id,
            batch_index=index,
            publish_time=entry.publish_time,
            event_time=message.metadata.event_time or entry.event_time,
            deliver_at_time=entry.deliver_at_time,
            properties={kv.key: kv.value for kv in message.metadata.properties}
            or dict(entry.properties),
            payload=message.payload,
        )
        for index, message in enumerate(batch)
        if not message.metadata.compacted_out
    ]
