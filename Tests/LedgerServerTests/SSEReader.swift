import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A Server-Sent Events connection over a plain socket, for tests: sends one GET, decodes the chunked
/// response as it arrives and hands out `message` events. Also a request on its own connection that a
/// test can wait on while it makes others (a long poll). (The router test client collects whole bodies, and a
/// stream never ends on its own.)
final class SSEReader: @unchecked Sendable {
    // @unchecked: used by one test at a time, one read at a time.
    struct Event: Equatable {
        let id: String
        let data: String
    }

    private let socket: Int32
    private var buffer: [UInt8] = []
    private var body: [UInt8] = []
    private var headersDone = false
    private(set) var status = 0
    /// The server ended the response (its last chunk came, or the connection closed).
    private(set) var ended = false

    init(port: Int, path: String, headers: [String: String]) throws {
        socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else { throw POSIXError(.ECONNREFUSED) }
        var request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
        for (name, value) in headers { request += "\(name): \(value)\r\n" }
        request += "\r\n"
        _ = Array(request.utf8).withUnsafeBytes { send(socket, $0.baseAddress, $0.count, 0) }
    }

    deinit { close(socket) }

    /// Reads until `count` message events arrived or `timeout` seconds passed; returns those seen so far.
    /// The blocking reads run on a dispatch thread, never on the cooperative pool the server's handlers need.
    func events(count: Int, timeout: Double) async -> [Event] {
        await read(timeout: timeout) { $0.parsedEvents().count >= count }
        return parsedEvents()
    }

    /// Reads until the server ends the response or `timeout` seconds passed; whether it ended.
    func end(timeout: Double) async -> Bool {
        await read(timeout: timeout) { _ in false }
        return ended
    }

    /// Reads until the response's head has come (any response, not only a stream) or `timeout` seconds
    /// passed; its status (0: none yet).
    func responseStatus(timeout: Double) async -> Int {
        await read(timeout: timeout) { $0.headersDone }
        return status
    }

    private func read(timeout: Double, until done: @escaping @Sendable (SSEReader) -> Bool) async {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                self.readBlocking(timeout: timeout, until: done)
                continuation.resume()
            }
        }
    }

    private func readBlocking(timeout: Double, until done: (SSEReader) -> Bool) {
        let deadline = Date().addingTimeInterval(timeout)
        while !done(self), !ended, Date() < deadline {
            var descriptor = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
            let remaining = Int32(max(1, deadline.timeIntervalSinceNow * 1000))
            // Other tests' child processes send this process SIGCHLD: an interrupted call is retried.
            let ready = poll(&descriptor, 1, remaining)
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { break }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let read = recv(socket, &chunk, chunk.count, 0)
            if read < 0 && errno == EINTR { continue }
            guard read > 0 else {
                ended = true
                break
            }
            buffer += chunk[..<read]
            decode()
        }
    }

    /// The response headers and chunked body so far, decoded into `body`.
    private func decode() {
        if !headersDone {
            guard let end = find([13, 10, 13, 10], in: buffer) else { return }
            let head = String(decoding: buffer[..<end], as: UTF8.self)
            status = Int(head.split(separator: " ").dropFirst().first ?? "") ?? 0
            buffer.removeFirst(end + 4)
            headersDone = true
        }
        while let lineEnd = find([13, 10], in: buffer),
            let size = Int(String(decoding: buffer[..<lineEnd], as: UTF8.self), radix: 16),
            buffer.count >= lineEnd + 2 + size + 2
        {
            body += buffer[(lineEnd + 2)..<(lineEnd + 2 + size)]
            buffer.removeFirst(lineEnd + 2 + size + 2)
            if size == 0 { ended = true }
        }
    }

    private func parsedEvents() -> [Event] {
        String(decoding: body, as: UTF8.self).components(separatedBy: "\n\n").compactMap { block in
            var id: String?
            var data: String?
            var isMessage = false
            for line in block.split(separator: "\n") {
                if line.hasPrefix("id: ") { id = String(line.dropFirst(4)) }
                if line.hasPrefix("data: ") { data = String(line.dropFirst(6)) }
                if line == "event: message" { isMessage = true }
            }
            guard isMessage, let id, let data else { return nil }
            return Event(id: id, data: data)
        }
    }

    private func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for index in 0...(haystack.count - needle.count)
        where haystack[index..<index + needle.count].elementsEqual(needle) {
            return index
        }
        return nil
    }
}
