"""``stripemq.cli.admin_output``: what ``stripemq admin`` prints, in pulsar-admin's layouts
(Jackson's pretty JSON, lists one per line, netty's hex dump, peeked messages)."""

from __future__ import annotations

import json

from stripemq.cli.admin_output import (
    PeekedMessage,
    Text,
    decode_peek,
    flatten,
    format_json,
    format_message_id,
    hex_dump,
    render,
    render_peeked,
)
from stripemq.proto import pulsar_api_pb2 as pb


def test_objects_print_in_jacksons_pretty_layout() -> None:
    doc = {"adminRoles": [], "allowedClusters": ["standalone", "east"], "n": 3, "x": {}}
    assert format_json(doc) == (
        "{\n"
        '  "adminRoles" : [ ],\n'
        '  "allowedClusters" : [ "standalone", "east" ],\n'
        '  "n" : 3,\n'
        '  "x" : { }\n'
        "}"
    )
    nested = {"subscriptions": {"s": {"consumers": [{"a": 1}]}}, "ok": True, "none": None}
    assert format_json(nested) == (
        "{\n"
        '  "subscriptions" : {\n'
        '    "s" : {\n'
        '      "consumers" : [ {\n'
        '        "a" : 1\n'
        "      } ]\n"
        "    }\n"
        "  },\n"
        '  "ok" : true,\n'
        '  "none" : null\n'
        "}"
    )
    assert json.loads(format_json(nested)) == nested


def test_values_print_as_pulsar_admin_prints_them() -> None:
    assert render(["public", "acme"]) == "public\nacme"
    assert render([]) == ""
    assert render("2.11.0") == "2.11.0"
    assert render(None) == "null"
    assert render(3600) == "3600"
    assert render(True) == "true"
    assert render(Text("Topic successfully terminated at 1:2:-1")).startswith("Topic")
    assert format_message_id({"ledgerId": 7, "entryId": 3, "partitionIndex": -1}) == "7:3:-1"
    assert format_message_id({"ledgerId": 7, "entryId": 3, "batchIndex": 2}) == "7:3:-1:2"


def test_tables_flatten_objects_to_dotted_paths() -> None:
    doc = {"a": 1, "b": {"c": [1, 2], "d": [{"e": None}], "f": {}}, "g": []}
    assert flatten(doc) == [("a", 1), ("b.c", [1, 2]), ("b.d[0].e", None), ("b.f", {}), ("g", [])]


def test_hex_dump_in_nettys_layout() -> None:
    assert hex_dump(b"") == ""
    assert hex_dump(b"hello") == (
        "         +-------------------------------------------------+\n"
        "         |  0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f |\n"
        "+--------+-------------------------------------------------+----------------+\n"
        "|00000000| 68 65 6c 6c 6f                                  |hello           |\n"
        "+--------+-------------------------------------------------+----------------+"
    )
    lines = hex_dump(bytes(range(0x1E, 0x1E + 17))).splitlines()
    assert (
        lines[3] == "|00000000| 1e 1f 20 21 22 23 24 25 26 27 28 29 2a 2b 2c 2d |.. !\"#$%&'()*+,-|"
    )
    assert lines[4].startswith("|00000010| 2e" + " " * 45 + " |.")
    assert lines[4].endswith("|.               |")
    assert hex_dump(b"\x7f\xff")[-100:].count(".") >= 2


def test_peeked_messages_print_as_pulsar_admin() -> None:
    first = PeekedMessage(5, 0, publish_time=1000, properties={"k": "v"}, payload=b"hi")
    second = PeekedMessage(5, 1, batch_index=2, publish_time=2000, payload=b"")
    text = render_peeked([first, second])
    assert text.startswith("Message ID: 5:0\nPublish time: 1000\nEvent time: 0\nProperties:\n")
    assert '{\n  "k" : "v"\n}' in text
    assert "|00000000| 68 69" in text
    assert "\n-------------------------------------------------------------------------\n\n" in text
    assert "Batch Message ID: 5:1:2\nPublish time: 2000" in text


def _batch(*payloads: tuple[bytes, dict[str, str]]) -> bytes:
    out = b""
    for payload, props in payloads:
        meta = pb.SingleMessageMetadata(payload_size=len(payload))
        for key, value in props.items():
            meta.properties.add(key=key, value=value)
        raw = meta.SerializeToString()
        out += len(raw).to_bytes(4, "big") + raw + payload
    return out


def test_peek_answers_are_decoded_from_headers_and_batches() -> None:
    headers = [
        ("X-Pulsar-Message-ID", "12:7"),
        ("X-Pulsar-publish-time", "2024-01-02T03:04:05.678Z"),
        ("X-Pulsar-PROPERTY", '{"a":"1"}'),
        ("X-Pulsar-PROPERTY-b", "2"),
    ]
    (message,) = decode_peek(headers, b"body")
    assert (message.ledger_id, message.entry_id, message.batch_index) == (12, 7, -1)
    assert message.publish_time == 1704164645678
    assert message.properties == {"a": "1", "b": "2"}
    assert message.payload == b"body"

    batch = _batch((b"one", {"x": "1"}), (b"two", {}))
    messages = decode_peek([*headers, ("X-Pulsar-num-batch-message", "2")], batch)
    assert [(m.batch_index, m.payload) for m in messages] == [(0, b"one"), (1, b"two")]
    assert messages[0].properties == {"x": "1"}
    # A header that claims a batch over a payload that is not one: shown whole.
    (whole,) = decode_peek([*headers, ("X-Pulsar-num-batch-message", "1")], b"hello")
    assert whole.payload == b"hello" and whole.batch_index == -1
    (timed,) = decode_peek([("X-Pulsar-publish-time", "1234")], b"")
    assert timed.publish_time == 1234


def test_compacted_out_messages_of_a_batch_are_not_shown() -> None:
    kept = pb.SingleMessageMetadata(payload_size=4)
    gone = pb.SingleMessageMetadata(payload_size=4, compacted_out=True)
    batch = b""
    for meta, payload in ((gone, b"gone"), (kept, b"kept")):
        raw = meta.SerializeToString()
        batch += len(raw).to_bytes(4, "big") + raw + payload
    headers = [("X-Pulsar-Message-ID", "3:1"), ("X-Pulsar-num-batch-message", "2")]
    (message,) = decode_peek(headers, batch)
    assert (message.batch_index, message.payload) == (1, b"kept")
    # Stray bytes after the messages: not a batch after all, shown whole.
    (whole,) = decode_peek(headers, batch + b"x")
    assert whole.batch_index == -1 and whole.payload == batch + b"x"
