import LedgerCore
import LedgerTestSupport
import PropertyBased
import Testing

@Suite("Condition properties", .offThePool)
struct ConditionPropertyTests {
    let topics = (0..<4).map { try! TopicName("T\($0)") }

    @Test("set algebra over bitmaps equals per-instance brute force, under both rules")
    func setAlgebraEqualsBruteForce() async {
        await propertyCheck(count: 400, input: Gen.uint64()) { seed in
            var generator = SeededGenerator(seed: seed)
            // 0…199 instance ids; some unregistered, some with no topics at all.
            let capacity = 200
            var universe = InstanceSet(capacity: capacity)
            var held: [InstanceID: Set<TopicName>] = [:]
            for id in InstanceID(1)..<InstanceID(capacity) where Int.random(in: 0..<10, using: &generator) < 8 {
                universe.insert(id)
                held[id] = Set(topics.filter { _ in Bool.random(using: &generator) })
            }
            let condition = randomCondition(
                operands: Int.random(in: 1...5, using: &generator), topics: topics, using: &generator)
            let audience = condition.audience(universe: universe) { name in
                var members = InstanceSet(capacity: capacity)
                for (id, names) in held where names.contains(name) { members.insert(id) }
                return members
            }
            let expected = held.filter { condition.isSatisfied(byTopics: $0.value) }.map(\.key).sorted()
            #expect(audience.ids == expected, "\(condition.text(precedence: .standard))")
            for rule in ConditionPrecedence.allCases {
                let text = condition.text(precedence: rule)
                let reparsed = try? Condition(parsing: text, precedence: rule)
                #expect(reparsed == condition, "\(rule): \(text)")
            }
        }
    }

    @Test("a page of a bitmap's ids after any id is the sorted ids filtered, word boundaries included")
    func idPages() async {
        await propertyCheck(count: 300, input: Gen.uint64()) { seed in
            var generator = SeededGenerator(seed: seed)
            let capacity = Int.random(in: 1...400, using: &generator)
            var set = InstanceSet(capacity: capacity)
            let density = Int.random(in: 0...10, using: &generator)
            for id in 0..<set.capacity where Int.random(in: 0..<10, using: &generator) < density {
                set.insert(InstanceID(id))
            }
            let all = set.ids
            let after: InstanceID? =
                Bool.random(using: &generator)
                ? nil : InstanceID(Int.random(in: 0..<set.capacity + 70, using: &generator))
            let limit = Int.random(in: 0...40, using: &generator)
            let expected = Array(all.filter { after == nil || $0 > after! }.prefix(limit))
            #expect(
                set.ids(after: after, limit: limit) == expected, "after \(String(describing: after)) limit \(limit)")
        }
    }

    @Test("text parsed under each rule evaluates like the tree that rule builds")
    func rulesDifferOnlyByGrouping() async {
        await propertyCheck(count: 300, input: Gen.uint64()) { seed in
            var generator = SeededGenerator(seed: seed)
            let condition = randomCondition(
                operands: Int.random(in: 2...5, using: &generator), topics: topics, using: &generator)
            // Flat text without the grouping parentheses: the rule decides.
            let flat = condition.text(precedence: .leftToRight)
            let leftToRight = try? Condition(parsing: flat, precedence: .leftToRight)
            #expect(leftToRight == condition)
            #expect(leftToRight?.operands == condition.operands)
        }
    }
}
