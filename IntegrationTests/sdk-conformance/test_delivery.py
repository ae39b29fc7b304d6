"""Delivery to devices against a live server: what the Admin SDK sends reaches exactly the devices in its
audience, over long poll and Server-Sent Events, until acknowledged. Every response is checked against
docs/openapi.yaml by the `contract` fixture."""

import json

import requests
from firebase_admin import messaging

from conftest import CLIENT_KEY, PROJECT
from test_http_battery import expect_rejected

DEVICE = {"x-goog-api-key": CLIENT_KEY}


def inbox(server, token, query=""):
    reply = requests.get(f"{server['base']}/v1/projects/{PROJECT}/registrations/{token}/messages{query}",
                         headers=DEVICE, timeout=70)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_the_seeds_condition_is_delivered_to_exactly_its_audience_until_acknowledged(server, app, register):
    # The FCM guide's example: 'TopicA' in topics && ('TopicB' in topics || 'TopicC' in topics).
    alice, bob, carol = register(), register(), register()
    messaging.subscribe_to_topic([alice, bob], "TopicA", app=app)
    messaging.subscribe_to_topic(alice, "TopicB", app=app)
    messaging.subscribe_to_topic(carol, "TopicC", app=app)
    condition = "'TopicA' in topics && ('TopicB' in topics || 'TopicC' in topics)"
    name = messaging.send(messaging.Message(
        condition=condition, notification=messaging.Notification("Goal", "2-1"), data={"score": "2-1"}), app=app)
    message_id = name.rsplit("/", 1)[1]
    received = {token: [m["messageId"] for m in inbox(server, token)["messages"]] for token in (alice, bob, carol)}
    assert received == {alice: [message_id], bob: [], carol: []}
    delivered = inbox(server, alice)["messages"][0]
    assert delivered["payload"]["gcm.message_id"] == message_id
    assert delivered["payload"]["aps"] == {"alert": {"title": "Goal", "body": "2-1"}}
    assert delivered["payload"]["score"] == "2-1"

    # The same message over Server-Sent Events, then acknowledged: never delivered again.
    stream_url = f"{server['base']}/v1/projects/{PROJECT}/registrations/{alice}/messages:stream"
    with requests.get(stream_url, headers=DEVICE, stream=True, timeout=10) as stream:
        assert stream.status_code == 200
        lines = []
        for line in stream.iter_lines(decode_unicode=True):
            lines.append(line)
            if line.startswith("data: "):
                break
    event_id = next(line[4:] for line in lines if line.startswith("id: "))
    assert event_id == delivered["cursor"]
    assert json.loads(lines[-1][6:])["messageId"] == message_id
    ack = requests.post(f"{server['base']}/v1/projects/{PROJECT}/registrations/{alice}/messages:ack",
                        headers=DEVICE, json={"through": event_id})
    assert ack.status_code == 200 and ack.json() == {"acknowledgedThrough": event_id}
    assert inbox(server, alice)["messages"] == []

    # The audit API shows who acknowledged.
    replay = requests.get(f"{server['base']}/v1/projects/{PROJECT}/audit/messages/{message_id}",
                          headers={"Authorization": "Bearer auditor"}).json()
    assert replay["recipients"] == [alice] and replay["acknowledgedCount"] == 1


def test_delivery_refuses_bad_input_and_strangers(server, register):
    token = register()
    base = f"/v1/projects/{PROJECT}/registrations/{token}"
    expect_rejected(server, "GET", base + "/messages?waitSeconds=x", headers=DEVICE, status=400,
                    code="INVALID_ARGUMENT", field="waitSeconds")
    expect_rejected(server, "GET", base + "/messages?after=-3", headers=DEVICE, status=400, code="INVALID_ARGUMENT",
                    field="after")
    expect_rejected(server, "GET", base + "/messages:stream", headers={**DEVICE, "Last-Event-ID": "x"}, status=400,
                    code="INVALID_ARGUMENT", field="Last-Event-ID")
    for body in ('{"through":"x"}', '{"through":"999999999"}', '{"through":"1","extra":1}', "{"):
        expect_rejected(server, "POST", base + "/messages:ack", body=body, headers=DEVICE, status=400,
                        code="INVALID_ARGUMENT")
    expect_rejected(server, "POST", base + "/messages:ack", body=b'{"through":"' + b"1" * (2 << 20) + b'"}',
                    headers=DEVICE, status=413, code="INVALID_ARGUMENT")
    for path in (base + "/messages", base + "/messages:stream"):
        expect_rejected(server, "GET", path, headers={}, status=401, code="THIRD_PARTY_AUTH_ERROR")
        expect_rejected(server, "GET", path, headers={"Authorization": "Bearer owner"}, status=403,
                        code="SENDER_ID_MISMATCH")
        expect_rejected(server, "GET", path.replace(token, "never-registered"), headers=DEVICE, status=404,
                        code="UNREGISTERED")
    expect_rejected(server, "POST", base + "/messages:ack", body='{"through":"1"}', headers={}, status=401,
                    code="THIRD_PARTY_AUTH_ERROR")
    expect_rejected(server, "POST", base + "/messages:ack", body='{"through":"1"}',
                    headers={"Authorization": "Bearer auditor"}, status=403, code="SENDER_ID_MISMATCH")
    expect_rejected(server, "POST", base.replace(token, "never-registered") + "/messages:ack",
                    body='{"through":"1"}', headers=DEVICE, status=404, code="UNREGISTERED")


def test_after_kill_9_and_restart_every_unacknowledged_message_is_delivered(contract):
    import os
    import signal

    from conftest import restart_server, start_server, stop_and_verify

    process, base, data, binary = start_server()
    token = requests.post(f"{base}/v1/projects/{PROJECT}/registrations", headers=DEVICE, json={}).json()["token"]
    requests.post(f"{base}/iid/v1/{token}/rel/topics/restart", headers={"Authorization": "Bearer owner"})
    sent = [requests.post(f"{base}/v1/projects/{PROJECT}/messages:send", headers={"Authorization": "Bearer owner"},
                          json={"message": {"topic": "restart", "data": {"n": str(n)}}}).json()["name"].rsplit("/", 1)[1]
            for n in range(3)]
    first = requests.get(f"{base}/v1/projects/{PROJECT}/registrations/{token}/messages", headers=DEVICE).json()
    requests.post(f"{base}/v1/projects/{PROJECT}/registrations/{token}/messages:ack", headers=DEVICE,
                  json={"through": first["messages"][0]["cursor"]}).raise_for_status()
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)

    restarted = restart_server(binary, data, base)
    try:
        again = requests.get(f"{base}/v1/projects/{PROJECT}/registrations/{token}/messages", headers=DEVICE).json()
        assert [m["messageId"] for m in again["messages"]] == sent[1:]
    finally:
        stop_and_verify(restarted, data, binary)


def test_platform_configs_built_by_the_sdk_reach_each_platform_mapped(server, app, register):
    # Everything the Admin SDK can put in AndroidConfig, APNSConfig and WebpushConfig is accepted (the
    # server checks the v1 proto types), and each platform's device gets FCM's mapping of it.
    ios, android, web = register("ios"), register("android"), register("web")
    messaging.subscribe_to_topic([ios, android, web], "match", app=app)
    message = messaging.Message(
        topic="match",
        data={"score": "2-1"},
        notification=messaging.Notification("Goal", "2-1", image="https://img.example/goal.png"),
        fcm_options=messaging.FCMOptions(analytics_label="goal"),
        android=messaging.AndroidConfig(
            collapse_key="score", priority="high", ttl=3600, restricted_package_name="com.example",
            data={"score": "2-1", "minute": "90"}, direct_boot_ok=True,
            fcm_options=messaging.AndroidFCMOptions(analytics_label="goal-a"),
            notification=messaging.AndroidNotification(
                title="GOAL", icon="ball", color="#22aa44", sound="whistle", tag="score", click_action="OPEN_MATCH",
                body_loc_key="goal_body", body_loc_args=["2", "1"], title_loc_key="goal_title", title_loc_args=["x"],
                channel_id="live", image="https://img.example/goal-a.png", ticker="Goal!", sticky=True,
                event_timestamp=__import__("datetime").datetime(2026, 11, 23, 20, 0, 0), local_only=False,
                priority="high", vibrate_timings_millis=[100, 200], default_vibrate_timings=False,
                default_sound=False, default_light_settings=False,
                light_settings=messaging.LightSettings(color="#22aa44", light_on_duration_millis=100,
                                                       light_off_duration_millis=200),
                visibility="public", notification_count=3, proxy="allow")),
        apns=messaging.APNSConfig(
            headers={"apns-priority": "10", "apns-collapse-id": "score", "apns-push-type": "alert"},
            payload=messaging.APNSPayload(
                aps=messaging.Aps(alert=messaging.ApsAlert(title="GOAL!", body="2-1 in the 90th"), badge=1,
                                  sound=messaging.CriticalSound("whistle.caf", critical=True, volume=0.5),
                                  content_available=False, mutable_content=True, category="SCORE",
                                  thread_id="match-7", custom_data={"target-content-id": "m7"}),
                match="7"),
            fcm_options=messaging.APNSFCMOptions(analytics_label="goal-i", image="https://img.example/goal-i.png")),
        webpush=messaging.WebpushConfig(
            headers={"Urgency": "high", "TTL": "600", "Topic": "score"}, data={"score": "2-1"},
            notification=messaging.WebpushNotification(
                title="Goal (web)", icon="/ball.png", badge="/badge.png", require_interaction=True,
                actions=[messaging.WebpushNotificationAction("open", "Open")]),
            fcm_options=messaging.WebpushFCMOptions(link="https://match.example/7")))
    message_id = messaging.send(message, app=app).rsplit("/", 1)[1]

    [on_ios] = inbox(server, ios)["messages"]
    payload = on_ios["payload"]
    assert payload["gcm.message_id"] == message_id and payload["from"] == "/topics/match"
    assert payload["aps"]["alert"] == {"title": "GOAL!", "body": "2-1 in the 90th"}
    assert payload["aps"]["badge"] == 1 and payload["aps"]["mutable-content"] == 1
    assert payload["aps"]["sound"] == {"name": "whistle.caf", "critical": 1, "volume": 0.5}
    assert payload["aps"]["thread-id"] == "match-7" and payload["aps"]["target-content-id"] == "m7"
    assert payload["match"] == "7" and payload["score"] == "2-1"
    assert payload["fcm_options"] == {"image": "https://img.example/goal-i.png"}
    assert (on_ios["collapseKey"], on_ios["priority"], on_ios["pushType"]) == ("score", "high", "alert")

    [on_android] = inbox(server, android)["messages"]
    payload = on_android["payload"]
    assert payload["data"] == {"score": "2-1", "minute": "90"}
    assert payload["notification"]["title"] == "GOAL" and payload["notification"]["body"] == "2-1"
    assert payload["notification"]["channelId"] == "live" and payload["notification"]["clickAction"] == "OPEN_MATCH"
    assert payload["notification"]["image"] == "https://img.example/goal-a.png"
    assert (payload["collapseKey"], payload["priority"], payload["ttl"]) == ("score", "high", 3600)
    assert payload["messageId"] == message_id and "pushType" not in on_android

    [on_web] = inbox(server, web)["messages"]
    payload = on_web["payload"]
    assert payload["notification"]["title"] == "Goal (web)" and payload["notification"]["body"] == "2-1"
    assert payload["notification"]["requireInteraction"] is True
    assert payload["fcmOptions"] == {"link": "https://match.example/7"}
    assert payload["collapseKey"] == "score" and on_web["priority"] == "high"


def test_platform_configs_fcm_refuses_are_refused(server, app, register):
    # The v1 proto types: nothing is appended for any of these.
    for bad in ({"apns": {"payload": "x"}}, {"apns": {"headers": {"apns-priority": 7}}},
                {"android": {"notification": {"sticky": "yes"}}}, {"webpush": {"headers": {"Urgency": "now"}}}):
        reply = requests.post(f"{server['base']}/v1/projects/{PROJECT}/messages:send",
                              headers={"Authorization": "Bearer owner"}, json={"message": {"topic": "t", **bad}})
        assert reply.status_code == 400, (bad, reply.text)
        assert reply.json()["error"]["status"] == "INVALID_ARGUMENT"
