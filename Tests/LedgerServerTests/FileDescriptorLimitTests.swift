import LedgerServer
import Testing

@Suite("The connection cap under the limit on open files")
struct FileDescriptorLimitTests {
    @Test("the cap is the configured one while the limit leaves room for it, else what the limit leaves")
    func connectionCap() {
        let reserve = FileDescriptorLimit.reserve(projects: 1)
        #expect(reserve == 72)
        #expect(FileDescriptorLimit.connectionCap(requested: 10_000, limit: 1_048_576, reserve: reserve) == 10_000)
        #expect(FileDescriptorLimit.connectionCap(requested: 10_000, limit: 10_072, reserve: reserve) == 10_000)
        #expect(FileDescriptorLimit.connectionCap(requested: 10_000, limit: 10_071, reserve: reserve) == 9_999)
        #expect(FileDescriptorLimit.connectionCap(requested: 10_000, limit: 1_024, reserve: reserve) == 952)
        // A limit below the reserve still lets one connection in; an unknown or unbounded one changes nothing.
        #expect(FileDescriptorLimit.connectionCap(requested: 10_000, limit: 20, reserve: reserve) == 1)
        #expect(FileDescriptorLimit.connectionCap(requested: 10_000, limit: nil, reserve: reserve) == 10_000)
        #expect(FileDescriptorLimit.connectionCap(requested: 10_000, limit: .max, reserve: reserve) == 10_000)
        #expect(FileDescriptorLimit.connectionCap(requested: 5, limit: 0, reserve: 0) == 1)
    }

    @Test("the reserve grows with the projects served")
    func reserveGrowsWithProjects() {
        #expect(FileDescriptorLimit.reserve(projects: 0) == 64)
        #expect(FileDescriptorLimit.reserve(projects: 100) == 864)
        #expect(FileDescriptorLimit.reserve(projects: -1) == 64)
    }
}
