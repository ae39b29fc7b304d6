import Crypto
import Foundation
import LedgerCore
import LedgerStore

/// A cosigner's Ed25519 key on disk (a witness's, a cluster node's): one line, `COSIGNER-ED25519
/// <base64 32-byte seed>`, mode 0600, made on first use. The name is not in the file: it is the command line's
/// or the configuration's, and the vkey covers it (C2SP tlog-cosignature).
public enum CosignerKeyFile {
    private static let prefix = "COSIGNER-ED25519 "

    /// The key at `path` under `name`, made when the file is missing and `create`.
    ///
    /// - Throws: `StoreError` `.notFound` (missing, not `create`), `.invalidArgument` (a file others can read,
    ///   one that is not a cosigner key, or a bad name), `.unavailable` (I/O).
    public static func open(_ path: String, name: String, create: Bool = true) throws -> Cosigner {
        let seed: [UInt8]
        if FileManager.default.fileExists(atPath: path) {
            seed = try SecretKeyFile.load(path, parse: parse, what: "a cosigner key (\(prefix)<base64 seed>)")
        } else {
            guard create else { throw StoreError(.notFound, "there is no key at \(path)") }
            let fresh = Array(Curve25519.Signing.PrivateKey().rawRepresentation)
            seed = try SecretKeyFile.create(path, text: prefix + Data(fresh).base64EncodedString(), parse: parse)
        }
        do {
            return try Cosigner(name: name, seed: seed)
        } catch {
            throw StoreError(.invalidArgument, "a cosigner name is non-empty, without spaces or +")
        }
    }

    private static func parse(_ line: String) -> [UInt8]? {
        guard line.hasPrefix(prefix), let seed = Data(base64Encoded: String(line.dropFirst(prefix.count))),
            seed.count == 32
        else { return nil }
        return Array(seed)
    }
}
