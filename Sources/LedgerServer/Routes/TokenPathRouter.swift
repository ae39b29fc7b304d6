import Hummingbird

/// The server's router: Hummingbird's, plus a byte-level match for the routes whose paths carry a
/// registration token.
///
/// Hummingbird's trie splits a path into components by `Character`. A path that names a registration token
/// is 200 characters and more (a token is 152), and walking it that way was a fifth of the request pool's
/// CPU under per-token subscribe — more than the credential check, the handler and its response together.
/// Routes registered through this type go to Hummingbird's router as before, and those with a `{token}`
/// component, of literal and `{capture}` components only and which no other route could also match, are
/// also kept in a table matched on the path's UTF-8 bytes. ``buildResponder()`` answers a request from the table
/// when its path is in canonical form (one `/` before each component, none empty, no trailing `/`) and
/// names a route and method there, with the same responder chain (the router's middlewares, the group's and
/// the handler), parameters and endpoint path Hummingbird's router would give it; every other request goes
/// to Hummingbird's router. `TokenPathRouterTests` checks that the two agree on generated paths, and that
/// replies through either are the same.
public final class TokenPathRouter: RouterMethods, HTTPResponderBuilder, @unchecked Sendable {
    // @unchecked: routes are registered before `buildResponder()` is called, on one thread (route setup);
    // the responder it returns holds only immutable copies.
    public typealias Context = LedgerRequestContext

    /// Hummingbird's router, which every route is registered on.
    public let router: Router<Context>
    private var routes: [Route] = []

    package struct Route {
        package let path: RouterPath
        let method: HTTPRequest.Method
        let responder: any HTTPResponder<Context>
        /// The path's components: a literal, or the name of a capture (`nil` if the path has any other kind
        /// of component, which only Hummingbird's router matches).
        let pattern: [Component]?
    }

    enum Component: Equatable, Sendable {
        case literal([UInt8])
        case capture(Substring)
    }

    /// A route of the byte-level table.
    package struct Entry: Sendable {
        let pattern: [Component]
        let method: HTTPRequest.Method
        /// What Hummingbird's router records as the endpoint path (metrics label routes by it).
        let endpointPath: String
        let responder: any HTTPResponder<Context>
    }

    /// Every route registered, in order.
    package var registeredRoutes: [Route] { routes }

    public init(router: Router<Context>) {
        self.router = router
    }

    @discardableResult public func on<Responder: HTTPResponder>(
        _ path: RouterPath, method: HTTPRequest.Method, responder: Responder
    ) -> Self where Responder.Context == Context {
        router.on(path, method: method, responder: responder)
        routes.append(
            Route(
                path: path, method: method,
                responder: router.middlewares.constructResponder(finalResponder: responder),
                pattern: Self.pattern(of: path)))
        return self
    }

    @discardableResult public func add(middleware: any MiddlewareProtocol<Request, Response, Context>) -> Self {
        router.add(middleware: middleware)
        return self
    }

    /// Answers from the byte-level table what it holds, and everything else through Hummingbird's router.
    public func buildResponder() -> TokenPathResponder<RouterResponder<Context>> {
        TokenPathResponder(routes: byteMatchedRoutes(), fallback: router.buildResponder())
    }

    /// The routes the table holds: a `{token}` capture, literal and capture components only, and no other
    /// route that could match one of the same paths (Hummingbird's trie would then choose between them).
    package func byteMatchedRoutes() -> [Entry] {
        routes.compactMap { route in
            guard let pattern = route.pattern, pattern.contains(.capture("token")) else { return nil }
            let overlapping = routes.contains { other in
                other.path != route.path && Self.mayOverlap(pattern, other.pattern)
            }
            guard !overlapping else { return nil }
            return Entry(
                pattern: pattern, method: route.method, endpointPath: route.path.description,
                responder: route.responder)
        }
    }

    /// The components of `path`, or `nil` if any is neither a literal nor a whole-component capture.
    static func pattern(of path: RouterPath) -> [Component]? {
        var components: [Component] = []
        for element in path.components {
            let text = element.description
            if text.first == "{" && text.last == "}" && text.count > 2 {
                let name = text.dropFirst().dropLast()
                guard !name.contains(where: { "{}*".contains($0) }) else { return nil }
                components.append(.capture(name))
            } else {
                guard !text.isEmpty, !text.contains(where: { "{}*!".contains($0) }) else { return nil }
                components.append(.literal(Array(text.utf8)))
            }
        }
        return components
    }

    /// Whether some path could match both patterns (`nil`: a pattern with wildcards, which may match any).
    static func mayOverlap(_ pattern: [Component], _ other: [Component]?) -> Bool {
        guard let other else { return true }
        guard pattern.count == other.count else { return false }
        return zip(pattern, other).allSatisfy { first, second in
            if case .literal(let a) = first, case .literal(let b) = second { return a == b }
            return true
        }
    }
}

/// The responder ``TokenPathRouter/buildResponder()`` builds.
public struct TokenPathResponder<Fallback: HTTPResponder>: HTTPResponder
where Fallback.Context == LedgerRequestContext {
    public typealias Context = LedgerRequestContext

    package typealias Entry = TokenPathRouter.Entry

    let routes: [Entry]
    let fallback: Fallback
    /// Bit `n` is set when some route has `n` components: a path with another number of `/`s is left to the
    /// fallback before its components are collected (most requests name no token route).
    let componentCounts: UInt64

    package init(routes: [Entry], fallback: Fallback) {
        self.routes = routes
        self.fallback = fallback
        componentCounts = routes.reduce(0) { $0 | ($1.pattern.count < 64 ? 1 << UInt64($1.pattern.count) : 0) }
    }

    public func respond(to request: Request, context: Context) async throws -> Response {
        let path = request.uri.path
        guard let (entry, parameters) = match(path, method: request.method) else {
            return try await fallback.respond(to: request, context: context)
        }
        var context = context
        context.coreContext.parameters = parameters
        context.coreContext.endpointPath.value = entry.endpointPath
        do {
            return try await entry.responder.respond(to: request, context: context)
        } catch let error as any HTTPResponseError {
            // As Hummingbird's router does: an error the chain throws is answered here.
            return try error.response(from: request, context: context)
        }
    }

    /// The route and parameters for `path`, if it is canonical and the table holds a route for it and `method`.
    package func match(_ path: String, method: HTTPRequest.Method) -> (Entry, Parameters)? {
        let utf8 = path.utf8
        var slashes = 0
        for byte in utf8 where byte == UInt8(ascii: "/") { slashes += 1 }
        guard slashes < 64, componentCounts & (1 << UInt64(slashes)) != 0, let ranges = Self.components(of: path)
        else { return nil }
        candidates: for entry in routes where entry.method == method && entry.pattern.count == ranges.count {
            for (component, range) in zip(entry.pattern, ranges) {
                if case .literal(let bytes) = component, !utf8[range].elementsEqual(bytes) { continue candidates }
            }
            var parameters = Parameters()
            for (component, range) in zip(entry.pattern, ranges) {
                if case .capture(let name) = component {
                    parameters[name] = Substring(path[range])
                }
            }
            return (entry, parameters)
        }
        return nil
    }

    /// The index ranges of a canonical path's components: `nil` unless it is printable ASCII, begins with
    /// `/` and has one `/` before each component, none empty, and no `/` at the end (the form clients send,
    /// percent-encoding anything else; any other form goes to Hummingbird's router, which also skips empty
    /// components). Printable ASCII is one `Character` per byte, so splitting the bytes at `/` gives the
    /// components Hummingbird's split by `Character` gives: a `/` followed by a combining mark is one
    /// `Character`, not a separator, to Hummingbird.
    static func components(of path: String) -> [Range<String.Index>]? {
        let utf8 = path.utf8
        guard utf8.first == UInt8(ascii: "/"), utf8.count > 1, utf8.last != UInt8(ascii: "/") else { return nil }
        var ranges: [Range<String.Index>] = []
        ranges.reserveCapacity(8)
        var start = utf8.index(after: utf8.startIndex)
        var index = start
        while index < utf8.endIndex {
            let byte = utf8[index]
            guard byte > 0x20 && byte < 0x7F else { return nil }
            if byte == UInt8(ascii: "/") {
                guard index > start else { return nil }
                ranges.append(start..<index)
                start = utf8.index(after: index)
            }
            index = utf8.index(after: index)
        }
        guard start < utf8.endIndex else { return nil }
        ranges.append(start..<utf8.endIndex)
        return ranges
    }
}
