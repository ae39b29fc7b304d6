import Foundation
import FuzzHarness
import LedgerTestSupport
import Testing

/// The fuzz targets' checks (tools/fuzz, ``FuzzHarness``) in the test build: each seed of their corpora and
/// thousands of deterministic mutations of them (bits flipped, bytes inserted, deleted and repeated, the grammar's
/// characters put in, two seeds spliced). libFuzzer's coverage-guided search (`make fuzz`, tools/fuzz/run.sh)
/// finds more, in a build of its own; this keeps every check run on every change, and a seed that fails names
/// itself so it can be replayed with SeededGenerator.
@Suite("The fuzz targets' checks on their corpora and mutations", .offThePool)
struct FuzzHarnessTests {
    static let fuzzDirectory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("tools/fuzz")

    /// The files of `tools/fuzz/<name>`, in name order.
    static func corpus(_ name: String) throws -> [[UInt8]] {
        let directory = fuzzDirectory.appendingPathComponent(name)
        let files = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
        return try files.map { Array(try Data(contentsOf: directory.appendingPathComponent($0))) }
    }

    /// Bytes a parser of JSON or conditions treats specially.
    static let grammar = Array(#"{}[]":,\()!&|'0123456789.eE-+ tnfu"#.utf8)

    /// One of libFuzzer's simple mutations of `bytes` (another seed for splicing).
    static func mutate(_ bytes: [UInt8], other: [UInt8], maximumLength: Int, using generator: inout SeededGenerator)
        -> [UInt8]
    {
        var bytes = bytes
        for _ in 0..<Int.random(in: 1...4, using: &generator) {
            let position = bytes.isEmpty ? 0 : Int.random(in: 0..<bytes.count, using: &generator)
            switch Int.random(in: 0..<6, using: &generator) {
            case 0 where !bytes.isEmpty: bytes[position] ^= 1 << UInt8.random(in: 0..<8, using: &generator)
            case 1: bytes.insert(UInt8.random(in: 0...255, using: &generator), at: position)
            case 2 where !bytes.isEmpty: bytes.remove(at: position)
            case 3 where !bytes.isEmpty:
                let end = min(bytes.count, position + Int.random(in: 1...16, using: &generator))
                bytes.insert(contentsOf: bytes[position..<end], at: position)
            case 4: bytes.insert(grammar.randomElement(using: &generator)!, at: position)
            case 5 where !other.isEmpty:
                let cut = Int.random(in: 0..<other.count, using: &generator)
                bytes = Array(bytes[..<position]) + Array(other[cut...])
            default: break
            }
        }
        return Array(bytes.prefix(maximumLength))
    }

    /// Runs `check` on every seed and on `mutations` mutations of them; records the first failure of each kind.
    static func run(
        seeds: [[UInt8]], mutations: Int, maximumLength: Int, seed: UInt64,
        _ check: (UnsafeRawBufferPointer) throws -> Void
    ) -> Int {
        var generator = SeededGenerator(seed: seed)
        var failures: Set<String> = []
        var checked = 0
        func checkOne(_ input: [UInt8], _ what: String) {
            checked += 1
            do { try input.withUnsafeBytes { try check($0) } } catch {
                if failures.insert("\(error)").inserted { Issue.record("\(what): \(error)") }
            }
        }
        for (index, input) in seeds.enumerated() { checkOne(input, "seed \(index)") }
        for round in 0..<mutations {
            let input = seeds[round % seeds.count]
            let other = seeds.randomElement(using: &generator)!
            checkOne(
                mutate(input, other: other, maximumLength: maximumLength, using: &generator),
                "mutation \(round) of seed \(round % seeds.count) (SeededGenerator seed \(seed))")
        }
        return checked
    }

    @Test("conditions: no trap, canonical text round-trips, set algebra agrees with brute force")
    func conditions() throws {
        let seeds = try Self.corpus("corpus")
        #expect(seeds.count >= 3)
        let checked = Self.run(seeds: seeds, mutations: 20_000, maximumLength: 512, seed: 1) {
            try FuzzHarness.checkCondition($0)
        }
        #expect(checked == seeds.count + 20_000)
    }

    @Test("request bodies: strict checks, the parser against Foundation, validation, payload mapping")
    func messages() throws {
        let seeds = try Self.corpus("corpus-message")
        #expect(seeds.count >= 5)
        let checked = Self.run(seeds: seeds, mutations: 10_000, maximumLength: 4_096, seed: 2) { bytes in
            try FuzzHarness.checkMessage(bytes.assumingMemoryBound(to: UInt8.self))
        }
        #expect(checked == seeds.count + 10_000)
    }

    @Test("stored events: the canonical decoder against SwiftProtobuf, encode → decode, hashing, never a trap")
    func events() throws {
        let seeds = FuzzHarness.eventSeeds()
        #expect(seeds.count == 14)
        let checked = Self.run(seeds: seeds, mutations: 20_000, maximumLength: 4_096, seed: 3) {
            try FuzzHarness.checkEvent($0)
        }
        #expect(checked == seeds.count + 20_000)
    }

    @Test("a check that does not hold is reported, not swallowed")
    func failuresAreReported() throws {
        // `'A' in topics` parses; a condition check that always fails must surface through run(_:).
        struct Refused: Error {}
        var reported = 0
        withKnownIssue {
            _ = Self.run(seeds: [Array("'A' in topics".utf8)], mutations: 0, maximumLength: 64, seed: 4) { _ in
                reported += 1
                throw Refused()
            }
        }
        #expect(reported == 1)
    }
}
