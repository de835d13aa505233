"""Service URLs (``client.pool``): the brokers a URL lists, refusals, and moving on to
the next address after a failure."""

from __future__ import annotations

import pytest

from stripemq.client.pool import DEFAULT_PORT, ServiceAddresses, parse_service_url
from stripemq.errors import InvalidConfigurationError


@pytest.mark.parametrize(
    ("url", "addresses"),
    [
        ("pulsar://localhost:6650", ["localhost:6650"]),
        ("pulsar://localhost", [f"localhost:{DEFAULT_PORT}"]),
        ("pulsar://localhost:6650/", ["localhost:6650"]),
        ("pulsar://broker-1.example.com:7000", ["broker-1.example.com:7000"]),
        ("pulsar://10.0.0.1:6651,10.0.0.2:6652", ["10.0.0.1:6651", "10.0.0.2:6652"]),
        ("pulsar://a:1,b,c:3", ["a:1", "b:6650", "c:3"]),
        ("pulsar://a,b,c", ["a:6650", "b:6650", "c:6650"]),
    ],
)
def test_service_urls_list_their_brokers(url: str, addresses: list[str]) -> None:
    assert parse_service_url(url) == addresses


def test_an_ipv6_broker_without_a_port_gets_the_default_port() -> None:
    assert parse_service_url("pulsar://[::1]:6650") == ["[::1]:6650"]
    assert parse_service_url("pulsar://[::1]") == ["[::1]:6650"]
    assert parse_service_url("pulsar://[fe80::1]:7000,[fe80::2]") == [
        "[fe80::1]:7000",
        "[fe80::2]:6650",
    ]


def test_the_default_port_is_pulsars() -> None:
    assert DEFAULT_PORT == 6650


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:8080",
        "https://localhost:8443",
        "localhost:6650",
        "",
        "pulsar://",
        "pulsar://host:",
        "pulsar://host:port",
        "pulsar://a:1,,b:2",
        "pulsar://:6650",
    ],
)
def test_bad_service_urls_are_configuration_errors(url: str) -> None:
    with pytest.raises(InvalidConfigurationError):
        parse_service_url(url)


def test_service_addresses_move_on_after_a_failure() -> None:
    addresses = ServiceAddresses("pulsar://a:1,b:2")
    assert addresses.current() == "a:1"
    addresses.failed("b:2")  # not the current one: no change
    assert addresses.current() == "a:1"
    addresses.failed("a:1")
    assert addresses.current() == "b:2"
    addresses.failed("b:2")
    assert addresses.current() == "a:1"
