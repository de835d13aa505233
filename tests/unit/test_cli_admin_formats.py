"""``stripemq.cli.admin_formats``: pulsar-admin's formats of sizes, times, message ids,
lists, names and metadata store URLs, sans-IO."""

from __future__ import annotations

import pytest

from stripemq.cli.admin_formats import (
    EARLIEST,
    LATEST,
    ArgumentFormatError,
    Namespace,
    check_name,
    metadata_store_url,
    parse_key_values,
    parse_message_id,
    parse_relative_millis,
    parse_relative_seconds,
    parse_size,
    parse_topic,
    retention_megabytes,
    retention_minutes,
    split_list,
)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("4096", 4096),
        ("100K", 100 * 1024),
        ("100k", 100 * 1024),
        ("10M", 10 * 1024**2),
        ("500m", 500 * 1024**2),
        ("16G", 16 * 1024**3),
        ("2T", 2 * 1024**4),
        ("-1", -1),
        ("0", 0),
    ],
)
def test_sizes_in_pulsar_admin_formats(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "G", "10X", "1.5G", "ten", "10 G", "--1"])
def test_malformed_sizes_are_refused(text: str) -> None:
    with pytest.raises(ArgumentFormatError, match="size"):
        parse_size(text)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("120", 120),
        ("30s", 30),
        ("10m", 600),
        ("1h", 3600),
        ("3H", 3 * 3600),
        ("2d", 2 * 86400),
        ("5w", 5 * 7 * 86400),
        ("1y", 365 * 86400),
        ("-1", -1),
        ("0", 0),
    ],
)
def test_relative_times_in_pulsar_admin_formats(text: str, seconds: int) -> None:
    assert parse_relative_seconds(text) == seconds
    assert parse_relative_millis(text) == seconds * 1000


@pytest.mark.parametrize("text", ["", "h", "3x", "1.5h", "abc", "10mm"])
def test_malformed_times_are_refused(text: str) -> None:
    with pytest.raises(ArgumentFormatError):
        parse_relative_seconds(text)


def test_retention_units_as_pulsar_admin_converts_them() -> None:
    assert retention_minutes(parse_relative_seconds("3d")) == 3 * 24 * 60
    assert retention_minutes(90) == 1  # whole minutes
    assert retention_minutes(-1) == -1
    assert retention_minutes(-5) == 0  # toward zero, as Java: never -1 (infinite) by accident
    assert retention_minutes(-120) == -2
    assert retention_megabytes(parse_size("10G")) == 10 * 1024
    assert retention_megabytes(parse_size("512K")) == 0  # less than 1 MB: no retention
    assert retention_megabytes(-1) == -1


def test_message_ids() -> None:
    assert parse_message_id("12:34") == (12, 34)
    assert parse_message_id("12:34:-1:0") == (12, 34)
    assert parse_message_id("latest") == LATEST
    assert parse_message_id("earliest") == EARLIEST
    for bad in ("12", "a:b", "", "12-34"):
        with pytest.raises(ArgumentFormatError, match="message id"):
            parse_message_id(bad)
    with pytest.raises(ArgumentFormatError):
        parse_message_id("latest", allow_named=False)


def test_lists_and_properties() -> None:
    assert split_list(["a,b", "c", " d , "]) == ["a", "b", "c", "d"]
    assert split_list(None) == []
    assert parse_key_values(["a=1,b=2", "c=x=y"]) == {"a": "1", "b": "2", "c": "x=y"}
    with pytest.raises(ArgumentFormatError, match="key=value"):
        parse_key_values(["novalue"])


def test_namespaces_and_topics_become_rest_paths() -> None:
    assert Namespace.parse("acme/billing").path == "acme/billing"
    for bad in ("acme", "acme/billing/x", "/billing", "acme/", "a b/c"):
        with pytest.raises(ArgumentFormatError, match="namespace"):
            Namespace.parse(bad)
    assert parse_topic("orders").rest_path == "persistent/public/default/orders"
    assert str(parse_topic("acme/billing/orders")) == "persistent://acme/billing/orders"
    assert parse_topic("persistent://a/b/my topic?").rest_path == "persistent/a/b/my%20topic%3F"
    assert parse_topic("a/b/c-partition-3").partition_index == 3
    for bad in ("a/b", "", "kafka://a/b/c", "persistent://a b/c/d", "a/b/x\ny"):
        with pytest.raises(ArgumentFormatError):
            parse_topic(bad)


def test_metadata_store_urls_in_pulsar_form() -> None:
    assert metadata_store_url("zk:127.0.0.1:2181/stripemq") == "zk://127.0.0.1:2181/stripemq"
    assert metadata_store_url("zk://h:2181") == "zk://h:2181"
    assert metadata_store_url("h1:2181,h2:2181") == "zk://h1:2181,h2:2181"
    assert metadata_store_url("local:/tmp/x") == "local:///tmp/x"
    with pytest.raises(ArgumentFormatError):
        metadata_store_url(" ")


@pytest.mark.parametrize("bad", ["caf\u00e9", "\u0661\u0662", "name\n", "a b", "", "a/b"])
def test_names_are_checked_as_the_broker_checks_them(bad: str) -> None:
    """One validator (``proto.topic_name.is_valid_name``): ASCII only, the whole name (a
    trailing newline included), as Pulsar's NamedEntity pattern."""
    with pytest.raises(ArgumentFormatError, match="invalid tenant"):
        check_name("tenant", bad)
    with pytest.raises(ArgumentFormatError, match="namespace"):
        Namespace.parse(f"{bad}/ns")
    assert check_name("tenant", "a-b_c.d:e=f") == "a-b_c.d:e=f"
