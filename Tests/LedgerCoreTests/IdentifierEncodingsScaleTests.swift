import Foundation
import LedgerCore
import LedgerTestSupport
import Testing

/// #65: an erasure adds ~12 forms per APNs token the device ever held, and `verify` searches for every pseudonym's
/// forms: thousands of identifiers must rewrite exactly as one form at a time would, with work linear in the bytes.
@Suite("Identifier encodings, thousands of identifiers (#65)", .offThePool)
struct IdentifierEncodingsScaleTests {
    /// One identifier added: its bytes, its replacement, owner, whether binary, the shortest form kept.
    struct Added {
        let identifier: [UInt8]
        let replacement: [UInt8]
        let owner: Int
        let binary: Bool
        let shortest: Int
    }

    /// The rewrite one form at a time: the forms present (a search for each), then at each offset the first of
    /// them, longest first, that is there.
    static func referenceRewrite(
        _ bytes: [UInt8], forms: [(needle: [UInt8], replacement: [UInt8], owner: Int)]
    ) -> (bytes: [UInt8], owners: Set<Int>)? {
        let data = Data(bytes)
        let present = forms.filter { data.range(of: Data($0.needle)) != nil }
        guard !present.isEmpty else { return nil }
        var result: [UInt8] = []
        var owners = Set<Int>()
        var index = 0
        outer: while index < bytes.count {
            for form in present
            where index + form.needle.count <= bytes.count
                && Array(bytes[index..<(index + form.needle.count)]) == form.needle
            {
                result += form.replacement
                owners.insert(form.owner)
                index += form.needle.count
                continue outer
            }
            result.append(bytes[index])
            index += 1
        }
        return (result, owners)
    }

    /// The forms, longest first and stable, the reference's way.
    static func orderedForms(_ added: [Added]) -> [(needle: [UInt8], replacement: [UInt8], owner: Int)] {
        var forms: [(needle: [UInt8], replacement: [UInt8], owner: Int)] = []
        var seen = Set<[UInt8]>()
        for item in added where !item.identifier.isEmpty {
            let needles = IdentifierEncodings.encodings(of: item.identifier)
            let replacements = IdentifierEncodings.encodings(of: item.replacement)
            for position in needles.indices
            where !(item.binary && position == 0) && needles[position].count >= item.shortest
                && seen.insert(needles[position]).inserted
            {
                forms.append((needles[position], replacements[position], item.owner))
            }
        }
        return Set(forms.map(\.needle.count)).sorted(by: >).flatMap { length in
            forms.filter { $0.needle.count == length }
        }
    }

    /// Identifiers of a device that held many APNs tokens, and of other devices: registration tokens (text) and
    /// APNs tokens (binary), some sharing long prefixes (so that groups hold several needles), some repeated.
    static func identifiers(count: Int, shortest: Int, generator: inout SeededGenerator) -> [Added] {
        var added: [Added] = []
        for index in 0..<count {
            let pseudonym = Array("erased-\(String(format: "%032x", index))".utf8)
            switch index % 4 {
            case 0:
                let token = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
                added.append(Added(identifier: token, replacement: pseudonym, owner: index, binary: true, shortest: shortest))
            case 1:
                // The same first bytes as an earlier one: one group, compared longest first.
                let token = Array("cShared:APA91b-\(index)-".utf8)
                    + (0..<Int.random(in: 0...20, using: &generator)).map { _ in UInt8(ascii: "a") + UInt8(index % 26) }
                added.append(Added(identifier: token, replacement: pseudonym, owner: index, binary: false, shortest: shortest))
            case 2:
                let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_:".utf8)
                let token = (0..<Int.random(in: 3...60, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! }
                added.append(Added(identifier: token, replacement: pseudonym, owner: index, binary: false, shortest: shortest))
            default:
                // Again an identifier already added, for another owner: the first one's forms stand.
                let earlier = added[Int.random(in: 0..<added.count, using: &generator)]
                added.append(Added(identifier: earlier.identifier, replacement: pseudonym, owner: index, binary: earlier.binary, shortest: shortest))
            }
        }
        return added
    }

    /// Content naming some of the identifiers in some of their forms, next to each other, inside others' forms, cut
    /// short, among noise.
    static func content(naming added: [Added], generator: inout SeededGenerator) -> [UInt8] {
        var bytes = Array(#"{"message":{"data":{"k":""#.utf8)
        for _ in 0..<60 {
            let item = added.randomElement(using: &generator)!
            let forms = IdentifierEncodings.encodings(of: item.identifier)
            var form = forms.randomElement(using: &generator)!
            switch Int.random(in: 0..<6, using: &generator) {
            case 0: form = Array(form.dropLast(Int.random(in: 1...3, using: &generator)))  // cut short
            case 1: form = Array(form.dropFirst())
            case 2: form += forms.randomElement(using: &generator)!  // two forms run together
            default: break
            }
            bytes += form
            let noise = Array(#" ","u":"https://x.example/p?t=&=%3D"#.utf8)
            bytes += noise.prefix(Int.random(in: 0...noise.count, using: &generator))
        }
        return bytes + Array(#""}}}"#.utf8)
    }

    @Test("thousands of identifiers: forms and rewrites equal the one-form-at-a-time reference's")
    func thousandsRewriteAsTheReference() throws {
        for (seed, shortest) in [(UInt64(65), IdentifierEncodings.shortestNeedle), (66, 1), (67, 9)] {
            var generator = SeededGenerator(seed: seed)
            let added = Self.identifiers(count: 2_000, shortest: shortest, generator: &generator)
            var encodings = IdentifierEncodings()
            for item in added {
                encodings.add(item.identifier, replacedBy: item.replacement, owner: item.owner, binary: item.binary, shortest: item.shortest)
            }
            let reference = Self.orderedForms(added)
            #expect(encodings.forms.map(\.needle) == reference.map(\.needle))
            #expect(encodings.forms.map(\.replacement) == reference.map(\.replacement))
            #expect(encodings.forms.map(\.owner) == reference.map(\.owner))
            for _ in 0..<8 {
                let content = Self.content(naming: added, generator: &generator)
                let rewrite = encodings.rewrite(content)
                let expected = Self.referenceRewrite(content, forms: reference)
                #expect(rewrite?.bytes == expected?.bytes, "seed \(seed)")
                #expect(rewrite?.owners == expected?.owners, "seed \(seed)")
                #expect(encodings.occurs(in: content) == (expected != nil))
            }
            let nothing = Array(#"{"message":{"data":{"k":"naming nothing at all, not even a token"}}}"#.utf8)
            #expect(encodings.rewrite(nothing) == nil)
            #expect(!encodings.occurs(in: nothing))
        }
    }

    @Test("a few identifiers (the memchr path) rewrite as the reference too")
    func fewRewriteAsTheReference() throws {
        var generator = SeededGenerator(seed: 650)
        for _ in 0..<50 {
            let added = Self.identifiers(count: Int.random(in: 1...2, using: &generator), shortest: 1, generator: &generator)
            var encodings = IdentifierEncodings()
            for item in added {
                encodings.add(item.identifier, replacedBy: item.replacement, owner: item.owner, binary: item.binary, shortest: item.shortest)
            }
            let content = Self.content(naming: added, generator: &generator)
            let expected = Self.referenceRewrite(content, forms: Self.orderedForms(added))
            #expect(encodings.rewrite(content)?.bytes == expected?.bytes)
            #expect(encodings.rewrite(content)?.owners == expected?.owners)
        }
    }

    @Test("the work of a rewrite is linear in the bytes, not in forms × bytes: 4,000 APNs tokens' forms")
    func rewriteWorkIsLinear() throws {
        var generator = SeededGenerator(seed: 4_000)
        var encodings = IdentifierEncodings()
        var tokens: [[UInt8]] = []
        for index in 0..<4_000 {
            let token = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
            tokens.append(token)
            encodings.add(token, replacedBy: Array("erased-\(String(format: "%032x", 0))".utf8), owner: index, binary: true)
        }
        #expect(encodings.forms.count >= 4_000 * 10)
        // A message naming a few of them among 16 KiB of text.
        var content = Array(#"{"data":{"#.utf8)
        for index in stride(from: 0, to: 4_000, by: 400) {
            content += Array(#""k":""#.utf8) + IdentifierEncodings.encodings(of: tokens[index])[index % 12 + 1] + Array(#"","#.utf8)
        }
        content += Array(String(repeating: "lorem ipsum dolor sit amet 0123456789abcdef ", count: 370).utf8)
        content += Array(#""z":1}}"#.utf8)
        var comparisons = 0
        let rewrite = try #require(encodings.rewrite(content, comparisons: &comparisons))
        #expect(rewrite.owners == Set(stride(from: 0, to: 4_000, by: 400)))
        // One scan to find a form, one to rewrite: a needle compared only where its first 8 bytes are.
        // One search per form (the old rewrite) would be 40,000+ before the first offset.
        #expect(comparisons <= 2 * 10 * 4, "\(comparisons) comparisons for \(content.count) bytes")
        var occursComparisons = 0
        content.withUnsafeBytes { buffer in
            _ = NeedleIndex(encodings.needles).occurs(in: buffer, comparisons: &occursComparisons)
        }
        #expect(occursComparisons <= 4)
    }
}
