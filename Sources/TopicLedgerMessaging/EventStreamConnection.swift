import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// One `GET …/messages:stream` connection as an `AsyncThrowingStream` of its body's chunks, bridged from a
/// `URLSessionDataDelegate` (`URLSession.bytes(for:)` does not exist in FoundationNetworking, and needs iOS 15
/// anyway). Opening it waits for the response head: a non-200 answer or a content type other than
/// `text/event-stream` is thrown as ``EventStreamConnection/Refusal``.
final class EventStreamConnection: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    // @unchecked: `head`, `errorBody` and `status` are only touched on the session's serial delegate queue.

    /// A stream the server (or something in between) would not open.
    struct Refusal: Error {
        let status: Int
        let contentType: String?
        let error: MessagingError
    }

    let chunks: AsyncThrowingStream<Data, any Error>
    private let continuation: AsyncThrowingStream<Data, any Error>.Continuation
    private var head: CheckedContinuation<Void, any Error>?
    private var status = 0
    private var contentType: String?
    private var retryAfter: String?
    private var errorBody = Data()
    private var session: URLSession?
    private let queue: OperationQueue

    private override init() {
        (chunks, continuation) = AsyncThrowingStream.makeStream()
        queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        super.init()
    }

    /// Connects and waits for the response head.
    static func open(_ request: URLRequest, configuration: URLSessionConfiguration) async throws
        -> EventStreamConnection
    {
        let connection = EventStreamConnection()
        let session = URLSession(configuration: configuration, delegate: connection, delegateQueue: connection.queue)
        connection.session = session
        let task = session.dataTask(with: request)
        connection.continuation.onTermination = { _ in
            task.cancel()
            session.invalidateAndCancel()
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (head: CheckedContinuation<Void, Error>) in
                connection.queue.addOperation {
                    connection.head = head
                    task.resume()
                }
            }
        } onCancel: {
            task.cancel()
        }
        return connection
    }

    /// Ends the connection.
    func close() {
        continuation.finish()
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        let http = response as? HTTPURLResponse
        status = http?.statusCode ?? 0
        contentType = http?.value(forHTTPHeaderField: "Content-Type")
        retryAfter = http?.value(forHTTPHeaderField: "Retry-After")
        if status == 200, contentType?.lowercased().hasPrefix("text/event-stream") == true {
            head?.resume()
            head = nil
        }
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        if head == nil {
            continuation.yield(data)
        } else if errorBody.count < 65_536 {
            errorBody.append(data)
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        if let head {
            self.head = nil
            if let error, status == 0 {
                head.resume(throwing: MessagingError.from(transport: error))
            } else {
                let mapped = MessagingError.from(status: status, body: errorBody, retryAfterHeader: retryAfter)
                head.resume(throwing: Refusal(status: status, contentType: contentType, error: mapped))
            }
        } else if let error {
            continuation.finish(throwing: MessagingError.from(transport: error))
        } else {
            continuation.finish()
        }
        session.finishTasksAndInvalidate()
    }
}
