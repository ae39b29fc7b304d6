import Hummingbird
import LedgerStore
import LedgerCore
import NIOCore
import FCMWire

/// Reads the registration token of the path (`{token}`, percent-decoded) once the caller is known:
/// 400 INVALID_ARGUMENT naming "registration token" when it is malformed.
struct RegistrationInPath: RouterMiddleware {
    typealias Context = LedgerRequestContext
    /// Where a device's own requests are noted as its activity (registration expiry); `nil` notes nothing.
    var activity: ActivityTracker?

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        var context = context
        do {
            context.registrationToken = try RegistrationToken(
                try context.parameters.decoded("token"), field: "registration token")
        } catch let error as LedgerCoreError {
            throw FCMError.invalidArgument(error)
        }
        if let activity, let caller = context.caller, caller.role == .client, let token = context.registrationToken {
            activity.note(token, in: caller.project)
        }
        return try await next(request, context)
    }
}
