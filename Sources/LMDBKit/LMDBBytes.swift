/// A value that can lend its bytes to LMDB as a key or data item.
///
/// Integers are lent in big-endian order so that integer keys sort numerically.
public protocol LMDBBytes {
    func withLMDBBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R
}

extension UnsafeRawBufferPointer: LMDBBytes {
    @inlinable
    public func withLMDBBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R { try body(self) }
}

extension Array: LMDBBytes where Element == UInt8 {
    @inlinable
    public func withLMDBBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try withUnsafeBytes(body)
    }
}

extension ArraySlice: LMDBBytes where Element == UInt8 {
    @inlinable
    public func withLMDBBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try withUnsafeBytes(body)
    }
}

extension String: LMDBBytes {
    /// The UTF-8 bytes of the string.
    @inlinable
    public func withLMDBBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        if let result = try utf8.withContiguousStorageIfAvailable({ try body(UnsafeRawBufferPointer($0)) }) {
            return result
        }
        return try Array(utf8).withUnsafeBytes(body)
    }
}

extension UInt64: LMDBBytes {
    /// The eight big-endian bytes of the integer.
    @inlinable
    public func withLMDBBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try Swift.withUnsafeBytes(of: bigEndian, body)
    }
}

extension UInt32: LMDBBytes {
    /// The four big-endian bytes of the integer.
    @inlinable
    public func withLMDBBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try Swift.withUnsafeBytes(of: bigEndian, body)
    }
}

extension UnsafeRawBufferPointer {
    /// Reads a big-endian `UInt64` at `offset`.
    @inlinable
    public func loadBigEndianUInt64(at offset: Int = 0) -> UInt64 {
        UInt64(bigEndian: loadUnaligned(fromByteOffset: offset, as: UInt64.self))
    }

    /// Reads a big-endian `UInt32` at `offset`.
    @inlinable
    public func loadBigEndianUInt32(at offset: Int = 0) -> UInt32 {
        UInt32(bigEndian: loadUnaligned(fromByteOffset: offset, as: UInt32.self))
    }
}

/// Up to 24 bytes built in place, for composite keys and values without a heap allocation.
public struct PackedBytes: LMDBBytes {
    private var storage: (UInt64, UInt64, UInt64) = (0, 0, 0)
    public private(set) var count = 0

    public init() {}

    @inlinable
    public mutating func append(_ value: UInt8) { appendBytes(of: value) }

    /// Appends the big-endian bytes of `value`.
    @inlinable
    public mutating func append(_ value: UInt32) { appendBytes(of: value.bigEndian) }

    /// Appends the big-endian bytes of `value`.
    @inlinable
    public mutating func append(_ value: UInt64) { appendBytes(of: value.bigEndian) }

    @usableFromInline
    mutating func appendBytes<T>(of value: T) {
        let size = MemoryLayout<T>.size
        precondition(count + size <= 24, "PackedBytes holds at most 24 bytes")
        let offset = count
        withUnsafeMutableBytes(of: &storage) { buffer in
            withUnsafeBytes(of: value) { source in
                buffer.baseAddress!.advanced(by: offset).copyMemory(from: source.baseAddress!, byteCount: size)
            }
        }
        count += size
    }

    public func withLMDBBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try withUnsafeBytes(of: storage) { try body(UnsafeRawBufferPointer(rebasing: $0[..<count])) }
    }
}
