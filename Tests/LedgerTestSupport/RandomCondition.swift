import LedgerCore

/// A random condition tree with `operands` topic operands drawn from `topics` (repeats allowed), mixing
/// `&&`, `||` and `!`.
public func randomCondition(operands: Int, topics: [TopicName], using generator: inout SeededGenerator) -> Condition {
    var node: Condition
    if operands == 1 {
        node = .topic(topics.randomElement(using: &generator)!)
    } else {
        let left = Int.random(in: 1..<operands, using: &generator)
        let leftNode = randomCondition(operands: left, topics: topics, using: &generator)
        let rightNode = randomCondition(operands: operands - left, topics: topics, using: &generator)
        node = Bool.random(using: &generator) ? .and(leftNode, rightNode) : .or(leftNode, rightNode)
    }
    if Int.random(in: 0..<4, using: &generator) == 0 { node = .not(node) }
    return node
}
