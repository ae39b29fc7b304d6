// ledger-device: a small device client for TopicLedger — what an app does, from a terminal.
//
//   ledger-device register [--platform ios]          → prints the registration token the server issued
//   ledger-device subscribe TOKEN TOPIC...           → the device subscribes itself (via = client)
//   ledger-device poll TOKEN [--wait 5] [--ack]      → long poll: prints waiting messages as JSON lines
//   ledger-device stream TOKEN [--count N] [--ack]   → Server-Sent Events: prints messages as they arrive
//   ledger-device unregister TOKEN
//
// Common options: --server http://127.0.0.1:8080, --project demo-project, --key dev-client-key.
// The token is the device's secret: this sample prints it because a terminal is its only storage.

import ArgumentParser
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

struct Connection: ParsableArguments {
    @Option(help: "The server.") var server = "http://127.0.0.1:8080"
    @Option(help: "The project.") var project = "demo-project"
    @Option(help: "The project's client API key.") var key = "dev-client-key"

    func url(_ path: String) -> String { "\(server)/v1/projects/\(project)/registrations\(path)" }

    /// One JSON request with the client key; returns the JSON object, or fails with the server's message.
    func call(_ method: HTTPMethod, _ path: String, body: String? = nil) async throws -> [String: Any] {
        var request = HTTPClientRequest(url: url(path))
        request.method = method
        request.headers.add(name: "x-goog-api-key", value: key)
        if let body {
            request.headers.add(name: "content-type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: body))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(90))
        let bytes = try await response.body.collect(upTo: 1 << 24)
        let object = (try? JSONSerialization.jsonObject(with: Data(bytes.readableBytesView))) as? [String: Any] ?? [:]
        guard response.status == .ok else {
            let message = (object["error"] as? [String: Any])?["message"] as? String ?? String(buffer: bytes)
            throw ValidationError("\(response.status.code): \(message)")
        }
        return object
    }
}

/// Prints one delivery as a JSON line.
func show(_ delivery: [String: Any]) throws {
    let data = try JSONSerialization.data(withJSONObject: delivery, options: [.sortedKeys, .withoutEscapingSlashes])
    FileHandle.standardOutput.write(data + Data("\n".utf8))
}

@main
struct DeviceClient: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ledger-device",
        abstract: "A sample TopicLedger device: register, subscribe, receive, acknowledge.",
        subcommands: [Register.self, Subscribe.self, Poll.self, Stream.self, Unregister.self])

    struct Register: AsyncParsableCommand {
        @OptionGroup var connection: Connection
        @Option(help: "ios, android or web.") var platform = "ios"
        @Option(help: "The app's bundle id.") var appId = "com.example.app"

        func run() async throws {
            let reply = try await connection.call(.POST, "", body: #"{"platform":"\#(platform)","appId":"\#(appId)"}"#)
            print(reply["token"] as? String ?? "")
        }
    }

    struct Subscribe: AsyncParsableCommand {
        @OptionGroup var connection: Connection
        @Argument var token: String
        @Argument var topics: [String]

        func run() async throws {
            for topic in topics {
                do {
                    _ = try await connection.call(.POST, "/\(token)/topicSubscriptions?topicName=\(topic)", body: "{}")
                } catch let error as ValidationError where error.message.hasPrefix("409") {
                    // Already subscribed: what the SDK re-confirms on every app start.
                }
            }
        }
    }

    struct Poll: AsyncParsableCommand {
        @OptionGroup var connection: Connection
        @Argument var token: String
        @Option(help: "Seconds to wait for a message.") var wait = 0
        @Flag(help: "Acknowledge what was received.") var ack = false

        func run() async throws {
            let reply = try await connection.call(.GET, "/\(token)/messages?waitSeconds=\(wait)")
            let messages = reply["messages"] as? [[String: Any]] ?? []
            for message in messages { try show(message) }
            if ack, let last = messages.last?["cursor"] as? String {
                _ = try await connection.call(.POST, "/\(token)/messages:ack", body: #"{"through":"\#(last)"}"#)
            }
        }
    }

    struct Stream: AsyncParsableCommand {
        @OptionGroup var connection: Connection
        @Argument var token: String
        @Option(help: "Stop after this many messages (default: run until stopped).") var count: Int?
        @Flag(help: "Acknowledge each message once printed.") var ack = false

        func run() async throws {
            var request = HTTPClientRequest(url: connection.url("/\(token)/messages:stream"))
            request.headers.add(name: "x-goog-api-key", value: connection.key)
            let response = try await HTTPClient.shared.execute(request, timeout: .hours(24))
            guard response.status == .ok else { throw ValidationError("\(response.status.code): cannot stream") }
            var pending = ""
            var received = 0
            for try await buffer in response.body {
                pending += String(buffer: buffer)
                while let end = pending.range(of: "\n\n") {
                    let event = pending[..<end.lowerBound]
                    pending.removeSubrange(..<end.upperBound)
                    guard let line = event.split(separator: "\n").first(where: { $0.hasPrefix("data: ") }),
                        let delivery = try? JSONSerialization.jsonObject(with: Data(line.dropFirst(6).utf8))
                            as? [String: Any]
                    else { continue }
                    try show(delivery)
                    if ack, let cursor = delivery["cursor"] as? String {
                        _ = try await connection.call(
                            .POST, "/\(token)/messages:ack", body: #"{"through":"\#(cursor)"}"#)
                    }
                    received += 1
                    if let count, received >= count { return }
                }
            }
        }
    }

    struct Unregister: AsyncParsableCommand {
        @OptionGroup var connection: Connection
        @Argument var token: String

        func run() async throws { _ = try await connection.call(.DELETE, "/\(token)") }
    }
}
