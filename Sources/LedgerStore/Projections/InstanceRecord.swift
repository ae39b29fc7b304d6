import LMDBKit
import LedgerCore

/// The `instances` value: `tokenLength u16 ‖ token ‖ platformLength u16 ‖ platform ‖ appID` (platform and
/// appID empty when not given). Whether the instance is registered lives in the `universe` database.
struct InstanceRecord: Equatable {
    var token: String
    var platform: String
    var appID: String

    var encoded: [UInt8] {
        var writer = ByteWriter(capacity: 4 + token.utf8.count + platform.utf8.count + appID.utf8.count)
        // Lengths are u16: requests and imports cap these fields far below that, and a value past it (only a
        // hand-made log could hold one) is cut rather than allowed to trap during a rebuild.
        let tokenBytes = Array(token.utf8.prefix(Int(UInt16.max)))
        let platformBytes = Array(platform.utf8.prefix(Int(UInt16.max)))
        writer.append(UInt16(tokenBytes.count))
        writer.append(tokenBytes)
        writer.append(UInt16(platformBytes.count))
        writer.append(platformBytes)
        writer.append(appID)
        return writer.bytes
    }

    init(token: String, platform: String, appID: String) {
        self.token = token
        self.platform = platform
        self.appID = appID
    }

    init(decoding bytes: UnsafeRawBufferPointer) throws {
        guard bytes.count >= 4 else { throw StoreError(.corrupt, "instance record of \(bytes.count) bytes") }
        let tokenLength = Int(UInt16(bigEndian: bytes.loadUnaligned(fromByteOffset: 0, as: UInt16.self)))
        let platformOffset = 2 + tokenLength
        guard bytes.count >= platformOffset + 2 else { throw StoreError(.corrupt, "instance record truncated") }
        token = String(decoding: bytes[2..<platformOffset], as: UTF8.self)
        let platformLength = Int(
            UInt16(bigEndian: bytes.loadUnaligned(fromByteOffset: platformOffset, as: UInt16.self)))
        let appOffset = platformOffset + 2 + platformLength
        guard bytes.count >= appOffset else { throw StoreError(.corrupt, "instance record truncated") }
        platform = String(decoding: bytes[(platformOffset + 2)..<appOffset], as: UTF8.self)
        appID = String(decoding: bytes[appOffset...], as: UTF8.self)
    }

    /// Just the token (the recipient list reads nothing else).
    static func token(in bytes: UnsafeRawBufferPointer) throws -> String {
        guard bytes.count >= 2 else { throw StoreError(.corrupt, "instance record of \(bytes.count) bytes") }
        let tokenLength = Int(UInt16(bigEndian: bytes.loadUnaligned(fromByteOffset: 0, as: UInt16.self)))
        guard bytes.count >= 2 + tokenLength else { throw StoreError(.corrupt, "instance record truncated") }
        return String(decoding: bytes[2..<(2 + tokenLength)], as: UTF8.self)
    }
}
