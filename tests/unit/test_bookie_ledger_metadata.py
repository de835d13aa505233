"""Ledger metadata, striping and placement, driven directly (no I/O)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stripemq.bookie.client.ledger_manager import ledger_id_from_path, ledger_path
from stripemq.bookie.client.metadata import (
    LedgerMetadata,
    LedgerState,
    master_key_for,
    stored_on,
    write_set,
)
from stripemq.bookie.client.placement import BookieInfo, EnsemblePlacementPolicy
from stripemq.errors import InvalidEntryError, NotEnoughBookiesError


def sample(**overrides: object) -> LedgerMetadata:
    fields: dict[str, object] = {
        "ensemble_size": 3,
        "write_quorum_size": 2,
        "ack_quorum_size": 2,
        "ensembles": {0: ("a:1", "b:1", "c:1")},
        "password_hash": master_key_for(b"pw").hex(),
    }
    fields.update(overrides)
    return LedgerMetadata(**fields)  # type: ignore[arg-type]


def test_codec_roundtrip_keeps_every_field() -> None:
    md = sample(custom_metadata={"application": "stripemq"}).with_ensemble(
        10, ["a:1", "d:1", "c:1"]
    )
    md = md.closed(25, 4096)
    again = LedgerMetadata.decode(md.encode())
    assert again == md
    assert again.state is LedgerState.CLOSED
    assert again.ensembles == {0: ("a:1", "b:1", "c:1"), 10: ("a:1", "d:1", "c:1")}


@pytest.mark.parametrize(
    "raw",
    [b"not json", b"{}", b'{"format": 99}', sample().encode().replace(b'"OPEN"', b'"SHUT"')],
)
def test_malformed_metadata_is_a_typed_error(raw: bytes) -> None:
    with pytest.raises(InvalidEntryError):
        LedgerMetadata.decode(raw)


def test_quorums_and_ensembles_are_validated() -> None:
    with pytest.raises(ValueError):
        sample(ack_quorum_size=3)  # Qa > Qw
    with pytest.raises(ValueError):
        sample(ensembles={0: ("a:1", "a:1", "c:1")})  # duplicate bookie
    with pytest.raises(ValueError):
        sample(ensembles={5: ("a:1", "b:1", "c:1")})  # no fragment at 0


def test_fragments_and_ensemble_lookup() -> None:
    md = sample().with_ensemble(100, ["a:1", "d:1", "c:1"])
    assert md.ensemble_at(0) == md.ensemble_at(99) == ("a:1", "b:1", "c:1")
    assert md.ensemble_at(100) == ("a:1", "d:1", "c:1")
    fragments = md.fragments()
    assert [(f.first_entry_id, f.last_entry_id) for f in fragments] == [(0, 99), (100, None)]
    closed = md.closed(150, 1)
    assert closed.fragments()[-1].last_entry_id == 150
    # A fragment that starts after the last entry holds nothing and is dropped on close.
    assert sample().with_ensemble(100, ["a:1", "d:1", "c:1"]).closed(99, 1).ensembles.keys() == {0}


def test_write_set_bookies_follow_striping() -> None:
    md = sample()
    assert md.write_set_bookies(0) == ["a:1", "b:1"]
    assert md.write_set_bookies(1) == ["b:1", "c:1"]
    assert md.write_set_bookies(2) == ["c:1", "a:1"]


@given(st.integers(0, 10_000), st.integers(1, 8), st.data())
def test_stored_on_agrees_with_write_set(entry_id: int, e: int, data: st.DataObject) -> None:
    qw = data.draw(st.integers(1, e))
    slots = set(write_set(entry_id, e, qw))
    assert len(slots) == qw
    assert {i for i in range(e) if stored_on(entry_id, i, e, qw)} == slots


@given(st.integers(0, 10**19 - 1))
def test_ledger_paths_roundtrip(ledger_id: int) -> None:
    path = ledger_path(ledger_id)
    assert ledger_id_from_path(path) == ledger_id
    assert path.startswith("/ledgers/") and path.rsplit("/", 1)[1].startswith("L")


# ------------------------------------------------------------------ placement


def bookies(count: int, racks: int = 0) -> dict[str, BookieInfo]:
    out = {}
    for i in range(count):
        rack = f"/r{i % racks}" if racks else "/default-rack"
        out[f"b{i}:1"] = BookieInfo(f"b{i}:1", rack)
    return out


def write_set_racks(ensemble: list[str], qw: int, known: dict[str, BookieInfo]) -> list[int]:
    e = len(ensemble)
    return [len({known[ensemble[(s + i) % e]].rack for i in range(qw)}) for s in range(e)]


@given(st.integers(1, 6), st.integers(1, 12), st.integers(0, 5), st.data())
def test_ensembles_are_distinct_and_rack_spread_when_possible(
    e: int, count: int, racks: int, data: st.DataObject
) -> None:
    qw = data.draw(st.integers(1, e))
    known = bookies(count, racks)
    policy = EnsemblePlacementPolicy(random.Random(data.draw(st.integers(0, 1000))))
    if count < e:
        with pytest.raises(NotEnoughBookiesError):
            policy.new_ensemble(e, qw, known)
        return
    ensemble = policy.new_ensemble(e, qw, known)
    assert len(ensemble) == e and len(set(ensemble)) == e
    # With Qw racks and at least two bookies in each, every write set spans Qw racks whenever
    # the ensemble size allows a cyclic arrangement (E a multiple of Qw, or plenty of racks).
    if racks >= qw and count >= 2 * racks and (e % qw == 0 or racks >= 2 * qw):
        assert min(write_set_racks(ensemble, qw, known)) == min(qw, racks)


def test_three_racks_each_write_set_spans_racks() -> None:
    known = bookies(6, racks=3)
    policy = EnsemblePlacementPolicy(random.Random(7))
    for _ in range(50):
        ensemble = policy.new_ensemble(3, 3, known)
        assert write_set_racks(ensemble, 3, known) == [3, 3, 3]
        ensemble = policy.new_ensemble(3, 2, known)
        assert write_set_racks(ensemble, 2, known) == [2, 2, 2]


def test_replacement_avoids_the_ensemble_the_excluded_and_neighbour_racks() -> None:
    known = bookies(6, racks=3)  # b0,b3:/r0  b1,b4:/r1  b2,b5:/r2
    policy = EnsemblePlacementPolicy(random.Random(1))
    ensemble = ["b0:1", "b1:1", "b2:1"]
    for _ in range(20):
        new = policy.replace_bookie(ensemble, 1, 2, known, exclude={"b1:1"})
        assert new not in ensemble
        assert new == "b4:1"  # the only other bookie on /r1, away from /r0 and /r2 neighbours
    with pytest.raises(NotEnoughBookiesError):
        policy.replace_bookie(ensemble, 1, 2, bookies(3), exclude=())
