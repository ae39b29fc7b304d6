import Logging
import Synchronization
import Testing

@testable import LedgerServer

/// ``DeferredMetadataLogHandler`` writes the lines `StreamLogHandler` writes for the same calls.
@Suite struct DeferredMetadataLogHandlerTests {
    /// Collects what a stream handler writes.
    final class Lines: Sendable {
        let text = Mutex("")
        struct Stream: TextOutputStream, Sendable {
            let lines: Lines
            mutating func write(_ string: String) { lines.text.withLock { $0 += string } }
        }
        /// The lines, each without its timestamp (the first word).
        var withoutTimestamps: [String] {
            text.withLock { $0 }.split(separator: "\n").map {
                $0.split(separator: " ", maxSplits: 1).last.map(String.init) ?? ""
            }
        }
    }

    /// What a request's logger goes through: base metadata, a per-request key, messages with their own
    /// metadata (one overriding a key), an error, and a message under the level.
    static func exercise(_ base: Logger) {
        var logger = base
        logger.logLevel = .info
        logger[metadataKey: "ledger.project"] = "demo-project"
        var request = logger
        request[metadataKey: "hb.request.id"] = "0123abcd"
        request.info("plain")
        request.notice("with its own", metadata: ["route": "/v1/x", "hb.request.id": "overridden"])
        request.debug("under the level")
        request.error("failed", metadata: ["error.code": "UNAVAILABLE"])
        request[metadataKey: "ledger.project"] = nil
        request.warning("one key removed")
        logger.info("the base logger", metadata: ["n": .stringConvertible(42)])
        logger.info("the base logger again")
    }

    @Test func linesMatchTheStreamHandlers() {
        let stream = Lines()
        let deferred = Lines()
        Self.exercise(Logger(label: "ledger") { StreamLogHandler(label: $0, stream: Lines.Stream(lines: stream)) })
        Self.exercise(
            Logger(label: "ledger") {
                DeferredMetadataLogHandler(wrapping: StreamLogHandler(label: $0, stream: Lines.Stream(lines: deferred)))
            })
        #expect(stream.withoutTimestamps.count == 6)
        #expect(deferred.withoutTimestamps == stream.withoutTimestamps)
        #expect(
            deferred.withoutTimestamps.first
                == "info ledger: hb.request.id=0123abcd ledger.project=demo-project [LedgerServerTests] plain")
    }
}
