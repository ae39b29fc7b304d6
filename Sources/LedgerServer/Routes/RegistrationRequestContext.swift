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

extension ServerContext {
    /// Appends `operation`, a change of the registration in the path, and answers the receipt. A change made with the
    /// client key (which ships in every app) first takes one from the device's budget of changes, as its
    /// subscriptions do: every change is an event.
    func appendDeviceChange(
        _ operation: LedgerOperation, _ context: RegistrationRequestContext, _ request: Request
    ) async throws -> WriteReceipt {
        let (caller, token) = (context.caller, context.token)
        if caller.role == .client {
            try take(
                deviceSubscriptionRate, for: DeviceKey(project: caller.project, token: token),
                "This device's changes are over their rate; retry later")
        }
        return try await append(
            WriteRequest(actor: caller.actor, requestID: request.ledgerRequestID, operations: [operation]),
            to: context.ledger)
    }
}
