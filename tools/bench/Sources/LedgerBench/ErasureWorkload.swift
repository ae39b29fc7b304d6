import Foundation
import LMDBKit
import LedgerCore
import LedgerStore

/// Erasure in a ledger of at least a million events: one device with 2,000 topics, then a batch of 1,000
/// devices, each against a compacting copy of the same ledger (`ledger backup`) — the part of an erasure that
/// grows with the ledger, measured alone. The one device's erasure also reads the whole log once.
struct ErasureWorkload {
    let instances: Int
    let events: Int
    let seed: UInt64
    let scratch: String

    func run() async throws -> [BenchResult] {
        let (directory, ledger) = try openScratchLedger(scratch: scratch, label: "erasure")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        defer { ledger.close() }
        var generator = SplitMix(seed: seed)
        let tokens = try (0..<instances).map {
            try RegistrationToken("era-\($0 &* 2_654_435_761 % 1_000_003):APA91b\($0)")
        }
        var request = 0
        func append(_ operations: [LedgerOperation]) async throws -> WriteReceipt {
            request += 1
            return try await ledger.append(
                WriteRequest(actor: "bench", requestID: "b\(request)", operations: operations))
        }
        for chunk in stride(from: 0, to: instances, by: 10_000) {
            _ = try await append(
                tokens[chunk..<min(chunk + 10_000, instances)].map { .register($0, platform: nil, appID: nil) })
        }
        // The device erased alone holds 2,000 topics; the batch's 1,000 devices 5 each.
        _ = try await append(try (0..<2000).map { .subscribe(tokens[0], try TopicName("own-\($0)"), via: .iid) })
        for device in 1...1000 {
            _ = try await append(
                try (0..<5).map { .subscribe(tokens[device], try TopicName("filler-\($0)"), via: .iid) })
        }
        let fillers = try (0..<1000).map { try TopicName("filler-\($0)") }
        var head = try ledger.readLog { try $0.head().seq }
        while head < UInt64(events) {
            let operations: [LedgerOperation] = (0..<10_000).map { _ in
                let token = tokens[Int.random(in: 1001..<instances, using: &generator)]
                let topic = fillers[Int.random(in: 0..<1000, using: &generator)]
                return Bool.random(using: &generator)
                    ? .subscribe(token, topic, via: .iid) : .unsubscribe(token, topic, via: .v1)
            }
            _ = try await append(operations)
            head = try ledger.readLog { try $0.head().seq }
        }
        let bytes = ledger.environment.usedBytes

        let copies = LedgerBench.scratchDirectory(in: scratch, label: "erasure-copy")
        defer { try? FileManager.default.removeItem(atPath: copies) }
        let copyStart = ContinuousClock.now
        try ledger.backup(to: copies)
        let copySeconds = (ContinuousClock.now - copyStart).seconds

        let oneStart = ContinuousClock.now
        let one = try await append([.erase(tokens[0], reason: "bench")])
        let oneSeconds = (ContinuousClock.now - oneStart).seconds
        guard let oneSeq = one.outcomes[0].seq,
            case .erased(let erasure)? = try ledger.read({ try $0.event(at: oneSeq) })?.body
        else { throw BenchError("the erasure was refused") }

        let batchStart = ContinuousClock.now
        let batch = try await append(tokens[1...1000].map { .erase($0, reason: "bench") })
        let batchSeconds = (ContinuousClock.now - batchStart).seconds
        guard batch.outcomes.allSatisfy({ $0.seq != nil }) else { throw BenchError("a batch erasure was refused") }

        let size = "\(head)-event ledger, \(bytes >> 20) MiB"
        return [
            BenchResult(
                name: "erase one device with 2,000 topics, \(size)", unit: "ms", value: oneSeconds * 1000,
                baselineName: "compacting copy of the same ledger (`ledger backup`)", baseline: copySeconds * 1000,
                notes: "\(erasure.redactedEvents) events rewritten; one pass over the log, then the file compacted"),
            BenchResult(
                name: "erase 1,000 devices in one batch, \(size)", unit: "ms", value: batchSeconds * 1000,
                baselineName: "erase one device, same ledger", baseline: oneSeconds * 1000,
                notes: "one pass over the log and one compaction for the batch"),
        ]
    }
}
