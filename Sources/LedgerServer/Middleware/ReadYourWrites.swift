import FCMWire
import Hummingbird
import LedgerCore

/// The last of a project route's three middlewares: waits for the write a request names in `x-ledger-min-seq`
/// (``ServerContext/awaitMinimumSeq(of:in:)``), and stamps a successful write's answer with the seq it reached
/// (``ServerContext/stampingSeq(_:of:for:)``) — on the ledger authentication opened.
struct ReadYourWrites: RouterMiddleware {
    typealias Context = LedgerRequestContext
    let server: ServerContext
    /// Whether a 4xx is answered in the Instance ID shape (`{"error": "STATUS"}`) rather than Google's.
    var instanceIDShape = false

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        guard let ledger = context.ledger else {
            throw RouteSetupError("ReadYourWrites runs after the authentication that opens the ledger")
        }
        try await InstanceIDError.inShape(if: instanceIDShape) {
            try await server.awaitMinimumSeq(of: request, in: ledger)
        }
        return server.stampingSeq(try await next(request, context), of: ledger, for: request)
    }
}
