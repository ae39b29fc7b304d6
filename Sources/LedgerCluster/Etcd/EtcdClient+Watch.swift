import EtcdAPI
import Foundation
import GRPCCore
import SwiftProtobuf

/// A watch ended because the revision it was to start from has been compacted away: its events are gone,
/// and the watcher must read the current state again and watch from there.
public struct WatchCompacted: Error, Sendable, CustomStringConvertible {
    public let compactRevision: Int64
    public var description: String { "the watched revision was compacted (through \(compactRevision))" }
}

extension EtcdClient {
    /// Watches every key under `prefix` from `revision`, handing each batch of events (with the revision
    /// they bring the watcher to) to `handle`, until `handle` returns `false`, the task is cancelled, or the
    /// watch fails.
    ///
    /// The watch asks its member to have a leader (etcd's `WithRequireLeader`): a member cut off from the
    /// others ends it instead of going quiet. It asks for progress notifications too, so a quiet prefix
    /// still advances the revision.
    ///
    /// - Throws: ``WatchCompacted`` when `revision` is compacted; ``EtcdError`` or the gRPC error when the
    ///   member fails (the caller watches again, on whichever member answers).
    public func watch(
        prefix: String, fromRevision revision: Int64,
        _ handle: @escaping @Sendable ([Mvccpb_Event], Int64) async throws -> Bool
    ) async throws {
        var create = Etcdserverpb_WatchCreateRequest()
        create.key = Data(prefix.utf8)
        create.rangeEnd = Data(Self.prefixEnd(prefix))
        create.startRevision = revision
        create.progressNotify = true
        let request = Etcdserverpb_WatchRequest.with { $0.createRequest = create }
        try await withWatchMember { grpc, options in
            try await Etcdserverpb_Watch.Client(wrapping: grpc).watch(
                metadata: ["hasleader": "true"], options: options
            ) { writer in
                try await writer.write(request)
                // Keep the request stream open for as long as the watch lasts.
                try await Task.sleep(for: .seconds(1 << 40))
            } onResponse: { response in
                for try await message in response.messages {
                    if message.compactRevision > 0 {
                        throw WatchCompacted(compactRevision: message.compactRevision)
                    }
                    if message.canceled {
                        throw EtcdError("etcd cancelled a watch: \(message.cancelReason)")
                    }
                    if message.created && message.events.isEmpty { continue }
                    guard try await handle(message.events, message.header.revision) else { return }
                }
                throw EtcdError("etcd ended a watch")
            }
        }
    }
}
