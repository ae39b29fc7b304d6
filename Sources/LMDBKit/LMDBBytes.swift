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
