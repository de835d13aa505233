#!/usr/bin/env bash
# Regenerate the Python modules for stripemq/proto/*.proto (needs grpcio-tools).
set -euo pipefail
cd "$(dirname "$0")/.."
# The bookie's gRPC service.
python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. \
    stripemq/proto/bookie.proto
# The Pulsar binary protocol: messages only, framed by stripemq.proto.frames.
python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. stripemq/proto/pulsar_api.proto
