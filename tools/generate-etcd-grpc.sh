#!/usr/bin/env bash
# Regenerates Sources/EtcdAPI/*.pb.swift and *.grpc.swift: the protobuf messages and gRPC clients of etcd's v3
# API (KV, Watch, Lease, Cluster, Maintenance) from the .proto files Debian ships for etcd 3.4.
#
# Needs (apt-get install golang-etcd-server-dev protobuf-compiler) and two protoc plugins, either on PATH or
# named by PROTOC_GEN_SWIFT and PROTOC_GEN_GRPC_SWIFT:
#   protoc-gen-swift         from swift-protobuf 1.39.0
#   protoc-gen-grpc-swift-2  from grpc-swift-protobuf 2.4.1
# Build both once in a checkout of grpc-swift-protobuf 2.4.1:
#   swift build -c release --product protoc-gen-grpc-swift-2 && swift build -c release --product protoc-gen-swift
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/Sources/EtcdAPI"
gocode=/usr/share/gocode/src
for file in "$gocode/go.etcd.io/etcd/etcdserver/etcdserverpb/rpc.proto" \
    "$gocode/github.com/gogo/protobuf/gogoproto/gogo.proto"; do
    [ -f "$file" ] || { echo "missing $file: apt-get install -y golang-etcd-server-dev protobuf-compiler" >&2; exit 1; }
done
swift_plugin="${PROTOC_GEN_SWIFT:-$(command -v protoc-gen-swift)}"
grpc_plugin="${PROTOC_GEN_GRPC_SWIFT:-$(command -v protoc-gen-grpc-swift-2)}"

# etcd's files import each other as "etcd/…"; gogoproto and the HTTP annotations are options only, which the
# Swift code does not use, but protoc must read them.
include="$(mktemp -d)"
trap 'rm -rf "$include"' EXIT
ln -s "$gocode/go.etcd.io/etcd" "$include/etcd"
mkdir -p "$include/gogoproto" "$include/google/api"
ln -s "$gocode/github.com/gogo/protobuf/gogoproto/gogo.proto" "$include/gogoproto/gogo.proto"
annotations="$gocode/github.com/grpc-ecosystem/grpc-gateway/third_party/googleapis/google/api"
ln -s "$annotations/annotations.proto" "$include/google/api/annotations.proto"
ln -s "$annotations/http.proto" "$include/google/api/http.proto"

protos=(etcd/mvcc/mvccpb/kv.proto etcd/auth/authpb/auth.proto etcd/etcdserver/etcdserverpb/rpc.proto)
rm -f "$out"/*.pb.swift "$out"/*.grpc.swift
protoc -I "$include" -I /usr/include --plugin=protoc-gen-swift="$swift_plugin" \
    --swift_opt=Visibility=Public --swift_opt=FileNaming=DropPath --swift_out="$out" "${protos[@]}"
protoc -I "$include" -I /usr/include --plugin=protoc-gen-grpc-swift="$grpc_plugin" \
    --grpc-swift_opt=Visibility=Public,Server=false,Client=true,FileNaming=DropPath --grpc-swift_out="$out" \
    etcd/etcdserver/etcdserverpb/rpc.proto
echo "generated into $out:"
ls "$out"
