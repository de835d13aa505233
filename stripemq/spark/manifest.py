"""The export's manifest: which entries of which ledgers an export directory already holds.

``stripemq spark export`` writes Parquet files into ``OUT`` and records what they cover in
``OUT/_stripemq_manifest.json``; the manifest is the export's commit point, written last and
atomically (temp file, fsync, rename, fsync of the directory). A file in ``OUT`` belongs to
the export only once a committed run lists it.

Format (one JSON object)::

    {"format": 1,
     "since_ms": null | int,           the export's publish-time floor (fixed by its first run)
     "partition_by": "date" | "none",  the layout (fixed by the first run)
     "topics": {"<managed ledger>": {"topic": "persistent://...",
                                     "ledgers": {"<ledger id>": LEDGER}}},
     "runs": [RUN, ...]}               committed runs, oldest first

    LEDGER = {"through": [[last_entry, until_ms | null], ...],
              "closed": bool, "last_entry": int}
    RUN = {"run_id", "started", "committed", "since_ms", "until_ms", "topics", "files",
           "messages", "entries", "stored_bytes", "parquet_bytes", "seconds"}

**What a ledger record means.** ``through`` is a staircase over the ledger's entries, from
entry 0: ``[[99, null], [140, 1767225600000]]`` says entries 0..99 are settled (every
message in them within the export's floor is in the files) and entries 100..140 were
examined by a run bounded by ``--until`` 1767225600000: their messages published up to
then are in the files, later ones are not yet. Entries past the last step are new.
``closed``/``last_entry`` are the ledger's state when it was last seen, so that a ledger
trimmed by retention before it was wholly exported is reported as data loss.

**Time bounds (the choice this module makes).** ``--since`` is a property of the export,
not of a run: the first run stores it, later runs inherit it and refuse a different one,
so entries published before it are settled once and for all (and ledgers wholly before it
need no record). ``--until`` is per run and exact: nothing published after it is settled,
so a later run with a later (or no) ``--until`` re-reads the steps bounded by an earlier
one and keeps only the messages published after that bound: no gaps and no duplicates even
when ``until`` falls in the middle of a ledger or producers' clocks disagree.

**Run files.** A run writes ``part-<n>-<run id>.parquet`` files (under ``date=YYYY-MM-DD/``
with date partitioning) into ``OUT/_staging/<run id>/``, moves them into place, then commits
the manifest. A run file that no committed run lists was left by a run that died between
the move and the commit: ``orphan_files`` finds it for the next run to delete.

Everything but ``load``/``write``/``find_run_files`` is pure: plan in, plan out.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stripemq.errors import ConfigError, SparkSourceError
from stripemq.spark.planning import LedgerSpan, ReadSplit, TopicPartitionRef, TopicSnapshot

log = logging.getLogger(__name__)

MANIFEST_NAME = "_stripemq_manifest.json"
STAGING_DIR = "_staging"
LOCK_NAME = "_stripemq_export.lock"
FORMAT = 1
PARTITION_LAYOUTS = ("date", "none")

# A run id sorts by time and is unique: 20260101T120000Z-1a2b3c4d.
_RUN_ID = r"\d{8}T\d{6}Z-[0-9a-f]{8}"
RUN_FILE = re.compile(rf"^part-(?P<index>\d+)-(?P<run_id>{_RUN_ID})\.parquet$")


class ManifestError(SparkSourceError):
    """The manifest cannot be read, or does not match this run's request."""


def new_run_id(now_ms: int) -> str:
    """A fresh run id: the UTC time to the second and 32 random bits."""
    stamp = datetime.fromtimestamp(now_ms / 1000, UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(4)}"


def run_file_name(index: int, run_id: str) -> str:
    return f"part-{index:05d}-{run_id}.parquet"


@dataclass(frozen=True)
class Step:
    """Entries after the previous step through ``last_entry`` were examined by runs whose
    upper publish-time bound was ``until_ms`` (``None``: unbounded, settled)."""

    last_entry: int
    until_ms: int | None


@dataclass(frozen=True)
class LedgerRecord:
    """What the export holds of one ledger, and the ledger's state when last seen."""

    steps: tuple[Step, ...]  # ascending by last_entry, non-empty
    closed: bool
    ledger_last_entry: int  # its last entry (closed) or LAC (open) when last seen

    @property
    def through(self) -> int:
        """The last entry examined."""
        return self.steps[-1].last_entry

    @property
    def complete(self) -> bool:
        """Every entry the ledger will ever have is settled."""
        return (
            self.closed
            and self.through >= self.ledger_last_entry
            and all(step.until_ms is None for step in self.steps)
        )


@dataclass(frozen=True)
class RunRecord:
    """One committed run."""

    run_id: str
    started: str  # ISO 8601, UTC
    committed: str
    since_ms: int | None
    until_ms: int | None
    topics: tuple[str, ...]
    files: tuple[str, ...]  # relative to OUT, "/"-separated
    messages: int
    entries: int
    stored_bytes: int  # entry bytes read from the bookies (planned estimate)
    parquet_bytes: int
    seconds: float


@dataclass(frozen=True)
class ExportRange:
    """Entries to read in this run. ``after_ms`` is set when an earlier run bounded by
    ``--until after_ms`` already examined them: only messages published later are new."""

    split: ReadSplit
    after_ms: int | None = None


@dataclass(frozen=True)
class TrimmedLedger:
    """A recorded ledger that is gone from its topic's ledger list."""

    topic: str
    ledger_id: int
    through: int
    lossy: bool  # it was not wholly exported: messages may be lost


@dataclass(frozen=True)
class Manifest:
    """The manifest's content (immutable: every change returns a new one)."""

    partition_by: str
    since_ms: int | None = None
    # managed ledger -> (topic name, ledger id -> record)
    topics: Mapping[str, tuple[str, Mapping[int, LedgerRecord]]] = field(default_factory=dict)
    runs: tuple[RunRecord, ...] = ()

    # ------------------------------------------------------------------ queries

    def record(self, managed_ledger: str, ledger_id: int) -> LedgerRecord | None:
        found = self.topics.get(managed_ledger)
        return None if found is None else found[1].get(ledger_id)

    @property
    def committed_run_ids(self) -> frozenset[str]:
        return frozenset(run.run_id for run in self.runs)

    @property
    def committed_files(self) -> frozenset[str]:
        return frozenset(name for run in self.runs for name in run.files)

    def check_request(self, partition_by: str, since_ms: int | None) -> None:
        """Refuse a later run whose layout or floor differs from the export's.

        Raises:
            ConfigError: naming what differs and what the export uses.
        """
        if partition_by != self.partition_by:
            raise ConfigError(
                f"this export is partitioned by {self.partition_by!r}, not {partition_by!r}: "
                "export to a new directory to change the layout"
            )
        if since_ms is not None and since_ms != self.since_ms:
            floor = "no --since" if self.since_ms is None else f"--since {_iso(self.since_ms)}"
            raise ConfigError(
                f"this export was started with {floor}: later runs keep it "
                "(omit --since, or export to a new directory)"
            )

    def pending_work(self, splits: Iterable[ReadSplit], until_ms: int | None) -> list[ExportRange]:
        """The parts of ``splits`` (a plan) this export does not hold yet, in plan order:
        entries past each ledger's last step, and steps bounded by an earlier ``until``
        that this run's ``until_ms`` (``None``: unbounded) reaches beyond."""
        work: list[ExportRange] = []
        for split in splits:
            record = self.record(split.ref.managed_ledger, split.ledger_id)
            if record is None:
                work.append(ExportRange(split))
                continue
            previous = -1
            for step in record.steps:
                first, last = (
                    max(split.first_entry, previous + 1),
                    min(split.last_entry, step.last_entry),
                )
                if first <= last and _reaches_beyond(until_ms, step.until_ms):
                    work.append(ExportRange(trim_split(split, first, last), step.until_ms))
                previous = step.last_entry
            if split.last_entry > previous:
                first = max(split.first_entry, previous + 1)
                work.append(ExportRange(trim_split(split, first, split.last_entry)))
        return work

    def trimmed_ledgers(self, snapshots: Iterable[TopicSnapshot]) -> list[TrimmedLedger]:
        """Recorded ledgers of these topics that are gone from their ledger lists.

        ``lossy`` marks the ones not wholly exported: the newest ledger an earlier run
        read (more entries may have followed) or one with steps bounded by ``until``.
        Ledgers created and trimmed entirely between two runs cannot be seen from here;
        a trimmed newest ledger is reported (not lossy) so that the caller can warn.
        A recorded ledger newer than every listed one is not judged: that list is behind
        (a ZooKeeper follower lagging), since ledgers are trimmed from the front only."""
        trimmed: list[TrimmedLedger] = []
        for snapshot in snapshots:
            found = self.topics.get(snapshot.ref.managed_ledger)
            if not found:
                continue
            records = found[1]
            newest = max(records)
            for ledger_id in sorted(records):
                record = records[ledger_id]
                if not _gone(ledger_id, snapshot):
                    continue
                if record.complete and ledger_id != newest:
                    continue  # wholly exported, then trimmed: nothing to say
                trimmed.append(
                    TrimmedLedger(found[0], ledger_id, record.through, not record.complete)
                )
        return trimmed

    # ------------------------------------------------------------------ changes

    def after_run(
        self,
        splits: Iterable[ReadSplit],
        until_ms: int | None,
        snapshots: Iterable[TopicSnapshot],
        run: RunRecord | None,
        *,
        skew_ms: int = 0,
    ) -> Manifest:
        """The manifest once a run over the plan ``splits`` (bounded by ``until_ms``) has
        committed ``run`` (``None``: it wrote no file, but what it examined is settled).

        Ledgers of the plan get a step through their planned end (entries the plan skipped
        within a ledger could not match the run's bounds); earlier steps the run re-read
        take its bound. ``snapshots`` (taken after planning) refresh each recorded ledger's
        state; a step bounded by ``until`` in a ledger closed at least ``skew_ms`` before it
        is settled. Recorded ledgers gone from the lists are dropped: ``trimmed_ledgers``
        judged them before this run wrote anything."""
        spans: dict[tuple[str, int], LedgerSpan] = {}
        listed: dict[str, TopicSnapshot] = {}
        for snapshot in snapshots:
            managed = snapshot.ref.managed_ledger
            listed[managed] = snapshot
            for span in snapshot.ledgers:
                spans[(managed, span.ledger_id)] = span
        planned: dict[tuple[str, int], tuple[str, int, int]] = {}
        for split in splits:
            key = (split.ref.managed_ledger, split.ledger_id)
            _, first, last = planned.get(key, (split.ref.topic, split.first_entry, -1))
            planned[key] = (
                split.ref.topic,
                min(first, split.first_entry),
                max(last, split.last_entry),
            )

        topics: dict[str, tuple[str, dict[int, LedgerRecord]]] = {
            managed: (topic, dict(records)) for managed, (topic, records) in self.topics.items()
        }
        for (managed, ledger_id), (topic, first, last) in planned.items():
            records = topics.setdefault(managed, (topic, {}))[1]
            old = records.get(ledger_id)
            steps = _examine(old.steps if old else (), first, last, until_ms)
            if old is None:
                records[ledger_id] = LedgerRecord(steps, False, last)
            else:
                records[ledger_id] = LedgerRecord(
                    steps, old.closed, max(last, old.ledger_last_entry)
                )
        for managed, (_, records) in topics.items():
            for ledger_id, record in list(records.items()):
                seen = spans.get((managed, ledger_id))
                if seen is not None:
                    steps = record.steps
                    if seen.closed and seen.closed_ms > 0:
                        steps = tuple(
                            Step(s.last_entry, None)
                            if s.until_ms is not None and seen.closed_ms + skew_ms <= s.until_ms
                            else s
                            for s in steps
                        )
                    # Monotonic: a list read from a lagging server never reopens a ledger.
                    records[ledger_id] = LedgerRecord(
                        _merge(steps),
                        seen.closed or record.closed,
                        max(seen.last_entry, record.ledger_last_entry),
                    )
            chain = listed.get(managed)
            if chain is not None:
                for ledger_id in list(records):
                    if _gone(ledger_id, chain):
                        del records[ledger_id]  # judged by trimmed_ledgers this run
        return replace(
            self,
            topics={m: (t, records) for m, (t, records) in topics.items() if records},
            runs=self.runs + ((run,) if run is not None else ()),
        )

    # ------------------------------------------------------------------ JSON

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "since_ms": self.since_ms,
            "partition_by": self.partition_by,
            "topics": {
                managed: {
                    "topic": topic,
                    "ledgers": {
                        str(ledger_id): {
                            "through": [[s.last_entry, s.until_ms] for s in record.steps],
                            "closed": record.closed,
                            "last_entry": record.ledger_last_entry,
                        }
                        for ledger_id, record in sorted(records.items())
                    },
                }
                for managed, (topic, records) in sorted(self.topics.items())
            },
            "runs": [
                {
                    "run_id": run.run_id,
                    "started": run.started,
                    "committed": run.committed,
                    "since_ms": run.since_ms,
                    "until_ms": run.until_ms,
                    "topics": list(run.topics),
                    "files": list(run.files),
                    "messages": run.messages,
                    "entries": run.entries,
                    "stored_bytes": run.stored_bytes,
                    "parquet_bytes": run.parquet_bytes,
                    "seconds": run.seconds,
                }
                for run in self.runs
            ],
        }

    @classmethod
    def from_json(cls, raw: Any) -> Manifest:
        """Raises ``ManifestError`` when ``raw`` is not a manifest this version reads."""
        try:
            if raw["format"] != FORMAT:
                raise ManifestError(f"manifest format {raw['format']!r} is not {FORMAT}")
            topics = {
                str(managed): (
                    str(entry["topic"]),
                    {
                        int(ledger_id): LedgerRecord(
                            tuple(
                                Step(int(last), None if until is None else int(until))
                                for last, until in record["through"]
                            ),
                            bool(record["closed"]),
                            int(record["last_entry"]),
                        )
                        for ledger_id, record in entry["ledgers"].items()
                    },
                )
                for managed, entry in raw["topics"].items()
            }
            runs = tuple(
                RunRecord(
                    run_id=str(run["run_id"]),
                    started=str(run["started"]),
                    committed=str(run["committed"]),
                    since_ms=run["since_ms"],
                    until_ms=run["until_ms"],
                    topics=tuple(run["topics"]),
                    files=tuple(run["files"]),
                    messages=int(run["messages"]),
                    entries=int(run["entries"]),
                    stored_bytes=int(run["stored_bytes"]),
                    parquet_bytes=int(run["parquet_bytes"]),
                    seconds=float(run["seconds"]),
                )
                for run in raw["runs"]
            )
            partition_by = str(raw["partition_by"])
            if partition_by not in PARTITION_LAYOUTS:
                raise ManifestError(f"unknown layout {partition_by!r}")
            return cls(
                partition_by=partition_by,
                since_ms=None if raw["since_ms"] is None else int(raw["since_ms"]),
                topics=topics,
                runs=runs,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ManifestError(f"not a stripemq export manifest ({exc!r})") from None


def _gone(ledger_id: int, snapshot: TopicSnapshot) -> bool:
    """Whether ``ledger_id`` was trimmed from ``snapshot``'s chain: not listed, and older
    than a listed one (a chain ending before it is behind, not trimmed)."""
    live = [span.ledger_id for span in snapshot.ledgers]
    return ledger_id not in live and (not live or ledger_id < max(live))


def trim_split(split: ReadSplit, first: int, last: int) -> ReadSplit:
    """``split`` cut to entries ``first..last``, its byte estimate scaled to match."""
    if first == split.first_entry and last == split.last_entry:
        return split
    share = (last - first + 1) / split.entries
    return replace(
        split,
        first_entry=first,
        last_entry=last,
        estimated_bytes=round(split.estimated_bytes * share),
    )


def _reaches_beyond(until_ms: int | None, examined_until_ms: int | None) -> bool:
    """Whether a run bounded by ``until_ms`` has something to read in a step examined up
    to ``examined_until_ms``."""
    if examined_until_ms is None:
        return False
    return until_ms is None or until_ms > examined_until_ms


def _examine(
    steps: Sequence[Step], first: int, last: int, until_ms: int | None
) -> tuple[Step, ...]:
    """``steps`` once entries ``first..last`` were examined with ``until_ms``: each step
    the run re-read (it reached beyond the step's bound) takes the run's bound over the
    part re-read, and entries past the last step become a new step."""
    out: list[Step] = []
    previous = -1
    for step in steps:
        overlap_last = min(step.last_entry, last)
        if max(previous + 1, first) <= overlap_last and _reaches_beyond(until_ms, step.until_ms):
            out.append(Step(overlap_last, until_ms))
            if overlap_last < step.last_entry:
                out.append(step)
        else:
            out.append(step)
        previous = step.last_entry
    if last > previous:
        out.append(Step(last, until_ms))
    return _merge(out)


def _merge(steps: Iterable[Step]) -> tuple[Step, ...]:
    """Adjacent steps with the same bound as one."""
    merged: list[Step] = []
    for step in steps:
        if merged and merged[-1].until_ms == step.until_ms:
            merged[-1] = step
        else:
            merged.append(step)
    return tuple(merged)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def iso_now(now_ms: int) -> str:
    return _iso(now_ms)


# ---------------------------------------------------------------------- files


def load(out: Path) -> Manifest | None:
    """The manifest in ``out``, or ``None`` if there is none yet.

    Raises:
        ManifestError: it exists but does not parse.
    """
    path = out / MANIFEST_NAME
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{path}: not JSON ({exc})") from None
    try:
        return Manifest.from_json(raw)
    except ManifestError as exc:
        raise ManifestError(f"{path}: {exc}") from None


def write(out: Path, manifest: Manifest) -> None:
    """Replace ``out``'s manifest atomically and durably: a temp file written and synced,
    renamed over the old one, then the directory synced (so the rename survives a crash)."""
    path = out / MANIFEST_NAME
    temp = out / f".{MANIFEST_NAME}.tmp"
    data = (json.dumps(manifest.to_json(), separators=(",", ":")) + "\n").encode()
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    fsync_dir(out)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def find_run_files(out: Path) -> Iterator[tuple[str, str]]:
    """``(relative path, run id)`` of every run file under ``out`` (skipping ``_`` and
    ``.`` directories, as Parquet readers do)."""
    for root, dirs, files in os.walk(out):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        for name in files:
            match = RUN_FILE.match(name)
            if match:
                relative = (Path(root) / name).relative_to(out).as_posix()
                yield relative, match.group("run_id")


def orphan_files(manifest: Manifest | None, found: Iterable[tuple[str, str]]) -> list[str]:
    """Run files (from ``find_run_files``) that no committed run lists: left by a run that
    never committed."""
    committed = manifest.committed_files if manifest else frozenset()
    return sorted(path for path, _ in found if path not in committed)


# ---------------------------------------------------------------------- exact splits

# A hidden source option: the export hands the data source the exact entry ranges to read
# (JSON from ``encode_splits``) instead of letting it plan the topics again.
EXPORT_SPLITS_OPTION = "stripemq.exportSplits"


def encode_splits(splits: Iterable[ReadSplit]) -> str:
    """``splits`` as compact JSON (one array per split)."""
    return json.dumps(
        [
            [
                s.ref.topic,
                s.ref.partition,
                s.ref.managed_ledger,
                s.ledger_id,
                s.first_entry,
                s.last_entry,
                s.estimated_bytes,
            ]
            for s in splits
        ],
        separators=(",", ":"),
    )


def decode_splits(text: str) -> list[ReadSplit]:
    """The splits ``encode_splits`` wrote.

    Raises:
        ConfigError: ``text`` is not such a list.
    """
    try:
        return [
            ReadSplit(
                TopicPartitionRef(str(topic), int(partition), str(managed)),
                int(ledger_id),
                int(first),
                int(last),
                int(size),
            )
            for topic, partition, managed, ledger_id, first, last, size in json.loads(text)
        ]
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f'option "{EXPORT_SPLITS_OPTION}" is not a list of splits: {exc}'
        ) from None
