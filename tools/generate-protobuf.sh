#!/usr/bin/env bash
# Regenerates Sources/LedgerCore/Codec/ledger_event.pb.swift from ledger_event.proto, and
# Sources/LedgerCluster/Wire/replication_block.pb.swift from replication_block.proto.
# Needs protoc (apt-get install protobuf-compiler) and protoc-gen-swift from swift-protobuf 1.39.0
# (build it once: swift build --product protoc-gen-swift in a checkout of swift-protobuf), either on PATH
# or named by PROTOC_GEN_SWIFT.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
plugin="${PROTOC_GEN_SWIFT:-$(command -v protoc-gen-swift)}"
for proto in Sources/LedgerCore/Codec/ledger_event.proto Sources/LedgerCluster/Wire/replication_block.proto; do
    (cd "$root/$(dirname "$proto")" && protoc --plugin=protoc-gen-swift="$plugin" --swift_out=Visibility=Internal:. \
        "$(basename "$proto")")
    echo "generated $root/${proto%.proto}.pb.swift"
done
