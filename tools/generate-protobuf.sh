#!/usr/bin/env bash
# Regenerates Sources/LedgerCore/Codec/ledger_event.pb.swift from ledger_event.proto.
# Needs protoc (apt-get install protobuf-compiler) and protoc-gen-swift from swift-protobuf 1.39.0
# (build it once: swift build --product protoc-gen-swift in a checkout of swift-protobuf), either on PATH
# or named by PROTOC_GEN_SWIFT.
set -euo pipefail
cd "$(dirname "$0")/../Sources/LedgerCore/Codec"
plugin="${PROTOC_GEN_SWIFT:-$(command -v protoc-gen-swift)}"
protoc --plugin=protoc-gen-swift="$plugin" --swift_out=Visibility=Internal:. ledger_event.proto
echo "generated $(pwd)/ledger_event.pb.swift"
