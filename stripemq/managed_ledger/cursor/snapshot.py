"""How a cursor's state is laid out in the entries of its own ledger (no I/O here).

A snapshot is some *chunk* entries followed by one *marker* entry. Holes and batch bits are
cut into segments of ``2**SEGMENT_BITS`` entries of one ledger; a segment is encoded in one
or more *parts* (its ranges and as many batch bit sets as fit, then further batch bit sets),
so that no chunk entry outgrows the chunk limit. A chunk holds some parts; the marker holds
the mark-delete position, the properties and, for every segment with content, the ids of
the chunk entries holding its parts' latest versions. A snapshot writes only the segments
changed since the previous one, so a million old holes cost nothing to keep; recovery reads
the last marker and the chunks it names, and ignores chunks written after it (a snapshot
cut short by a crash).

Entry layouts (varints unless noted)::

    chunk:  b"C" u8 version | count | (segment, part, length, payload) * count
    payload: encoded key ranges | batches: count | (entry offset, bit count, bytes) * count
    marker: b"M" u8 version | md ledger+1 | md entry+1 | props length | props JSON
            | segments count | (segment delta, parts, entry id * parts) * count | holes
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from bitarray import bitarray

from stripemq.managed_ledger.cursor.range_set import (
    RangeSet,
    encode_key_ranges,
    get_varint,
    put_varint,
    read_key_ranges,
)
from stripemq.managed_ledger.cursor.state import SEGMENT_BITS, CursorState, segment_of
from stripemq.managed_ledger.position import ENTRY_BITS, Position, key_position, position_key

CHUNK_TAG = b"C"
MARKER_TAG = b"M"
VERSION = 1
DEFAULT_CHUNK_BYTES = 1 << 20
MIN_CHUNK_BYTES = 64 * 1024  # room for a segment's ranges, or the largest batch bit set
_RECORD_ROOM = 32  # a part's record header in a chunk, at most


class SnapshotFormatError(ValueError):
    """An entry of a cursor ledger is not a chunk or marker this code can read."""


@dataclass
class Marker:
    """The decoded marker entry: everything but the segments' contents."""

    mark_delete: Position
    properties: dict[str, int]
    segments: dict[int, tuple[int, ...]]  # segment -> entry ids of the chunks holding its parts
    holes: int  # positions individually acknowledged, to check a recovery against


@dataclass
class SnapshotPlan:
    """The chunk entries to append, then ``marker_for(their entry ids)`` to append last."""

    chunks: list[bytes]
    chunk_parts: list[list[tuple[int, int]]]  # (segment, part) records of each chunk
    part_counts: dict[int, int]  # parts of each segment written
    kept: dict[int, tuple[int, ...]]  # segments carried over from the previous marker
    mark_delete: Position
    properties: dict[str, int]
    holes: int
    segments_written: int = 0
    bytes_written: int = field(default=0)

    def marker_for(self, chunk_entry_ids: list[int]) -> tuple[bytes, dict[int, tuple[int, ...]]]:
        """The marker entry and the segment index it records."""
        if len(chunk_entry_ids) != len(self.chunks):
            raise ValueError("one entry id per chunk")
        written: dict[int, list[int]] = {s: [-1] * n for s, n in self.part_counts.items()}
        for entry_id, records in zip(chunk_entry_ids, self.chunk_parts, strict=True):
            for segment, part in records:
                written[segment][part] = entry_id
        index = dict(self.kept)
        index.update((segment, tuple(ids)) for segment, ids in written.items())
        marker = encode_marker(Marker(self.mark_delete, self.properties, index, self.holes))
        return marker, index


def plan_snapshot(
    state: CursorState,
    previous_index: dict[int, tuple[int, ...]] | None,
    *,
    max_chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> SnapshotPlan:
    """Encode what changed since the snapshot that wrote ``previous_index``.

    ``previous_index=None`` (a new cursor ledger, or after a reset) writes every segment.
    A chunk exceeds ``max_chunk_bytes`` only if one record alone does (``CursorConfig``
    keeps the limit at ``MIN_CHUNK_BYTES`` or more, above any single record).
    The state's dirty set is cleared: if writing the plan fails, the caller must write a
    complete snapshot next (``previous_index=None``).
    """
    full = previous_index is None or state.needs_full_snapshot
    if full:
        previous_index = None
    segments = _segments_with_content(state) if full else set(state.dirty_segments)
    md_key_limit = _last_key_at_or_before(state.mark_delete)
    kept = {
        s: entry_ids
        for s, entry_ids in (previous_index or {}).items()
        if s not in segments and ((s + 1) << SEGMENT_BITS) - 1 > md_key_limit
    }
    chunks: list[bytes] = []
    chunk_parts: list[list[tuple[int, int]]] = []
    part_counts: dict[int, int] = {}
    body = bytearray()
    members: list[tuple[int, int]] = []
    for segment in sorted(segments):
        if ((segment + 1) << SEGMENT_BITS) - 1 <= md_key_limit:
            continue  # wholly acknowledged: dropped from the index
        parts = encode_segment(state, segment, max_chunk_bytes - _RECORD_ROOM)
        if not parts:
            continue  # nothing left in it
        part_counts[segment] = len(parts)
        for part, payload in enumerate(parts):
            record = bytearray()
            put_varint(record, segment)
            put_varint(record, part)
            put_varint(record, len(payload))
            record += payload
            if members and len(body) + len(record) > max_chunk_bytes - _RECORD_ROOM:
                chunks.append(_chunk(members, body))
                chunk_parts.append(members)
                body, members = bytearray(), []
            body += record
            members.append((segment, part))
    if members:
        chunks.append(_chunk(members, body))
        chunk_parts.append(members)
    state.dirty_segments.clear()
    state.needs_full_snapshot = False
    state.acks_since_snapshot = 0
    return SnapshotPlan(
        chunks=chunks,
        chunk_parts=chunk_parts,
        part_counts=part_counts,
        kept=kept,
        mark_delete=state.mark_delete,
        properties=dict(state.properties),
        holes=state.holes.count,
        segments_written=len(part_counts),
        bytes_written=sum(len(c) for c in chunks),
    )


def _chunk(members: list[tuple[int, int]], body: bytearray) -> bytes:
    head = bytearray(CHUNK_TAG)
    head.append(VERSION)
    put_varint(head, len(members))
    return bytes(head + body)


def _last_key_at_or_before(position: Position) -> int:
    if position.ledger_id < 0:
        return -1
    return (position.ledger_id << ENTRY_BITS) + position.entry_id  # entry -1: previous key


def _segments_with_content(state: CursorState) -> set[int]:
    segments: set[int] = set()
    for start, end in state.holes.key_ranges():
        segments.update(range(start >> SEGMENT_BITS, ((end - 1) >> SEGMENT_BITS) + 1))
    for position, _bits in state.batches:
        segments.add(segment_of(position))
    return segments


# ---------------------------------------------------------------------------- segments


def encode_segment(state: CursorState, segment: int, part_bytes: int) -> list[bytes]:
    """Holes and batch bits of one segment in parts of at most about ``part_bytes`` each
    (the first holds the ranges); empty when the segment holds neither."""
    low, high = segment << SEGMENT_BITS, (segment + 1) << SEGMENT_BITS
    ranges = [
        (max(start, low), min(end, high))
        for start, end in state.holes.key_ranges_overlapping(low, high)
    ]
    batches = list(state.batches.in_range(key_position(low), key_position(high)))
    if not ranges and not batches:
        return []
    parts: list[bytes] = []
    head = encode_key_ranges(ranges)
    records: list[bytes] = []
    size = len(head)
    for position, bits in batches:
        record = bytearray()
        put_varint(record, position_key(position) - low)
        put_varint(record, len(bits))
        record += bits.tobytes()
        if records and size + len(record) + 8 > part_bytes:
            parts.append(_part(head, records))
            head, records, size = encode_key_ranges([]), [], 1
        records.append(bytes(record))
        size += len(record)
    parts.append(_part(head, records))
    return parts


def _part(ranges: bytes, batch_records: list[bytes]) -> bytes:
    out = bytearray(ranges)
    put_varint(out, len(batch_records))
    for record in batch_records:
        out += record
    return bytes(out)


def decode_segment(
    segment: int, payload: bytes
) -> tuple[list[tuple[int, int]], list[tuple[Position, bitarray]]]:
    low, high = segment << SEGMENT_BITS, (segment + 1) << SEGMENT_BITS
    view = memoryview(payload)
    try:
        ranges, offset = read_key_ranges(view, 0)
        count, offset = get_varint(view, offset)
    except ValueError as exc:
        raise SnapshotFormatError(f"segment {segment}: {exc}") from None
    if any(start < low or end > high for start, end in ranges):
        raise SnapshotFormatError(f"segment {segment} holds ranges outside itself")
    batches: list[tuple[Position, bitarray]] = []
    for _ in range(count):
        try:
            delta, offset = get_varint(view, offset)
            size, offset = get_varint(view, offset)
        except ValueError as exc:
            raise SnapshotFormatError(f"segment {segment}: {exc}") from None
        nbytes = (size + 7) // 8
        if delta >= high - low or size == 0 or offset + nbytes > len(view):
            raise SnapshotFormatError(f"segment {segment} has a bad batch record")
        bits = bitarray()
        bits.frombytes(bytes(view[offset : offset + nbytes]))
        del bits[size:]
        offset += nbytes
        batches.append((key_position(low + delta), bits))
    if offset != len(view):
        raise SnapshotFormatError(f"segment {segment} has stray bytes")
    return ranges, batches


def decode_chunk(raw: bytes) -> dict[tuple[int, int], bytes]:
    """``{(segment, part): payload}`` of a chunk entry."""
    if raw[:1] != CHUNK_TAG or len(raw) < 2 or raw[1] != VERSION:
        raise SnapshotFormatError("not a version-1 cursor chunk entry")
    view = memoryview(raw)
    try:
        count, offset = get_varint(view, 2)
        parts: dict[tuple[int, int], bytes] = {}
        for _ in range(count):
            segment, offset = get_varint(view, offset)
            part, offset = get_varint(view, offset)
            length, offset = get_varint(view, offset)
            if offset + length > len(view):
                raise SnapshotFormatError("chunk entry cut short")
            parts[(segment, part)] = bytes(view[offset : offset + length])
            offset += length
    except ValueError as exc:
        raise SnapshotFormatError(str(exc)) from None
    if offset != len(view):
        raise SnapshotFormatError("stray bytes after the chunk's records")
    return parts


# ---------------------------------------------------------------------------- marker


def is_marker(raw: bytes) -> bool:
    return raw[:1] == MARKER_TAG


def encode_marker(marker: Marker) -> bytes:
    out = bytearray(MARKER_TAG)
    out.append(VERSION)
    put_varint(out, marker.mark_delete.ledger_id + 1)
    put_varint(out, marker.mark_delete.entry_id + 1)
    props = json.dumps(marker.properties, sort_keys=True, separators=(",", ":")).encode()
    put_varint(out, len(props))
    out += props
    put_varint(out, len(marker.segments))
    previous = 0
    for segment in sorted(marker.segments):
        put_varint(out, segment - previous)
        entry_ids = marker.segments[segment]
        put_varint(out, len(entry_ids))
        for entry_id in entry_ids:
            put_varint(out, entry_id)
        previous = segment
    put_varint(out, marker.holes)
    return bytes(out)


def decode_marker(raw: bytes) -> Marker:
    if raw[:1] != MARKER_TAG or len(raw) < 2 or raw[1] != VERSION:
        raise SnapshotFormatError("not a version-1 cursor marker entry")
    view = memoryview(raw)
    try:
        ledger, offset = get_varint(view, 2)
        entry, offset = get_varint(view, offset)
        length, offset = get_varint(view, offset)
        props = json.loads(bytes(view[offset : offset + length]))
        offset += length
        count, offset = get_varint(view, offset)
        segments: dict[int, tuple[int, ...]] = {}
        segment = 0
        for _ in range(count):
            delta, offset = get_varint(view, offset)
            nparts, offset = get_varint(view, offset)
            if nparts == 0 or nparts > len(view):
                raise ValueError("a segment with no parts")
            entry_ids = []
            for _ in range(nparts):
                entry_id, offset = get_varint(view, offset)
                entry_ids.append(entry_id)
            segment += delta
            segments[segment] = tuple(entry_ids)
        holes, offset = get_varint(view, offset)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SnapshotFormatError(f"bad marker: {exc}") from None
    if offset != len(view) or not isinstance(props, dict):
        raise SnapshotFormatError("bad marker: stray bytes or properties")
    return Marker(
        Position(ledger - 1, entry - 1), {str(k): int(v) for k, v in props.items()}, segments, holes
    )


# ---------------------------------------------------------------------------- recovery


def restore_state(state: CursorState, marker: Marker, chunks: dict[int, bytes]) -> None:
    """Load a marker and the chunk entries it names (``{entry id: raw}``) into ``state``."""
    decoded: dict[int, dict[tuple[int, int], bytes]] = {}
    ranges: list[tuple[int, int]] = []
    for segment, entry_ids in marker.segments.items():
        for part, entry_id in enumerate(entry_ids):
            if entry_id not in decoded:
                if entry_id not in chunks:
                    raise SnapshotFormatError(f"chunk entry {entry_id} is missing")
                decoded[entry_id] = decode_chunk(chunks[entry_id])
            payload = decoded[entry_id].get((segment, part))
            if payload is None:
                raise SnapshotFormatError(
                    f"chunk entry {entry_id} lacks part {part} of segment {segment}"
                )
            segment_ranges, batches = decode_segment(segment, payload)
            ranges.extend(segment_ranges)
            for position, bits in batches:
                state.batches.restore(position, bits)
    state.mark_delete = marker.mark_delete
    state.properties = dict(marker.properties)
    state.holes = RangeSet.from_key_ranges(ranges)
    state.holes.remove_at_most(marker.mark_delete)
    state.batches.discard_at_most(marker.mark_delete)
    if state.holes.count != marker.holes:
        raise SnapshotFormatError(
            f"snapshot holds {state.holes.count} holes, its marker says {marker.holes}"
        )
    state.dirty_segments.clear()
    state.acks_since_snapshot = 0
    state.rewind()


def chunk_entry_ids(marker: Marker) -> Iterable[int]:
    return sorted({entry_id for ids in marker.segments.values() for entry_id in ids})
