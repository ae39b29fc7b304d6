import Foundation

extension NSLock {
    /// `body` with the lock held (`NSLocking.withLock` needs iOS 16).
    func locked<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        lock()
        defer { unlock() }
        return try body()
    }
}
