"""Bookie cookies (``stripemq.bookie.cookie``): the record and its encoding, the start
decision over every combination of cookies found, the directory and metadata helpers, and
an in-process ``BookieServer`` on an embedded ``local://`` store refusing or starting."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stripemq.bookie.bookie_client import BookieClient
from stripemq.bookie.config import BookieConfig
from stripemq.bookie.cookie import (
    COOKIE_FILE,
    COOKIE_LAYOUT_VERSION,
    INSTANCE_ID_PATH,
    Cookie,
    DirectoryState,
    Verdict,
    check_cookies,
    cluster_instance_id,
    cookie_path,
    cookies_apply,
    decide,
    delete_registered_cookie,
    differing_fields,
    read_directory,
    read_registered_cookie,
    registered_cookies,
    write_directory_cookie,
)
from stripemq.bookie.registration import registration_path
from stripemq.bookie.server import BookieServer
from stripemq.cli.main import build_parser
from stripemq.cli.shell import run_shell
from stripemq.config import load_config
from stripemq.errors import ConfigError, InvalidCookieError, NotFoundError
from stripemq.metadata import MetadataStore, create_metadata_store
from stripemq.testing.ports import free_port

URL = "zk://zk:2181/c"
ME = Cookie("bookie-0:3181", ("/d/journal",), ("/d/ledgers",), "instance-a")


def state(path: str, cookie: Cookie | None, empty: bool = True) -> DirectoryState:
    return DirectoryState(path, cookie, empty)


def both(cookie: Cookie | None, empty: bool = True) -> list[DirectoryState]:
    return [state("/d/journal", cookie, empty), state("/d/ledgers", cookie, empty)]


def with_(cookie: Cookie, **changes: object) -> Cookie:
    fields = {
        "bookie_id": cookie.bookie_id,
        "journal_dirs": cookie.journal_dirs,
        "ledger_dirs": cookie.ledger_dirs,
        "instance_id": cookie.instance_id,
    }
    return Cookie(**{**fields, **changes})  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the record


def test_a_cookie_is_its_layout_version_then_json_and_decodes_to_itself() -> None:
    data = ME.encode()
    assert data.startswith(f"{COOKIE_LAYOUT_VERSION}\n{{".encode())
    assert Cookie.decode(data, "x") == ME


def test_the_configuration_makes_the_expected_cookie() -> None:
    config = BookieConfig(
        data_dir="/data//bookie/", advertised_address="bookie-0.bookies", bookie_port=3181
    )
    cookie = Cookie.for_bookie(config, "instance-a")
    assert cookie == Cookie(
        "bookie-0.bookies:3181",
        ("/data/bookie/journal",),
        ("/data/bookie/ledgers",),
        "instance-a",
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff\xfe", "cannot be read"),
        (b"one\n{}", "cannot be read"),
        (b"1\nnot json", "cannot be read"),
        (b"1\n{}", "lacks a field"),
        (b'1\n{"bookie_id": "", "journal_dirs": [], "ledger_dirs": []}', "malformed"),
        (b'1\n{"bookie_id": "b", "journal_dirs": [1], "ledger_dirs": []}', "malformed"),
        (b'0\n{"bookie_id": "b", "journal_dirs": [], "ledger_dirs": []}', "malformed"),
        (b"99\n{}", "layout version 99, newer"),
    ],
)
def test_what_is_not_a_cookie_is_refused_naming_its_source(data: bytes, message: str) -> None:
    with pytest.raises(InvalidCookieError, match=message) as refused:
        Cookie.decode(data, "/d/journal/VERSION")
    assert "/d/journal/VERSION" in str(refused.value)


def test_fields_are_compared_in_order() -> None:
    other = with_(ME, bookie_id="bookie-1:3181", ledger_dirs=("/e",))
    assert differing_fields(ME, other) == ["bookie_id", "ledger_dirs"]
    assert differing_fields(ME, ME) == []


def test_cookies_are_checked_on_every_store_that_outlives_the_process() -> None:
    assert cookies_apply("zk://a:2181/x") and cookies_apply("local:///var/lib/smq")
    assert not cookies_apply("memory://") and not cookies_apply("memory://shared")


# --------------------------------------------------------------------------- the decision


def test_no_cookie_anywhere_is_a_new_bookie_stamping_every_directory() -> None:
    decision = decide(ME, None, both(None), metadata_url=URL)
    assert decision.verdict is Verdict.WRITE_NEW
    assert decision.write_dirs == ("/d/journal", "/d/ledgers") and decision.write_metadata
    assert decision.adopted == ()


def test_directories_written_before_cookies_are_adopted() -> None:
    decision = decide(
        ME, None, [state("/d/journal", None), state("/d/ledgers", None, False)], metadata_url=URL
    )
    assert decision.verdict is Verdict.WRITE_NEW and decision.adopted == ("/d/ledgers",)


def test_the_same_cookie_everywhere_starts() -> None:
    assert decide(ME, ME, both(ME), metadata_url=URL).verdict is Verdict.OK


def test_a_known_bookie_with_empty_directories_refuses_and_says_what_to_do() -> None:
    decision = decide(ME, ME, both(None), metadata_url=URL)
    assert decision.verdict is Verdict.REFUSE
    reason = decision.reason
    assert reason.startswith("bookie bookie-0:3181 refuses to start: its directories")
    assert "are empty but the cluster knows this bookie" in reason
    assert "data is lost or its volumes are not mounted" in reason
    assert f"`stripemq shell --metadata {URL} cookie_delete bookie-0:3181`" in reason
    assert "\n" not in reason


def test_one_wiped_directory_of_a_known_bookie_refuses_naming_it() -> None:
    decision = decide(
        ME, ME, [state("/d/journal", ME), state("/d/ledgers", None)], metadata_url=URL
    )
    assert decision.verdict is Verdict.REFUSE
    assert "directory /d/ledgers holds no cookie (while /d/journal does)" in decision.reason


def test_a_directory_of_another_bookie_refuses_naming_that_bookie() -> None:
    theirs = with_(ME, bookie_id="bookie-1:3181")
    for registered in (None, ME):
        decision = decide(ME, registered, both(theirs), metadata_url=URL)
        assert decision.verdict is Verdict.REFUSE
        assert "directory /d/journal belongs to bookie bookie-1:3181" in decision.reason
        assert "two bookies cannot share a directory" in decision.reason


def test_directories_of_another_cluster_refuse_naming_both_instances() -> None:
    foreign = with_(ME, instance_id="instance-b")
    decision = decide(ME, None, both(foreign), metadata_url=URL)
    assert decision.verdict is Verdict.REFUSE
    assert "holds data of cluster instance instance-b" in decision.reason
    assert f"metadata store {URL} is cluster instance instance-a" in decision.reason


def test_a_changed_directory_setting_refuses_naming_the_field() -> None:
    moved = with_(ME, ledger_dirs=("/old/ledgers",))
    decision = decide(ME, moved, both(moved), metadata_url=URL)
    assert decision.verdict is Verdict.REFUSE
    assert "the cluster knows it with ledger directory /old/ledgers" in decision.reason
    assert "configured with /d/ledgers" in decision.reason
    decision = decide(ME, None, both(moved), metadata_url=URL)
    assert "was stamped with ledger directory /old/ledgers" in decision.reason


def test_a_stored_cookie_of_an_earlier_instance_refuses() -> None:
    earlier = with_(ME, instance_id="instance-0")
    decision = decide(ME, earlier, both(earlier), metadata_url=URL)
    assert decision.verdict is Verdict.REFUSE
    assert "names cluster instance instance-0" in decision.reason
    assert f"{INSTANCE_ID_PATH}) is instance-a" in decision.reason


def test_a_deleted_stored_cookie_of_this_cluster_is_stamped_again() -> None:
    decision = decide(ME, None, both(ME), metadata_url=URL)
    assert decision.verdict is Verdict.WRITE_NEW
    assert decision.write_dirs == () and decision.write_metadata


def test_a_first_start_cut_short_finishes_stamping_empty_directories() -> None:
    half = [state("/d/journal", ME), state("/d/ledgers", None)]
    decision = decide(ME, None, half, metadata_url=URL)
    assert decision.verdict is Verdict.WRITE_NEW
    assert decision.write_dirs == ("/d/ledgers",) and decision.write_metadata
    half = [state("/d/journal", ME), state("/d/ledgers", None, empty=False)]
    decision = decide(ME, None, half, metadata_url=URL)
    assert decision.verdict is Verdict.REFUSE
    assert "/d/ledgers hold(s) data but no cookie" in decision.reason


def test_a_wiped_directory_beside_one_with_data_stays_refused_after_cookie_delete() -> None:
    """Not a first start cut short: the journal still holds this bookie's data while the
    ledgers volume was replaced. Deleting the stored cookie does not make it a new bookie."""
    partly = [state("/d/journal", ME, empty=False), state("/d/ledgers", None)]
    decision = decide(ME, None, partly, metadata_url=URL)
    assert decision.verdict is Verdict.REFUSE
    assert "still hold(s) this bookie's data" in decision.reason
    assert "empty them all" in decision.reason


def test_directories_are_compared_as_absolute_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative directory setting names the same directory as its absolute form."""
    monkeypatch.chdir(tmp_path)
    relative = load_config(BookieConfig, None, {"data_dir": "data/bookie"})
    absolute = load_config(BookieConfig, None, {"data_dir": str(tmp_path / "data" / "bookie")})
    assert Cookie.for_bookie(relative, "i") == Cookie.for_bookie(absolute, "i")


# --------------------------------------------------------------------------- directories


def test_a_directory_is_read_with_its_cookie_and_emptiness(tmp_path: Path) -> None:
    missing = read_directory(str(tmp_path / "nowhere"))
    assert missing.cookie is None and missing.empty
    (tmp_path / "lost+found").mkdir()
    (tmp_path / f"{COOKIE_FILE}.tmp").write_bytes(b"half")
    assert read_directory(str(tmp_path)).empty
    write_directory_cookie(str(tmp_path / "new" / "journal"), ME)
    stamped = read_directory(str(tmp_path / "new" / "journal"))
    assert stamped.cookie == ME and stamped.empty
    (tmp_path / "data.log").write_bytes(b"x")
    assert not read_directory(str(tmp_path)).empty
    (tmp_path / COOKIE_FILE).write_bytes(b"garbage")
    with pytest.raises(InvalidCookieError, match="cannot be read"):
        read_directory(str(tmp_path))


# --------------------------------------------------------------------------- metadata


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[MetadataStore]:
    s = create_metadata_store(f"local://{tmp_path / 'metadata'}")
    await s.start()
    yield s
    await s.close()


def config_in(base: Path, store_dir: Path, port: int = 3181) -> BookieConfig:
    return BookieConfig(
        data_dir=str(base),
        bookie_port=port,
        metadata_service_uri=f"local://{store_dir}",
        stats_http_port=0,
    )


async def test_the_instance_id_is_created_once(store: MetadataStore) -> None:
    ids = await asyncio.gather(*(cluster_instance_id(store) for _ in range(5)))
    assert len(set(ids)) == 1
    assert await cluster_instance_id(store) == ids[0]


async def test_check_stamps_a_new_bookie_then_verifies_and_refuses_when_wiped(
    store: MetadataStore, tmp_path: Path
) -> None:
    config = config_in(tmp_path / "bookie", tmp_path / "metadata")
    assert (await check_cookies(store, config)).verdict is Verdict.WRITE_NEW
    found = await read_registered_cookie(store, config.bookie_id)
    assert found is not None
    cookie, _version = found
    assert cookie.instance_id == await cluster_instance_id(store)
    for directory in (config.journal_dir, config.ledger_dir):
        assert Cookie.decode((Path(directory) / COOKIE_FILE).read_bytes(), "f") == cookie
    assert (await check_cookies(store, config)).verdict is Verdict.OK
    assert await registered_cookies(store) == {config.bookie_id: cookie}

    shutil.rmtree(config.journal_dir)
    with pytest.raises(InvalidCookieError, match="holds no cookie"):
        await check_cookies(store, config)
    shutil.rmtree(config.ledger_dir)
    with pytest.raises(InvalidCookieError, match="are empty but the cluster knows"):
        await check_cookies(store, config)

    await delete_registered_cookie(store, config.bookie_id)
    with pytest.raises(NotFoundError):
        await delete_registered_cookie(store, config.bookie_id)
    assert await registered_cookies(store) == {}
    assert (await check_cookies(store, config)).verdict is Verdict.WRITE_NEW


async def test_a_deleted_stored_cookie_is_restamped_from_intact_directories(
    store: MetadataStore, tmp_path: Path
) -> None:
    config = config_in(tmp_path / "bookie", tmp_path / "metadata")
    await check_cookies(store, config)
    await delete_registered_cookie(store, config.bookie_id)
    decision = await check_cookies(store, config)
    assert decision.verdict is Verdict.WRITE_NEW and decision.write_dirs == ()
    assert await store.exists(cookie_path(config.bookie_id)) is not None


async def test_directories_kept_across_a_new_cluster_are_refused(
    store: MetadataStore, tmp_path: Path
) -> None:
    config = config_in(tmp_path / "bookie", tmp_path / "metadata")
    await check_cookies(store, config)
    await store.delete(cookie_path(config.bookie_id))
    await store.delete(INSTANCE_ID_PATH)  # as if the metadata were wiped
    with pytest.raises(InvalidCookieError, match="holds data of cluster instance"):
        await check_cookies(store, config)


# --------------------------------------------------------------------------- the server


async def shell(url: str, *args: str) -> None:
    await run_shell(build_parser().parse_args(["shell", "--metadata", url, *args]))


async def test_the_shell_takes_the_metadata_url_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """When it runs (an init container's environment), not when its parser is built."""
    args = build_parser().parse_args(["shell", "cookie_list"])
    monkeypatch.delenv("STRIPEMQ_METADATA_SERVICE_URI", raising=False)
    with pytest.raises(ConfigError, match="--metadata"):
        await run_shell(args)
    bookie = BookieServer(config_in(tmp_path / "b0", tmp_path / "metadata", free_port()))
    await bookie.start()
    await bookie.stop()
    monkeypatch.setenv("STRIPEMQ_METADATA_SERVICE_URI", f"local://{tmp_path / 'metadata'}")
    capsys.readouterr()
    await run_shell(args)
    assert bookie.bookie_id in capsys.readouterr().out


async def test_shell_cookie_list_and_cookie_delete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"local://{tmp_path / 'metadata'}"
    running = BookieServer(config_in(tmp_path / "b0", tmp_path / "metadata", free_port()))
    gone = BookieServer(config_in(tmp_path / "b1", tmp_path / "metadata", free_port()))
    await gone.start()
    await gone.stop()
    await running.start()
    try:
        capsys.readouterr()
        await shell(url, "cookie_list")
        listed = {
            bookie_id: (state, dirs)
            for bookie_id, state, _instance, dirs in (
                line.split("\t") for line in capsys.readouterr().out.splitlines()
            )
        }
        assert listed == {
            running.bookie_id: ("registered", f"{tmp_path}/b0/journal,{tmp_path}/b0/ledgers"),
            gone.bookie_id: ("not-registered", f"{tmp_path}/b1/journal,{tmp_path}/b1/ledgers"),
        }
        with pytest.raises(SystemExit, match=f"bookie {running.bookie_id} is registered"):
            await shell(url, "cookie_delete", running.bookie_id)
        await shell(url, "cookie_delete", gone.bookie_id)
        assert capsys.readouterr().out == f"deleted the cookie of bookie {gone.bookie_id}\n"
        with pytest.raises(SystemExit, match=f"no cookie for bookie {gone.bookie_id}"):
            await shell(url, "cookie_delete", gone.bookie_id)
        await shell(url, "cookie_delete", "--force", running.bookie_id)
        await shell(url, "cookie_delete", "-f", gone.bookie_id)  # as rm -f: absent is fine
        assert capsys.readouterr().out.splitlines() == [
            f"deleted the cookie of bookie {running.bookie_id}",
            f"the cluster has no cookie for bookie {gone.bookie_id}: nothing to delete",
        ]
        await shell(url, "cookie_list")
        assert capsys.readouterr().out == ""
    finally:
        await running.stop()


async def test_a_refused_bookie_registers_nothing_and_releases_its_port(tmp_path: Path) -> None:
    port = free_port()
    config = config_in(tmp_path / "bookie", tmp_path / "metadata", port)
    first = BookieServer(config)
    await first.start()
    bookie_id = first.bookie_id
    await first.stop()
    shutil.rmtree(tmp_path / "bookie" / "journal")
    shutil.rmtree(tmp_path / "bookie" / "ledgers")

    refused = BookieServer(config_in(tmp_path / "bookie", tmp_path / "metadata", port))
    with pytest.raises(InvalidCookieError, match=f"bookie {bookie_id} refuses to start"):
        await refused.start()
    assert not (tmp_path / "bookie" / "journal").exists()  # storage never started
    store = create_metadata_store(config.metadata_service_uri)
    await store.start()
    try:
        assert await store.exists(registration_path(bookie_id, False)) is None
        await delete_registered_cookie(store, bookie_id)
    finally:
        await store.close()
    fresh = BookieServer(config_in(tmp_path / "bookie", tmp_path / "metadata", port))
    await fresh.start()  # the same port is free again
    await fresh.stop()


async def test_a_memory_store_bookie_checks_and_writes_no_cookie(tmp_path: Path) -> None:
    config = BookieConfig(data_dir=str(tmp_path), bookie_port=0, stats_http_port=0)
    for _ in range(2):  # a new private store each time: no cookie would ever match
        bookie = BookieServer(config)
        await bookie.start()
        await bookie.stop()
    assert not (tmp_path / "journal" / COOKIE_FILE).exists()


async def test_a_bookie_on_port_zero_is_stamped_with_the_port_it_listens_on(
    tmp_path: Path,
) -> None:
    config = config_in(tmp_path / "bookie", tmp_path / "metadata", 0)
    bookie = BookieServer(config)
    await bookie.start()
    try:
        cookie = read_directory(config.journal_dir).cookie
        assert config.bookie_port != 0 and cookie is not None
        assert cookie.bookie_id == bookie.bookie_id == f"127.0.0.1:{config.bookie_port}"
        client = BookieClient(bookie.bookie_id, timeout=5.0)
        await client.connect()
        try:
            assert (await client.get_info()).bookie_id == bookie.bookie_id
        finally:
            await client.close()
    finally:
        await bookie.stop()
