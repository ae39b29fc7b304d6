// libFuzzer target for the condition parser (FuzzHarness.checkCondition). Build and run with tools/fuzz/run.sh.

import FuzzDriver
import FuzzHarness

runFuzzer { data, size in
    guard let data else { return 0 }
    do { try FuzzHarness.checkCondition(UnsafeRawBufferPointer(start: data, count: size)) } catch {
        fatalError("\(error)")
    }
    return 0
}
