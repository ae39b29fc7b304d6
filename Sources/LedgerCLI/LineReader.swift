#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Reads a file a chunk at a time and hands out its lines, so that a file of any size is read in bounded
/// memory (a chunk plus the longest line).
///
/// Written on `read(2)` rather than `FileHandle`: each line is lent as a slice of the chunk, with no `Data` or
/// `String` made for lines nobody keeps.
struct LineReader: ~Copyable {
    /// A line longer than this is an error rather than a reason to buffer without end.
    static let maximumLineBytes = 16 << 20

    private let descriptor: Int32
    /// Where every byte read is also written (standard input kept for a second pass), if anywhere.
    private let tee: Int32?
    private var buffer: [UInt8]
    /// The unread bytes are `buffer[start..<end]`.
    private var start = 0
    private var end = 0
    private var atEndOfFile = false
    /// Bytes read from the file so far.
    private(set) var bytesRead = 0
    /// Lines handed out so far (the number of the last one).
    private(set) var lineNumber = 0

    /// Reads from `descriptor`, which the caller keeps open and closes, copying what it reads to `tee`.
    init(descriptor: Int32, tee: Int32? = nil, chunkBytes: Int = 1 << 20) {
        self.descriptor = descriptor
        self.tee = tee
        self.buffer = [UInt8](repeating: 0, count: max(chunkBytes, 4096))
    }

    /// Calls `body` with the next line (without its `\n`; a final line without one counts) and its number,
    /// and returns what `body` returns; `nil` once the file has ended.
    ///
    /// - Throws: `LineReaderError` when the file cannot be read or a line is longer than
    ///   ``maximumLineBytes``; whatever `body` throws.
    mutating func withNextLine<R>(_ body: (UnsafeBufferPointer<UInt8>, Int) throws -> R) throws -> R? {
        while true {
            let newline: Int? = buffer.withUnsafeBufferPointer { bytes in
                guard start < end else { return nil }
                return memchr(bytes.baseAddress! + start, Int32(UInt8(ascii: "\n")), end - start).map {
                    UnsafePointer<UInt8>($0.assumingMemoryBound(to: UInt8.self)) - bytes.baseAddress!
                }
            }
            let lineEnd: Int
            if let newline {
                lineEnd = newline
            } else if atEndOfFile {
                guard start < end else { return nil }
                lineEnd = end
            } else {
                try fill()
                continue
            }
            lineNumber += 1
            let number = lineNumber
            let lineStart = start
            start = min(lineEnd + 1, end)
            return try buffer.withUnsafeBufferPointer { bytes in
                try body(UnsafeBufferPointer(rebasing: bytes[lineStart..<lineEnd]), number)
            }
        }
    }

    /// Moves the unread bytes to the front and reads more after them, growing the buffer for a long line.
    private mutating func fill() throws {
        if start > 0 {
            let unread = end - start
            buffer.withUnsafeMutableBufferPointer { bytes in
                _ = memmove(bytes.baseAddress!, bytes.baseAddress! + start, unread)
            }
            start = 0
            end = unread
        }
        if end == buffer.count {
            guard buffer.count < Self.maximumLineBytes else {
                throw LineReaderError(
                    "line \(lineNumber + 1) is longer than \(Self.maximumLineBytes) bytes")
            }
            buffer.append(contentsOf: repeatElement(0, count: min(buffer.count, Self.maximumLineBytes - buffer.count)))
        }
        while true {
            let count = buffer.withUnsafeMutableBufferPointer { bytes in
                read(descriptor, bytes.baseAddress! + end, bytes.count - end)
            }
            if count < 0 {
                if errno == EINTR { continue }
                throw LineReaderError("read failed: \(String(cString: strerror(errno)))")
            }
            if count == 0 { atEndOfFile = true }
            if let tee { try write(tee, from: end, count: count) }
            end += count
            bytesRead += count
            return
        }
    }
}

extension LineReader {
    /// Writes `buffer[offset..<offset + count]` to `target`, all of it.
    private func write(_ target: Int32, from offset: Int, count: Int) throws {
        var written = 0
        while written < count {
            let result = buffer.withUnsafeBufferPointer { bytes in
                posixWrite(target, bytes.baseAddress! + offset + written, count - written)
            }
            if result < 0 {
                if errno == EINTR { continue }
                throw LineReaderError("writing the copy of standard input failed: \(String(cString: strerror(errno)))")
            }
            written += result
        }
    }
}

/// `write(2)`, named apart from the method above.
private func posixWrite(_ descriptor: Int32, _ bytes: UnsafeRawPointer, _ count: Int) -> Int {
    write(descriptor, bytes, count)
}

struct LineReaderError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
