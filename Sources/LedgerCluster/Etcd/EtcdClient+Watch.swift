import AsyncAlgorithms
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

/// One response of a watch: its events, and the revision they bring the watcher to.
public struct WatchResponse: Sendable {
    public var events: [Mvccpb_Event]
    public var revision: Int64
}

/// A watch's responses, in order, as an `AsyncSequence`: iterate it, and the watch lasts as long as the
/// iteration does. Leaving the loop (or cancelling the iterating task) ends the watch; its errors are thrown
/// from the loop.
///
/// Back-pressured: the gRPC stream is read only as fast as the loop takes responses (an `AsyncThrowingChannel`
/// hands each one over), so a replica that applies slowly holds etcd's stream rather than a growing buffer.
public struct EtcdWatch: AsyncSequence, Sendable {
    public typealias Element = WatchResponse

    let start: @Sendable (AsyncThrowingChannel<WatchResponse, any Error>) async -> Void

    public struct AsyncIterator: AsyncIteratorProtocol {
        /// Ends the watch when the last copy of the iterator goes.
        fileprivate final class Watch: Sendable {
            let channel = AsyncThrowingChannel<WatchResponse, any Error>()
            let task: Task<Void, Never>

            init(start: @escaping @Sendable (AsyncThrowingChannel<WatchResponse, any Error>) async -> Void) {
                let channel = self.channel
                task = Task { await start(channel) }
            }

            deinit { task.cancel() }
        }

        fileprivate let watch: Watch
        fileprivate var responses: AsyncThrowingChannel<WatchResponse, any Error>.AsyncIterator

        public mutating func next() async throws -> WatchResponse? { try await responses.next() }
    }

    public func makeAsyncIterator() -> AsyncIterator {
        let watch = AsyncIterator.Watch(start: start)
        return AsyncIterator(watch: watch, responses: watch.channel.makeAsyncIterator())
    }
}

extension EtcdClient {
    /// Watches every key under `prefix` from `revision`: each response with its events and the revision they
    /// bring the watcher to, until the loop over it ends or the watch fails.
    ///
    /// The watch asks its member to have a leader (etcd's `WithRequireLeader`): a member cut off from the
    /// others ends it instead of going quiet. It asks for progress notifications too, so a quiet prefix
    /// still advances the revision.
    ///
    /// The loop throws ``WatchCompacted`` when `revision` is compacted; ``EtcdError`` or the gRPC error when
    /// the member fails (the caller watches again, on whichever member answers).
    public func watch(prefix: String, fromRevision revision: Int64) -> EtcdWatch {
        watch(Data(prefix.utf8), rangeEnd: Data(Self.prefixEnd(prefix)), fromRevision: revision)
    }

    /// Watches the one key `key` from `revision`, as ``watch(prefix:fromRevision:)`` watches a prefix (a key's
    /// prefix would also match every longer key that begins with it).
    public func watch(key: String, fromRevision revision: Int64) -> EtcdWatch {
        watch(Data(key.utf8), rangeEnd: Data(), fromRevision: revision)
    }

    private func watch(_ key: Data, rangeEnd: Data, fromRevision revision: Int64) -> EtcdWatch {
        var create = Etcdserverpb_WatchCreateRequest()
        create.key = key
        create.rangeEnd = rangeEnd
        create.startRevision = revision
        create.progressNotify = true
        let request = Etcdserverpb_WatchRequest.with { $0.createRequest = create }
        return EtcdWatch { [self] channel in
            do {
                try await withWatchMember { grpc, options in
                    // The request stream stays open until the responses end: closing it would end the watch.
                    let (ended, end) = AsyncStream<Never>.makeStream()
                    try await Etcdserverpb_Watch.Client(wrapping: grpc).watch(
                        metadata: ["hasleader": "true"], options: options
                    ) { writer in
                        try await writer.write(request)
                        for await _ in ended {}
                    } onResponse: { response in
                        defer { end.finish() }
                        for try await message in response.messages {
                            if message.compactRevision > 0 {
                                throw WatchCompacted(compactRevision: message.compactRevision)
                            }
                            if message.canceled {
                                throw EtcdError("etcd cancelled a watch: \(message.cancelReason)")
                            }
                            if message.created && message.events.isEmpty { continue }
                            await channel.send(WatchResponse(events: message.events, revision: message.header.revision))
                            // The loop over the watch has ended.
                            if Task.isCancelled { return }
                        }
                        throw EtcdError("etcd ended a watch")
                    }
                }
                channel.finish()
            } catch {
                channel.fail(error)
            }
        }
    }
}
