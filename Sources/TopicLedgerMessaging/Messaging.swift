import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A device's messaging: its registration token, its topics and its messages — FirebaseMessaging's shape
/// (`Messaging.messaging().subscribe(toTopic:)`), against a TopicLedger server.
///
/// - Topic operations are checked as the iOS SDK checks them, written to the store before anything is sent, and
///   sent in the order they were asked for by one background worker, which retries what may succeed later
///   (network, 429, 5xx) with exponential backoff and jitter, never sooner than `Retry-After`, until it succeeds
///   — across launches: a new instance with the same store finishes what the last one left.
/// - The token is registered when there is something to do (or when ``token()`` is called, when auto-init is
///   off), kept in the store, and replaced when the server says it is not registered; after a new token the
///   topics the app wants are subscribed again, and ``tokenUpdates()`` announces it.
/// - ``messages()`` delivers the device's messages as an `AsyncSequence` (Server-Sent Events, else long poll),
///   each acknowledged once the app asks for the next one.
///
/// Thread-safe; completion handlers are called on ``MessagingConfiguration``'s callback queue.
public final class Messaging: @unchecked Sendable {
    // @unchecked: every `var` below is read and written with `lock` held, and the lock is never held across an
    // `await`.
    public let configuration: MessagingConfiguration
    let api: ServerAPI
    let streamSessionConfiguration: URLSessionConfiguration
    private let store: MessagingStore
    private let issuer: String
    private let lock = NSLock()
    private var state: MessagingState
    private var waiters: [UUID: [@Sendable (MessagingError?) -> Void]] = [:]
    private var worker: Task<Void, Never>?
    private var mayRegister: Bool
    private var permissionWaiters: [CheckedContinuation<Void, Never>] = []
    private var tokenObservers: [UUID: AsyncStream<String>.Continuation] = [:]
    private var registration: Task<String, any Error>?
    private var isClosed = false

    /// Loads the store (throws ``MessagingError/store(_:)`` when it exists and cannot be read) and resumes any
    /// topic operations a previous instance left pending.
    public init(configuration: MessagingConfiguration) throws {
        self.configuration = configuration
        let session = URLSessionConfiguration.ephemeral
        session.requestCachePolicy = .reloadIgnoringLocalCacheData
        session.urlCache = nil
        api = ServerAPI(configuration: configuration, session: URLSession(configuration: session))
        let stream = URLSessionConfiguration.ephemeral
        stream.requestCachePolicy = .reloadIgnoringLocalCacheData
        stream.urlCache = nil
        stream.timeoutIntervalForRequest = configuration.streamIdleTimeout
        streamSessionConfiguration = stream
        store = MessagingStore(url: configuration.storeURL)
        issuer = "\(configuration.serverURL.absoluteString) \(configuration.projectID)"
        var state = try store.load()
        if state.issuer != issuer {
            // A token is only good on the server and project that issued it.
            state.token = nil
            state.issuer = issuer
        }
        self.state = state
        mayRegister = configuration.isAutoInitEnabled || state.token != nil
        lock.locked { startWorkerIfNeeded() }
    }

    // MARK: Token

    /// The registration token, if the device has one (FirebaseMessaging's `fcmToken`).
    public var registrationToken: String? { lock.locked { state.token } }

    /// The registration token, registering the device first if it has none. Allows registration when auto-init
    /// is off.
    public func token() async throws -> String {
        allowRegistration()
        if let token = registrationToken { return token }
        return try await newToken(replacing: nil)
    }

    public func token(completion: @escaping @Sendable (String?, (any Error)?) -> Void) {
        Task {
            do {
                let token = try await token()
                configuration.callbackQueue.async { completion(token, nil) }
            } catch {
                configuration.callbackQueue.async { completion(nil, error) }
            }
        }
    }

    /// Every token the device gets from now on: after the first registration, and after the server said the
    /// last one was not registered (the delegate's `didReceiveRegistrationToken`).
    public func tokenUpdates() -> AsyncStream<String> {
        let (stream, continuation) = AsyncStream.makeStream(of: String.self)
        let id = UUID()
        lock.locked { tokenObservers[id] = continuation }
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            _ = self.lock.locked { self.tokenObservers.removeValue(forKey: id) }
        }
        return stream
    }

    /// Unregisters the device on the server and forgets its token, topics and Live Activities. Pending topic
    /// operations fail
    /// with ``MessagingError/unregistered``. A later ``token()`` (or, with auto-init, a later topic operation)
    /// registers a new token.
    public func deleteToken() async throws {
        let token = registrationToken
        if let token {
            do {
                try await api.unregister(token)
            } catch .unregistered {
                // Gone already.
            }
        }
        let dropped = try lock.locked { () throws(MessagingError) -> [@Sendable (MessagingError?) -> Void] in
            var next = state
            next.token = nil
            next.topics = []
            next.liveActivities = nil
            next.pushToStartTokens = nil
            next.pending = []
            try store.save(next)
            state = next
            mayRegister = configuration.isAutoInitEnabled
            let dropped = waiters.values.flatMap { $0 }
            waiters = [:]
            return dropped
        }
        for waiter in dropped { waiter(.unregistered) }
    }

    // MARK: APNs

    /// Which APNs environment a device token belongs to (FirebaseMessaging's `MessagingAPNSTokenType`).
    public enum APNSTokenType: Sendable {
        /// Decided from the app's provisioning profile: `aps-environment` `development` is the sandbox; an app
        /// without an embedded profile (the App Store's) is production.
        case unknown
        /// A development build's token: pushed through APNs' sandbox.
        case sandbox
        /// A production token.
        case prod
    }

    /// The device's APNs token, as the app got it in `didRegisterForRemoteNotificationsWithDeviceToken`. Setting
    /// it is ``setAPNSToken(_:type:)`` with `.unknown`; setting `nil` clears it on the server.
    public var apnsToken: Data? {
        get { lock.locked { state.apnsToken.flatMap(Self.bytes(ofHex:)) } }
        set {
            if let newValue {
                setAPNSToken(newValue, type: .unknown)
            } else {
                recordAPNSToken(nil, sandbox: false)
            }
        }
    }

    /// Whether the APNs token the app set (or cleared) is still to reach the server.
    public var isAPNSTokenPending: Bool { lock.locked { state.apnsTokenSent == false } }

    /// Gives the server the device's APNs token, so that messages reach the app through APNs when it is not
    /// running. Kept in the store and sent like a topic operation: before them, retried until the server has
    /// it, sent again after a new registration token.
    public func setAPNSToken(_ token: Data, type: APNSTokenType) {
        let sandbox: Bool
        switch type {
        case .sandbox: sandbox = true
        case .prod: sandbox = false
        case .unknown: sandbox = Self.provisioningProfileIsDevelopment()
        }
        recordAPNSToken(token.map { String(format: "%02x", $0) }.joined(), sandbox: sandbox)
    }

    /// Hands a message that arrived through APNs (`didReceiveRemoteNotification`'s `userInfo`) to the library,
    /// which remembers its id: `true` when the app should handle it, `false` when the stream already handed it
    /// over (a message reaches a device both ways, and the app sees it once).
    public func appDidReceiveMessage(_ userInfo: [AnyHashable: Any]) -> Bool {
        guard let id = userInfo["gcm.message_id"] as? String ?? (userInfo["gcm.message_id"] as? NSNumber)?.stringValue
        else { return true }
        // APNs may push a message twice (a provider's retry): the second is not handed over either.
        return record(id, as: \.pushedMessageIDs, unlessIn: \.streamedMessageIDs, again: false)
    }

    /// Records that the stream hands message `id` to the app; `false` when APNs already did.
    func streamDelivery(of id: String) -> Bool {
        // The stream delivers an unacknowledged message again after a relaunch: at least once stays.
        record(id, as: \.streamedMessageIDs, unlessIn: \.pushedMessageIDs, again: true)
    }

    private func record(
        _ id: String, as path: WritableKeyPath<MessagingState, [String]?>,
        unlessIn other: KeyPath<MessagingState, [String]?>, again: Bool
    ) -> Bool {
        lock.locked {
            guard !(state[keyPath: other] ?? []).contains(id) else { return false }
            var next = state
            var ids = next[keyPath: path] ?? []
            guard !ids.contains(id) else { return again }
            ids.append(id)
            if ids.count > Self.rememberedDeliveries { ids.removeFirst(ids.count - Self.rememberedDeliveries) }
            next[keyPath: path] = ids
            try? store.save(next)
            state = next
            return true
        }
    }

    /// How many delivered message ids are remembered: a message arrives both ways within moments, not a day apart.
    static let rememberedDeliveries = 256

    private func recordAPNSToken(_ hex: String?, sandbox: Bool) {
        lock.locked {
            guard state.apnsToken != hex || (hex != nil && state.apnsSandbox != sandbox) else { return }
            var next = state
            next.apnsToken = hex
            next.apnsSandbox = sandbox
            next.apnsTokenSent = false
            try? store.save(next)
            state = next
            startWorkerIfNeeded()
        }
    }

    /// The server has `hex` (or none) for `registrationToken`: done, unless the app set another since.
    private func apnsTokenSent(_ hex: String?, sandbox: Bool, to registrationToken: String) {
        lock.locked {
            guard !isClosed, state.apnsToken == hex, state.apnsSandbox ?? false == sandbox || hex == nil,
                state.token == registrationToken
            else { return }
            var next = state
            next.apnsTokenSent = true
            try? store.save(next)
            state = next
        }
    }

    static func bytes(ofHex hex: String) -> Data? {
        var data = Data()
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2, limitedBy: hex.endIndex) ?? hex.endIndex
            guard let byte = UInt8(hex[index..<next], radix: 16) else { return nil }
            data.append(byte)
            index = next
        }
        return data
    }

    /// Whether the app's embedded provisioning profile says `aps-environment` `development`.
    static func provisioningProfileIsDevelopment() -> Bool {
        guard let path = Bundle.main.path(forResource: "embedded", ofType: "mobileprovision"),
            let data = FileManager.default.contents(atPath: path)
        else { return false }
        // The profile is a signed plist: its XML is in the clear between the signature's bytes.
        let text = String(decoding: data, as: UTF8.self)
        guard let key = text.range(of: "<key>aps-environment</key>") else { return false }
        let rest = text[key.upperBound...].prefix(200)
        return rest.contains("<string>development</string>")
    }

    // MARK: Topics

    /// Subscribes the device to `topic` (a leading `/topics/` is accepted). Returns once the server has the
    /// subscription, retrying what may succeed later; throws ``MessagingError/invalidTopicName(_:)`` at once
    /// for a name the server would refuse, or the server's error when it refuses.
    public func subscribe(toTopic topic: String) async throws {
        try await enqueue(.subscribe, topic)
    }

    public func subscribe(toTopic topic: String, completion: (@Sendable ((any Error)?) -> Void)?) {
        enqueue(.subscribe, topic, completion: completion)
    }

    /// Unsubscribes the device from `topic`; not subscribed counts as done.
    public func unsubscribe(fromTopic topic: String) async throws {
        try await enqueue(.unsubscribe, topic)
    }

    public func unsubscribe(fromTopic topic: String, completion: (@Sendable ((any Error)?) -> Void)?) {
        enqueue(.unsubscribe, topic, completion: completion)
    }

    // MARK: Live Activity broadcast channels

    /// The iOS 18 broadcast channel id of `topic` (a leading `/topics/` is accepted), for the app to start its Live
    /// Activity on with ActivityKit's `pushType: .channel(id)`; `nil` when the topic has no channel. Every send the
    /// backend makes to the topic with `apns-push-type: liveactivity` reaches the activities on it, as one broadcast.
    ///
    /// Asks the server each time (a channel can be deleted and another made), under the device's own registration
    /// (registering first if it has none, and again if the server no longer knows it). Not queued: an error
    /// (``MessagingError``) is the caller's to retry.
    ///
    /// ```swift
    /// if let channel = try await messaging.liveActivityChannel(forTopic: "match-42") {
    ///     _ = try Activity.request(attributes: attributes, content: content, pushType: .channel(channel))
    /// }
    /// ```
    public func liveActivityChannel(forTopic topic: String) async throws -> String? {
        let name = try Topic.validated(topic)
        let token = try await self.token()
        do {
            return try await api.liveActivityChannel(token, topic: name)
        } catch .unregistered {
            forget(token)
            return try await api.liveActivityChannel(try await newToken(replacing: token), topic: name)
        }
    }

    /// The topics the app wants: what the server will have once every pending operation is through.
    public var topics: Set<String> { lock.locked { state.topics } }

    // MARK: Live Activities

    /// Follows `topic`'s Live Activity with the activity's push token, as ActivityKit's `pushTokenUpdates` gives
    /// it: the topic's `liveactivity` updates and ends are pushed to it (while the device is subscribed to the
    /// topic). A new token replaces the old one; feed every token `pushTokenUpdates` yields. Persisted and retried
    /// like ``subscribe(toTopic:)``; throws ``MessagingError/invalidTopicName(_:)`` or
    /// ``MessagingError/invalidArgument(_:)`` (a token that is not 16 to 200 bytes) at once.
    ///
    /// ```swift
    /// for await token in activity.pushTokenUpdates {
    ///     try await Messaging.messaging().followLiveActivity(topic: "match-42", pushToken: token)
    /// }
    /// ```
    public func followLiveActivity(topic: String, pushToken: Data) async throws {
        try await enqueue(try Self.liveActivityOperation(.followLiveActivity, topic: topic, pushToken: pushToken))
    }

    /// Follows `topic`'s Live Activity no more (when the activity ends on the device); not following counts as
    /// done.
    public func unfollowLiveActivity(topic: String) async throws {
        try await enqueue(try Self.liveActivityOperation(.unfollowLiveActivity, topic: topic, pushToken: nil))
    }

    /// Holds `token`, as ActivityKit's `pushToStartTokenUpdates` gives it for the ActivityAttributes type
    /// `attributesType` (its name, as a start's `attributes-type` says it), so that a topic's `liveactivity` start
    /// of that type starts the activity on the device (while it is subscribed to the topic). Persisted and retried
    /// like ``subscribe(toTopic:)``.
    ///
    /// ```swift
    /// for await token in Activity<MatchAttributes>.pushToStartTokenUpdates {
    ///     try await Messaging.messaging().setPushToStartToken(token, attributesType: "MatchAttributes")
    /// }
    /// ```
    public func setPushToStartToken(_ token: Data, attributesType: String) async throws {
        guard Self.isAttributesType(attributesType) else {
            throw MessagingError.invalidArgument(
                "attributesType must be an ActivityAttributes type's name (letters, digits, _ and ., at most 200)")
        }
        let hex = try Self.activityTokenHex(token)
        try await enqueue(
            TopicOperation(
                id: UUID(), action: .setPushToStartToken, topic: "", pushToken: hex, attributesType: attributesType))
    }

    /// The topics whose Live Activity the app follows, with the activity's push token (hex).
    public var liveActivities: [String: String] { lock.locked { state.liveActivities ?? [:] } }

    private static func liveActivityOperation(_ action: TopicOperation.Action, topic: String, pushToken: Data?)
        throws(MessagingError) -> TopicOperation
    {
        let name = try Topic.validated(topic)
        return TopicOperation(
            id: UUID(), action: action, topic: name, pushToken: try pushToken.map(Self.activityTokenHex))
    }

    /// An ActivityKit token as the server takes it: hex of 16 to 200 bytes.
    private static func activityTokenHex(_ token: Data) throws(MessagingError) -> String {
        guard (16...200).contains(token.count) else {
            throw .invalidArgument("an ActivityKit token is 16 to 200 bytes; this one is \(token.count)")
        }
        return token.map { String(format: "%02x", $0) }.joined()
    }

    /// The server's rule for an ActivityAttributes type's name: 1 to 200 ASCII letters, digits, `_` and `.`, not
    /// starting with a digit or `.`.
    static func isAttributesType(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard let first = bytes.first, bytes.count <= 200, !(48...57).contains(first), first != UInt8(ascii: ".")
        else { return false }
        return bytes.allSatisfy { byte in
            (48...57).contains(byte) || (65...90).contains(byte) || (97...122).contains(byte)
                || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ".")
        }
    }

    /// The topic operations not confirmed by the server yet, oldest first.
    public var pendingTopicOperations: [TopicOperation] { lock.locked { state.pending } }

    /// Stops the background work (as when the app is terminated). Pending operations stay in the store for the
    /// next instance; callers still waiting for one get ``MessagingError/closed``.
    public func close() {
        let (permissions, callers) = lock.locked {
            isClosed = true
            worker?.cancel()
            worker = nil
            registration?.cancel()
            defer {
                permissionWaiters = []
                waiters = [:]
            }
            return (permissionWaiters, waiters.values.flatMap { $0 })
        }
        for continuation in permissions { continuation.resume() }
        for caller in callers { caller(.closed) }
    }

    // MARK: Messages

    /// The device's messages, oldest first, each once (at least once across launches): a message is
    /// acknowledged when the app asks for the next one — after its handler returned — or by ``acknowledge(_:)``.
    /// Registers the device if it has no token.
    ///
    /// With `.manual` nothing is acknowledged by the sequence: the app calls ``acknowledge(_:)`` when it has
    /// made a message safe (acknowledging a message acknowledges every one before it).
    public func messages(acknowledgement: MessageSequence.Acknowledgement = .automatic) -> MessageSequence {
        MessageSequence(messaging: self, acknowledgement: acknowledgement)
    }

    /// What is waiting for the device now (up to 100 messages from its acknowledgement cursor), after waiting
    /// up to `waitSeconds` (at most 60) for one to arrive — one long poll, for a background fetch. Nothing is
    /// acknowledged. Registers the device if it has no token.
    public func fetchMessages(waitSeconds: Int = 0) async throws -> [RemoteMessage] {
        let token = try await token()
        do {
            let page = try await api.poll(token, after: nil, wait: min(max(waitSeconds, 0), 60))
            return page.messages.map { message in
                var message = message
                message.registrationToken = token
                return message
            }
        } catch {
            if error == .unregistered { forget(token) }
            throw error
        }
    }

    /// Acknowledges `message` and every message before it: the server will not deliver them again.
    public func acknowledge(_ message: RemoteMessage) async throws {
        try await api.acknowledge(message.registrationToken, through: message.cursor)
    }

    // MARK: - The worker

    /// Cancelling the caller ends its wait with `CancellationError`, not the operation: it stays pending and is
    /// sent all the same.
    private func enqueue(_ action: TopicOperation.Action, _ topic: String) async throws {
        try await enqueue(TopicOperation(id: UUID(), action: action, topic: try Topic.validated(topic)))
    }

    private func enqueue(_ operation: TopicOperation) async throws {
        let outcome = Outcome()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
                outcome.wait(continuation)
                do {
                    try append(operation) { error in outcome.resume(error.map { .failure($0) } ?? .success(())) }
                } catch {
                    outcome.resume(.failure(error))
                }
            }
        } onCancel: {
            outcome.resume(.failure(CancellationError()))
        }
    }

    private func enqueue(
        _ action: TopicOperation.Action, _ topic: String, completion: (@Sendable ((any Error)?) -> Void)?
    ) {
        let queue = configuration.callbackQueue
        let done: @Sendable (MessagingError?) -> Void = { error in queue.async { completion?(error) } }
        do {
            try append(TopicOperation(id: UUID(), action: action, topic: try Topic.validated(topic)), then: done)
        } catch {
            done(error)
        }
    }

    /// Records the operation in the store — before anything is sent — and wakes the worker.
    private func append(
        _ operation: TopicOperation, then done: @escaping @Sendable (MessagingError?) -> Void
    ) throws(MessagingError) {
        try lock.locked { () throws(MessagingError) in
            var next = state
            next.pending.append(operation)
            let topic = operation.topic
            switch operation.action {
            case .subscribe: next.topics.insert(topic)
            case .unsubscribe: next.topics.remove(topic)
            case .followLiveActivity:
                next.liveActivities = (next.liveActivities ?? [:]).merging([topic: operation.pushToken ?? ""]) { $1 }
            case .unfollowLiveActivity: next.liveActivities?[topic] = nil
            case .setPushToStartToken:
                if let type = operation.attributesType, let token = operation.pushToken {
                    next.pushToStartTokens = (next.pushToStartTokens ?? [:]).merging([type: token]) { $1 }
                }
            }
            try store.save(next)
            state = next
            waiters[operation.id, default: []].append(done)
            startWorkerIfNeeded()
        }
    }

    /// Call with `lock` held.
    private func startWorkerIfNeeded() {
        guard worker == nil, !isClosed, !state.pending.isEmpty || state.apnsTokenSent == false else { return }
        worker = Task { await self.drain() }
    }

    /// Sends the pending operations in order until none is left.
    private func drain() async {
        var failures = 0
        while !Task.isCancelled {
            let next = lock.locked { () -> (Work, String?, Bool)? in
                if state.apnsTokenSent == false {
                    return (.apnsToken(state.apnsToken, sandbox: state.apnsSandbox ?? false), state.token, mayRegister)
                }
                guard let operation = state.pending.first else {
                    worker = nil
                    return nil
                }
                return (.topic(operation), state.token, mayRegister)
            }
            guard let (work, token, mayRegister) = next else { return }
            // The token the operation is sent with: the one registered just now when there was none.
            var used = token
            do {
                if token == nil && !mayRegister {
                    await waitForPermission()
                    continue
                }
                let current: String
                if let token { current = token } else { current = try await newToken(replacing: nil) }
                used = current
                switch work {
                case .apnsToken(let hex, let sandbox):
                    if let hex {
                        try await api.setAPNSToken(current, hex: hex, sandbox: sandbox)
                    } else {
                        try await api.clearAPNSToken(current)
                    }
                    failures = 0
                    apnsTokenSent(hex, sandbox: sandbox, to: current)
                case .topic(let operation):
                    // A new token rewrites the list: the operation may be gone.
                    guard lock.locked({ state.pending.first?.id == operation.id }) else { continue }
                    switch operation.action {
                    case .subscribe: try await api.subscribe(current, to: operation.topic)
                    case .unsubscribe: try await api.unsubscribe(current, from: operation.topic)
                    case .followLiveActivity:
                        try await api.followLiveActivity(
                            current, topic: operation.topic, pushToken: operation.pushToken ?? "")
                    case .unfollowLiveActivity: try await api.unfollowLiveActivity(current, topic: operation.topic)
                    case .setPushToStartToken:
                        try await api.setPushToStartToken(
                            current, attributesType: operation.attributesType ?? "",
                            pushToken: operation.pushToken ?? "")
                    }
                    failures = 0
                    complete(operation, error: nil)
                }
            } catch let error as MessagingError {
                if error == .unregistered, let used {
                    // A new token next; if the new ones are refused too (something between us and the server
                    // answers 404), not in a tight loop.
                    forget(used)
                    if failures > 0 {
                        do {
                            try await sleep(seconds: configuration.retry.delay(afterFailure: failures, retryAfter: nil))
                        } catch {
                            return
                        }
                    }
                    failures += 1
                } else if error.isRetryable {
                    do {
                        try await sleep(
                            seconds: configuration.retry.delay(afterFailure: failures, retryAfter: error.retryAfter))
                    } catch {
                        return
                    }
                    failures += 1
                } else {
                    failures = 0
                    switch work {
                    case .topic(let operation): complete(operation, error: error)
                    case .apnsToken(let hex, let sandbox):
                        // The server refuses it for good (a platform that is not ios): not sent again.
                        apnsTokenSent(hex, sandbox: sandbox, to: used ?? "")
                    }
                }
            } catch {
                return  // cancelled
            }
        }
    }

    private func waitForPermission() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = lock.locked {
                if mayRegister || isClosed { return true }
                permissionWaiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    private func allowRegistration() {
        let waiting = lock.locked {
            mayRegister = true
            defer { permissionWaiters = [] }
            return permissionWaiters
        }
        for continuation in waiting { continuation.resume() }
    }

    /// Removes a finished operation and tells whoever waits for it. An operation the server refused leaves the
    /// app's wanted topics as they were before it (unless a later operation changes the same topic).
    private func complete(_ operation: TopicOperation, error: MessagingError?) {
        let done = lock.locked { () -> [@Sendable (MessagingError?) -> Void] in
            // A closed instance no longer writes the store: the next launch owns it.
            guard !isClosed else { return [] }
            var next = state
            next.pending.removeAll { $0.id == operation.id }
            if error != nil, !operation.isLiveActivity,
                !next.pending.contains(where: { !$0.isLiveActivity && $0.topic == operation.topic })
            {
                if operation.action == .subscribe {
                    next.topics.remove(operation.topic)
                } else {
                    next.topics.insert(operation.topic)
                }
            }
            // A follow or push-to-start token the server refused (a registration that is not ios, a token it
            // will not take) is not wanted: it would be sent again with every new registration.
            if error != nil, operation.action == .followLiveActivity,
                !next.pending.contains(where: { $0.isLiveActivity && $0.topic == operation.topic }),
                next.liveActivities?[operation.topic] == operation.pushToken
            {
                next.liveActivities?[operation.topic] = nil
            }
            if error != nil, operation.action == .setPushToStartToken, let type = operation.attributesType,
                next.pushToStartTokens?[type] == operation.pushToken
            {
                next.pushToStartTokens?[type] = nil
            }
            // If the store cannot be written, the operation is sent again by the next launch: harmless, both
            // are idempotent on the server.
            try? store.save(next)
            state = next
            return waiters.removeValue(forKey: operation.id) ?? []
        }
        for waiter in done { waiter(error) }
    }

    // MARK: - Registration

    /// The server no longer knows `token`: forget it, so that the next step registers a new one.
    func forget(_ token: String) {
        lock.locked {
            guard state.token == token, !isClosed else { return }
            var next = state
            next.token = nil
            try? store.save(next)
            state = next
        }
    }

    /// A new token, unless the device already has one other than `old`. One registration at a time.
    func newToken(replacing old: String?) async throws -> String {
        enum Next {
            case token(String)
            case registration(Task<String, any Error>)
        }
        let next = lock.locked { () -> Next in
            if let token = state.token, token != old { return .token(token) }
            if let registration { return .registration(registration) }
            let task = Task { [api] in
                do {
                    let token = try await api.register()
                    self.adopt(token)
                    return token
                } catch {
                    self.lock.locked { self.registration = nil }
                    throw error
                }
            }
            registration = task
            return .registration(task)
        }
        switch next {
        case .token(let token): return token
        case .registration(let task): return try await task.value
        }
    }

    /// Takes a newly registered token: the pending operations become one subscribe per wanted topic (a new
    /// token has no subscriptions, so the unsubscribes are done and the wanted topics are re-applied), and the
    /// observers hear of it.
    private func adopt(_ token: String) {
        let (done, observers) = lock.locked {
            () -> ([@Sendable (MessagingError?) -> Void], [AsyncStream<String>.Continuation]) in
            registration = nil
            guard !isClosed else { return ([], []) }
            var next = state
            next.token = token
            next.issuer = issuer
            var kept: [TopicOperation] = []
            var done: [@Sendable (MessagingError?) -> Void] = []
            let wanted = next.topics
            var covered: Set<String> = []
            var followed: Set<String> = []
            var startTypes: Set<String> = []
            for operation in next.pending {
                if operation.action == .subscribe, wanted.contains(operation.topic),
                    covered.insert(operation.topic).inserted
                {
                    kept.append(operation)
                } else if operation.action == .followLiveActivity,
                    next.liveActivities?[operation.topic] == operation.pushToken,
                    followed.insert(operation.topic).inserted
                {
                    kept.append(operation)
                } else if operation.action == .setPushToStartToken, let type = operation.attributesType,
                    next.pushToStartTokens?[type] == operation.pushToken, startTypes.insert(type).inserted
                {
                    kept.append(operation)
                } else {
                    done += waiters.removeValue(forKey: operation.id) ?? []
                }
            }
            for topic in wanted.subtracting(covered).sorted() {
                kept.append(TopicOperation(id: UUID(), action: .subscribe, topic: topic))
            }
            // Likewise the Live Activities: a new registration follows none, so the ones the app follows, and its
            // push-to-start tokens, are sent again (their pending operations are done by these).
            for (topic, pushToken) in (next.liveActivities ?? [:]).sorted(by: { $0.key < $1.key })
            where !followed.contains(topic) {
                kept.append(
                    TopicOperation(id: UUID(), action: .followLiveActivity, topic: topic, pushToken: pushToken))
            }
            for (type, pushToken) in (next.pushToStartTokens ?? [:]).sorted(by: { $0.key < $1.key })
            where !startTypes.contains(type) {
                kept.append(
                    TopicOperation(
                        id: UUID(), action: .setPushToStartToken, topic: "", pushToken: pushToken,
                        attributesType: type))
            }
            next.pending = kept
            // A new registration holds no APNs token: send the app's again.
            if next.apnsToken != nil { next.apnsTokenSent = false }
            try? store.save(next)
            state = next
            startWorkerIfNeeded()
            return (done, Array(tokenObservers.values))
        }
        for waiter in done { waiter(nil) }
        for observer in observers { observer.yield(token) }
    }
}

/// What the worker sends next: the APNs token (set, or cleared when `nil`), or the first topic operation.
private enum Work {
    case apnsToken(String?, sandbox: Bool)
    case topic(TopicOperation)
}

/// Resumes one continuation once, with whichever outcome comes first (the operation's, or cancellation's).
private final class Outcome: @unchecked Sendable {
    // @unchecked: guarded by `lock`.
    private let lock = NSLock()
    private var continuation: CheckedContinuation<Void, any Error>?
    private var early: Result<Void, any Error>?
    private var resumed = false

    func wait(_ continuation: CheckedContinuation<Void, any Error>) {
        let ready = lock.locked { () -> Result<Void, any Error>? in
            if let early { return early }
            self.continuation = continuation
            return nil
        }
        if let ready { continuation.resume(with: ready) }
    }

    func resume(_ result: Result<Void, any Error>) {
        let waiting = lock.locked { () -> CheckedContinuation<Void, any Error>? in
            guard !resumed else { return nil }
            resumed = true
            guard let continuation else {
                early = result
                return nil
            }
            self.continuation = nil
            return continuation
        }
        waiting?.resume(with: result)
    }
}
