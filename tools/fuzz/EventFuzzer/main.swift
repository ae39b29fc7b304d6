// libFuzzer target for the stored-event decoder (FuzzHarness.checkEvent). Build and run with tools/fuzz/run.sh.
// `EventFuzzer --write-seeds DIR` writes FuzzHarness.eventSeeds() there, the starting corpus.

import Foundation
import FuzzDriver
import FuzzHarness

if CommandLine.arguments.count == 3, CommandLine.arguments[1] == "--write-seeds" {
    for (index, seed) in FuzzHarness.eventSeeds().enumerated() {
        _ = FileManager.default.createFile(atPath: CommandLine.arguments[2] + "/seed-\(index)", contents: Data(seed))
    }
    exit(0)
}

runFuzzer { data, size in
    guard let data else { return 0 }
    do { try FuzzHarness.checkEvent(UnsafeRawBufferPointer(start: data, count: size)) } catch {
        fatalError("\(error)")
    }
    return 0
}
