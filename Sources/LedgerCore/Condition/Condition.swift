/// A parsed FCM topic condition: `'A' in topics && ('B' in topics || !('C' in topics))`.
///
/// Parentheses only group; the tree records the grouping that the precedence rule gave.
///
/// ```swift
/// let condition = try Condition(parsing: "'A' in topics || 'B' in topics && 'C' in topics", precedence: .leftToRight)
/// // ((A || B) && C) under FCM's left-to-right rule
/// ```
public enum Condition: Hashable, Sendable {
    /// `'name' in topics`: the instance is subscribed to the topic.
    case topic(TopicName)
    /// `!x`: every registered instance that does not satisfy `x`, including instances with no topics.
    indirect case not(Condition)
    indirect case and(Condition, Condition)
    indirect case or(Condition, Condition)

    /// At most this many topic operands (counting repeats), as in FCM.
    public static let maximumOperands = 5
    /// Parentheses and `!` together nest at most this deep (bounds recursion on untrusted input).
    public static let maximumNesting = 64
    /// Conditions longer than this (in characters) are refused before parsing.
    public static let maximumLength = 8192

    /// The topic operands in order of appearance, with repeats.
    public var operands: [TopicName] {
        switch self {
        case .topic(let name): [name]
        case .not(let inner): inner.operands
        case .and(let left, let right), .or(let left, let right): left.operands + right.operands
        }
    }

    /// Whether an instance holding `topics` satisfies the condition: the brute-force definition that the
    /// set-algebra evaluation must agree with.
    public func isSatisfied(byTopics topics: Set<TopicName>) -> Bool {
        switch self {
        case .topic(let name): topics.contains(name)
        case .not(let inner): !inner.isSatisfied(byTopics: topics)
        case .and(let left, let right): left.isSatisfied(byTopics: topics) && right.isSatisfied(byTopics: topics)
        case .or(let left, let right): left.isSatisfied(byTopics: topics) || right.isSatisfied(byTopics: topics)
        }
    }

    /// Canonical text that parses back to this same tree under `precedence`, with parentheses only where
    /// the rule needs them — never more nesting than any text that parses to the tree, so canonical text
    /// always stays within ``maximumNesting`` (`!'A' in topics`, `!('A' in topics || 'B' in topics)`).
    public func text(precedence: ConditionPrecedence) -> String {
        switch self {
        case .topic(let name):
            return "'\(name.rawValue)' in topics"
        case .not(let inner):
            let innerText = inner.text(precedence: precedence)
            return inner.isBinary ? "!(\(innerText))" : "!" + innerText
        case .and(let left, let right), .or(let left, let right):
            let isAnd = if case .and = self { true } else { false }
            let leftText = left.text(precedence: precedence)
            let rightText = right.text(precedence: precedence)
            let wrapLeft: Bool
            let wrapRight: Bool
            switch precedence {
            case .leftToRight:
                wrapLeft = false
                wrapRight = right.isBinary
            case .standard:
                wrapLeft = isAnd && left.isOr
                wrapRight = isAnd ? right.isBinary : right.isOr
            }
            return "\(wrapLeft ? "(\(leftText))" : leftText) \(isAnd ? "&&" : "||") "
                + "\(wrapRight ? "(\(rightText))" : rightText)"
        }
    }

    private var isBinary: Bool {
        switch self {
        case .and, .or: true
        case .topic, .not: false
        }
    }

    private var isOr: Bool {
        if case .or = self { return true }
        return false
    }
}
