"""The one ``InitialPosition``: the client's, the managed ledger's and the protocol's."""

from __future__ import annotations

import stripemq.client
from stripemq.client.options import InitialPosition as ClientInitialPosition
from stripemq.managed_ledger.managed_ledger import InitialPosition as LedgerInitialPosition
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.initial_position import InitialPosition


def test_one_enum_everywhere() -> None:
    assert ClientInitialPosition is InitialPosition
    assert LedgerInitialPosition is InitialPosition
    assert stripemq.client.InitialPosition is InitialPosition


def test_values_are_the_protocols() -> None:
    assert InitialPosition.Latest.value == pb.CommandSubscribe.Latest
    assert InitialPosition.Earliest.value == pb.CommandSubscribe.Earliest
    assert InitialPosition(pb.CommandSubscribe.Earliest) is InitialPosition.Earliest
    body = pb.CommandSubscribe(initialPosition=InitialPosition.Earliest.value)
    assert InitialPosition(body.initialPosition) is InitialPosition.Earliest


def test_one_spelling_the_official_clients() -> None:
    assert [p.name for p in InitialPosition] == ["Latest", "Earliest"]
    assert InitialPosition["Earliest"] is InitialPosition.Earliest  # as the CLI looks them up
    assert not hasattr(InitialPosition, "EARLIEST")
