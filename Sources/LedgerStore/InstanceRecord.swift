import LMDBKit
import LedgerCore

/// The `instances` value: `registeredSince u64 (0 = not registered) ‖ tokenLength u16 ‖ token ‖
/// platformLength u16 ‖ platform ‖ appID` (platform and appID empty when not given).
struct InstanceRecord: Equatable {
    var registeredSince: UInt64
    var token: String
    var platform: String
    var appID: String

    var isRegistered: Bool { registeredSince != 0 }

    var encoded: [UInt8] {
        var writer = ByteWriter(capacity: 12 + token.utf8.count + platform.utf8.count + appID.utf8.count)
        writer.append(registeredSince)
        writer.append(UInt16(token.utf8.count))
        writer.append(token)
        writer.append(UInt16(platform.utf8.count))
        writer.append(platform)
        writer.append(appID)
        return writer.bytes
    }

    init(registeredSince: UInt64, token: String, platform: String, appID: String) {
        self.registeredSince = registeredSince
        self.token = token
        self.platform = platform
        self.appID = appID
    }

    init(decoding bytes: UnsafeRawBufferPointer) throws {
        guard bytes.count >= 12 else { throw StoreError(.corrupt, "instance record of \(bytes.count) bytes") }
        registeredSince = bytes.loadBigEndianUInt64(at: 0)
        let tokenLength = Int(UInt16(bigEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt16.self)))
        let platformOffset = 10 + tokenLength
        guard bytes.count >= platformOffset + 2 else { throw StoreError(.corrupt, "instance record truncated") }
        token = String(decoding: bytes[10..<platformOffset], as: UTF8.self)
        let platformLength = Int(
            UInt16(bigEndian: bytes.loadUnaligned(fromByteOffset: platformOffset, as: UInt16.self)))
        let appOffset = platformOffset + 2 + platformLength
        guard bytes.count >= appOffset else { throw StoreError(.corrupt, "instance record truncated") }
        platform = String(decoding: bytes[(platformOffset + 2)..<appOffset], as: UTF8.self)
        appID = String(decoding: bytes[appOffset...], as: UTF8.self)
    }

    /// Reads only the registration seq (the hot path of every subscription change).
    static func registeredSince(in bytes: UnsafeRawBufferPointer) throws -> UInt64 {
        guard bytes.count >= 8 else { throw StoreError(.corrupt, "instance record of \(bytes.count) bytes") }
        return bytes.loadBigEndianUInt64(at: 0)
    }
}
