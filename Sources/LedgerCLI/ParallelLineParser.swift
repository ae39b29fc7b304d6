import LedgerStore
import LedgerQueries

/// Parses the lines of an import on other threads, a batch at a time, up to ``depth`` batches ahead of the
/// caller, and hands them out in file order.
///
/// Why: once the bulk import appended the log alone, parsing was the longest of its threads (2M lines: about
/// 6 CPU-seconds against 3.5 for deciding, encoding and committing); on one thread it left the second core
/// idle a fifth of the time. Splitting lines stays on the caller's thread (a `memchr` per line); each batch
/// of about 1 MiB of lines is copied out and parsed in a task of its own.
struct ParallelLineParser: ~Copyable {
    static let depth = 3

    private var pending: [Task<[ParsedLine], any Error>] = []
    private var atEnd = false

    /// An operation and the number of its line.
    typealias ParsedLine = (line: OperationImport.Line, number: Int)

    /// The next batch's operations, in file order (blank lines and comments left out); `nil` after the last.
    ///
    /// - Throws: the first malformed line's error (in file order); the reader's errors.
    mutating func next(from reader: inout LineReader) async throws -> [ParsedLine]? {
        while !atEnd, pending.count < Self.depth {
            var batch = LineBatch(firstNumber: reader.lineNumber + 1)
            while !batch.isFull, try reader.withNextLine({ line, _ in batch.append(line) }) != nil {}
            if batch.isEmpty {
                atEnd = true
            } else {
                pending.append(Task { [batch] in try batch.parse() })
            }
        }
        guard !pending.isEmpty else { return nil }
        return try await pending.removeFirst().value
    }

    /// The number of operations in the batches parsed ahead and not handed out, which it waits for.
    ///
    /// - Throws: the first malformed line's error among them.
    mutating func drain() async throws -> Int {
        var operations = 0
        while !pending.isEmpty { operations += try await pending.removeFirst().value.count }
        return operations
    }
}

/// Lines copied out of the reader's buffer, to be parsed on another thread.
private struct LineBatch: Sendable {
    /// About how many bytes of lines a batch holds (a longer line makes one batch of its own).
    static let targetBytes = 1 << 20

    let firstNumber: Int
    private var bytes: [UInt8] = []
    /// Where each line ends in `bytes` (it starts where the one before ends).
    private var ends: [Int] = []

    init(firstNumber: Int) {
        self.firstNumber = firstNumber
        bytes.reserveCapacity(Self.targetBytes + 4096)
    }

    var isFull: Bool { bytes.count >= Self.targetBytes }
    var isEmpty: Bool { ends.isEmpty }

    mutating func append(_ line: UnsafeBufferPointer<UInt8>) {
        bytes.append(contentsOf: line)
        ends.append(bytes.count)
    }

    /// Each line's operation with its number, in order.
    ///
    /// - Throws: the first malformed line's error.
    func parse() throws -> [ParallelLineParser.ParsedLine] {
        var parsed: [ParallelLineParser.ParsedLine] = []
        parsed.reserveCapacity(ends.count)
        try bytes.withUnsafeBufferPointer { bytes in
            var start = 0
            for (index, end) in ends.enumerated() {
                let number = firstNumber + index
                if let line = try OperationImport.parse(
                    line: UnsafeBufferPointer(rebasing: bytes[start..<end]), number: number)
                {
                    parsed.append((line, number))
                }
                start = end
            }
        }
        return parsed
    }
}
