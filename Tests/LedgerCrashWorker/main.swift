// A child process for the crash-safety tests: appends with group commit from many concurrent writers
// (subscriptions and sends, whose audiences the ledger records in the background) and prints
// `ack <requestId> <seq,seq,…>` for every request the ledger acknowledged, until it is killed.
//
// Usage: LedgerCrashWorker DATA_DIR WRITERS

import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// Writes a whole line with one write(2), so lines from concurrent writers never interleave.
func emit(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    _ = bytes.withUnsafeBytes { write(STDOUT_FILENO, $0.baseAddress, $0.count) }
}

let arguments = CommandLine.arguments
guard arguments.count == 3, let writers = Int(arguments[2]) else {
    FileHandle.standardError.write(Data("usage: LedgerCrashWorker DATA_DIR WRITERS\n".utf8))
    exit(64)
}
let ledger = try Ledger.open(dataDirectory: arguments[1], project: .default, logger: quietLogger)
let tokens = try (0..<writers).map { try RegistrationToken("crash-writer-\($0)") }
_ = try await ledger.append(
    WriteRequest(
        actor: "crash", requestID: "register-\(getpid())",
        operations: tokens.map { .register($0, platform: nil, appID: nil) }))
emit("ready")

try await withThrowingTaskGroup(of: Void.self) { group in
    for (index, token) in tokens.enumerated() {
        group.addTask {
            var generator = SeededGenerator(seed: UInt64(getpid()) << 16 | UInt64(index))
            var round = 0
            while true {
                round += 1
                var operations: [LedgerOperation] = try (0..<Int.random(in: 1...3, using: &generator)).map { _ in
                    let topic = try TopicName("topic-\(Int.random(in: 0..<8, using: &generator))")
                    return Bool.random(using: &generator)
                        ? .subscribe(token, topic, via: .iid) : .unsubscribe(token, topic, via: .v1)
                }
                // Some sends too, so that kills also land between a send and its audience event.
                if Int.random(in: 0..<4, using: &generator) == 0 {
                    let topic = try TopicName("topic-\(Int.random(in: 0..<8, using: &generator))")
                    operations.append(.send(.topic(topic), precedence: .leftToRight, messageJSON: Array("{}".utf8)))
                }
                let requestID = "w\(index)-\(getpid())-\(round)"
                let receipt = try await ledger.append(
                    WriteRequest(actor: "crash", requestID: requestID, operations: operations))
                emit(
                    "ack \(requestID) " + receipt.outcomes.compactMap { $0.seq.map(String.init) }.joined(separator: ",")
                )
            }
        }
    }
    try await group.waitForAll()
}
