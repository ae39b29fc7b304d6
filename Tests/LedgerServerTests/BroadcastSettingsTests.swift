import Foundation
import LedgerCore
import LedgerServer
import LedgerTestSupport
import Testing

@Suite("The config file's broadcast channel settings (apns.broadcast, channelEndpoint, broadcastEndpoint)")
struct BroadcastSettingsTests {
    let key = "sha256:" + String(repeating: "ab", count: 32)
    let apns =
        #""teamId": "ABCDE12345", "keyId": "KEY1234567", "keyFile": "/nowhere/AuthKey.p8", "topic": "com.example.app""#

    func load(_ members: String) throws -> APNsSettings? {
        let path = TemporaryDirectory("config").path + "/config.json"
        try Data(#"{"projects": {"shop": {"adminKeys": ["\#(key)"], "apns": {\#(apns)\#(members)}}}}"#.utf8)
            .write(to: URL(fileURLWithPath: path))
        return try ServerConfiguration.load(path: path).apns[try ProjectID("shop")]
    }

    @Test("broadcast is off and the endpoints are Apple's production hosts unless the file says otherwise")
    func defaults() throws {
        let settings = try #require(try load(""))
        #expect(!settings.broadcast)
        #expect(settings.channelEndpoint == "https://api-manage-broadcast.push.apple.com:2196")
        #expect(settings.broadcastEndpoint == "https://api.push.apple.com")
        let chosen = try #require(
            try load(
                #", "broadcast": true, "channelEndpoint": "https://127.0.0.1:2197/", "#
                    + #""broadcastEndpoint": "https://standin.test:2198""#))
        #expect(chosen.broadcast)
        #expect(chosen.channelEndpoint == "https://127.0.0.1:2197")
        #expect(chosen.broadcastEndpoint == "https://standin.test:2198")
        #expect(try load(#", "broadcast": false"#)?.broadcast == false)
    }

    @Test("a malformed broadcast setting is refused, naming its key")
    func refusals() {
        for (members, field) in [
            (#", "broadcast": "true""#, "apns.broadcast"),
            (#", "broadcast": 1"#, "apns.broadcast"),
            (#", "broadcast": null"#, "apns.broadcast"),
            (#", "channelEndpoint": "http://127.0.0.1:2197""#, "apns.channelEndpoint"),
            (#", "channelEndpoint": "https://host/1/apps""#, "apns.channelEndpoint"),
            (#", "channelEndpoint": """#, "apns.channelEndpoint"),
            (#", "broadcastEndpoint": "https://host?x=1""#, "apns.broadcastEndpoint"),
            (#", "broadcastEndpoint": true"#, "apns.broadcastEndpoint"),
            (#", "broadcasts": true"#, "apns.broadcasts"),
        ] {
            do {
                _ = try load(members)
                Issue.record("\(members) was accepted")
            } catch {
                #expect(error is LedgerCoreError, "\(members)")
                #expect("\(error)".contains(field), "\(members): \(error)")
            }
        }
    }
}
