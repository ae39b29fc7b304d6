import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PropertyBased
import Testing

@testable import LedgerQueries

@Suite("Audience", .offThePool)
struct AudienceTests {
    @Test("the store's audience at any seq equals brute force over the fold of the log up to that seq")
    func audienceEqualsBruteForce() async {
        await propertyCheck(count: 20, input: Gen.uint64()) { seed in
            do {
                let directory = TemporaryDirectory()
                defer { directory.remove() }
                let history = RandomHistory(tokenCount: 12, topicCount: 4)
                var generator = SeededGenerator(seed: seed)
                let ledger = try openTestLedger(directory)
                _ = try await appendAll(history.requests(count: 50, using: &generator), to: ledger)
                let states = try foldLog(ledger)
                try ledger.read { snapshot throws in
                    for _ in 0..<25 {
                        let seq = Int.random(in: 0..<states.count, using: &generator)
                        let state = states[seq]
                        let condition = randomCondition(
                            operands: Int.random(in: 1...5, using: &generator), topics: history.topics,
                            using: &generator)
                        let expected = state.registeredTokens.filter {
                            condition.isSatisfied(byTopics: state.topics(of: $0))
                        }.sorted()
                        for rule in ConditionPrecedence.allCases {
                            let target = MessageTarget.condition(condition.text(precedence: rule))
                            let audience = try snapshot.audience(of: target, precedence: rule, at: UInt64(seq))
                            let tokens = try snapshot.recipientTokens(audience)
                            #expect(tokens == expected, "seed \(seed) seq \(seq) \(rule)")
                            #expect(audience.count == expected.count)
                            #expect(
                                RecipientDigest.digest(sortedTokens: tokens)
                                    == RecipientDigest.digest(sortedTokens: expected))
                        }
                        let topic = history.topics.randomElement(using: &generator)!
                        let members = try snapshot.recipientTokens(
                            try snapshot.audience(of: .topic(topic), precedence: .leftToRight, at: UInt64(seq)))
                        #expect(members == state.members(of: topic).sorted())
                        let token = history.tokens.randomElement(using: &generator)!
                        let single = try snapshot.audience(of: .token(token), precedence: .leftToRight, at: UInt64(seq))
                        #expect(single.count == (state.isRegistered(token) ? 1 : 0))
                    }
                }
            } catch {
                Issue.record("seed \(seed): \(error)")
            }
        }
    }

    @Test("!('X' in topics) reaches registered instances with no topics, never unregistered ones")
    func negationUniverse() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        let subscribed = try RegistrationToken("on-news")
        let bare = try RegistrationToken("no-topics")
        let gone = try RegistrationToken("unregistered")
        let news = try TopicName("news")
        _ = try await ledger.append(
            WriteRequest(
                actor: "t", requestID: "r",
                operations: [
                    .register(subscribed, platform: nil, appID: nil), .register(bare, platform: nil, appID: nil),
                    .register(gone, platform: nil, appID: nil), .subscribe(subscribed, news, via: .v1),
                    .unregister(gone, reason: "x"),
                ]))
        try ledger.read { snapshot throws in
            let audience = try snapshot.audience(
                of: .condition("!('news' in topics)"), precedence: .leftToRight)
            #expect(try snapshot.recipientTokens(audience) == [bare])
            // Before the unregistration (seq 4), the third instance was there too.
            let before = try snapshot.audience(of: .condition("!('news' in topics)"), precedence: .leftToRight, at: 4)
            #expect(try snapshot.recipientTokens(before) == [bare, gone].sorted())
            // A topic nobody ever subscribed to: nobody is on it, everybody is off it.
            #expect(try snapshot.audience(of: .topic(try TopicName("never")), precedence: .standard).count == 0)
            #expect(try snapshot.audience(of: .condition("!('never' in topics)"), precedence: .standard).count == 2)
        }
    }

    @Test("the recipient digest is SHA-256 of the sorted tokens each followed by a newline")
    func digestDefinition() throws {
        #expect(
            RecipientDigest.digest(sortedTokens: []).hexString
                == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        // printf 'a\nb\n' | sha256sum
        let tokens = [try RegistrationToken("a"), try RegistrationToken("b")]
        #expect(
            RecipientDigest.digest(sortedTokens: tokens).hexString
                == "911169ddaaf146aff539f58c26c489af3b892dff0fe283c1c264c65ae5aa59a2")
    }

    @Test("the digest of tokens over several 64 KiB buffers, and of one longer than a buffer, is SHA-256 of them")
    func digestAcrossBuffers() throws {
        var generator = SeededGenerator(seed: 64)
        var tokens: [[UInt8]] = (0..<600).map { index in
            let length = Int.random(in: 1...1200, using: &generator)
            return Array("t\(index)-".utf8) + (0..<length).map { _ in UInt8.random(in: 0x21...0x7E, using: &generator) }
        }
        // Lengths that end exactly at a buffer's last byte, with and without room for the newline.
        tokens.insert([UInt8](repeating: 0x61, count: RecipientDigest.Builder.bufferSize - 1), at: 100)
        tokens.insert([UInt8](repeating: 0x62, count: RecipientDigest.Builder.bufferSize), at: 300)
        tokens.insert([UInt8](repeating: 0x63, count: RecipientDigest.Builder.bufferSize + 5), at: 500)
        var builder = RecipientDigest.Builder()
        var whole: [UInt8] = []
        for token in tokens {
            token.withUnsafeBytes { builder.add(rawToken: $0) }
            whole += token + [UInt8(ascii: "\n")]
        }
        #expect(whole.count > 5 * RecipientDigest.Builder.bufferSize)
        #expect(builder.count == tokens.count)
        // Every byte is ASCII, so the text is the bytes.
        #expect(builder.finish().hexString == sha256Hex(String(decoding: whole, as: UTF8.self)))
    }

    @Test("a version-2 digest is sort -n | sha256sum of the device numbers, across buffer boundaries and at the ends")
    func deviceDigest() {
        // 0, 9, 10 and UInt32.max (every digit count), then enough numbers to fill several buffers.
        let devices: [UInt32] = [0, 9, 10, 99, 100, UInt32.max - 1, UInt32.max] + (1_000_000..<1_040_000).map { $0 }
        let sorted = devices.sorted()
        let text = sorted.map { "\($0)\n" }.joined()
        #expect(text.utf8.count > 4 * RecipientDigest.Builder.bufferSize)
        #expect(RecipientDigest.digest(ascendingDevices: sorted).hexString == sha256Hex(text))
        #expect(RecipientDigest.digest(ascendingDevices: []).hexString == sha256Hex(""))
    }

    @Test(
        "a version-1 digest with an erased recipient cannot be recomputed: the count alone decides; version 2 always can"
    )
    func recomputability() throws {
        let pseudonym = Erasure.newPseudonym()
        let recipients = [RegistrationToken(trusted: "kept"), pseudonym].sorted()
        func replay(_ version: RecipientDigest.Version, recorded digest: [UInt8], count: UInt64 = 2) -> MessageReplay {
            MessageReplay(
                messageID: 7, seq: 3, time: LedgerTime(microseconds: 0), target: .topic(try! TopicName("news")),
                precedence: .leftToRight, messageJSON: [], recipients: recipients, devices: [1, 2],
                recipientDigest: RecipientDigest.digest(ascendingDevices: [1, 2]), digestVersion: version,
                recorded: (
                    AudienceRecord(
                        messageID: 7, sendSeq: 3, recipientCount: count, recipientDigest: digest,
                        digestVersion: version), 4
                ), acknowledged: [false, false], pushes: [nil, nil])
        }
        let other = [UInt8](repeating: 7, count: 32)
        // Version 1, over a token that is gone: only the count is compared, and the replay says so.
        #expect(replay(.tokens, recorded: other).matchesRecord)
        #expect(!replay(.tokens, recorded: other).digestRecomputable)
        #expect(!replay(.tokens, recorded: other, count: 3).matchesRecord)
        // Version 2: the digest is compared, erased recipients or not.
        #expect(replay(.devices, recorded: other).digestRecomputable)
        #expect(!replay(.devices, recorded: other).matchesRecord)
        #expect(replay(.devices, recorded: RecipientDigest.digest(ascendingDevices: [1, 2])).matchesRecord)
    }

    @Test("large audiences list tokens in byte order through the token index")
    func largeAudienceOrder() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        var generator = SeededGenerator(seed: 7)
        let tokens = try (0..<300).map { _ in
            try RegistrationToken(String((0..<12).map { _ in "aZ09_-:.".randomElement(using: &generator)! }))
        }
        let unique = Array(Set(tokens))
        _ = try await ledger.append(
            WriteRequest(
                actor: "t", requestID: "r", operations: unique.map { .register($0, platform: nil, appID: nil) }))
        try ledger.read { snapshot throws in
            let everyone = try snapshot.audience(of: .condition("!('x' in topics)"), precedence: .standard)
            let listed = try snapshot.recipientTokens(everyone)
            #expect(listed == unique.sorted())
            #expect(
                listed.map(\.rawValue) == unique.map(\.rawValue).sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
        }
    }
}
