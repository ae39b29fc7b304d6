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
    /// Reads a big-endian `UInt64` at `offset`. Bytes outside the buffer read as zero: a stored value shorter
    /// than its layout (a damaged file) gives a wrong number — which `verify` reports — and never a read
    /// past the value, which in a release build would not trap but could run off the end of the map.
    @inlinable
    public func loadBigEndianUInt64(at offset: Int = 0) -> UInt64 {
        guard offset >= 0, offset <= count - 8 else { return UInt64(loadBigEndianPadded(at: offset, width: 8)) }
        return UInt64(bigEndian: loadUnaligned(fromByteOffset: offset, as: UInt64.self))
    }

    /// Reads a big-endian `UInt32` at `offset`; bytes outside the buffer read as zero
    /// (``loadBigEndianUInt64(at:)``).
    @inlinable
    public func loadBigEndianUInt32(at offset: Int = 0) -> UInt32 {
        guard offset >= 0, offset <= count - 4 else {
            return UInt32(truncatingIfNeeded: loadBigEndianPadded(at: offset, width: 4))
        }
        return UInt32(bigEndian: loadUnaligned(fromByteOffset: offset, as: UInt32.self))
    }

    /// `width` bytes from `offset`, big-endian, those outside the buffer as zero.
    @usableFromInline
    func loadBigEndianPadded(at offset: Int, width: Int) -> UInt64 {
        var value: UInt64 = 0
        for index in 0..<width {
            let (position, overflow) = offset.addingReportingOverflow(index)
            let byte = !overflow && position >= 0 && position < count ? self[position] : 0
            value = value << 8 | UInt64(byte)
        }
        return value
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
