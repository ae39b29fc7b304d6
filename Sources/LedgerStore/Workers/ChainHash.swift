/// A chain hash (32 bytes) copied out of the log for the tree's thread.
package struct ChainHash: Sendable {
    private var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)

    package init(_ bytes: UnsafeRawBufferPointer) {
        withUnsafeMutableBytes(of: &words) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes.prefix(32))) }
    }

    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R { Swift.withUnsafeBytes(of: words, body) }
}
