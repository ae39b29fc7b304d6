/// Renders an event as one line for people (`ledger log --format text`):
///
/// ```
/// 12 2026-11-23T17:54:14.123456Z subscribed token=dGVzdA topic=news via=iid actor=admin request=r-1 hash=1a2b3c4d5e6f
/// ```
///
/// Seq, time and kind, then the kind's fields as `name=value`, who did it, and the first 12 hex digits of
/// the chain hash. A value that holds a space, a quote, a backslash, `=` or anything unprintable is quoted
/// with escapes, so that app ids, reasons and conditions (user input) can neither split a line nor send a
/// terminal control sequence. The message itself and whole hashes are in `--format json`. Audit data: it
/// carries tokens by design and must never be sent to a log.
public enum EventText {
    public static func line(_ event: LedgerEvent, hash: some Sequence<UInt8>) -> String {
        var fields: [(String, String)] = []
        switch event.body {
        case .registered(let token, let platform, let appID):
            fields.append(("token", token.rawValue))
            if let platform { fields.append(("platform", platform)) }
            if let appID { fields.append(("appId", appID)) }
        case .unregistered(let token, let reason):
            fields += [("token", token.rawValue), ("reason", reason)]
        case .subscribed(let token, let topic, let via), .unsubscribed(let token, let topic, let via):
            fields += [("token", token.rawValue), ("topic", topic.rawValue), ("via", via.rawValue)]
        case .sent(let sent):
            fields += [
                ("messageId", String(sent.messageID)), (sent.target.kindName, sent.target.text),
                ("precedence", sent.precedence.rawValue), ("messageBytes", String(sent.messageJSON.count)),
            ]
            if let channel = sent.broadcastChannelID { fields.append(("broadcastChannelId", channel)) }
            if let activity = sent.topicActivity { fields.append(("topicActivity", activity.name)) }
            if case .pushToStart(let type)? = sent.topicActivity { fields.append(("attributesType", type)) }
        case .audience(let audience):
            fields += [
                ("messageId", String(audience.messageID)), ("sendSeq", String(audience.sendSeq)),
                ("recipients", String(audience.recipientCount)),
                ("digest", String(Hex.encode(audience.recipientDigest).prefix(12))),
                ("digestVersion", String(audience.digestVersion.rawValue)),
            ]
        case .acknowledged(let token, let through):
            fields += [("token", token.rawValue), ("throughSeq", String(through))]
        case .apnsTokenSet(let token, let apnsToken):
            fields += [
                ("token", token.rawValue), ("apnsToken", apnsToken.hex),
                ("apnsSandbox", String(apnsToken.sandbox)),
            ]
        case .apnsTokenCleared(let token, let reason):
            fields += [("token", token.rawValue), ("reason", reason)]
        case .pushProgress(let progress):
            fields += [
                ("sendSeq", String(progress.sendSeq)), ("through", progress.throughToken?.rawValue ?? ""),
                ("finished", String(progress.finished)), ("expired", String(progress.expired)),
                ("failures", String(progress.failures.count)), ("settledThrough", String(progress.settledThrough)),
            ]
            if let broadcast = progress.broadcast {
                fields += [
                    ("broadcastChannel", broadcast.channelID), ("broadcastStatus", String(broadcast.status)),
                    ("broadcastReason", broadcast.reason), ("apnsRequestId", broadcast.apnsRequestID),
                ]
            }
        case .erased(let erasure):
            fields += [
                ("pseudonym", erasure.pseudonym.rawValue), ("registeredSeq", String(erasure.registeredSeq)),
                ("reason", erasure.reason), ("redactedEvents", String(erasure.redactedEvents)),
            ]
        case .retention(let sweep):
            fields += [
                ("firstSeq", String(sweep.firstSeq)), ("throughSeq", String(sweep.throughSeq)),
                ("cutoff", sweep.cutoff.rfc3339), ("forgottenContents", String(sweep.forgottenContents)),
                ("unsealedContents", String(sweep.unsealedContents)),
            ]
        case .liveActivityChannelCreated(let change):
            fields += [
                ("topic", change.topic.rawValue), ("channel", change.channelID),
                ("messageStoragePolicy", String(change.messageStoragePolicy)), ("apnsRequestId", change.apnsRequestID),
            ]
        case .liveActivityChannelDeleted(let change):
            fields += [
                ("topic", change.topic.rawValue), ("channel", change.channelID),
                ("apnsRequestId", change.apnsRequestID),
                ("reason", change.reason),
            ]
        case .liveActivityFollowed(let token, let topic, let pushToken):
            fields += [("token", token.rawValue), ("topic", topic.rawValue), ("pushToken", pushToken.hex)]
        case .liveActivityUnfollowed(let token, let topic, let reason):
            fields += [("token", token.rawValue), ("topic", topic.rawValue), ("reason", reason)]
        case .pushToStartTokenSet(let token, let attributesType, let pushToken):
            fields += [("token", token.rawValue), ("attributesType", attributesType), ("pushToken", pushToken.hex)]
        case .liveActivitiesEnded(let topic, let sendSeq, let messageID):
            fields += [("topic", topic.rawValue), ("sendSeq", String(sendSeq)), ("messageId", String(messageID))]
        }
        fields += [
            ("actor", event.actor), ("request", event.requestID), ("hash", String(Hex.encode(Array(hash)).prefix(12))),
        ]
        var line = "\(event.seq) \(event.time.rfc3339) \(event.kind.rawValue)"
        for (name, value) in fields {
            line += " \(name)=\(quoted(value))"
        }
        return line
    }

    /// `value` as is when it is plain printable ASCII without spaces, quotes, backslashes or `=`; otherwise
    /// in double quotes, with `\"` and `\\`, printable letters of any script kept, and `\u{…}` for every
    /// control, separator or format scalar (bidi overrides included).
    public static func quoted(_ value: String) -> String {
        let plain =
            !value.isEmpty
            && value.unicodeScalars.allSatisfy { scalar in
                scalar.value > 0x20 && scalar.value < 0x7F && !"\"\\=".unicodeScalars.contains(scalar)
            }
        if plain { return value }
        var out = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case " ", "=": out.unicodeScalars.append(scalar)
            case _ where scalar.value >= 0x20 && scalar.value < 0x7F: out.unicodeScalars.append(scalar)
            case _
            where scalar.value > 0x9F && scalar.properties.generalCategory != .format
                && scalar.properties.generalCategory != .lineSeparator
                && scalar.properties.generalCategory != .paragraphSeparator:
                // Printable non-ASCII (names in other scripts) stays readable.
                out.unicodeScalars.append(scalar)
            default: out += "\\u{\(String(scalar.value, radix: 16))}"
            }
        }
        return out + "\""
    }
}
