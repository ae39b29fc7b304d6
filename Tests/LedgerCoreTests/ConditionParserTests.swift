import LedgerCore
import Testing
import Foundation
import LedgerTestSupport

private func parse(_ text: String, _ precedence: ConditionPrecedence = .leftToRight) throws -> Condition {
    try Condition(parsing: text, precedence: precedence)
}

private func topic(_ name: String) -> Condition { .topic(try! TopicName(name)) }

@Suite("Condition parser", .offThePool)
struct ConditionParserTests {
    let a = topic("A"), b = topic("B"), c = topic("C"), d = topic("D")

    @Test("every operator, nesting, both quote styles and free whitespace")
    func validForms() throws {
        #expect(try parse("'A' in topics") == a)
        #expect(try parse("\"A\" in topics") == a)
        #expect(try parse("  'A'   in\ttopics  ") == a)
        #expect(try parse("'A'in topics") == a)
        #expect(try parse("'A' in topics&&'B' in topics") == .and(a, b))
        #expect(try parse("'A' in topics || \"B\" in topics") == .or(a, b))
        #expect(try parse("!('A' in topics)") == .not(a))
        #expect(try parse("!'A' in topics") == .not(a))
        #expect(try parse("!!('A' in topics)") == .not(.not(a)))
        #expect(try parse("('A' in topics)") == a)
        #expect(try parse("((('A' in topics)))") == a)
        #expect(try parse("'A' in topics && ('B' in topics || 'C' in topics)") == .and(a, .or(b, c)))
        #expect(try parse("!('A' in topics && 'B' in topics) || 'C' in topics") == .or(.not(.and(a, b)), c))
        #expect(
            try parse("('A' in topics || 'B' in topics) && !('C' in topics || 'D' in topics)")
                == .and(.or(a, b), .not(.or(c, d))))
        #expect(try parse("'/topics/A' in topics".replacingOccurrences(of: "/topics/", with: "")) == a)
        #expect(try parse("'a-b_c.d~e%f' in topics") == topic("a-b_c.d~e%f"))
        #expect(try parse("\n'A' in topics\n&&\n'B' in topics\n") == .and(a, b))
    }

    @Test("A || B && C is (A || B) && C left to right, and A || (B && C) under the standard rule")
    func precedenceRules() throws {
        let text = "'A' in topics || 'B' in topics && 'C' in topics"
        let leftToRight = try parse(text, .leftToRight)
        let standard = try parse(text, .standard)
        #expect(leftToRight == .and(.or(a, b), c))
        #expect(standard == .or(a, .and(b, c)))
        // An instance on A alone tells them apart.
        let onlyA: Set<TopicName> = [try TopicName("A")]
        #expect(leftToRight.isSatisfied(byTopics: onlyA) == false)
        #expect(standard.isSatisfied(byTopics: onlyA) == true)
        // Longer chains.
        let chain = "'A' in topics && 'B' in topics || 'C' in topics && 'D' in topics"
        #expect(try parse(chain, .leftToRight) == .and(.or(.and(a, b), c), d))
        #expect(try parse(chain, .standard) == .or(.and(a, b), .and(c, d)))
        // ! binds to what follows under both rules.
        #expect(try parse("!'A' in topics && 'B' in topics", .standard) == .and(.not(a), b))
        #expect(try parse("!'A' in topics && 'B' in topics", .leftToRight) == .and(.not(a), b))
    }

    @Test("the documented example: TopicA and either TopicB or TopicC")
    func documentedExample() throws {
        let condition = try parse("'TopicA' in topics && ('TopicB' in topics || 'TopicC' in topics)")
        func receives(_ names: String...) -> Bool {
            condition.isSatisfied(byTopics: Set(names.map { try! TopicName($0) }))
        }
        #expect(receives("TopicA", "TopicB"))
        #expect(receives("TopicA", "TopicC"))
        #expect(!receives("TopicA"))
        #expect(!receives("TopicB"))
        #expect(!receives("TopicB", "TopicC"))
        #expect(!receives())
        let negated = try parse("!('TopicA' in topics)")
        #expect(negated.isSatisfied(byTopics: []))
    }

    @Test("canonical text parses back to the same tree under its rule")
    func canonicalText() throws {
        #expect(
            Condition.and(.or(a, b), c).text(precedence: .leftToRight)
                == "'A' in topics || 'B' in topics && 'C' in topics")
        #expect(
            Condition.and(.or(a, b), c).text(precedence: .standard)
                == "('A' in topics || 'B' in topics) && 'C' in topics")
        #expect(
            Condition.or(a, .and(b, c)).text(precedence: .leftToRight)
                == "'A' in topics || ('B' in topics && 'C' in topics)")
        #expect(Condition.not(.or(a, b)).text(precedence: .standard) == "!('A' in topics || 'B' in topics)")
        #expect(Condition.not(.not(a)).text(precedence: .standard) == "!!'A' in topics")
        // Found by the fuzzer: canonical text must not nest deeper than the input that produced the tree.
        let deep = try parse(String(repeating: "!", count: 37) + "\"B\"in topics")
        #expect(try parse(deep.text(precedence: .leftToRight)) == deep)
        let deepest = try parse(String(repeating: "!", count: 63) + "('A' in topics || 'B' in topics)")
        #expect(try parse(deepest.text(precedence: .standard), .standard) == deepest)
        for tree in [Condition.and(a, .and(b, c)), .or(.or(a, b), c), .or(a, .or(b, c)), .and(.not(a), .not(.not(b)))] {
            for rule in ConditionPrecedence.allCases {
                #expect(try parse(tree.text(precedence: rule), rule) == tree)
            }
        }
    }

    @Test("five operands are allowed, counting repeats")
    func operandLimit() throws {
        let five = "'A' in topics && 'A' in topics && 'B' in topics && !'C' in topics || 'D' in topics"
        #expect(try parse(five).operands.count == 5)
    }

    @Test(
        "invalid conditions say what is wrong and where",
        arguments: [
            // empty and whitespace
            ("", "condition is empty"),
            ("   ", "condition is empty"),
            // parentheses
            ("('A' in topics", "expected ')' at offset 14 to close the '(' at offset 0"),
            ("(('A' in topics)", "expected ')' at offset 16 to close the '(' at offset 0"),
            ("'A' in topics)", "unmatched ')' at offset 13"),
            (
                "'A' in topics && ('B' in topics || 'C' in topics",
                "expected ')' at offset 48 to close the '(' at offset 17"
            ),
            ("()", "empty parentheses at offset 0"),
            ("'A' in topics && ( )", "empty parentheses at offset 17"),
            (")", "expected a topic operand ('name' in topics), '(' or '!' at offset 0, found ')'"),
            ("('A' in topics))", "unmatched ')' at offset 15"),
            // operand count
            (
                "'A' in topics && 'B' in topics && 'C' in topics && 'D' in topics && 'E' in topics && 'F' in topics",
                "too many topic operands: the condition may name at most 5 topics (counting repeats); operand 6 starts at offset 85"
            ),
            (
                "'A' in topics || 'A' in topics || 'A' in topics || 'A' in topics || 'A' in topics || 'A' in topics",
                "operand 6 starts at offset 85"
            ),
            // topic names
            ("'' in topics", "empty topic name at offset 0"),
            ("\"\" in topics", "empty topic name at offset 0"),
            ("'A B' in topics", "topic name has a character outside [a-zA-Z0-9-_.~%] at offset 2: ' '"),
            ("'A!' in topics", "at offset 2: '!'"),
            ("'Tópic' in topics", "at offset 2: 'ó'"),
            ("'/topics/A' in topics", "at offset 1: '/'"),
            (
                "'" + String(repeating: "x", count: 901) + "' in topics",
                "topic name at offset 0 is longer than 900 characters"
            ),
            // quotes
            ("'A in topics", "unterminated quote: the ' at offset 0 is never closed"),
            ("'A\" in topics", "unterminated quote: the ' at offset 0 is never closed"),
            ("\"A' in topics", "unterminated quote: the \" at offset 0 is never closed"),
            ("'A' in topics && 'B", "unterminated quote: the ' at offset 17 is never closed"),
            // the words in and topics
            ("'A' on topics", "expected 'in' at offset 4 (in the operand starting at offset 0), found 'on'"),
            ("'A' inn topics", "expected 'in' at offset 4 (in the operand starting at offset 0), found 'inn'"),
            ("'A' IN topics", "expected 'in' at offset 4 (in the operand starting at offset 0), found 'IN'"),
            ("'A' topics", "expected 'in' at offset 4 (in the operand starting at offset 0), found 'topics'"),
            ("'A'", "expected 'in' at offset 3 (in the operand starting at offset 0), found the end"),
            ("'A' in", "expected whitespace and 'topics' after 'in' at offset 6"),
            ("'A' intopics", "expected 'in' at offset 4 (in the operand starting at offset 0), found 'intopics'"),
            ("'A' in topic", "expected 'topics' at offset 7 (in the operand starting at offset 0), found 'topic'"),
            ("'A' in Topics", "expected 'topics' at offset 7 (in the operand starting at offset 0), found 'Topics'"),
            ("'A' in topicsX", "expected 'topics' at offset 7 (in the operand starting at offset 0), found 'topicsX'"),
            ("'A' in topics.", "expected '&&', '||' or the end at offset 13, found '.'"),
            // operators
            (
                "'A' in topics &&",
                "expected a topic operand ('name' in topics), '(' or '!' after '&&' at offset 14, but the condition ended"
            ),
            ("'A' in topics ||   ", "after '||' at offset 14, but the condition ended"),
            ("'A' in topics & 'B' in topics", "expected '&&' at offset 14, found a single '&'"),
            ("'A' in topics | 'B' in topics", "expected '||' at offset 14, found a single '|'"),
            ("'A' in topics and 'B' in topics", "expected '&&', '||' or the end at offset 14, found 'and'"),
            ("'A' in topics 'B' in topics", "expected '&&', '||' or the end at offset 14, found '''"),
            ("&& 'A' in topics", "expected a topic operand ('name' in topics), '(' or '!' at offset 0, found '&'"),
            (
                "'A' in topics && && 'B' in topics",
                "expected a topic operand ('name' in topics), '(' or '!' at offset 17, found '&'"
            ),
            (
                "!",
                "expected a topic operand ('name' in topics), '(' or '!' after '!' at offset 0, but the condition ended"
            ),
            ("'A' in topics !", "expected '&&', '||' or the end at offset 14, found '!'"),
            ("'A' in topics && ()", "empty parentheses at offset 17"),
            // bare words, unicode, other junk
            ("A in topics", "expected a topic operand ('name' in topics), '(' or '!' at offset 0, found 'A'"),
            ("topics", "found 'topics'"),
            ("‘A’ in topics", "at offset 0, found '‘'"),
            ("'A' in topics ∧ 'B' in topics", "expected '&&', '||' or the end at offset 14, found '∧'"),
            ("'A' in topics\u{0} && 'B' in topics", "expected '&&', '||' or the end at offset 13"),
            ("[ 'A' in topics ]", "at offset 0, found '['"),
            ("'A' in topics && ‘B’ in topics", "at offset 17, found '‘'"),
            (String(repeating: "é", count: 8193), "condition is 8193 characters long"),
            (String(repeating: "(", count: 9000), "condition is 9000 characters long; at most 8192 are allowed"),
        ])
    func invalid(text: String, expected: String) {
        #expect {
            try Condition(parsing: text, precedence: .leftToRight)
        } throws: { error in
            guard let error = error as? LedgerCoreError else { return false }
            return error.code == .invalidArgument && error.field == "message.condition"
                && error.message.contains(expected)
        }
        // The standard rule reports the same fault.
        #expect(throws: LedgerCoreError.self) { try Condition(parsing: text, precedence: .standard) }
    }

    @Test("nesting is bounded: 64 levels parse, deeper is a clear error, never a stack overflow")
    func deepNesting() throws {
        func nested(_ depth: Int) -> String {
            String(repeating: "(", count: depth) + "'A' in topics" + String(repeating: ")", count: depth)
        }
        #expect(try parse(nested(64)) == a)
        #expect(try parse(String(repeating: "!", count: 64) + "'A' in topics").operands.count == 1)
        for text in [
            nested(65), nested(4000), String(repeating: "!", count: 8000) + "'A' in topics",
            String(repeating: "!(", count: 2000),
        ] {
            #expect {
                try parse(text)
            } throws: { error in
                "\(error)".contains("nest deeper than 64 levels at offset")
            }
        }
    }
}
