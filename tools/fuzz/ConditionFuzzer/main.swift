// libFuzzer target for the condition parser. Build and run with tools/fuzz/run.sh.
//
// For every input: parsing never crashes; whatever parses prints to canonical text that parses back to the
// same tree under the same rule; and set-algebra evaluation agrees with brute force on a small universe.

import Foundation
import FuzzDriver
import LedgerCore

/// The small universe each parsed condition is evaluated over: instance i holds the topics whose bit is set.
let names = ["A", "B", "C", "D", "E"].map { try! TopicName($0) }

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    for rule in ConditionPrecedence.allCases {
        guard let condition = try? Condition(parsing: text, precedence: rule) else { continue }
        let canonical = condition.text(precedence: rule)
        guard let reparsed = try? Condition(parsing: canonical, precedence: rule), reparsed == condition else {
            fatalError("canonical text does not round-trip: \(canonical)")
        }
        let capacity = 1 << names.count
        var universe = InstanceSet(capacity: capacity)
        for id in 0..<capacity { universe.insert(InstanceID(id)) }
        let audience = condition.audience(universe: universe) { name in
            var members = InstanceSet(capacity: capacity)
            if let bit = names.firstIndex(of: name) {
                for id in 0..<capacity where id & (1 << bit) != 0 { members.insert(InstanceID(id)) }
            }
            return members
        }
        for id in 0..<capacity {
            let held = Set(names.indices.filter { id & (1 << $0) != 0 }.map { names[$0] })
            if audience.contains(InstanceID(id)) != condition.isSatisfied(byTopics: held) {
                fatalError("set algebra and brute force disagree on \(canonical) for instance \(id)")
            }
        }
    }
    return 0
}

runFuzzer(fuzzOneInput)
