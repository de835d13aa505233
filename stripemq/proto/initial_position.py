"""Where a new subscription starts: the one ``InitialPosition`` of the client and the broker.

Values are the protocol's ``CommandSubscribe.InitialPosition``, so a SUBSCRIBE's field
converts both ways with ``InitialPosition(body.initialPosition)`` and ``position.value``.
Member names are the official ``pulsar-client``'s (``Latest``, ``Earliest``).
"""

from __future__ import annotations

import enum

from stripemq.proto import pulsar_api_pb2 as pb


class InitialPosition(enum.Enum):
    """Where a new cursor starts: after the last entry, or at the first one kept."""

    Latest = pb.CommandSubscribe.Latest
    Earliest = pb.CommandSubscribe.Earliest
