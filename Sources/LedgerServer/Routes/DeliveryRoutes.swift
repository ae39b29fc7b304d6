import Foundation
import HTTPTypes
import Hummingbird
import LedgerCore
import LedgerStore
import ServiceLifecycle
import FCMWire
import LedgerQueries

/// Delivery to devices (SPEC §4.4): Server-Sent Events, long poll and acknowledgement. A device calls with
/// its project's client API key, and holding its registration token — in the path — is what makes it itself.
///
/// The inbox is derived from the log (``LedgerSnapshot/inbox(of:after:now:limit:sends:)``); the only state a device
/// changes is its acknowledgement cursor, appended as an `acknowledged` event. At-least-once: a message is
/// delivered again until acknowledged. Payloads are never logged.
struct DeliveryRoutes {
    let server: ServerContext
    static let pageSize = 100
    static let maximumWaitSeconds = 60
    static let keepAliveInterval: Duration = .seconds(15)

    func register(on router: TokenPathRouter) {
        let device = router.group("/v1/projects/:project/registrations/:token")
            .projectRoutes(server, roles: [.client])
            .add(middleware: RegistrationInPath(activity: server.ledgers.activity))
            .group(context: RegistrationRequestContext.self)
        device.get("messages") { request, context in try await poll(request, context) }
        device.get("messages:stream") { request, context in try await stream(request, context) }
        device.post("messages:ack") { request, context in try await acknowledge(request, context) }
    }

    /// The device of the path: authorized with the project's client key, registered now.
    private struct Device {
        let project: ProjectID
        let token: RegistrationToken
        let ledger: Ledger
        let shared: DeliveryState
        /// The head seq of the snapshot the device was looked up in: the end of the log a cursor may name.
        let head: UInt64
        var notifier: DeliveryNotifier { shared.notifier }
    }

    /// A cursor the device sent back: a decimal seq within the log (never past its head), or 400 naming
    /// `field`.
    private func cursor(_ text: some StringProtocol, field: String, device: Device) throws -> UInt64 {
        guard text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }), let value = UInt64(text)
        else {
            throw FCMError.invalidArgument(
                "\(field) must be a cursor (a decimal string) from an earlier answer", field: field)
        }
        guard value <= device.head else {
            throw FCMError.invalidArgument(
                "\(field) is past the end of the log; use a cursor from an earlier answer", field: field)
        }
        return value
    }

    private func device(_ request: Request, _ context: RegistrationRequestContext) async throws -> (
        Device, InstanceID, UInt64
    ) {
        let project = context.caller.project
        let token = context.token
        let ledger = context.ledger
        let (instance, acknowledged, head) = try ledger.read { snapshot -> (InstanceID, UInt64, UInt64) in
            guard let instance = try snapshot.instanceID(of: token), try snapshot.isRegistered(instance) else {
                throw FCMError.notFound(Self.unregistered, errorCode: "UNREGISTERED")
            }
            return (
                instance, try snapshot.acknowledgedThrough(instance),
                min(try snapshot.head().seq, ledger.acknowledgedSeq)
            )
        }
        let device = Device(
            project: project, token: token, ledger: ledger, shared: server.ledgers.delivery(for: project),
            head: head)
        return (device, instance, acknowledged)
    }

    /// `GET …/messages?after=CURSOR&waitSeconds=N`: the messages after the cursor (default: the
    /// acknowledgement cursor), waiting up to N seconds (at most 60) for one to arrive.
    private func poll(_ request: Request, _ context: RegistrationRequestContext) async throws -> Response {
        let (device, instance, acknowledged) = try await device(request, context)
        let query = request.uri.queryParameters
        var after = acknowledged
        if let text = query["after"] {
            after = max(try cursor(text, field: "after", device: device), acknowledged)
        }
        var wait = 0
        if let text = query["waitSeconds"] ?? query["wait_seconds"] {
            guard let value = Int(text), value >= 0 else {
                throw FCMError.invalidArgument("waitSeconds must be 0 or more", field: "waitSeconds")
            }
            wait = min(value, Self.maximumWaitSeconds)
        }
        let deadline = ContinuousClock.now + .seconds(wait)
        let stopping = StopFlag()
        // Waiting is activity for as long as it lasts (registration expiry).
        let activity = server.ledgers.activity
        activity.opened(device.token, in: device.project)
        defer { activity.closed(device.token, in: device.project) }
        // A server that is stopping answers a waiting poll at once (with what there is) instead of holding
        // SIGTERM for up to a minute.
        return try await withGracefulShutdownHandler {
            while true {
                let generation = device.notifier.current
                // Unregistered while waiting (the DELETE wakes it): 404, as a new poll would get.
                guard let page = try inbox(device, instance, after: after) else {
                    throw FCMError.notFound(Self.unregistered, errorCode: "UNREGISTERED")
                }
                after = page.through
                if !page.messages.isEmpty || ContinuousClock.now >= deadline || Task.isCancelled || stopping.isSet {
                    return JSONResponse.bytes(DeliveryJSON.page(page, project: device.project))
                }
                await device.notifier.wait(for: instance, after: generation, timeout: deadline - ContinuousClock.now)
            }
        } onGracefulShutdown: {
            stopping.set()
            device.notifier.wakeAll()
        }
    }

    /// `GET …/messages:stream`: Server-Sent Events, one `message` event per message with `id:` its cursor,
    /// from `Last-Event-ID` if given (never before the acknowledgement cursor), else from the
    /// acknowledgement cursor; a comment every 15 s keeps idle connections open. Ends when the device is
    /// unregistered, erased or expired.
    private func stream(_ request: Request, _ context: RegistrationRequestContext) async throws -> Response {
        let (device, instance, acknowledged) = try await device(request, context)
        var start = acknowledged
        if let lastEventID = request.headers[.lastEventID] {
            start = max(try cursor(lastEventID, field: "Last-Event-ID", device: device), acknowledged)
        }
        let activity = server.ledgers.activity
        let body = ResponseBody { [start] writer in
            let stopping = StopFlag()
            // An open stream is activity for as long as it stays open (registration expiry).
            activity.opened(device.token, in: device.project)
            defer { activity.closed(device.token, in: device.project) }
            try await withGracefulShutdownHandler {
                var after = start
                try await writer.write(ByteBuffer(string: "retry: 1000\n\n"))
                while !Task.isCancelled && !stopping.isSet {
                    let generation = device.notifier.current
                    // One snapshot per wake: still registered, and what is new. The DELETE of the
                    // registration wakes the stream, so it ends at once.
                    guard let page = try inbox(device, instance, after: after) else { break }
                    // A page is one write (one flush), not one per message: a device with a backlog gets it
                    // in up to `pageSize` events per write. Each event is rendered once for every device.
                    if page.messages.count == 1 {
                        try await writer.write(device.shared.events.event(page.messages[0]))
                    } else if !page.messages.isEmpty {
                        var events = ByteBuffer()
                        for message in page.messages {
                            var event = device.shared.events.event(message)
                            events.writeBuffer(&event)
                        }
                        try await writer.write(events)
                    }
                    // Sends not for this device are not looked at again.
                    after = page.through
                    if page.messages.count == Self.pageSize {
                        // A backlog is sent a page at a time; between pages the thread is left to other
                        // requests, so a device replaying thousands of messages cannot starve them.
                        await Task.yield()
                        continue
                    }
                    await device.notifier.wait(for: instance, after: generation, timeout: Self.keepAliveInterval)
                    if device.notifier.current == generation && !stopping.isSet {
                        try await writer.write(ByteBuffer(string: ": keep-alive\n\n"))
                    }
                }
            } onGracefulShutdown: {
                // The server is stopping: end every stream now rather than at its next keep-alive.
                stopping.set()
                device.notifier.wakeAll()
            }
            try await writer.finish(nil)
        }
        return Response(
            status: .ok,
            headers: [.contentType: "text/event-stream", .cacheControl: "no-cache"],
            body: body)
    }

    /// `POST …/messages:ack {"through": CURSOR}`: every message at or before the cursor is acknowledged and
    /// never delivered again. An older cursor than the current one changes nothing.
    private func acknowledge(_ request: Request, _ context: RegistrationRequestContext) async throws -> Response {
        let (device, _, acknowledged) = try await device(request, context)
        let body = try await JSONBody.decode(
            AcknowledgementBody.self, request, limit: server.configuration.maximumBodyBytes)
        let through = try cursor(body.through, field: "through", device: device)
        try server.take(
            server.deviceAcknowledgementRate, for: DeviceKey(project: device.project, token: device.token),
            "This device's acknowledgements are over their rate; retry later")
        guard through > acknowledged else {
            return try JSONResponse.encoded(AcknowledgedThrough(acknowledgedThrough: String(acknowledged)))
        }
        let receipt = try await server.append(
            WriteRequest(
                actor: "device", requestID: request.ledgerRequestID,
                operations: [.acknowledge(device.token, through: through)]),
            to: device.ledger)
        if let rejection = receipt.outcomes[0].rejection {
            throw FCMError.invalidArgument(
                "through must be a cursor this device was given: \(rejection.message)", field: "through")
        }
        return try JSONResponse.encoded(AcknowledgedThrough(acknowledgedThrough: String(through)))
    }

    /// One snapshot: `nil` once the device is no longer registered, else its inbox after `after`.
    private func inbox(_ device: Device, _ instance: InstanceID, after: UInt64) throws -> InboxPage? {
        try device.ledger.read { snapshot in
            guard try snapshot.isRegistered(instance) else { return nil }
            let now = LedgerTime.now()
            // A message whose content the project's contentRetention forgets (or has forgotten) is not delivered.
            let retained = server.configuration.retention(of: device.project).content.seconds.map { seconds in
                LedgerTime(
                    microseconds: now.microseconds - seconds.multipliedReportingOverflow(by: 1_000_000).partialValue)
            }
            return try snapshot.inbox(
                of: instance, after: after, now: now, limit: Self.pageSize, sends: device.shared.sends,
                through: device.ledger.acknowledgedSeq, sentSince: retained)
        }
    }

    static let unregistered = "Requested entity was not found: the registration is not registered."
}

/// Set once, read by a stream's or a poll's loop.
private struct StopFlag: Sendable {
    private let value = LockedValue(false)
    var isSet: Bool { value.withLock { $0 } }
    func set() { value.withLock { $0 = true } }
}

extension HTTPField.Name {
    static let lastEventID = HTTPField.Name("Last-Event-ID")!
}
