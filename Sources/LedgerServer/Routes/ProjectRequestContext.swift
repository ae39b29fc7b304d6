import Hummingbird
import LedgerCore
import LedgerStore

/// The context of a route behind ``ProjectAuthentication`` or ``InstanceIDAuthentication``: the caller is
/// authenticated for a project, whose ledger is open.
///
/// Made from the ``LedgerRequestContext`` the middleware filled in; a route registered without that
/// middleware is a programming error, answered as a 500 (``RouteSetupError``) before its handler runs.
struct ProjectRequestContext: ChildRequestContext {
    var coreContext: CoreRequestContextStorage
    let caller: Caller
    let ledger: Ledger
    /// The caller's project: the one in the path, or the one an Instance ID credential names.
    var project: ProjectID { caller.project }

    init(context: LedgerRequestContext) throws {
        guard let caller = context.caller, let ledger = context.ledger else {
            throw RouteSetupError("route has no authentication middleware")
        }
        coreContext = context.coreContext
        self.caller = caller
        self.ledger = ledger
    }
}
