extension Condition {
    /// Parses FCM condition text under `precedence`.
    ///
    /// Accepts `'X' in topics` or `"X" in topics`, `&&`, `||`, `!`, parentheses and free whitespace; topic
    /// names are validated as topics are; at most 5 operands.
    ///
    /// - Throws: `LedgerCoreError.Code.invalidArgument` naming `field`, whose message says what is wrong and
    ///   at which character offset (from 0), e.g. `expected ')' at offset 27 to close the '(' at offset 0`.
    public init(parsing text: String, precedence: ConditionPrecedence, field: String = "message.condition")
        throws(LedgerCoreError)
    {
        var parser = ConditionParser(text: text, field: field)
        self = try parser.parse(precedence: precedence)
    }
}

/// A recursive-descent parser over the condition's Unicode scalars (offsets count scalars).
///
/// Operands and operators of one parenthesis level are collected flat, then grouped by the precedence rule:
/// left to right (FCM) or `&&` before `||` (standard). `!` binds to the operand or group that follows.
struct ConditionParser {
    private let scalars: [Unicode.Scalar]
    private let field: String
    private var position = 0
    private var operandCount = 0
    private var depth = 0

    init(text: String, field: String) {
        self.scalars = Array(text.unicodeScalars)
        self.field = field
    }

    private enum Operator { case and, or }

    mutating func parse(precedence: ConditionPrecedence) throws(LedgerCoreError) -> Condition {
        guard scalars.count <= Condition.maximumLength else {
            throw error("condition is \(scalars.count) characters long; at most \(Condition.maximumLength) are allowed")
        }
        skipWhitespace()
        guard position < scalars.count else { throw error("condition is empty") }
        let condition = try parseSequence(precedence: precedence, openedAt: nil)
        return condition
    }

    /// Parses `unary (op unary)*` up to the end or a `)` closing the group opened at `openedAt`.
    private mutating func parseSequence(precedence: ConditionPrecedence, openedAt: Int?) throws(LedgerCoreError)
        -> Condition
    {
        var operands = [try parseUnary(precedence: precedence, after: nil)]
        var operators: [Operator] = []
        while true {
            skipWhitespace()
            guard position < scalars.count else {
                if let openedAt {
                    throw error("expected ')' at offset \(position) to close the '(' at offset \(openedAt)")
                }
                break
            }
            let start = position
            switch scalars[position] {
            case ")":
                guard openedAt != nil else { throw error("unmatched ')' at offset \(position)") }
                position += 1
                return group(operands, operators, precedence: precedence)
            case "&":
                guard next(is: "&") else { throw error("expected '&&' at offset \(start), found a single '&'") }
                position += 2
                operators.append(.and)
                operands.append(try parseUnary(precedence: precedence, after: ("&&", start)))
            case "|":
                guard next(is: "|") else { throw error("expected '||' at offset \(start), found a single '|'") }
                position += 2
                operators.append(.or)
                operands.append(try parseUnary(precedence: precedence, after: ("||", start)))
            default:
                throw error("expected '&&', '||' or the end at offset \(start), found \(describeHere())")
            }
        }
        return group(operands, operators, precedence: precedence)
    }

    /// `!` unary | `(` sequence `)` | operand.
    private mutating func parseUnary(precedence: ConditionPrecedence, after: (String, Int)?) throws(LedgerCoreError)
        -> Condition
    {
        skipWhitespace()
        guard position < scalars.count else {
            if let (symbol, offset) = after {
                throw error(
                    "expected a topic operand ('name' in topics), '(' or '!' after '\(symbol)' at offset \(offset),"
                        + " but the condition ended")
            }
            throw error(
                "expected a topic operand ('name' in topics), '(' or '!' at offset \(position), but the condition ended"
            )
        }
        switch scalars[position] {
        case "!":
            let start = position
            try enterNesting(at: start)
            defer { depth -= 1 }
            position += 1
            return .not(try parseUnary(precedence: precedence, after: ("!", start)))
        case "(":
            let start = position
            try enterNesting(at: start)
            defer { depth -= 1 }
            position += 1
            skipWhitespace()
            if position < scalars.count && scalars[position] == ")" {
                throw error("empty parentheses at offset \(start)")
            }
            return try parseSequence(precedence: precedence, openedAt: start)
        case "'", "\"":
            return .topic(try parseOperand())
        default:
            throw error(
                "expected a topic operand ('name' in topics), '(' or '!' at offset \(position), found \(describeHere())"
            )
        }
    }

    /// `'name' in topics` (or with double quotes).
    private mutating func parseOperand() throws(LedgerCoreError) -> TopicName {
        let quote = scalars[position]
        let start = position
        position += 1
        let nameStart = position
        while position < scalars.count && scalars[position] != quote { position += 1 }
        guard position < scalars.count else {
            throw error("unterminated quote: the \(quote) at offset \(start) is never closed")
        }
        let nameScalars = scalars[nameStart..<position]
        position += 1
        guard !nameScalars.isEmpty else { throw error("empty topic name at offset \(start)") }
        if let bad = nameScalars.firstIndex(where: { !$0.isASCII || !TopicName.isTopicByte(UInt8($0.value)) }) {
            throw error(
                "topic name has a character outside [a-zA-Z0-9-_.~%] at offset \(bad): '\(scalars[bad])'")
        }
        guard nameScalars.count <= TopicName.maximumLength else {
            throw error("topic name at offset \(start) is longer than \(TopicName.maximumLength) characters")
        }
        operandCount += 1
        guard operandCount <= Condition.maximumOperands else {
            throw error(
                "too many topic operands: the condition may name at most \(Condition.maximumOperands) topics"
                    + " (counting repeats); operand \(operandCount) starts at offset \(start)")
        }
        var name = String()
        name.unicodeScalars.append(contentsOf: nameScalars)
        skipWhitespace()
        try expectWord("in", after: start)
        guard position < scalars.count, scalars[position].properties.isWhitespace else {
            throw error("expected whitespace and 'topics' after 'in' at offset \(position)")
        }
        skipWhitespace()
        try expectWord("topics", after: start)
        return TopicName(trusted: name)
    }

    /// Consumes `word`, which must not run on into more letters.
    private mutating func expectWord(_ word: String, after operandStart: Int) throws(LedgerCoreError) {
        let expected = Array(word.unicodeScalars)
        let start = position
        var end = position
        while end < scalars.count && (scalars[end].properties.isAlphabetic || scalars[end] == "_") { end += 1 }
        guard Array(scalars[start..<end]) == expected else {
            let found = start < end ? "'\(String(String.UnicodeScalarView(scalars[start..<end])))'" : describeHere()
            throw error(
                "expected '\(word)' at offset \(start) (in the operand starting at offset \(operandStart)),"
                    + " found \(found)")
        }
        position = end
    }

    private func group(_ operands: [Condition], _ operators: [Operator], precedence: ConditionPrecedence)
        -> Condition
    {
        switch precedence {
        case .leftToRight:
            var result = operands[0]
            for (index, op) in operators.enumerated() {
                result = op == .and ? .and(result, operands[index + 1]) : .or(result, operands[index + 1])
            }
            return result
        case .standard:
            var disjuncts: [Condition] = []
            var current = operands[0]
            for (index, op) in operators.enumerated() {
                if op == .and {
                    current = .and(current, operands[index + 1])
                } else {
                    disjuncts.append(current)
                    current = operands[index + 1]
                }
            }
            disjuncts.append(current)
            return disjuncts.dropFirst().reduce(disjuncts[0]) { .or($0, $1) }
        }
    }

    /// Bounds recursion (here and in every walk of the tree): parentheses and `!` together nest at most
    /// `Condition.maximumNesting` levels.
    private mutating func enterNesting(at offset: Int) throws(LedgerCoreError) {
        depth += 1
        guard depth <= Condition.maximumNesting else {
            throw error(
                "parentheses and '!' nest deeper than \(Condition.maximumNesting) levels at offset \(offset)")
        }
    }

    private mutating func skipWhitespace() {
        while position < scalars.count && scalars[position].properties.isWhitespace { position += 1 }
    }

    private func next(is scalar: Unicode.Scalar) -> Bool {
        position + 1 < scalars.count && scalars[position + 1] == scalar
    }

    /// A short description of what stands at the current position, for messages.
    private func describeHere() -> String {
        guard position < scalars.count else { return "the end" }
        var end = position
        while end < scalars.count && end - position < 12
            && (scalars[end].properties.isAlphabetic || scalars[end].properties.numericType != nil)
        {
            end += 1
        }
        if end == position { end += 1 }
        return "'\(String(String.UnicodeScalarView(scalars[position..<end])))'"
    }

    private func error(_ message: String) -> LedgerCoreError {
        LedgerCoreError(.invalidArgument, field: field, message)
    }
}
