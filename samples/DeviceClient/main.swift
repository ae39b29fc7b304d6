// ledger-device: a device from a terminal, built on TopicLedgerMessaging — what an app does with the library.
//
//   ledger-device register [--platform ios]       → registers (once) and prints the device's token
//   ledger-device subscribe TOPIC...              → subscribes the device (retried until the server has it)
//   ledger-device unsubscribe TOPIC...
//   ledger-device poll [--wait 5] [--ack]         → prints what is waiting, as JSON lines
//   ledger-device stream [--count N] [--ack]      → prints messages as they arrive (Server-Sent Events)
//   ledger-device unregister
//
// A device is its store file (`--store`, default ./ledger-device.json): its token, its topics and its pending
// topic operations, as an app keeps them. Common options: --server, --project, --key.
// The token is the device's secret: this sample prints it because a terminal is its only screen.

import ArgumentParser
import Foundation
import TopicLedgerMessaging

struct Device: ParsableArguments {
    @Option(help: "The server.") var server = "http://127.0.0.1:8080"
    @Option(help: "The project.") var project = "demo-project"
    @Option(help: "The project's client API key.") var key = "dev-client-key"
    @Option(help: "The device's store file: its token, topics and pending operations.")
    var store = "ledger-device.json"

    func validate() throws {
        guard let url = URL(string: server), url.scheme == "http" || url.scheme == "https", url.host != nil else {
            throw ValidationError("--server must be an http or https URL, not \"\(server)\"")
        }
    }

    func messaging(platform: MessagingConfiguration.Platform = .ios, appID: String? = nil) throws -> Messaging {
        let configuration = MessagingConfiguration(
            serverURL: URL(string: server)!, projectID: project, apiKey: key, platform: platform,
            appID: appID ?? "com.example.ledger-device", storeURL: URL(fileURLWithPath: store),
            callbackQueue: DispatchQueue(label: "ledger-device"))
        return try Failure.exiting { try Messaging(configuration: configuration) }
    }
}

/// Exit statuses from sysexits.h, so scripts can tell a refused request from a server that is away.
enum Failure {
    static func exitCode(for error: MessagingError) -> Int32 {
        switch error {
        case .invalidTopicName, .invalidArgument, .tooManyTopics: 65  // EX_DATAERR
        case .unregistered: 67  // EX_NOUSER
        case .authentication: 77  // EX_NOPERM
        case .quotaExceeded, .unavailable, .network, .closed: 69  // EX_UNAVAILABLE
        case .store: 74  // EX_IOERR
        case .internalError, .unexpectedResponse: 76  // EX_PROTOCOL
        }
    }

    /// Runs `body`; a `MessagingError` becomes a message on stderr and its exit status.
    static func exiting<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as MessagingError {
            FileHandle.standardError.write(Data("ledger-device: \(error)\n".utf8))
            throw ExitCode(exitCode(for: error))
        }
    }

    static func exiting<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as MessagingError {
            FileHandle.standardError.write(Data("ledger-device: \(error)\n".utf8))
            throw ExitCode(exitCode(for: error))
        }
    }
}

/// One message as a JSON line: the server's delivery (`cursor`, `messageId`, `payload`, …).
func show(_ message: RemoteMessage) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    FileHandle.standardOutput.write(try encoder.encode(message) + Data("\n".utf8))
}

/// Waits for `operation`, at most `timeout` seconds; past that the operation stays in the store and the next
/// run of any command sends it.
func finish(within timeout: Double, _ what: String, _ operation: @escaping @Sendable () async throws -> Void)
    async throws
{
    try await withThrowingTaskGroup(of: Bool.self) { group in
        group.addTask {
            try await operation()
            return true
        }
        group.addTask {
            try await Task.sleep(for: .seconds(timeout))
            return false
        }
        let done = try await group.next()!
        group.cancelAll()
        if !done {
            FileHandle.standardError.write(
                Data("ledger-device: \(what) is still pending after \(Int(timeout)) s; the next run retries it\n".utf8))
            throw ExitCode(69)
        }
    }
}

/// One topic operation per topic, in order, each waited for at most `timeout` seconds.
func change(
    _ topics: [String], on device: Device, within timeout: Double, _ doing: String,
    _ operation: @escaping @Sendable (Messaging, String) async throws -> Void
) async throws {
    let messaging = try device.messaging()
    for topic in topics {
        try await Failure.exiting {
            try await finish(within: timeout, "\(doing) \(topic)") { try await operation(messaging, topic) }
        }
    }
}

@main
struct DeviceClient: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ledger-device",
        abstract: "A TopicLedger device on the TopicLedgerMessaging library: register, subscribe, receive.",
        discussion: """
            A device is its store file (--store): its registration token, its topics and the topic operations \
            the server has not confirmed yet. Exit status: 0 done; 64 usage; 65 refused input (a bad topic \
            name, too many topics); 67 not registered; 69 the server is unavailable (operations stay pending \
            and the next run retries them); 74 the store cannot be read or written; 76 an answer that is not \
            the server's; 77 a wrong key or project.
            """,
        subcommands: [
            Register.self, Subscribe.self, Unsubscribe.self, Poll.self, Stream.self, Unregister.self,
        ])

    struct Register: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Register the device (once per store) and print its registration token.")
        @OptionGroup var device: Device
        @Option(help: "ios, android or web: the payload shape the device receives.")
        var platform: MessagingConfiguration.Platform = .ios
        @Option(help: "The app's bundle id.") var appId = "com.example.app"
        @Option(help: "The device's APNs token (hex), as didRegisterForRemoteNotificationsWithDeviceToken gives it.")
        var apnsToken: String?
        @Flag(help: "The APNs token is a development build's (pushed through APNs' sandbox).") var apnsSandbox = false
        @Option(help: "Seconds to wait for the server to take the APNs token before leaving it pending.")
        var timeout = 30.0

        func validate() throws {
            if let apnsToken,
                apnsToken.count % 2 != 0 || apnsToken.isEmpty
                    || !apnsToken.allSatisfy({ $0.isHexDigit })
            {
                throw ValidationError("--apns-token is hex digits, an even number of them")
            }
        }

        func run() async throws {
            let messaging = try device.messaging(platform: platform, appID: appId)
            print(try await Failure.exiting { try await messaging.token() })
            guard let apnsToken else { return }
            let bytes = Data(
                stride(from: 0, to: apnsToken.count, by: 2).map { offset in
                    let start = apnsToken.index(apnsToken.startIndex, offsetBy: offset)
                    return UInt8(apnsToken[start..<apnsToken.index(start, offsetBy: 2)], radix: 16)!
                })
            messaging.setAPNSToken(bytes, type: apnsSandbox ? .sandbox : .prod)
            let deadline = Date().addingTimeInterval(timeout)
            while messaging.isAPNSTokenPending {
                guard Date() < deadline else {
                    FileHandle.standardError.write(
                        Data("ledger-device: the APNs token is not on the server yet; the next run sends it\n".utf8))
                    throw ExitCode(69)
                }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
    }

    struct Subscribe: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Subscribe the device to topics (registering it first if it has no token).")
        @OptionGroup var device: Device
        @Argument(help: "Topic names ([a-zA-Z0-9-_.~%], a leading /topics/ accepted).") var topics: [String]
        @Option(help: "Seconds to wait for the server before leaving the rest pending.") var timeout = 30.0

        func run() async throws {
            try await change(topics, on: device, within: timeout, "subscribing to") {
                try await $0.subscribe(toTopic: $1)
            }
        }
    }

    struct Unsubscribe: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Unsubscribe the device from topics.")
        @OptionGroup var device: Device
        @Argument(help: "Topic names.") var topics: [String]
        @Option(help: "Seconds to wait for the server before leaving the rest pending.") var timeout = 30.0

        func run() async throws {
            try await change(topics, on: device, within: timeout, "unsubscribing from") {
                try await $0.unsubscribe(fromTopic: $1)
            }
        }
    }

    struct Poll: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the messages waiting for the device as JSON lines (one long poll).")
        @OptionGroup var device: Device
        @Option(help: "Seconds to wait for a message (0–60).") var wait = 0
        @Flag(help: "Acknowledge what was printed: it is not delivered again.") var ack = false

        func validate() throws {
            guard (0...60).contains(wait) else { throw ValidationError("--wait must be 0 to 60 seconds") }
        }

        func run() async throws {
            let messaging = try device.messaging()
            try await Failure.exiting {
                let messages = try await messaging.fetchMessages(waitSeconds: wait)
                for message in messages { try show(message) }
                if ack, let last = messages.last { try await messaging.acknowledge(last) }
            }
        }
    }

    struct Stream: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print messages as they arrive (Server-Sent Events, else long poll), as JSON lines.")
        @OptionGroup var device: Device
        @Option(help: "Stop after this many messages (default: run until stopped).") var count: Int?
        @Flag(help: "Acknowledge each message once printed.") var ack = false

        func validate() throws {
            if let count, count < 1 { throw ValidationError("--count must be 1 or more") }
        }

        func run() async throws {
            let messaging = try device.messaging()
            try await Failure.exiting {
                var received = 0
                for try await message in messaging.messages(acknowledgement: .manual) {
                    try show(message)
                    if ack { try await messaging.acknowledge(message) }
                    received += 1
                    if let count, received >= count { return }
                }
            }
        }
    }

    struct Unregister: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete the device's registration on the server and forget its token and topics.")
        @OptionGroup var device: Device

        func run() async throws {
            let messaging = try device.messaging()
            try await Failure.exiting { try await messaging.deleteToken() }
        }
    }
}

extension MessagingConfiguration.Platform: ExpressibleByArgument {}
