import Crypto
import Foundation
import LedgerCore
import LedgerStore
import Logging
import NIOSSL
import ServiceLifecycle
import Synchronization
import UnixSignals
import NIOCore
// On Linux, `stat` and its fields are declared by the C module under Dispatch, which MemberImportVisibility
// asks to be imported by name.
#if canImport(CDispatch)
    import CDispatch
#endif
#if canImport(CoreFoundation)
    import CoreFoundation
#endif

/// The server's TLS certificate chain and private key, read from PEM files (`ledger serve --tls-cert FILE
/// --tls-key FILE`, or the config file's `tls`), and read again on SIGHUP (``CertificateReloader``).
///
/// Each new connection's handshake takes the pair in force at that moment (NIOSSL's per-handshake context
/// callback), so a reload never touches a connection that is open: renewing a certificate drops no one.
/// A pair is checked whole before it is used — both files readable, the key readable by no one but its owner
/// and group, every certificate and the key parsed, the key the certificate's — and a reload that fails
/// keeps the pair in force.
///
/// - Note: Thread-safe.
public final class ServerCertificate: Sendable {
    public let certificatePath: String
    public let keyPath: String
    private let current: Mutex<Pair>

    struct Pair: Sendable {
        let chain: [NIOSSLCertificate]
        let key: NIOSSLPrivateKey
    }

    /// Reads and checks the pair.
    ///
    /// - Throws: ``ServerCertificateError`` naming the file and what is wrong with it.
    public init(certificatePath: String, keyPath: String) throws {
        self.certificatePath = certificatePath
        self.keyPath = keyPath
        current = Mutex(try Self.load(certificatePath: certificatePath, keyPath: keyPath))
    }

    /// Reads the files again; the new pair serves every handshake from now on. On a failure the pair in force
    /// stays.
    ///
    /// - Throws: ``ServerCertificateError``.
    public func reload() throws {
        let pair = try Self.load(certificatePath: certificatePath, keyPath: keyPath)
        current.withLock { $0 = pair }
    }

    /// TLS 1.2's suites: Mozilla's "intermediate" profile as BoringSSL has it — ECDHE key exchange and AEAD
    /// ciphers only (no CBC, no RSA key exchange) — one a key type. NIOSSL gives no way to set BoringSSL's
    /// `SSL_OP_CIPHER_SERVER_PREFERENCE`, so the client would choose among several; with one suite a key type
    /// there is nothing to choose, and the server's order holds. TLS 1.3's suites (all AEAD) are BoringSSL's own.
    static let tls12CipherSuites = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256"

    /// The server side's TLS configuration: TLS 1.2 or later (``tls12CipherSuites``), and the pair in force at
    /// each handshake.
    var tlsConfiguration: TLSConfiguration {
        let pair = current.withLock { $0 }
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: pair.chain.map { .certificate($0) }, privateKey: .privateKey(pair.key))
        configuration.minimumTLSVersion = .tlsv12
        configuration.cipherSuites = Self.tls12CipherSuites
        configuration.sslContextCallback = { [self] _, promise in
            let pair = current.withLock { $0 }
            var override = NIOSSLContextConfigurationOverride()
            override.certificateChain = pair.chain.map { .certificate($0) }
            override.privateKey = .privateKey(pair.key)
            promise.succeed(override)
        }
        return configuration
    }

    /// The leaf certificate's SHA-256 fingerprint (hex), for the log line of a start or a reload.
    var fingerprint: String {
        let leaf = current.withLock { $0.chain.first }
        guard let der = try? leaf?.toDERBytes() else { return "?" }
        return Hex.encode(Array(SHA256.hash(data: der)))
    }

    private static func load(certificatePath: String, keyPath: String) throws -> Pair {
        if let problem = ConfiguredFile.problem(at: keyPath, kind: .secret) {
            throw ServerCertificateError(file: keyPath, "the TLS key (tls.keyFile, --tls-key): \(problem)")
        }
        if let problem = ConfiguredFile.problem(at: certificatePath, kind: .publicMaterial) {
            throw ServerCertificateError(
                file: certificatePath, "the TLS certificate (tls.certificateFile, --tls-cert): \(problem)")
        }
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMFile(certificatePath)
        } catch {
            throw ServerCertificateError(file: certificatePath, "not a PEM certificate chain (\(error))")
        }
        guard !chain.isEmpty else {
            throw ServerCertificateError(file: certificatePath, "holds no certificate")
        }
        let key: NIOSSLPrivateKey
        do {
            key = try NIOSSLPrivateKey(file: keyPath, format: .pem)
        } catch {
            throw ServerCertificateError(file: keyPath, "not a PEM private key (\(error))")
        }
        // A context made from the pair is what checks that the key is the certificate's.
        do {
            _ = try NIOSSLContext(
                configuration: .makeServerConfiguration(
                    certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key)))
        } catch {
            throw ServerCertificateError(
                file: keyPath, "is not the key of the certificate in \(certificatePath) (\(error))")
        }
        return Pair(chain: chain, key: key)
    }
}

/// A TLS certificate or key file that cannot be used, and why.
public struct ServerCertificateError: Error, CustomStringConvertible {
    public let file: String
    public let reason: String

    init(file: String, _ reason: String) {
        self.file = file
        self.reason = reason
    }

    public var description: String { "\(file): \(reason)" }
}
