#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Synchronization

/// The kernel's random numbers (`/dev/urandom`), read 4 KiB at a time and handed out eight bytes at a time,
/// each once.
///
/// `SystemRandomNumberGenerator` makes one system call per `next()`: two per request id, and the kernel's
/// per-call set-up (`crng_make_state`) made request ids 1.8 % of a per-token subscribe's server samples. From
/// this pool a request id costs a lock and one system call per 256 ids.
///
/// - Note: Thread-safe: every generator shares one pool behind a mutex.
public struct PooledSystemRandomNumberGenerator: RandomNumberGenerator, Sendable {
    public init() {}

    public mutating func next() -> UInt64 { Self.pool.next() }

    /// Fills `buffer` with words from the pool under one lock (a seal key's four words: ``Seal/newKey()``).
    public mutating func fill(_ buffer: UnsafeMutableBufferPointer<UInt64>) { Self.pool.fill(buffer) }

    private static let pool = Pool()

    private final class Pool: Sendable {
        static let words = 512
        private let state = Mutex(State())

        struct State {
            var words = [UInt64](repeating: 0, count: Pool.words)
            /// The next word to hand out; `words.count` when all are spent.
            var next = Pool.words
        }

        func fill(_ buffer: UnsafeMutableBufferPointer<UInt64>) {
            state.withLock { state in
                for index in buffer.indices {
                    if state.next == state.words.count {
                        state.words.withUnsafeMutableBytes { PooledSystemRandomNumberGenerator.fill($0) }
                        state.next = 0
                    }
                    buffer[index] = state.words[state.next]
                    state.next += 1
                }
            }
        }

        func next() -> UInt64 {
            state.withLock { state in
                if state.next == state.words.count {
                    state.words.withUnsafeMutableBytes { PooledSystemRandomNumberGenerator.fill($0) }
                    state.next = 0
                }
                defer { state.next += 1 }
                return state.words[state.next]
            }
        }
    }

    /// Fills `buffer` from `/dev/urandom` (one descriptor, opened on first use and kept), retrying on
    /// interruption and short reads; where it cannot be opened or read, from `SystemRandomNumberGenerator`.
    public static func fill(_ buffer: UnsafeMutableRawBufferPointer) {
        var filled = 0
        if let descriptor = urandom {
            while filled < buffer.count {
                let count = read(descriptor, buffer.baseAddress! + filled, buffer.count - filled)
                if count > 0 {
                    filled += count
                } else if count < 0 && errno == EINTR {
                    continue
                } else {
                    break
                }
            }
        }
        var system = SystemRandomNumberGenerator()
        while filled < buffer.count {
            var word = system.next() as UInt64
            let count = min(8, buffer.count - filled)
            withUnsafeBytes(of: &word) { bytes in
                (buffer.baseAddress! + filled).copyMemory(from: bytes.baseAddress!, byteCount: count)
            }
            filled += count
        }
    }

    /// `getrandom(2)` is not in Swift's Glibc module; `/dev/urandom` reads the same generator.
    private static let urandom: Int32? = {
        let descriptor = open("/dev/urandom", O_RDONLY | O_CLOEXEC)
        return descriptor >= 0 ? descriptor : nil
    }()
}
