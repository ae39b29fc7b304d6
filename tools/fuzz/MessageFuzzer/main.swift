// libFuzzer target for what a request body goes through before anything is appended (FuzzHarness.checkMessage).
// Build and run with tools/fuzz/run.sh.

import FuzzDriver
import FuzzHarness

runFuzzer { data, size in
    guard let data else { return 0 }
    do { try FuzzHarness.checkMessage(UnsafeBufferPointer(start: data, count: size)) } catch {
        fatalError("\(error)")
    }
    return 0
}
