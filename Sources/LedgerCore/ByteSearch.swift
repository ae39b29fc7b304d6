#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Searching and replacing byte strings: what an erasure looks for in stored events.
package enum ByteSearch {
    /// Whether `needle` occurs in `haystack` (`memchr` for its first byte, then `memcmp`: Glibc's module
    /// does not export `memmem`).
    package static func contains(_ haystack: UnsafeRawBufferPointer, _ needle: [UInt8]) -> Bool {
        guard let first = needle.first, haystack.count >= needle.count, let base = haystack.baseAddress else {
            return false
        }
        return needle.withUnsafeBytes { needleBytes in
            var offset = 0
            let last = haystack.count - needle.count
            while offset <= last {
                guard let found = memchr(base + offset, Int32(first), last - offset + 1) else { return false }
                let position = base.distance(to: UnsafeRawPointer(found))
                if memcmp(base + position, needleBytes.baseAddress!, needle.count) == 0 { return true }
                offset = position + 1
            }
            return false
        }
    }

    package static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        haystack.withUnsafeBytes { contains($0, needle) }
    }

    /// `bytes` with every occurrence of `needle` replaced by `replacement`.
    package static func replacing(_ needle: [UInt8], with replacement: [UInt8], in bytes: [UInt8]) -> [UInt8] {
        var result: [UInt8] = []
        result.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            if index + needle.count <= bytes.count, bytes[index..<(index + needle.count)].elementsEqual(needle) {
                result += replacement
                index += needle.count
            } else {
                result.append(bytes[index])
                index += 1
            }
        }
        return result
    }
}
