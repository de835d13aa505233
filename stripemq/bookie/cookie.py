"""Bookie cookies: who a bookie is, stamped on its directories and kept by the cluster.

A bookie's identity is its id (``host:port``); the cluster's ledgers name it in their
ensembles. A bookie that comes back under a known id with empty or foreign directories (a
replaced volume, a deleted PersistentVolumeClaim, a pod on a new node with local storage)
must not register: the auditor would count it back and its ledgers would never be
re-replicated. As in BookKeeper, the first start writes a **cookie** into each of the
bookie's directories and then into the metadata store; every later start compares them,
and the bookie refuses to start (``InvalidCookieError``) when they disagree.

Format (the same bytes in a file and in the store): the layout version on the first line,
then a JSON object::

    1
    {"bookie_id": "bookie-0.bookies:3181", "instance_id": "<uuid>",
     "journal_dirs": ["/data/journal"], "ledger_dirs": ["/data/ledgers"]}

Where: ``<dir>/VERSION`` in the journal and the ledger directory (BookKeeper keeps it in
``<dir>/current/VERSION``; stripemq's directories have no ``current`` level), written to a
temporary file, fsynced and renamed; ``/ledgers/cookies/<bookie id>`` in the metadata
store, created after the files. ``/ledgers/INSTANCEID`` holds the cluster's instance id
(a UUID), created once by whichever process needs it first (a create, so exactly one wins).

Decision (``decide``, sans-IO) over the cookie in the store, the directories' cookies and
the cookie this bookie's configuration makes:

- no cookie anywhere: a new bookie; stamp the directories, then the store. Directories
  that hold data but no cookie (written before cookies existed) are adopted with a warning.
- every cookie found must equal the expected one (bookie id, instance id, directories),
  else refuse naming the field: a directory of another bookie, of another cluster, a
  changed directory setting.
- the store has the cookie: every directory must have it too, else its data is lost or its
  volume is not mounted: refuse, and say to let auto-recovery re-replicate the ledgers and
  then ``stripemq shell cookie_delete <id>``.
- the store lacks it but directories have it with this cluster's instance id (deleted with
  ``cookie_delete``, or a first start that crashed before writing the store): stamp the
  store again, and the directories still without one if they are empty.

A ``memory://`` store does not outlive its process, so it cannot remember any bookie:
``cookies_apply`` is false for it and the check is skipped. One ledger directory per bookie,
so BookKeeper's ``allowStorageExpansion`` has nothing to expand.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from stripemq.bookie.config import BookieConfig
from stripemq.bookie.storage.files import make_dirs, write_atomically
from stripemq.errors import InvalidCookieError, MetadataError, NodeExistsError, NotFoundError
from stripemq.metadata import MetadataStore

log = logging.getLogger(__name__)

COOKIE_LAYOUT_VERSION = 1
COOKIE_FILE = "VERSION"
COOKIES_PATH = "/ledgers/cookies"
INSTANCE_ID_PATH = "/ledgers/INSTANCEID"
# What a directory may hold and still count as empty: a fresh ext4 volume's lost+found, a
# cookie file a crash left half-written.
_IGNORED_ENTRIES = frozenset({"lost+found", f"{COOKIE_FILE}.tmp"})
# Compared in this order; the first that differs is the one a refusal names.
FIELDS = ("bookie_id", "instance_id", "journal_dirs", "ledger_dirs")
_FIELD_LABELS = {
    "bookie_id": "bookie id",
    "instance_id": "cluster instance id",
    "journal_dirs": "journal directory",
    "ledger_dirs": "ledger directory",
}


def cookie_path(bookie_id: str) -> str:
    return f"{COOKIES_PATH}/{bookie_id}"


def cookies_apply(metadata_url: str) -> bool:
    """Whether a bookie on this metadata store checks cookies: not on ``memory://``, which
    forgets every bookie when its process ends."""
    return not metadata_url.startswith("memory:")


@dataclass(frozen=True)
class Cookie:
    """What a bookie is: its id, its directories and the cluster it belongs to."""

    bookie_id: str
    journal_dirs: tuple[str, ...]
    ledger_dirs: tuple[str, ...]
    instance_id: str | None
    layout_version: int = COOKIE_LAYOUT_VERSION

    @classmethod
    def for_bookie(cls, config: BookieConfig, instance_id: str | None) -> Cookie:
        """The cookie this configuration makes (absolute paths: a relative setting means the
        same directory whatever the working directory was when it was stamped)."""
        return cls(
            bookie_id=config.bookie_id,
            journal_dirs=(os.path.abspath(config.journal_dir),),
            ledger_dirs=(os.path.abspath(config.ledger_dir),),
            instance_id=instance_id,
        )

    def encode(self) -> bytes:
        body = {
            "bookie_id": self.bookie_id,
            "instance_id": self.instance_id,
            "journal_dirs": list(self.journal_dirs),
            "ledger_dirs": list(self.ledger_dirs),
        }
        return f"{self.layout_version}\n{json.dumps(body, indent=2)}\n".encode()

    @classmethod
    def decode(cls, data: bytes, source: str) -> Cookie:
        """Parse a cookie; ``InvalidCookieError`` naming ``source`` if it is not one."""
        try:
            head, _, body = data.decode("utf-8").partition("\n")
            version = int(head.strip())
            doc = json.loads(body)
        except (UnicodeDecodeError, ValueError) as exc:
            raise InvalidCookieError(f"cookie {source} cannot be read: {exc}") from None
        if version > COOKIE_LAYOUT_VERSION:
            raise InvalidCookieError(
                f"cookie {source} has layout version {version}, newer than this stripemq's "
                f"{COOKIE_LAYOUT_VERSION}: run the release that wrote it"
            )
        try:
            cookie = cls(
                bookie_id=doc["bookie_id"],
                journal_dirs=tuple(doc["journal_dirs"]),
                ledger_dirs=tuple(doc["ledger_dirs"]),
                instance_id=doc.get("instance_id"),
                layout_version=version,
            )
        except (KeyError, TypeError) as exc:
            raise InvalidCookieError(f"cookie {source} lacks a field: {exc}") from None
        strings = [cookie.bookie_id, *cookie.journal_dirs, *cookie.ledger_dirs]
        well_formed = (
            version >= 1
            and all(isinstance(s, str) for s in strings)
            and bool(cookie.bookie_id)
            and isinstance(cookie.instance_id, str | None)
        )
        if not well_formed:
            raise InvalidCookieError(f"cookie {source} is malformed")
        return cookie


def differing_fields(expected: Cookie, found: Cookie) -> list[str]:
    """The fields (of ``FIELDS``, in that order) on which ``found`` is not ``expected``."""
    return [name for name in FIELDS if getattr(expected, name) != getattr(found, name)]


@dataclass(frozen=True)
class DirectoryState:
    """One of the bookie's directories as found at start: its cookie, whether it is empty."""

    path: str
    cookie: Cookie | None
    empty: bool


class Verdict(enum.Enum):
    OK = "ok"  # every cookie is there and agrees: start
    WRITE_NEW = "write-new"  # stamp ``write_dirs`` (then the store if asked), then start
    REFUSE = "refuse"  # do not start; ``reason`` says why and what to do


@dataclass(frozen=True)
class CookieDecision:
    verdict: Verdict
    reason: str
    write_dirs: tuple[str, ...] = ()
    write_metadata: bool = False
    adopted: tuple[str, ...] = ()  # directories with data but no cookie, stamped as they are


def decide(
    expected: Cookie,
    registered: Cookie | None,
    directories: Sequence[DirectoryState],
    *,
    metadata_url: str,
) -> CookieDecision:
    """Whether a bookie may start, given the cookie its configuration makes (``expected``,
    with the cluster's current instance id), the one the metadata store holds for its id
    and the ones in its directories."""
    bookie = expected.bookie_id
    stamped = [d for d in directories if d.cookie is not None]
    missing = [d for d in directories if d.cookie is None]
    if registered is not None:
        fields = differing_fields(expected, registered)
        if fields:
            return _refuse(_registered_mismatch(expected, registered, fields[0], metadata_url))
    for state in stamped:
        assert state.cookie is not None
        fields = differing_fields(expected, state.cookie)
        if fields:
            return _refuse(
                _directory_mismatch(expected, state, fields[0], registered, metadata_url)
            )
    if registered is None and not stamped:
        reason = f"bookie {bookie} is new to the cluster: stamping its cookie"
        adopted = tuple(d.path for d in missing if not d.empty)
        if adopted:
            reason += f" (adopting {_listing(adopted)}, which hold data written before cookies)"
        return CookieDecision(
            Verdict.WRITE_NEW, reason, tuple(d.path for d in missing), True, adopted
        )
    if registered is None:
        # Our directories, this cluster: the store's copy was deleted (cookie_delete) or a
        # first start stopped before writing it. Directories still without one were being
        # stamped then, and so must be empty.
        full = [d.path for d in missing if not d.empty]
        if missing and any(not d.empty for d in stamped):
            # Not a first start cut short (storage never ran then): some directories lost
            # their cookie while others still hold this bookie's data.
            return _refuse(
                f"bookie {bookie} refuses to start: {_listing([d.path for d in missing])} "
                f"hold(s) no cookie while {_listing([d.path for d in stamped])} still hold(s) "
                "this bookie's data, and the cluster has no cookie for it: the directories "
                "come from different places (a replaced volume?); empty them all to start "
                "this bookie as a new one"
            )
        if full:
            return _refuse(
                f"bookie {bookie} refuses to start: {_listing(full)} hold(s) data but no "
                f"cookie, while {_listing([d.path for d in stamped])} hold(s) this bookie's "
                "cookie and the cluster has none: the directories come from different "
                "places; empty them all to start this bookie as a new one"
            )
        return CookieDecision(
            Verdict.WRITE_NEW,
            f"the metadata store has no cookie for bookie {bookie} but its directories "
            "belong to this cluster: stamping it again",
            tuple(d.path for d in missing),
            True,
        )
    if missing:
        return _refuse(_data_lost(bookie, missing, stamped, metadata_url))
    return CookieDecision(Verdict.OK, f"cookies of bookie {bookie} verified")


def _refuse(reason: str) -> CookieDecision:
    return CookieDecision(Verdict.REFUSE, reason)


def _listing(paths: Sequence[str]) -> str:
    return ", ".join(paths)


def _value(cookie: Cookie, field: str) -> str:
    value = getattr(cookie, field)
    if isinstance(value, tuple):
        return _listing(value)
    return str(value)


def _delete_hint(bookie: str, metadata_url: str) -> str:
    return f"`stripemq shell --metadata {metadata_url} cookie_delete {bookie}`"


def _data_lost(
    bookie: str,
    missing: Sequence[DirectoryState],
    stamped: Sequence[DirectoryState],
    metadata_url: str,
) -> str:
    what = _listing([d.path for d in missing])
    if stamped:
        which = f"directory {what} holds no cookie (while {stamped[0].path} does)"
    else:
        empty = all(d.empty for d in missing)
        which = f"its directories ({what}) are {'empty' if empty else 'without a cookie'}"
    return (
        f"bookie {bookie} refuses to start: {which} but the cluster knows this bookie, so "
        "its data is lost or its volumes are not mounted; mount them, or let auto-recovery "
        f"re-replicate its ledgers, then empty all its directories and run "
        f"{_delete_hint(bookie, metadata_url)} to start it as a new bookie"
    )


def _registered_mismatch(
    expected: Cookie, registered: Cookie, field: str, metadata_url: str
) -> str:
    bookie = expected.bookie_id
    if field == "instance_id":
        return (
            f"bookie {bookie} refuses to start: its cookie in the metadata store names "
            f"cluster instance {registered.instance_id}, but the cluster's instance id "
            f"({INSTANCE_ID_PATH}) is {expected.instance_id}: the cluster's metadata was "
            "partly recreated; restore it, or empty this bookie's directories and run "
            f"{_delete_hint(bookie, metadata_url)} to start it as a new bookie"
        )
    label = _FIELD_LABELS[field]
    old, new = _value(registered, field), _value(expected, field)
    return (
        f"bookie {bookie} refuses to start: the cluster knows it with {label} {old}, but it "
        f"is configured with {new}; configure {old} again (a bookie keeps its directories "
        "for life), or, to start it afresh, let auto-recovery re-replicate its ledgers, "
        f"then run {_delete_hint(bookie, metadata_url)}"
    )


def _directory_mismatch(
    expected: Cookie,
    state: DirectoryState,
    field: str,
    registered: Cookie | None,
    metadata_url: str,
) -> str:
    bookie = expected.bookie_id
    found = state.cookie
    assert found is not None
    if field == "bookie_id":
        return (
            f"bookie {bookie} refuses to start: directory {state.path} belongs to bookie "
            f"{found.bookie_id}: two bookies cannot share a directory, and a bookie cannot "
            f"change its address or port (the cluster knows its ledgers by "
            f"{found.bookie_id}); give this bookie its own empty directories, or start it "
            f"as {found.bookie_id} again"
        )
    if field == "instance_id":
        known = "" if registered is None else " (its cookie there is this cluster's)"
        return (
            f"bookie {bookie} refuses to start: directory {state.path} holds data of "
            f"cluster instance {found.instance_id}, but the metadata store {metadata_url}"
            f"{known} is cluster instance {expected.instance_id}: metadata_service_uri "
            "points at another cluster, or that cluster's metadata was wiped; point it at "
            "the bookie's own cluster, or empty its directories to start it as a new bookie"
        )
    label = _FIELD_LABELS[field]
    old, new = _value(found, field), _value(expected, field)
    return (
        f"bookie {bookie} refuses to start: directory {state.path} was stamped with "
        f"{label} {old}, but the bookie is configured with {new}; configure {old} again, "
        f"or, if the data was moved on purpose, delete the {COOKIE_FILE} file of each of "
        f"its directories and run {_delete_hint(bookie, metadata_url)} so it is stamped anew"
    )


# ----------------------------------------------------------------------------- directories


def bookie_directories(config: BookieConfig) -> list[str]:
    """The directories a bookie stamps, each once (they may be configured as one)."""
    paths = [os.path.abspath(config.journal_dir), os.path.abspath(config.ledger_dir)]
    return list(dict.fromkeys(paths))


def read_directory(path: str) -> DirectoryState:
    """The cookie and emptiness of one directory (missing: empty, no cookie). Blocking."""
    directory = Path(path)
    cookie_file = directory / COOKIE_FILE
    try:
        cookie: Cookie | None = Cookie.decode(cookie_file.read_bytes(), str(cookie_file))
    except FileNotFoundError:
        cookie = None
    try:
        entries = {entry.name for entry in os.scandir(directory)}
    except FileNotFoundError:
        entries = set()
    return DirectoryState(path, cookie, not entries - _IGNORED_ENTRIES - {COOKIE_FILE})


def write_directory_cookie(path: str, cookie: Cookie) -> None:
    """Stamp ``cookie`` into a directory (created if missing), durably. Blocking."""
    directory = Path(path)
    make_dirs(directory)
    write_atomically(directory / COOKIE_FILE, cookie.encode())


# ----------------------------------------------------------------------------- metadata


async def cluster_instance_id(store: MetadataStore) -> str:
    """The cluster's instance id, created (one random UUID, once) if it has none yet.

    Raises:
        MetadataError: the store failed.
    """
    found = await store.get(INSTANCE_ID_PATH)
    if found is None:
        try:
            await store.create(INSTANCE_ID_PATH, str(uuid.uuid4()).encode())
        except NodeExistsError:
            pass  # another process created it first: theirs is the one
        found = await store.get(INSTANCE_ID_PATH)
        if found is None:
            raise MetadataError(f"{INSTANCE_ID_PATH} vanished right after its creation")
    return found[0].decode().strip()


async def read_registered_cookie(store: MetadataStore, bookie_id: str) -> tuple[Cookie, int] | None:
    """The cookie the store holds for ``bookie_id`` and its version, or None.

    Raises:
        InvalidCookieError: the stored cookie cannot be parsed.
        MetadataError: the store failed.
    """
    path = cookie_path(bookie_id)
    found = await store.get(path)
    if found is None:
        return None
    data, stat = found
    return Cookie.decode(data, path), stat.version


async def registered_cookies(store: MetadataStore) -> dict[str, Cookie]:
    """Every cookie in the store, by bookie id (BookKeeper's ``cookie_list``).

    Raises:
        InvalidCookieError: a stored cookie cannot be parsed.
        MetadataError: the store failed.
    """
    try:
        names = await store.children(COOKIES_PATH)
    except NotFoundError:
        return {}
    cookies = {}
    for bookie_id in sorted(names):
        found = await read_registered_cookie(store, bookie_id)
        if found is not None:
            cookies[bookie_id] = found[0]
    return cookies


async def delete_registered_cookie(store: MetadataStore, bookie_id: str) -> None:
    """Forget ``bookie_id``: its next start with empty directories makes it a new bookie.

    Raises:
        NotFoundError: the store has no cookie for it.
        MetadataError: the store failed.
    """
    await store.delete(cookie_path(bookie_id))


async def check_cookies(store: MetadataStore, config: BookieConfig) -> CookieDecision:
    """Verify this bookie's cookies before it starts; stamp them if it is new.

    Raises:
        InvalidCookieError: the bookie must not start (the message says why and what to do).
        MetadataError: the store failed.
        OSError: a directory could not be read or written.
    """
    instance_id = await cluster_instance_id(store)
    expected = Cookie.for_bookie(config, instance_id)
    found = await read_registered_cookie(store, expected.bookie_id)
    directories = await asyncio.to_thread(
        lambda: [read_directory(path) for path in bookie_directories(config)]
    )
    decision = decide(
        expected,
        None if found is None else found[0],
        directories,
        metadata_url=config.metadata_service_uri,
    )
    if decision.verdict is Verdict.REFUSE:
        raise InvalidCookieError(decision.reason)
    if decision.verdict is Verdict.WRITE_NEW:
        level = logging.WARNING if decision.adopted else logging.INFO
        log.log(level, "%s", decision.reason)
        for path in decision.write_dirs:
            await asyncio.to_thread(write_directory_cookie, path, expected)
        if decision.write_metadata:
            try:
                await store.create(cookie_path(expected.bookie_id), expected.encode())
            except NodeExistsError:
                # Our own create, retried after a lost connection, finds what it wrote.
                written = await store.get(cookie_path(expected.bookie_id))
                if written is not None and written[0] == expected.encode():
                    return decision
                raise InvalidCookieError(
                    f"bookie {expected.bookie_id} refuses to start: another process stamped "
                    "a cookie for this bookie id while it was starting; is a second bookie "
                    "starting under the same id?"
                ) from None
    else:
        log.debug("%s", decision.reason)
    return decision
