"""The export manifest: what is new given a plan, what a run records (with and without
``--until``), trimmed ledgers, its atomic write, and the cleanup of runs that crashed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from stripemq.errors import ConfigError
from stripemq.spark import manifest as mf
from stripemq.spark.export import recover
from stripemq.spark.manifest import (
    ExportRange,
    LedgerRecord,
    Manifest,
    ManifestError,
    RunRecord,
    Step,
    TrimmedLedger,
)
from stripemq.spark.planning import LedgerSpan, ReadSplit, TopicPartitionRef, TopicSnapshot

REF = TopicPartitionRef("persistent://public/default/t", -1, "public/default/persistent/t")
OTHER = TopicPartitionRef("persistent://public/default/u", -1, "public/default/persistent/u")
DAY = 86_400_000


def split(ledger: int, first: int, last: int, ref: TopicPartitionRef = REF) -> ReadSplit:
    return ReadSplit(ref, ledger, first, last, estimated_bytes=(last - first + 1) * 100)


def closed(ledger: int, last: int, closed_ms: int = 1000) -> LedgerSpan:
    return LedgerSpan(ledger, last, (last + 1) * 100, 0, closed_ms, True)


def open_span(ledger: int, lac: int) -> LedgerSpan:
    return LedgerSpan(ledger, lac, (lac + 1) * 100, 0, 0, False)


def snapshot(*spans: LedgerSpan, ref: TopicPartitionRef = REF) -> TopicSnapshot:
    return TopicSnapshot(ref, tuple(spans))


def run(run_id: str, *files: str) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        started="2026-01-01T00:00:00Z",
        committed="2026-01-01T00:00:05Z",
        since_ms=None,
        until_ms=None,
        topics=(REF.topic,),
        files=files,
        messages=10,
        entries=5,
        stored_bytes=500,
        parquet_bytes=400,
        seconds=5.0,
    )


def ranges(work: list[ExportRange]) -> list[tuple[int, int, int, int | None]]:
    return [(w.split.ledger_id, w.split.first_entry, w.split.last_entry, w.after_ms) for w in work]


def recorded(ledgers: dict[int, LedgerRecord], ref: TopicPartitionRef = REF) -> Manifest:
    return Manifest(partition_by="none", topics={ref.managed_ledger: (ref.topic, ledgers)})


# ---------------------------------------------------------------------- what is new


def test_an_empty_manifest_leaves_the_whole_plan_to_export() -> None:
    plan = [split(1, 0, 9), split(1, 10, 19), split(2, 0, 4, OTHER)]
    assert ranges(Manifest("none").pending_work(plan, None)) == [
        (1, 0, 9, None),
        (1, 10, 19, None),
        (2, 0, 4, None),
    ]


def test_only_entries_after_the_recorded_ones_are_new() -> None:
    manifest = recorded(
        {
            1: LedgerRecord((Step(19, None),), True, 19),
            2: LedgerRecord((Step(12, None),), False, 12),
        }
    )
    plan = [split(1, 0, 9), split(1, 10, 19), split(2, 0, 9), split(2, 10, 30), split(3, 0, 5)]
    work = manifest.pending_work(plan, None)
    assert ranges(work) == [(2, 13, 30, None), (3, 0, 5, None)]
    assert work[0].split.estimated_bytes == 18 * 100  # scaled to the entries left


def test_a_ledger_of_another_topic_with_the_same_id_is_new() -> None:
    manifest = recorded({1: LedgerRecord((Step(9, None),), True, 9)})
    assert ranges(manifest.pending_work([split(1, 0, 9, OTHER)], None)) == [(1, 0, 9, None)]


def test_steps_bounded_by_an_earlier_until_are_reread_for_later_messages() -> None:
    until = 5 * DAY
    manifest = recorded({1: LedgerRecord((Step(9, None), Step(19, until)), False, 19)})
    plan = [split(1, 0, 29)]
    # Unbounded, or a later bound: entries 10..19 again (after `until`), 20.. new.
    assert ranges(manifest.pending_work(plan, None)) == [(1, 10, 19, until), (1, 20, 29, None)]
    assert ranges(manifest.pending_work(plan, until + 1)) == [
        (1, 10, 19, until),
        (1, 20, 29, None),
    ]
    # The same bound or an earlier one has nothing more to find there.
    assert ranges(manifest.pending_work(plan, until)) == [(1, 20, 29, None)]
    assert ranges(manifest.pending_work(plan, until - DAY)) == [(1, 20, 29, None)]


# ---------------------------------------------------------------------- what a run records


def test_a_run_records_each_planned_ledger_through_its_planned_end() -> None:
    plan = [split(1, 0, 9), split(1, 10, 19), split(2, 0, 7)]
    after = Manifest("none").after_run(
        plan, None, [snapshot(closed(1, 19), open_span(2, 7))], run("r1", "part-00000-r1.parquet")
    )
    assert after.record(REF.managed_ledger, 1) == LedgerRecord((Step(19, None),), True, 19)
    assert after.record(REF.managed_ledger, 2) == LedgerRecord((Step(7, None),), False, 7)
    assert after.record(REF.managed_ledger, 1).complete  # type: ignore[union-attr]
    assert not after.record(REF.managed_ledger, 2).complete  # type: ignore[union-attr]
    assert [r.run_id for r in after.runs] == ["r1"]
    assert after.committed_files == {"part-00000-r1.parquet"}
    # Exporting the same plan again finds nothing new.
    assert after.pending_work(plan, None) == []


def test_the_open_ledger_grows_and_only_its_new_entries_are_exported_next() -> None:
    first = Manifest("none").after_run([split(2, 0, 7)], None, [snapshot(open_span(2, 7))], None)
    grown = [split(2, 0, 15)]
    assert ranges(first.pending_work(grown, None)) == [(2, 8, 15, None)]
    second = first.after_run(grown, None, [snapshot(closed(2, 15))], None)
    assert second.record(REF.managed_ledger, 2) == LedgerRecord((Step(15, None),), True, 15)


def test_until_leaves_later_messages_to_the_next_run_without_duplicates() -> None:
    day1, day2 = 10 * DAY, 11 * DAY
    # Run 1, --until day1: ledger 1 (closed long before day1) settles; ledger 2 straddles.
    run1_plan = [split(1, 0, 9), split(2, 0, 5)]
    spans1 = [snapshot(closed(1, 9, closed_ms=day1 - DAY), open_span(2, 8))]
    m1 = Manifest("none").after_run(run1_plan, day1, spans1, None, skew_ms=60_000)
    assert m1.record(REF.managed_ledger, 1) == LedgerRecord((Step(9, None),), True, 9)
    assert m1.record(REF.managed_ledger, 2) == LedgerRecord((Step(5, day1),), False, 8)
    # Run 2, --until day2: re-read 0..5 for messages after day1, then 6.. as new.
    run2_plan = [split(1, 0, 9), split(2, 0, 20)]
    assert ranges(m1.pending_work(run2_plan, day2)) == [(2, 0, 5, day1), (2, 6, 20, None)]
    m2 = m1.after_run(run2_plan, day2, [snapshot(closed(1, 9), open_span(2, 25))], None)
    assert m2.record(REF.managed_ledger, 2) == LedgerRecord((Step(20, day2),), False, 25)
    # Run 3, unbounded: everything of ledger 2 once more for messages after day2.
    run3_plan = [split(2, 0, 25)]
    assert ranges(m2.pending_work(run3_plan, None)) == [(2, 0, 20, day2), (2, 21, 25, None)]
    m3 = m2.after_run(run3_plan, None, [snapshot(closed(1, 9), closed(2, 25, day2 + DAY))], None)
    assert m3.record(REF.managed_ledger, 2) == LedgerRecord((Step(25, None),), True, 25)
    assert m3.pending_work(run3_plan, None) == []


def test_a_run_reaching_only_part_of_a_step_splits_it() -> None:
    day1, day2 = 10 * DAY, 11 * DAY
    manifest = recorded({2: LedgerRecord((Step(20, day1),), False, 20)})
    after = manifest.after_run([split(2, 0, 12)], day2, [], None)
    assert after.record(REF.managed_ledger, 2) == LedgerRecord(
        (Step(12, day2), Step(20, day1)), False, 20
    )


def test_a_ledger_closed_in_bookkeeper_but_not_yet_in_the_list_settles_nothing() -> None:
    # closed_ms 0: the catalog has no closing time for it yet.
    span = LedgerSpan(2, 9, 1000, 0, 0, True)
    after = Manifest("none").after_run([split(2, 0, 9)], 5 * DAY, [snapshot(span)], None)
    assert after.record(REF.managed_ledger, 2) == LedgerRecord((Step(9, 5 * DAY),), True, 9)


# ---------------------------------------------------------------------- trimmed ledgers


def test_trimmed_ledgers_wholly_exported_are_dropped_silently() -> None:
    manifest = recorded(
        {
            1: LedgerRecord((Step(9, None),), True, 9),
            2: LedgerRecord((Step(9, None),), True, 9),
            3: LedgerRecord((Step(4, None),), True, 4),
        }
    )
    # Retention trimmed 1 and 2; 3 is still listed.
    now = [snapshot(closed(3, 4), open_span(4, 2))]
    assert manifest.trimmed_ledgers(now) == []
    after = manifest.after_run([split(4, 0, 2)], None, now, None)
    assert sorted(after.topics[REF.managed_ledger][1]) == [3, 4]


def test_a_trimmed_ledger_not_wholly_exported_is_data_loss() -> None:
    manifest = recorded(
        {
            1: LedgerRecord((Step(9, None),), True, 9),
            2: LedgerRecord((Step(5, None),), False, 5),  # open when last read
        }
    )
    assert manifest.trimmed_ledgers([snapshot(open_span(7, 3))]) == [
        TrimmedLedger(REF.topic, 2, 5, lossy=True)
    ]
    # The newest ledger read, wholly exported, trimmed: reported, not as a loss.
    complete = recorded({2: LedgerRecord((Step(5, None),), True, 5)})
    assert complete.trimmed_ledgers([snapshot(open_span(7, 3))]) == [
        TrimmedLedger(REF.topic, 2, 5, lossy=False)
    ]
    # Topics this run did not list are not judged.
    assert manifest.trimmed_ledgers([snapshot(ref=OTHER)]) == []
    # Once judged (and reported), gone ledgers leave the manifest: reported once.
    after = manifest.after_run([split(7, 0, 3)], None, [snapshot(open_span(7, 3))], None)
    assert sorted(after.topics[REF.managed_ledger][1]) == [7]
    assert after.trimmed_ledgers([snapshot(open_span(7, 3))]) == []


def test_a_list_behind_the_manifest_is_not_taken_for_trimming() -> None:
    # A ZooKeeper follower lagging behind the one the last run read: ledger 5 is not
    # listed yet, but it is newer than every listed ledger, so it was not trimmed.
    manifest = recorded(
        {4: LedgerRecord((Step(9, None),), True, 9), 5: LedgerRecord((Step(2, None),), False, 2)}
    )
    behind = [snapshot(open_span(4, 9))]
    assert manifest.trimmed_ledgers(behind) == []
    after = manifest.after_run([], None, behind, None)
    assert after.record(REF.managed_ledger, 5) is not None
    assert after.record(REF.managed_ledger, 4) == LedgerRecord((Step(9, None),), True, 9)


# ---------------------------------------------------------------------- requests, JSON


def test_later_runs_keep_the_layout_and_the_since_floor() -> None:
    manifest = Manifest("date", since_ms=5 * DAY)
    manifest.check_request("date", None)
    manifest.check_request("date", 5 * DAY)
    with pytest.raises(ConfigError, match="partitioned by 'date'"):
        manifest.check_request("none", None)
    with pytest.raises(ConfigError, match="started with --since 1970-01-06"):
        manifest.check_request("date", 6 * DAY)
    with pytest.raises(ConfigError, match="started with no --since"):
        Manifest("none").check_request("none", DAY)


def test_json_round_trip() -> None:
    manifest = recorded({1: LedgerRecord((Step(9, None), Step(12, 5 * DAY)), False, 14)}).after_run(
        [], None, [], run("20260101T000000Z-0a0b0c0d", "date=2026-01-01/x.parquet")
    )
    text = json.dumps(manifest.to_json())
    assert Manifest.from_json(json.loads(text)) == manifest


@pytest.mark.parametrize(
    "raw",
    [
        {},
        {"format": 2},
        {"format": 1, "since_ms": None, "partition_by": "hour", "topics": {}, "runs": []},
    ],
)
def test_a_foreign_manifest_is_refused(raw: dict[str, object]) -> None:
    with pytest.raises(ManifestError):
        Manifest.from_json(raw)


def test_splits_travel_to_the_source_as_json() -> None:
    splits = [split(1, 0, 9), split(2, 3, 4, OTHER)]
    assert mf.decode_splits(mf.encode_splits(splits)) == splits
    with pytest.raises(ConfigError):
        mf.decode_splits('{"not": "a list"}')


def test_run_ids_and_file_names() -> None:
    run_id = mf.new_run_id(1_767_225_600_000)
    assert run_id.startswith("20260101T000000Z-")
    assert mf.new_run_id(1_767_225_600_000) != run_id
    name = mf.run_file_name(3, run_id)
    match = mf.RUN_FILE.match(name)
    assert match is not None and match.group("run_id") == run_id and match.group("index") == "00003"


# ---------------------------------------------------------------------- files


def test_write_then_load(tmp_path: Path) -> None:
    assert mf.load(tmp_path) is None
    manifest = Manifest("date", since_ms=DAY).after_run([split(1, 0, 3)], None, [], run("r"))
    mf.write(tmp_path, manifest)
    assert mf.load(tmp_path) == manifest
    assert sorted(p.name for p in tmp_path.iterdir()) == [mf.MANIFEST_NAME]


def test_a_write_that_fails_before_the_rename_leaves_the_old_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = Manifest("none").after_run([split(1, 0, 3)], None, [], run("r1"))
    mf.write(tmp_path, old)
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    def crash(src: object, dst: object) -> None:
        raise OSError("power cut")

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", crash)
    new = old.after_run([split(1, 0, 9)], None, [], run("r2"))
    with pytest.raises(OSError, match="power cut"):
        mf.write(tmp_path, new)
    assert synced  # the temp file was synced before the rename was tried
    assert mf.load(tmp_path) == old


def test_a_corrupt_manifest_is_an_error_not_an_empty_export(tmp_path: Path) -> None:
    (tmp_path / mf.MANIFEST_NAME).write_text("{not json")
    with pytest.raises(ManifestError, match="not JSON"):
        mf.load(tmp_path)


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"PAR1")
    return path


def test_recovery_removes_staging_and_files_of_runs_that_never_committed(tmp_path: Path) -> None:
    committed_id = mf.new_run_id(1_767_225_600_000)
    crashed_id = mf.new_run_id(1_767_225_700_000)
    kept = [
        f"date=2026-01-01/{mf.run_file_name(0, committed_id)}",
        f"date=2026-01-02/{mf.run_file_name(1, committed_id)}",
    ]
    for name in kept:
        touch(tmp_path / name)
    orphans = [
        f"date=2026-01-02/{mf.run_file_name(0, crashed_id)}",
        f"date=2026-01-03/{mf.run_file_name(1, crashed_id)}",
    ]
    for name in orphans:
        touch(tmp_path / name)
    touch(tmp_path / mf.STAGING_DIR / crashed_id / "date=2026-01-03" / "part-00000-x.parquet")
    touch(tmp_path / "notes" / "readme.parquet")  # not a run file: never touched
    manifest = Manifest("date").after_run([], None, [], run(committed_id, *kept))
    mf.write(tmp_path, manifest)

    assert sorted(recover(tmp_path, mf.load(tmp_path))) == sorted(orphans)
    assert not (tmp_path / mf.STAGING_DIR).exists()
    assert not (tmp_path / "date=2026-01-03").exists()  # emptied, removed
    assert sorted(path for path, _ in mf.find_run_files(tmp_path)) == sorted(kept)
    assert (tmp_path / "notes" / "readme.parquet").exists()
    # Before any commit, every run file is an orphan.
    assert mf.orphan_files(None, [(kept[0], committed_id)]) == [kept[0]]


def test_run_files_without_a_manifest_are_refused_not_deleted(tmp_path: Path) -> None:
    """A lost manifest: nothing tells which files are committed, so none is deleted (a
    first run writes its manifest before it moves files in)."""
    name = f"date=2026-01-01/{mf.run_file_name(0, mf.new_run_id(1_767_225_600_000))}"
    touch(tmp_path / name)
    with pytest.raises(ConfigError, match=r"holds 1 export files .* but no manifest"):
        recover(tmp_path, mf.load(tmp_path))
    assert (tmp_path / name).exists()
    # An empty manifest (a first run that died after writing it) lets recovery go on.
    mf.write(tmp_path, Manifest("date"))
    assert recover(tmp_path, mf.load(tmp_path)) == [name]
    assert not (tmp_path / name).exists()
