import ArgumentParser
import Foundation
import LedgerCore
import LedgerStore
import LedgerQueries
// On Linux, `stat` and its fields are declared by the C module under Dispatch, which MemberImportVisibility
// asks to be imported by name.
#if canImport(CDispatch)
    import CDispatch
#endif
#if canImport(CoreFoundation)
    import CoreFoundation
#endif

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension LedgerCommand {
    /// `ledger import FILE`: builds a ledger from JSON lines of operations, without a server.
    ///
    /// The file is read a chunk at a time, so its size does not bound memory. Into an empty ledger, it is
    /// imported in bulk (``BulkImport``) in one pass: lines are parsed a batch at a time on other threads
    /// (``ParallelLineParser``), each request's events go to the log while the next are parsed
    /// (``OrderedAppends``), and the projections are written once at the end,
    /// as `rebuild` writes them; a malformed line, or any failure, empties the ledger again. A file with a
    /// send, or a ledger with events, is read twice instead: the first pass parses every line (a malformed
    /// file changes nothing), the second appends each request through the live writer. Standard input is
    /// copied to an unlinked temporary file as it is read, for a second pass.
    struct Import: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Append operations from a JSON-lines file (- for standard input); see docs/operations.md.")

        @OptionGroup var common: CommonOptions

        @Argument(help: "JSON-lines file of operations, or - for standard input.")
        var file: String

        @Flag(help: "Never draw the progress bar (it is drawn only when standard error is a terminal).")
        var noProgress = false

        @Flag(
            help: """
                Append through the live writer, checking the whole file first, even into an empty ledger (which \
                is otherwise imported in bulk: the log first, the projections written once at the end).
                """)
        var incremental = false

        func run() async throws {
            let source = try ImportSource(path: file)
            defer { source.close() }
            let progress = ImportProgress(
                enabled: !noProgress && isatty(STDERR_FILENO) == 1, totalBytes: source.sizeBytes)
            let directory = (common.data as NSString).appendingPathComponent(common.projectID.rawValue)
            let existed = FileManager.default.fileExists(atPath: directory + "/data.mdb")
            let ledger = try common.open(.readWrite, recordsAudiences: false)
            defer { ledger.close() }
            let tally: ImportTally
            do {
                tally = try await importFile(source, into: ledger, progress: progress)
            } catch {
                // A ledger this import created is taken away again: nothing is left of a failed import.
                if !existed {
                    ledger.close()
                    Self.removeLedger(in: directory)
                }
                throw error
            }
            try report(tally, head: try ledger.readLog { try $0.head() })
        }

        private func importFile(_ source: ImportSource, into ledger: Ledger, progress: ImportProgress) async throws
            -> ImportTally
        {
            var checker = LineReader(descriptor: source.descriptor, tee: source.spool)
            var operations = 0
            if !incremental, try ledger.readLog({ try $0.head().seq }) == 0 {
                let bulk = try ledger.beginBulkImport()
                switch try await Self.importInBulk(from: &checker, into: bulk, progress: progress) {
                case .imported(let tally): return tally
                case .metSend(let read):
                    // Sends need the live writer (their audiences are computed from the stored projections):
                    // start again the other way, from an empty ledger and the rest of the first pass.
                    try bulk.discard()
                    operations = read
                }
            }

            // Pass 1 (or the rest of it): every line parses, or nothing is appended.
            while let parsed = try checker.withNextLine({ try OperationImport.parse(line: $0, number: $1) }) {
                if parsed != nil { operations += 1 }
                progress.update("checking", bytes: checker.bytesRead, operations: operations)
            }
            progress.finish("checked", bytes: checker.bytesRead, operations: operations)

            // Pass 2: parse again and append. Each send's audience is recorded right after its request, with
            // the request's time, so that an import gives the same log every time (a background recorder
            // would interleave by timing).
            var requests = ImportRequests(reader: LineReader(descriptor: try source.rewind()))
            var tally = ImportTally()
            // One request appending (a child task) while the next is parsed; the scope waits for it.
            try await withThrowingTaskGroup(of: WriteReceipt.self) { appends in
                var inFlight: WriteRequest?
                while true {
                    let next = try requests.next()
                    if let request = inFlight, let receipt = try await appends.next() {
                        tally.count(receipt, of: request)
                        tally.audiences += try await ledger.recordAudiences(of: receipt, time: request.time).count
                        progress.update("appending", bytes: requests.bytesRead, operations: tally.operations)
                    }
                    guard let next else { break }
                    appends.addTask { try await ledger.append(next) }
                    inFlight = next
                }
            }
            progress.finish("appended", bytes: requests.bytesRead, operations: tally.operations)
            return tally
        }

        private enum BulkOutcome {
            case imported(ImportTally)
            /// A send was met after `operations` operations; nothing of the file stays in the ledger.
            case metSend(operations: Int)
        }

        /// One pass: lines parsed into requests, appended in order while the next are parsed, then the
        /// projections written. Anything thrown, and a send met, leave the ledger to be emptied by the caller.
        private static func importInBulk(
            from reader: inout LineReader, into bulk: BulkImport, progress: ImportProgress
        ) async throws -> BulkOutcome {
            var parser = ParallelLineParser()
            var builder = OperationImport.RequestBuilder()
            var appends = OrderedAppends(bulk: bulk)
            var operations = 0
            do {
                var metSend = false
                batches: while let lines = try await parser.next(from: &reader) {
                    for (index, (line, number)) in lines.enumerated() {
                        if case .send = line.operation {
                            // The lines parsed ahead count as checked: the check pass goes on after them.
                            operations += lines.count - index
                            operations += try await parser.drain()
                            metSend = true
                            break batches
                        }
                        operations += 1
                        guard let request = builder.add(line, number: number) else { continue }
                        try await appends.add(request)
                    }
                    progress.update("importing", bytes: reader.bytesRead, operations: operations)
                }
                if metSend {
                    _ = try await appends.finish()
                    return .metSend(operations: operations)
                }
                if let last = builder.finish() { try await appends.add(last) }
                let tally = try await appends.finish()
                progress.finish("imported", bytes: reader.bytesRead, operations: operations)
                // The projections, written once: the import's last few seconds.
                progress.update("indexing", bytes: reader.bytesRead, operations: operations)
                try bulk.finish()
                progress.finish("indexed", bytes: reader.bytesRead, operations: operations)
                return .imported(tally)
            } catch {
                await appends.cancel()
                try? bulk.discard()
                throw error
            }
        }

        /// Removes the files of a ledger this import created (and its directory, once empty).
        private static func removeLedger(in directory: String) {
            for name in ["data.mdb", "lock.mdb", "writer.lock"] {
                try? FileManager.default.removeItem(atPath: directory + "/" + name)
            }
            if (try? FileManager.default.contentsOfDirectory(atPath: directory))?.isEmpty == true {
                try? FileManager.default.removeItem(atPath: directory)
            }
        }

        private func report(_ tally: ImportTally, head: LedgerHead) throws {
            for line in tally.rejected.prefix(20) { printError("rejected: \(line)") }
            if tally.rejectedCount > 20 { printError("rejected: … and \(tally.rejectedCount - 20) more") }
            switch common.format {
            case .json:
                var out = JSONObjectWriter()
                out.field("appended", number: tally.appended)
                out.field("unchanged", number: tally.unchanged)
                out.field("audiences", number: tally.audiences)
                out.field("rejected", number: tally.rejectedCount)
                out.field("headSeq", number: head.seq)
                print(out.finish())
            case .text:
                print(
                    "appended \(tally.appended) events, rejected \(tally.rejectedCount) operations, recorded"
                        + " \(tally.audiences) audience event(s); head seq \(head.seq)"
                        + (tally.unchanged > 0
                            ? "; \(tally.unchanged) operation(s) changed nothing and appended nothing" : ""))
            }
            if tally.rejectedCount > 0 { throw ExitCode(1) }
        }
    }
}

/// The file being imported, open for reading twice; standard input is spooled to an unlinked temporary file.
private struct ImportSource {
    let descriptor: Int32
    /// Where standard input is copied during the first pass; `nil` for a file.
    let spool: Int32?
    /// The file's size, for the progress bar; `nil` for standard input.
    let sizeBytes: Int?

    init(path: String) throws {
        if path == "-" {
            descriptor = STDIN_FILENO
            var template = Array((NSTemporaryDirectory() + "/ledger-import-XXXXXX").utf8CString)
            let spool = mkstemp(&template)
            guard spool >= 0 else {
                throw ValidationError("cannot make a temporary file for standard input: \(Self.lastError)")
            }
            unlink(String(cString: template))
            self.spool = spool
            sizeBytes = nil
        } else {
            let descriptor = open(path, O_RDONLY)
            guard descriptor >= 0 else { throw ValidationError("cannot read \(path): \(Self.lastError)") }
            var status = stat()
            guard fstat(descriptor, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG else {
                _ = closeDescriptor(descriptor)
                throw ValidationError("cannot read \(path): not a regular file")
            }
            self.descriptor = descriptor
            spool = nil
            sizeBytes = Int(status.st_size)
        }
    }

    /// The descriptor to read the second pass from, at its start.
    func rewind() throws -> Int32 {
        let target = spool ?? descriptor
        guard lseek(target, 0, SEEK_SET) == 0 else {
            throw ValidationError("cannot read the file again: \(Self.lastError)")
        }
        return target
    }

    func close() {
        if let spool { _ = closeDescriptor(spool) }
        if descriptor != STDIN_FILENO { _ = closeDescriptor(descriptor) }
    }

    private static var lastError: String { String(cString: strerror(errno)) }
}

/// `close(2)`, named apart from ``ImportSource/close()``.
private func closeDescriptor(_ descriptor: Int32) -> Int32 { close(descriptor) }

/// The second pass: lines parsed into requests, one at a time.
private struct ImportRequests: ~Copyable {
    private var reader: LineReader
    private var builder = OperationImport.RequestBuilder()
    private var ended = false

    init(reader: consuming LineReader) { self.reader = reader }

    var bytesRead: Int { reader.bytesRead }

    /// The next whole request; `nil` after the last.
    mutating func next() throws -> WriteRequest? {
        while !ended {
            let read = try reader.withNextLine { (bytes, number) throws -> WriteRequest? in
                guard let line = try OperationImport.parse(line: bytes, number: number) else { return nil }
                return builder.add(line, number: number)
            }
            switch read {
            case nil: ended = true
            case .some(nil): continue
            case .some(.some(let request)): return request
            }
        }
        return builder.finish()
    }
}

/// A bulk import's requests on their way into the log: appended in order on a ``SerialWorker`` (outside
/// Swift's cooperative pool, which a blocking commit would otherwise take a thread of, leaving the parsing
/// tasks one), while the caller parses up to ``depth`` requests ahead. The first failure stops the worker:
/// the requests queued after it are not appended.
private struct OrderedAppends {
    static let depth = 3

    private let worker: SerialWorker<WriteRequest, Void>
    /// Each queued request's result, in the order queued.
    private var results: AsyncStream<Result<WriteReceipt, any Error>>.Iterator
    private var pending: [WriteRequest] = []
    private var tally = ImportTally()

    init(bulk: BulkImport) {
        let (stream, results) = AsyncStream.makeStream(of: Result<WriteReceipt, any Error>.self)
        self.results = stream.makeAsyncIterator()
        worker = SerialWorker(name: "ledger-import", state: ()) { _, requests in
            for request in requests {
                let result = Result { try bulk.append(request) }
                results.yield(result)
                if case .failure(let error) = result {
                    results.finish()
                    throw error
                }
            }
        }
    }

    /// Queues `request` after the others; waits for the oldest when ``depth`` are queued.
    mutating func add(_ request: WriteRequest) async throws {
        guard worker.enqueue(request) else {
            // An earlier request failed: its result, still to be taken, says why.
            while !pending.isEmpty { try await takeOldest() }
            throw StoreError(.invalidArgument, "an earlier request failed")
        }
        pending.append(request)
        while pending.count > Self.depth { try await takeOldest() }
    }

    /// Waits for every queued request; what they did.
    mutating func finish() async throws -> ImportTally {
        while !pending.isEmpty { try await takeOldest() }
        worker.stop()
        return tally
    }

    /// After a failure: waits for the queued requests to end (those after a failed one are not appended),
    /// so that nothing is appended after the caller empties the ledger.
    mutating func cancel() async {
        worker.stop()
        pending = []
    }

    private mutating func takeOldest() async throws {
        let request = pending.removeFirst()
        guard let result = await results.next() else {
            throw StoreError(.invalidArgument, "an earlier request failed")
        }
        tally.count(try result.get(), of: request)
    }
}

/// What the appends did.
private struct ImportTally {
    var appended = 0
    var unchanged = 0
    var audiences = 0
    var rejectedCount = 0
    /// The first rejections, described.
    var rejected: [String] = []

    var operations: Int { appended + unchanged + rejectedCount }

    mutating func count(_ receipt: WriteReceipt, of request: WriteRequest) {
        for (index, outcome) in receipt.outcomes.enumerated() {
            switch outcome {
            case .rejected(let rejection):
                rejectedCount += 1
                if rejected.count < 20 {
                    rejected.append("request \(request.requestID) operation \(index + 1): \(rejection)")
                }
            case .unchanged: unchanged += 1
            case .appended, .sent: appended += 1
            }
        }
    }
}
