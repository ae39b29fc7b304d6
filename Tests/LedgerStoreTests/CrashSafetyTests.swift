import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import Testing
import LedgerQueries

#if canImport(Glibc)
    import Glibc
#endif

@Suite("Crash safety", .serialized, .offThePool)
struct CrashSafetyTests {
    @Test("SIGKILL at random moments loses no acknowledged event and leaves a sound ledger (24 rounds)")
    func killNine() async throws {
        let directory = TemporaryDirectory("ledger-crash")
        defer { directory.remove() }
        var generator = SeededGenerator(seed: UInt64(Date().timeIntervalSince1970))
        var acknowledged: [UInt64: String] = [:]
        for round in 1...24 {
            let delay = UInt32.random(in: 0...150_000, using: &generator)
            let (text, reason) = try await onThreadOfItsOwn { [path = directory.path] in
                try Self.runWorkerUntilKilled(directory: path, delay: delay)
            }
            #expect(reason == .uncaughtSignal, "round \(round): the worker exited by itself")

            var acksThisRound = 0
            var lines = text.split(separator: "\n", omittingEmptySubsequences: false)
            // A line cut by the kill (no newline yet) is not an acknowledgement anyone saw in full.
            lines.removeLast()
            for line in lines where line.hasPrefix("ack ") {
                // `ack <requestId> <seq,…>`; a request whose operations all changed nothing (unsubscribing
                // from topics it does not hold) is acknowledged with no seqs.
                let parts = line.split(separator: " ")
                guard parts.count == 2 || parts.count == 3 else { continue }
                for seq in parts.dropFirst(2).first?.split(separator: ",").compactMap({ UInt64($0) }) ?? [] {
                    acknowledged[seq] = String(parts[1])
                }
                acksThisRound += 1
            }
            #expect(acksThisRound > 0, "round \(round): nothing was acknowledged before the kill")

            let ledger = try openTestLedger(directory, mode: .readOnly)
            let head = try ledger.readLog { try $0.head() }
            try ledger.readLog { snapshot throws in
                for (seq, requestID) in acknowledged {
                    let event = try snapshot.event(at: seq)
                    #expect(event?.requestID == requestID, "round \(round): acknowledged seq \(seq) lost or changed")
                }
            }
            #expect(acknowledged.keys.max() ?? 0 <= head.seq)
            let report = try ledger.verify()
            #expect(report.isSound, "round \(round): \(report.problems)")
            if !report.isSound { return }
        }
        #expect(acknowledged.count > 100)

        // Kills landed between sends and their audiences: the next writer records what is missing, and every
        // send ends with exactly one audience that matches a replay.
        let ledger = try openTestLedger(directory)
        ledger.waitForAudiences()
        var sends: Set<UInt64> = []
        var audiences: [UInt64: Int] = [:]
        try ledger.readLog { snapshot in
            try snapshot.forEachEvent { event, _ in
                switch event.body {
                case .sent(let sent): sends.insert(sent.messageID)
                case .audience(let audience): audiences[audience.messageID, default: 0] += 1
                default: break
                }
                return true
            }
        }
        #expect(!sends.isEmpty)
        #expect(Set(audiences.keys) == sends)
        #expect(audiences.values.allSatisfy { $0 == 1 })
        let report = try ledger.verify(checkAudiences: true)
        #expect(report.isSound, "\(report.problems)")
        #expect(report.sendsWithoutAudience == 0 && report.audiencesChecked == sends.count)
        ledger.close()
    }

    /// Runs the crash worker on `directory`, reads its acknowledgements until its writers run, kills it
    /// `delay` µs later, and returns what it printed and how it ended (blocking: called on a thread of its
    /// own, see ``onThreadOfItsOwn(_:)``).
    static func runWorkerUntilKilled(directory: String, delay: UInt32) throws -> (String, Process.TerminationReason) {
        let worker = Process()
        worker.executableURL = builtProductsDirectory().appendingPathComponent("LedgerCrashWorker")
        worker.arguments = [directory, "16"]
        let output = Pipe()
        worker.standardOutput = output
        let exit = try ChildExit(running: worker)
        // Read acknowledgements as they arrive; kill at a random moment once the writers are running.
        let reader = output.fileHandleForReading
        var text = ""
        // A worker that never acknowledges would block the read below: a watchdog ends it, and the
        // round then fails on `acksThisRound`.
        let pid = worker.processIdentifier
        DispatchQueue.global().asyncAfter(deadline: .now() + 30) {
            if worker.isRunning { kill(pid, SIGKILL) }
        }
        // Wait until the writers run (the first acknowledgement), then kill at a random moment.
        while !text.contains("\nack ") {
            let chunk = reader.availableData
            if chunk.isEmpty { break }
            text += String(decoding: chunk, as: UTF8.self)
        }
        usleep(delay)
        kill(worker.processIdentifier, SIGKILL)
        exit.wait()
        text += String(decoding: reader.readDataToEndOfFile(), as: UTF8.self)
        return (text, worker.terminationReason)
    }
}
