import Foundation

extension LedgerBench {
    /// `ledger import` of a JSON-lines file (a child process, release build, progress bar off): registrations
    /// then random subscriptions over 500 topics, against raw LMDB puts in durable transactions of 1,000 —
    /// the import row. The ledger starts with the default map, so map growth is part of what is measured.
    /// Twice on the same file: into an empty ledger as it comes (in bulk), and with `--incremental` (through
    /// the live writer, the path of a ledger with events).
    func importWorkloads(operations: Int) throws -> [BenchResult] {
        let directory = scratchDirectory("import")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/operations.jsonl"
        let instances = max(operations / 10, 1)
        var generator = SplitMix(seed: seed)
        var text = ""
        text.reserveCapacity(operations * 120)
        for index in 0..<instances {
            text +=
                #"{"op":"register","token":"bench-\#(index)-abcdefghijklmnopqrstuvwxyz0123456789","#
                + #""platform":"ios","appId":"com.example"}"# + "\n"
        }
        for _ in instances..<operations {
            let instance = Int.random(in: 0..<instances, using: &generator)
            let topic = Int.random(in: 0..<500, using: &generator)
            text +=
                #"{"op":"subscribe","token":"bench-\#(instance)-abcdefghijklmnopqrstuvwxyz0123456789","#
                + #""topic":"topic-\#(topic)","via":"iid"}"# + "\n"
        }
        try Data(text.utf8).write(to: URL(fileURLWithPath: file))
        let bytes = text.utf8.count
        text = ""

        let baseline = try rawPuts(count: operations, batch: 1000, valueSize: 120)
        return try [
            ("ledger import, \(operations) operations (JSON lines), empty ledger: bulk", []),
            ("ledger import --incremental, \(operations) operations (JSON lines)", ["--incremental"]),
        ].map { name, flags in
            let dataDirectory = directory + "/data" + flags.joined()
            defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
            let process = Process()
            process.executableURL = URL(fileURLWithPath: ledgerBinary)
            process.arguments =
                ["import", file, "--data", dataDirectory, "--format", "json", "--no-progress"] + flags
            let output = Pipe()
            process.standardOutput = output
            let start = ContinuousClock.now
            try process.run()
            let report = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            let elapsed = (ContinuousClock.now - start).seconds
            guard process.terminationStatus == 0,
                let json = try JSONSerialization.jsonObject(with: report) as? [String: Any],
                let appended = json["appended"] as? Int, let unchanged = json["unchanged"] as? Int,
                appended + unchanged == operations
            else {
                throw BenchError("ledger import failed: \(String(decoding: report, as: UTF8.self))")
            }
            return BenchResult(
                name: name, unit: "events/s", value: Double(appended) / elapsed,
                baselineName: "raw LMDB puts, batch 1000, 120 B, fsync", baseline: baseline,
                notes: "\(bytes >> 20) MiB file, \(appended) events appended, \(String(format: "%.2f", elapsed)) s "
                    + "including process start"
                    + (flags.isEmpty ? " (one pass; projections written at the end)" : " (check pass, then append)"))
        }
    }
}
