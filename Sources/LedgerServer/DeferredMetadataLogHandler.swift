import Logging

/// A log handler that keeps its logger's metadata as set and formats it only when a message is logged.
///
/// Hummingbird gives every request a logger with its own `hb.request.id`, and swift-log's
/// `StreamLogHandler` formats its whole metadata (sorted, each value described) whenever metadata is set —
/// for every request, though the server logs for almost none: 5 % of the request pool's samples under
/// per-token subscribe. This handler stores the metadata and passes it, under each message's own, to the
/// handler it wraps (whose own metadata stays empty), so a line reads as the wrapped handler would have
/// written it.
///
/// - Note: The logger's metadata takes precedence over a metadata provider's values here (the wrapped
///   handler sees it as the message's, and `StreamLogHandler` lets a provider override a logger's own
///   metadata but not a message's); `ledger serve` installs no provider.
public struct DeferredMetadataLogHandler<Wrapped: LogHandler>: LogHandler {
    private var wrapped: Wrapped
    public var metadata: Logger.Metadata = [:]

    public init(wrapping wrapped: Wrapped) {
        self.wrapped = wrapped
        self.metadata = wrapped.metadata
        self.wrapped.metadata = [:]
    }

    public var logLevel: Logger.Level {
        get { wrapped.logLevel }
        set { wrapped.logLevel = newValue }
    }

    public var metadataProvider: Logger.MetadataProvider? {
        get { wrapped.metadataProvider }
        set { wrapped.metadataProvider = newValue }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var event = event
        if !metadata.isEmpty {
            event.metadata = metadata.merging(event.metadata ?? [:]) { _, message in message }
        }
        wrapped.log(event: event)
    }
}
