import Foundation

/// A file an operator names in the configuration — a secret (a signing or TLS key, the peer secret) or public
/// material (a certificate chain, trusted roots) — checked before it is read.
///
/// Not a regular file: a FIFO or a device would block the start with no message (a `caFile` that was a FIFO
/// did). A secret others can read is no longer one's own. Public material others can write could be replaced
/// (a root added to what the server trusts).
public enum ConfiguredFile {
    public enum Kind: Sendable {
        case secret
        case publicMaterial
    }

    /// Why `path` cannot be used as `kind`, or `nil` when it can (symbolic links are followed).
    public static func problem(at path: String, kind: Kind) -> String? {
        var status = stat()
        guard stat(path, &status) == 0 else {
            return "\(path) cannot be read (\(String(cString: strerror(errno))))"
        }
        guard status.st_mode & S_IFMT == S_IFREG else { return "\(path) is not a regular file" }
        let mode = String(status.st_mode & 0o777, radix: 8)
        switch kind {
        case .secret where status.st_mode & 0o007 != 0:
            return "\(path) can be read by others (mode \(mode)); `chmod 600` it (or 640 with a group of its own)"
        case .publicMaterial where status.st_mode & 0o002 != 0:
            return "\(path) can be written by others (mode \(mode)); `chmod 644` it"
        default:
            return nil
        }
    }
}
