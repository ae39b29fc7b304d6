import FCMWire
import LedgerCore
import LedgerStore

extension MessageRoutes {
    /// Refuses a topic's Live Activity send (``APNsDestination/channel``) that cannot go out as a broadcast: the
    /// project does not broadcast (`apns.broadcast`), or the topic has no channel now (`POST
    /// …/topics/{topic}:createLiveActivityChannel` makes one). 400 `INVALID_ARGUMENT` naming the `apns-push-type`
    /// header, as before topics had channels; `validate_only` is refused alike. A send accepted here is pushed as one
    /// broadcast by ``ProjectPusher``, on the channel the topic has at its send.
    static func checkBroadcast(_ message: ValidatedMessage, project: ProjectID, broadcasting: Bool, ledger: Ledger)
        throws
    {
        guard case .topic(let topic) = message.target else { return }
        let object = DevicePayload.object(ofMessageJSON: message.json)
        guard APNsDestination(message: object, target: message.target) == .channel else { return }
        let field = "message.apns.headers.apns-push-type"
        guard broadcasting else {
            throw FCMError.invalidArgument(
                "a liveactivity send to a topic is a broadcast on the topic's channel, and project \(project) does not"
                    + " use broadcast channels (apns.broadcast); sending to each follower's Live Activity is not"
                    + " supported yet",
                field: field)
        }
        guard try ledger.read({ try $0.liveActivityChannel(of: topic) }) != nil else {
            throw FCMError.invalidArgument(
                "topic \(topic.rawValue) has no Live Activity broadcast channel (POST"
                    + " …/topics/\(topic.rawValue):createLiveActivityChannel makes one); sending to each follower's"
                    + " Live Activity is not supported yet",
                field: field)
        }
    }
}
