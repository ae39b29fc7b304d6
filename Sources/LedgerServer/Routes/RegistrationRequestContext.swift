import Hummingbird
import LedgerCore
import LedgerStore

/// The context of a route with a `{token}` in its path, behind ``ProjectAuthentication`` and
/// ``RegistrationInPath``: a ``ProjectRequestContext`` and the registration token the path names.
struct RegistrationRequestContext: ChildRequestContext {
    var coreContext: CoreRequestContextStorage
    let caller: Caller
    let ledger: Ledger
    let token: RegistrationToken
    var project: ProjectID { caller.project }

    init(context: LedgerRequestContext) throws {
        let project = try ProjectRequestContext(context: context)
        guard let token = context.registrationToken else {
            throw RouteSetupError("route has no RegistrationInPath middleware")
        }
        (coreContext, caller, ledger, self.token) = (project.coreContext, project.caller, project.ledger, token)
    }
}
