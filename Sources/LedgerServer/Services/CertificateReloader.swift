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

/// Reads the server's certificate and key again on each SIGHUP (systemd's `ExecReload=/bin/kill -HUP $MAINPID`)
/// until the server shuts down; a pair that cannot be used is logged and the one in force stays.
struct CertificateReloader: Service {
    let certificate: ServerCertificate
    let logger: Logger

    func run() async throws {
        for await _ in await UnixSignalsSequence(trapping: .sighup).cancelOnGracefulShutdown() {
            do {
                try certificate.reload()
                logger.notice(
                    "TLS certificate reloaded; new connections use it",
                    metadata: ["ledger.certificateSHA256": "\(certificate.fingerprint)"])
            } catch {
                logger.error(
                    "TLS certificate not reloaded; the one in force stays", metadata: ["error": "\(error)"])
            }
        }
    }
}
