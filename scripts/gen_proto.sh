#!/usr/bin/env bash
# Regenerate the Python modules for stripemq/proto/*.proto (needs grpcio-tools).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. stripemq/proto/*.proto
