import FCMWire
import Foundation
import HTTPTypes
import Hummingbird
import LedgerCore

/// Who is calling, once authenticated for a project.
struct Caller {
    let project: ProjectID
    let role: CredentialStore.Role

    /// The `actor` recorded in the events this caller appends.
    var actor: String { role.rawValue }
}
