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
        var text = text
        let result: Result<Condition, LedgerCoreError> = text.withUTF8 { bytes in
            var parser = ConditionParser(bytes: bytes, field: field)
            return Result { () throws(LedgerCoreError) in try parser.parse(precedence: precedence) }
        }
        self = try result.get()
    }
}

/// A recursive-descent parser over the condition's UTF-8 bytes.
///
/// Operands and operators of one parenthesis level are collected flat, then grouped by the precedence rule:
/// left to right (FCM) or `&&` before `||` (standard). `!` binds to the operand or group that follows.
/// Everything outside quoted names is ASCII, so bytes are classified directly; offsets in messages are
/// converted to characters (Unicode scalars) only when an error is raised.
struct ConditionParser {
    /// Valid only while the `withUTF8` call that lends it runs; the parser never outlives it.
    private let bytes: UnsafeBufferPointer<UInt8>
    private let field: String
    private var position = 0
    private var operandCount = 0
    private var depth = 0

    init(bytes: UnsafeBufferPointer<UInt8>, field: String) {
        self.bytes = bytes
        self.field = field
    }

    private enum Operator { case and, or }

    mutating func parse(precedence: ConditionPrecedence) throws(LedgerCoreError) -> Condition {
        // Characters never outnumber bytes, so only long inputs need counting.
        if bytes.count > Condition.maximumLength {
            let length = characterOffset(bytes.count)
            guard length <= Condition.maximumLength else {
                throw error("condition is \(length) characters long; at most \(Condition.maximumLength) are allowed")
            }
        }
        skipWhitespace()
        guard position < bytes.count else { throw error("condition is empty") }
        return try parseSequence(precedence: precedence, openedAt: nil)
    }

    /// Parses `unary (op unary)*` up to the end or a `)` closing the group opened at `openedAt`.
    private mutating func parseSequence(precedence: ConditionPrecedence, openedAt: Int?) throws(LedgerCoreError)
        -> Condition
    {
        let first = try parseUnary(precedence: precedence, after: nil)
        skipWhitespace()
        // A group of one (the common case at the innermost level) needs no lists.
        if position < bytes.count && bytes[position] == UInt8(ascii: ")") && openedAt != nil {
            position += 1
            return first
        }
        var operands: [Condition] = []
        var operators: [Operator] = []
        operands.reserveCapacity(Condition.maximumOperands)
        operators.reserveCapacity(Condition.maximumOperands)
        operands.append(first)
        while true {
            skipWhitespace()
            guard position < bytes.count else {
                if let openedAt {
                    throw error(
                        "expected ')' at offset \(at(position)) to close the '(' at offset \(at(openedAt))")
                }
                break
            }
            let start = position
            switch bytes[position] {
            case UInt8(ascii: ")"):
                guard openedAt != nil else { throw error("unmatched ')' at offset \(at(position))") }
                position += 1
                return group(operands, operators, precedence: precedence)
            case UInt8(ascii: "&"):
                guard next(is: "&") else { throw error("expected '&&' at offset \(at(start)), found a single '&'") }
                position += 2
                operators.append(.and)
                operands.append(try parseUnary(precedence: precedence, after: ("&&", start)))
            case UInt8(ascii: "|"):
                guard next(is: "|") else { throw error("expected '||' at offset \(at(start)), found a single '|'") }
                position += 2
                operators.append(.or)
                operands.append(try parseUnary(precedence: precedence, after: ("||", start)))
            default:
                throw error("expected '&&', '||' or the end at offset \(at(start)), found \(describeHere())")
            }
        }
        return group(operands, operators, precedence: precedence)
    }

    /// `!` unary | `(` sequence `)` | operand.
    private mutating func parseUnary(precedence: ConditionPrecedence, after: (String, Int)?) throws(LedgerCoreError)
        -> Condition
    {
        skipWhitespace()
        guard position < bytes.count else {
            if let (symbol, offset) = after {
                throw error(
                    "expected a topic operand ('name' in topics), '(' or '!' after '\(symbol)' at offset \(at(offset)),"
                        + " but the condition ended")
            }
            throw error(
                "expected a topic operand ('name' in topics), '(' or '!' at offset \(at(position)), but the condition ended"
            )
        }
        switch bytes[position] {
        case UInt8(ascii: "!"):
            let start = position
            try enterNesting(at: start)
            defer { depth -= 1 }
            position += 1
            return .not(try parseUnary(precedence: precedence, after: ("!", start)))
        case UInt8(ascii: "("):
            let start = position
            try enterNesting(at: start)
            defer { depth -= 1 }
            position += 1
            skipWhitespace()
            if position < bytes.count && bytes[position] == UInt8(ascii: ")") {
                throw error("empty parentheses at offset \(at(start))")
            }
            return try parseSequence(precedence: precedence, openedAt: start)
        case UInt8(ascii: "'"), UInt8(ascii: "\""):
            return .topic(try parseOperand())
        default:
            throw error(
                "expected a topic operand ('name' in topics), '(' or '!' at offset \(at(position)), found \(describeHere())"
            )
        }
    }

    /// `'name' in topics` (or with double quotes).
    private mutating func parseOperand() throws(LedgerCoreError) -> TopicName {
        let quote = bytes[position]
        let start = position
        position += 1
        let nameStart = position
        while position < bytes.count && bytes[position] != quote { position += 1 }
        guard position < bytes.count else {
            throw error(
                "unterminated quote: the \(Character(Unicode.Scalar(quote))) at offset \(at(start)) is never closed")
        }
        let nameEnd = position
        position += 1
        guard nameEnd > nameStart else { throw error("empty topic name at offset \(at(start))") }
        if let bad = bytes[nameStart..<nameEnd].firstIndex(where: { !TopicName.isTopicByte($0) }) {
            throw error(
                "topic name has a character outside [a-zA-Z0-9-_.~%] at offset \(at(bad)): '\(character(at: bad))'")
        }
        guard nameEnd - nameStart <= TopicName.maximumLength else {
            throw error("topic name at offset \(at(start)) is longer than \(TopicName.maximumLength) characters")
        }
        operandCount += 1
        guard operandCount <= Condition.maximumOperands else {
            throw error(
                "too many topic operands: the condition may name at most \(Condition.maximumOperands) topics"
                    + " (counting repeats); operand \(operandCount) starts at offset \(at(start))")
        }
        let name = String(decoding: bytes[nameStart..<nameEnd], as: UTF8.self)
        skipWhitespace()
        try expectWord("in", operandStart: start)
        guard position < bytes.count, Self.isWhitespace(bytes[position]) else {
            throw error("expected whitespace and 'topics' after 'in' at offset \(at(position))")
        }
        skipWhitespace()
        try expectWord("topics", operandStart: start)
        return TopicName(trusted: name)
    }

    /// Consumes `word`, which must not run on into more letters.
    private mutating func expectWord(_ word: StaticString, operandStart: Int) throws(LedgerCoreError) {
        let start = position
        var end = position
        while end < bytes.count && (Self.isLetter(bytes[end]) || bytes[end] == UInt8(ascii: "_")) { end += 1 }
        let matches = word.withUTF8Buffer { expected in bytes[start..<end].elementsEqual(expected) }
        guard matches else {
            let found =
                start < end ? "'\(String(decoding: bytes[start..<end], as: UTF8.self))'" : describeHere()
            throw error(
                "expected '\(word)' at offset \(at(start)) (in the operand starting at offset \(at(operandStart))),"
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
                "parentheses and '!' nest deeper than \(Condition.maximumNesting) levels at offset \(at(offset))")
        }
    }

    @inline(__always)
    private static func isWhitespace(_ byte: UInt8) -> Bool {
        byte == 0x20 || (0x09...0x0D).contains(byte)
    }

    @inline(__always)
    private static func isLetter(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
    }

    private mutating func skipWhitespace() {
        while position < bytes.count && Self.isWhitespace(bytes[position]) { position += 1 }
    }

    private func next(is scalar: Unicode.Scalar) -> Bool {
        position + 1 < bytes.count && bytes[position + 1] == UInt8(ascii: scalar)
    }

    /// The character offset (counting Unicode scalars) of byte `offset`.
    private func characterOffset(_ offset: Int) -> Int {
        bytes[..<offset].reduce(0) { $0 + ($1 & 0xC0 == 0x80 ? 0 : 1) }
    }

    private func at(_ offset: Int) -> Int { characterOffset(offset) }

    /// The whole character starting at byte `offset`.
    private func character(at offset: Int) -> String {
        var end = offset + 1
        while end < bytes.count && bytes[end] & 0xC0 == 0x80 { end += 1 }
        return String(decoding: bytes[offset..<end], as: UTF8.self)
    }

    /// A short description of what stands at the current position, for messages.
    private func describeHere() -> String {
        guard position < bytes.count else { return "the end" }
        var end = position
        while end < bytes.count && end - position < 12
            && (Self.isLetter(bytes[end]) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[end]))
        {
            end += 1
        }
        if end == position { return "'\(character(at: position))'" }
        return "'\(String(decoding: bytes[position..<end], as: UTF8.self))'"
    }

    private func error(_ message: String) -> LedgerCoreError {
        LedgerCoreError(.invalidArgument, field: field, message)
    }
}
