"""Values several of the client and proto unit tests share (imported by name: pytest puts
this directory on ``sys.path``)."""

from __future__ import annotations

from hypothesis import strategies as st

from stripemq.proto import pulsar_api_pb2 as pb

LONG_MAX = (1 << 63) - 1

# Every codec the official clients and we both support.
COMPRESSIONS = [pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY]

# Text protobuf string fields accept (no lone surrogates).
proto_text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=20)
