/// The token Apple issues an app for one device (`didRegisterForRemoteNotificationsWithDeviceToken`), and which
/// APNs environment it belongs to.
public struct APNsDeviceToken: Sendable, Hashable {
    /// The shortest and longest token accepted, in bytes. Apple's tokens are 32 bytes today and documented as
    /// variable in length.
    public static let byteRange = 16...200

    /// The token's bytes.
    public let bytes: [UInt8]
    /// Issued to a development build: pushed to the sandbox endpoint.
    public let sandbox: Bool

    /// - Throws: `.invalidArgument` for a token outside ``byteRange``.
    public init(bytes: [UInt8], sandbox: Bool) throws(LedgerCoreError) {
        guard Self.byteRange.contains(bytes.count) else {
            throw LedgerCoreError(
                .invalidArgument, field: "apnsToken",
                "an APNs token is \(Self.byteRange.lowerBound) to \(Self.byteRange.upperBound) bytes")
        }
        self.bytes = bytes
        self.sandbox = sandbox
    }

    /// A token as apps send it: hex digits (either case), an even number of them.
    ///
    /// - Throws: `.invalidArgument` naming `field` for anything else.
    public init(hex: String, sandbox: Bool, field: String = "apnsToken") throws(LedgerCoreError) {
        guard hex.utf8.count <= 2 * Self.byteRange.upperBound, let bytes = Hex.decode(hex) else {
            throw LedgerCoreError(
                .invalidArgument, field: field,
                "an APNs token is an even number of hex digits, \(2 * Self.byteRange.lowerBound) to"
                    + " \(2 * Self.byteRange.upperBound)")
        }
        do {
            try self.init(bytes: bytes, sandbox: sandbox)
        } catch {
            throw LedgerCoreError(.invalidArgument, field: field, error.message)
        }
    }

    /// Lowercase hex: the path of the push (`/3/device/<hex>`) and how audits print it.
    public var hex: String { Hex.encode(bytes) }
}
