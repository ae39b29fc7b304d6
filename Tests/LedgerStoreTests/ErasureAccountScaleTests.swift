import Foundation
import LedgerCore
import LedgerTestSupport
import Testing

@testable import LedgerQueries

/// #65: `verify`'s account of erasures was a pass over every rewritten record per `erased` event. Thousands of
/// erasures — rewritten records naming their pseudonyms in fields and in every form inside contents, erasures whose
/// counts are off, records no erasure accounts for, contents a retention sweep emptied — must give exactly the
/// problems the per-erasure account gives.
@Suite("Erasure account, thousands of erasures (#65)", .offThePool)
struct ErasureAccountScaleTests {
    /// What the account is told, in log order.
    enum Note {
        case redacted(LedgerEvent)
        case emptied(UInt64)
        case erasure(Erasure, UInt64)
    }

    /// The account as it was (#65): for each erasure, every rewritten record before it that names its pseudonym in
    /// a field or any form of it in its content.
    static func reference(_ notes: [Note]) -> [String] {
        var redacted: [(seq: UInt64, tokens: Set<String>, json: [UInt8])] = []
        var recorded: [(erasure: Erasure, seq: UInt64)] = []
        var emptied: [UInt64] = []
        for note in notes {
            switch note {
            case .redacted(let event):
                switch event.body {
                case .registered(let token, _, _), .subscribed(let token, _, _):
                    redacted.append((event.seq, [token.rawValue], []))
                case .sent(let sent):
                    if case .token(let token) = sent.target {
                        redacted.append((event.seq, [token.rawValue], sent.messageJSON))
                    } else {
                        redacted.append((event.seq, [], sent.messageJSON))
                    }
                default:
                    Issue.record("not made by this test")
                }
            case .emptied(let seq): emptied.append(seq)
            case .erasure(let erasure, let seq): recorded.append((erasure, seq))
            }
        }
        var problems: [String] = []
        var accounted = Set<UInt64>()
        for (erasure, seq) in recorded {
            let name = erasure.pseudonym.rawValue
            let forms = IdentifierEncodings.encodings(of: Array(name.utf8))
            let naming = redacted.filter { record in
                record.seq < seq
                    && (record.tokens.contains(name) || forms.contains { ByteSearch.contains(record.json, $0) })
            }
            accounted.formUnion(naming.map(\.seq))
            let unnamed = UInt64(emptied.filter { $0 < seq }.count)
            if UInt64(naming.count) > erasure.redactedEvents || erasure.redactedEvents > UInt64(naming.count) + unnamed {
                problems.append(
                    "seq \(seq): the erasure of \(name) rewrote \(erasure.redactedEvents) event(s), but "
                        + "\(naming.count) rewritten event(s) before it name it")
            }
        }
        for record in redacted where !accounted.contains(record.seq) {
            problems.append("seq \(record.seq): a rewritten (erased) event that no later `erased` event accounts for")
        }
        return problems
    }

    /// The `index`th erasure's pseudonym: `erased-` and 32 hex digits that look random, as the writer's do (an index
    /// written out in hex would give thousands of pseudonyms 30 digits in common).
    static func pseudonym(_ index: Int) throws -> RegistrationToken {
        func mix(_ value: UInt64) -> UInt64 {  // SplitMix64's finalizer: one-to-one, so distinct indices stay distinct
            var z = value &+ 0x9E37_79B9_7F4A_7C15
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        let high = mix(UInt64(index))
        return try RegistrationToken("erased-" + String(format: "%016llx%016llx", high, mix(high)))
    }

    /// A log of `count` erasures, each with up to four rewritten records (its pseudonym as a field, as a send's
    /// target, in some form inside a topic send's content, sometimes with another's), some erasures late, some
    /// counts off by one, some records after their erasure, some contents emptied.
    static func notes(erasures count: Int, seed: UInt64, exact: Bool) throws -> [Note] {
        var generator = SeededGenerator(seed: seed)
        var notes: [Note] = []
        var seq: UInt64 = 0
        var pending: [(erasure: Erasure, index: Int)] = []
        let topic = try TopicName("news")
        func event(_ body: LedgerEvent.Body) -> LedgerEvent {
            seq += 1
            return LedgerEvent(seq: seq, time: LedgerTime(microseconds: 1), actor: "t", requestID: "r", body: body)
        }
        func content(_ names: [RegistrationToken], generator: inout SeededGenerator) -> [UInt8] {
            var json = Array(#"{"message":{"data":{"#.utf8)
            for name in names {
                let form = IdentifierEncodings.encodings(of: Array(name.rawValue.utf8)).randomElement(using: &generator)!
                json += Array(#""k":"https://x.example/?t="#.utf8) + form + Array(#"","#.utf8)
            }
            return json + Array(#""z":"1"}}}"#.utf8)
        }
        for index in 0..<count {
            let name = try pseudonym(index)
            var named: UInt64 = 0
            if Bool.random(using: &generator) {
                notes.append(.redacted(event(.registered(token: name, platform: "ios", appID: nil))))
                named += 1
            }
            if Int.random(in: 0..<3, using: &generator) == 0 {
                notes.append(.redacted(event(.subscribed(token: name, topic: topic, via: .client))))
                named += 1
            }
            if Int.random(in: 0..<3, using: &generator) == 0 {
                let sent = SentMessage(
                    messageID: seq, target: .token(name), precedence: .standard, messageJSON: [])
                notes.append(.redacted(event(.sent(sent))))
                named += 1
            }
            if Bool.random(using: &generator) {
                // Its pseudonym in a topic send's content, and sometimes an earlier or later one's too.
                var names = [name]
                if index > 0, Bool.random(using: &generator) { names.append(try pseudonym(Int.random(in: 0..<index, using: &generator))) }
                if !exact, Int.random(in: 0..<4, using: &generator) == 0 { names.append(try pseudonym(index + 1)) }
                let sent = SentMessage(
                    messageID: seq, target: .topic(topic), precedence: .standard,
                    messageJSON: content(names.shuffled(using: &generator), generator: &generator))
                notes.append(.redacted(event(.sent(sent))))
                named += 1
            }
            if !exact, Int.random(in: 0..<20, using: &generator) == 0 {
                notes.append(.emptied(seq + 1))
                _ = event(.sent(SentMessage(messageID: seq, target: .topic(topic), precedence: .standard, messageJSON: [])))
            }
            if !exact, Int.random(in: 0..<20, using: &generator) == 0 {
                named = UInt64(max(0, Int(named) + (Bool.random(using: &generator) ? 1 : -1)))
            }
            pending.append((Erasure(pseudonym: name, registeredSeq: 1, reason: "test", redactedEvents: named), index))
            // Erasures late, after others' records, some of which may name them.
            while let first = pending.first, exact || pending.count > 3 || Bool.random(using: &generator) {
                notes.append(.erasure(first.erasure, seq + 1))
                _ = event(.erased(first.erasure))
                pending.removeFirst()
                if exact { break }
            }
            if !exact, Int.random(in: 0..<25, using: &generator) == 0 {
                // A record naming an erasure already made: no later erasure accounts for it.
                if case .erasure(let erasure, _)? = notes.last(where: { if case .erasure = $0 { true } else { false } }) {
                    notes.append(.redacted(event(.subscribed(token: erasure.pseudonym, topic: topic, via: .v1))))
                }
            }
        }
        for item in pending {
            notes.append(.erasure(item.erasure, seq + 1))
            _ = event(.erased(item.erasure))
        }
        return notes
    }

    static func account(_ notes: [Note]) -> ErasureAccount {
        var account = ErasureAccount()
        for note in notes {
            switch note {
            case .redacted(let event): account.noteRedacted(event)
            case .emptied(let seq): account.noteEmptied(at: seq)
            case .erasure(let erasure, let seq): account.noteErasure(erasure, at: seq)
            }
        }
        return account
    }

    @Test("600 erasures, with every kind of problem: the same problems as the per-erasure account, in order")
    func problemsEqualThePerErasureAccount() throws {
        for seed in [UInt64(65), 66, 67] {
            let notes = try Self.notes(erasures: 600, seed: seed, exact: false)
            let problems = Self.account(notes).problems()
            let expected = Self.reference(notes)
            #expect(problems == expected, "seed \(seed)")
            #expect(!expected.isEmpty)
        }
        let exact = try Self.notes(erasures: 600, seed: 68, exact: true)
        #expect(Self.account(exact).problems() == [])
        #expect(Self.reference(exact) == [])
    }

    @Test(
        "thousands of erasures account in one pass: the needles compared grow with the erasures, not with erasures × contents (pseudonyms share their first 8 bytes in every form)"
    )
    func linearInErasures() throws {
        var work: [Int: Int] = [:]
        for count in [2_000, 8_000] {
            let notes = try Self.notes(erasures: count, seed: UInt64(count), exact: true)
            let account = Self.account(notes)
            var comparisons = 0
            #expect(account.erasures == count)
            #expect(account.problems(comparisons: &comparisons) == [])
            // Each content names up to three pseudonyms; each is compared with the few forms that begin as it does.
            #expect(comparisons <= 8 * count, "\(comparisons) needles compared for \(count) erasures")
            work[count] = comparisons
        }
        let small = try #require(work[2_000])
        let large = try #require(work[8_000])
        #expect(large <= 6 * small, "4 times the erasures compared \(large) needles against \(small)")

        // One count off, one record after its erasure: exactly those two.
        var broken = try Self.notes(erasures: 8_000, seed: 8_000, exact: true)
        guard let last = broken.lastIndex(where: { if case .erasure = $0 { true } else { false } }),
            case .erasure(var erasure, let seq) = broken[last]
        else { Issue.record("no erasure"); return }
        erasure.redactedEvents += 5
        broken[last] = .erasure(erasure, seq)
        broken.append(
            .redacted(
                LedgerEvent(
                    seq: seq + 1, time: LedgerTime(microseconds: 1), actor: "t", requestID: "r",
                    body: .registered(token: erasure.pseudonym, platform: nil, appID: nil))))
        let problems = Self.account(broken).problems()
        #expect(problems.count == 2)
        #expect(problems.first?.hasPrefix("seq \(seq): the erasure of \(erasure.pseudonym.rawValue) rewrote") == true)
        #expect(problems.last == "seq \(seq + 1): a rewritten (erased) event that no later `erased` event accounts for")
    }
}
