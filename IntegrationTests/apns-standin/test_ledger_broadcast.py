"""Topics carried by iOS 18 broadcast channels, through `ledger serve`, against the stand-in's channel management API
and broadcast endpoint: a topic's channel is created, shown, listed and deleted at Apple and in the ledger (each
change an event, durable across a restart); a `liveactivity` send to the topic is one broadcast whatever its audience
(`apns-expiration: 0` on a channel that stores nothing), recorded with Apple's answer and `apns-request-id`, and
replayed as a broadcast to the channel that addressed the topic's members; the stand-in's refusals surface as errors
and in the metrics; a hostile client changes nothing. Every answer of the channel routes is checked against
docs/openapi.yaml."""

import json
import tempfile
import time

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from apns_harness import ADMIN, AUDITOR, CLIENT, TOPIC, Ledger, StandIn, device_token
from openapi_contract import Contract

BROADCAST_PATH = f"/4/broadcasts/apps/{TOPIC}"
CHANNELS_PATH = f"/1/apps/{TOPIC}/channels"
CONTRACT = Contract()


def _settings(standin):
    return {"broadcast": True, "channelEndpoint": standin.base, "broadcastEndpoint": standin.base}


@pytest.fixture
def world():
    directory = tempfile.mkdtemp(prefix="ledger-broadcast-")
    standin = StandIn(directory, max_streams=100, max_channels=3)
    ledger = Ledger(standin, directory, apns=_settings(standin), limits={"registrationsPerSecond": 100000})
    yield standin, ledger, directory
    ledger.stop()
    standin.stop()
    ledger.verify()


def _call(ledger, method, path, key=ADMIN, device=False, **kwargs):
    """A request to the ledger, its answer checked against docs/openapi.yaml."""
    headers = {"x-goog-api-key": CLIENT} if device else {"Authorization": f"Bearer {key}"}
    response = httpx.request(method, ledger.url(path), headers=headers, timeout=30, **kwargs)
    CONTRACT.check(method, str(response.request.url), response.status_code, response.headers,
                   lambda: response.content)
    return response


def _create(ledger, topic, policy=0, expect=200):
    response = _call(ledger, "POST", f"/topics/{topic}:createLiveActivityChannel",
                     json={"messageStoragePolicy": policy})
    assert response.status_code == expect, response.text
    return response.json()


def _update(event="update"):
    return {"aps": {"timestamp": int(time.time()), "event": event, "content-state": {"home": 1, "away": 0}}}


def _live(topic, **apns):
    return {"topic": topic, "apns": {"headers": {"apns-push-type": "liveactivity", "apns-priority": "5"},
                                     "payload": _update(), **apns}}


def _broadcasts(requests):
    return [r for r in requests if r["path"] == BROADCAST_PATH]


def _audit_broadcast(ledger, message_id, timeout=30):
    deadline = time.time() + timeout
    while True:
        audit = ledger.audit_message(message_id)
        if audit.get("broadcast", {}).get("state") not in (None, "pending"):
            return audit
        assert time.time() < deadline, f"the broadcast was never recorded: {audit.get('broadcast')}"
        time.sleep(0.1)


def _metric(ledger, series):
    text = httpx.get(ledger.base + "/metrics").text
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0


def test_a_channel_is_created_shown_listed_and_deleted_at_apple_and_in_the_ledger(world):
    standin, ledger, _ = world
    channel = _create(ledger, "match-42", policy=0)
    held = httpx.get(standin.control + "/channels").json()
    assert held == {channel["channelId"]: 0}
    [request] = [r for r in standin.requests() if r["path"] == CHANNELS_PATH]
    assert request["method"] == "POST" and request["status"] == 201
    assert json.loads(request["body"]) == {"message-storage-policy": 0, "push-type": "LiveActivity"}
    assert request["headers"]["authorization"].startswith("bearer ")
    assert channel["topic"] == "match-42" and channel["messageStoragePolicy"] == 0
    assert channel["name"] == "projects/shop/topics/match-42/liveActivityChannel"
    [created] = ledger.events("liveActivityChannelCreated")
    assert created["channelId"] == channel["channelId"] and created["topic"] == "match-42"
    assert created["apnsRequestId"] == request["requestId"] and str(created["seq"]) == channel["createSeq"]
    # Shown to the admin and the auditor, listed, and readable by a registered device with the client key.
    assert _call(ledger, "GET", "/topics/match-42:liveActivityChannel").json() == channel
    assert _call(ledger, "GET", "/topics/match-42:liveActivityChannel", key=AUDITOR).json() == channel
    assert _call(ledger, "GET", "/liveActivityChannels").json() == {"liveActivityChannels": [channel]}
    device = ledger.register(device_token(1))
    assert _call(ledger, "GET", f"/registrations/{device}/liveActivityChannels/match-42", device=True).json() \
        == channel
    # Deleted at Apple, then in the ledger.
    deleted = _call(ledger, "DELETE", "/topics/match-42:liveActivityChannel")
    assert deleted.status_code == 200 and deleted.json() == {}, deleted.text
    assert httpx.get(standin.control + "/channels").json() == {}
    [deletion] = ledger.events("liveActivityChannelDeleted")
    assert deletion["channelId"] == channel["channelId"] and deletion["reason"] == "deleted"
    assert _call(ledger, "GET", "/topics/match-42:liveActivityChannel").status_code == 404
    assert _call(ledger, "DELETE", "/topics/match-42:liveActivityChannel").status_code == 404
    assert _call(ledger, "GET", "/liveActivityChannels").json() == {"liveActivityChannels": []}
    assert _metric(ledger, 'ledger_apns_channel_requests_total{operation="create",outcome="succeeded"}') == 1
    assert _metric(ledger, 'ledger_apns_channel_requests_total{operation="delete",outcome="succeeded"}') == 1


def test_a_liveactivity_send_is_one_broadcast_whatever_the_audience_and_replay_says_so(world):
    standin, ledger, _ = world
    tokens = [ledger.register(device_token(i)) for i in range(40)]
    ledger.batch_add(tokens, "match-42")
    channel = _create(ledger, "match-42", policy=0)
    before = len(standin.requests())
    message = _live("match-42")
    sent = ledger.send(message)
    message_id = sent["name"].rsplit("/", 1)[1]
    audit = _audit_broadcast(ledger, message_id)
    time.sleep(0.5)  # nothing more follows
    requests = standin.requests()[before:]
    [broadcast] = _broadcasts(requests)
    assert not [r for r in requests if r["path"].startswith("/3/device/")], "no push per device"
    headers = broadcast["headers"]
    assert headers["apns-channel-id"] == channel["channelId"] and headers["apns-push-type"] == "liveactivity"
    assert headers["apns-expiration"] == "0" and headers["apns-priority"] == "5"
    assert broadcast["status"] == 200
    assert json.loads(broadcast["body"])["aps"] == message["apns"]["payload"]["aps"]
    # Recorded: Apple's answer and its apns-request-id; the topic's 40 members addressed, none pushed one by one.
    recorded = audit["broadcast"]
    assert recorded["state"] == "accepted" and recorded["channelId"] == channel["channelId"]
    assert recorded["apnsRequestId"] == broadcast["requestId"] and recorded["recipients"] == "addressed"
    assert audit["recipientCount"] == 40 and audit["pushes"] == []
    [progress] = [e for e in ledger.events("pushProgress") if e["sendSeq"] == audit["seq"]]
    assert progress["finished"] is True and progress["broadcast"]["status"] == 200
    assert progress["broadcast"]["apnsRequestId"] == broadcast["requestId"]
    replay = ledger.cli("replay", "--message", message_id)
    # The channel id is base64 (it ends with `=`): quoted, as `ledger log --format text` quotes such values.
    assert f'broadcast to channel "{channel["channelId"]}" at ' in replay, replay
    assert "accepted" in replay and "(addressed by the broadcast)" in replay
    assert _metric(ledger, 'ledger_apns_broadcasts_total{outcome="accepted"}') == 1
    # An ordinary send to the same topic is unchanged: a push per member's APNs token, no broadcast.
    before = len(standin.requests())
    ledger.send({"topic": "match-42", "notification": {"title": "Full time"}})
    pushed = standin.wait_for(lambda r: len([x for x in r[before:] if x["path"].startswith("/3/device/")]) >= 40)
    assert not _broadcasts(pushed[before:])
    # validate_only checks it all and sends nothing.
    events = len(ledger.events())
    before = len(standin.requests())
    dry = httpx.post(ledger.url("/messages:send"), headers={"Authorization": f"Bearer {ADMIN}"},
                     json={"message": _live("match-42"), "validate_only": True})
    assert dry.status_code == 200, dry.text
    time.sleep(0.5)
    assert len(ledger.events()) == events and standin.requests()[before:] == []


def test_a_pending_broadcast_counts_one_push_in_the_outbox_whatever_its_audience(world):
    standin, ledger, _ = world
    tokens = [ledger.register(device_token(i)) for i in range(40)]
    ledger.batch_add(tokens, "match-42")
    _create(ledger, "match-42", policy=0)
    # Apple refuses the provider token from now on: the broadcasts wait, pending.
    ledger.stop()
    settings = json.loads(ledger.config.read_text())
    settings["projects"]["shop"]["apns"]["keyFile"] = standin.key_file(ec.generate_private_key(ec.SECP256R1()))
    ledger.config.write_text(json.dumps(settings))
    ledger.start()
    ids = [ledger.send(_live("match-42"))["name"].rsplit("/", 1)[1] for _ in range(2)]
    deadline = time.time() + 30
    while httpx.get(ledger.base + "/readyz").status_code == 200:
        assert time.time() < deadline, "readyz never reported the refused provider token"
        time.sleep(0.1)
    time.sleep(1.5)  # the depth is counted every second
    # Two broadcasts owed, not 2 x 40 pushes.
    assert _metric(ledger, "ledger_apns_outbox_depth") == 2
    assert all(ledger.audit_message(i)["broadcast"]["state"] == "pending" for i in ids)
    assert all(ledger.audit_message(i)["broadcast"]["recipients"] == "pending" for i in ids)


def test_a_channel_that_stores_the_latest_broadcast_gets_the_messages_expiry(world):
    standin, ledger, _ = world
    ledger.subscribe(ledger.register(device_token(1)), "gate-B12")
    channel = _create(ledger, "gate-B12", policy=1)
    message_id = ledger.send(_live("gate-B12"))["name"].rsplit("/", 1)[1]
    assert _audit_broadcast(ledger, message_id)["broadcast"]["state"] == "accepted"
    [broadcast] = _broadcasts(standin.requests())
    assert broadcast["headers"]["apns-channel-id"] == channel["channelId"]
    # FCM's default lifetime, four weeks from the send.
    assert int(broadcast["headers"]["apns-expiration"]) > time.time() + 27 * 86400


def test_the_stand_ins_refusals_surface_as_errors_and_in_the_metrics(world):
    standin, ledger, directory = world
    for topic in ("a", "b", "c"):
        _create(ledger, topic)
    events = len(ledger.events())
    # Apple's limit at the stand-in is 3: its refusal names Apple's reason, and nothing is recorded.
    refused = _call(ledger, "POST", "/topics/d:createLiveActivityChannel", json={"messageStoragePolicy": 0})
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["status"] == "FAILED_PRECONDITION"
    assert "CannotCreateChannelConfig" in refused.json()["error"]["message"]
    assert len(ledger.events()) == events
    assert _metric(ledger, 'ledger_apns_channel_requests_total{operation="create",outcome="refused"}') == 1
    # Apple no longer holds the channels (the stand-in forgot them): the broadcast is refused, recorded as such.
    standin.reset()
    ledger.subscribe(ledger.register(device_token(2)), "a")
    message_id = ledger.send(_live("a"))["name"].rsplit("/", 1)[1]
    recorded = _audit_broadcast(ledger, message_id)["broadcast"]
    assert recorded["state"] == "rejected" and recorded["status"] == 404
    assert recorded["reason"] == "ChannelNotRegistered" and recorded["recipients"] == "notAddressed"
    replay = ledger.cli("replay", "--message", message_id)
    assert "(not addressed: broadcast rejected)" in replay and "(addressed by" not in replay, replay
    assert _metric(ledger, 'ledger_apns_broadcasts_total{outcome="rejected"}') == 1
    assert "a broadcast was not taken" in ledger.log.read_text()
    # Deleting a channel Apple no longer holds records the deletion, with Apple's reason.
    assert _call(ledger, "DELETE", "/topics/a:liveActivityChannel").status_code == 200
    [deletion] = ledger.events("liveActivityChannelDeleted")
    assert deletion["reason"] == "APNs: ChannelNotRegistered"


def test_a_creation_apple_carried_out_and_never_answered_is_of_unknown_outcome(world):
    """APNs made the channel and its answer never came (the ledger's 30 s timeout): 503 saying the outcome is unknown,
    counted, one error line naming the topic; nothing recorded, and APNs' list shows the channel the ledger lacks."""
    standin, ledger, _ = world
    ledger.register()  # the project's ledger, made on first write
    events = len(ledger.events())
    standin.leave_channel_requests_unanswered(1)
    response = httpx.post(ledger.url("/topics/match-7:createLiveActivityChannel"),
                          headers={"Authorization": f"Bearer {ADMIN}"}, json={"messageStoragePolicy": 0}, timeout=90)
    CONTRACT.check("POST", str(response.request.url), response.status_code, response.headers,
                   lambda: response.content)
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["status"] == "UNAVAILABLE" and "outcome is unknown" in error["message"], error
    assert len(httpx.get(standin.control + "/channels").json()) == 1
    assert _call(ledger, "GET", "/liveActivityChannels").json() == {"liveActivityChannels": []}
    assert len(ledger.events()) == events
    assert _metric(ledger, 'ledger_apns_channel_requests_total{operation="create",outcome="unknown"}') == 1
    assert _metric(ledger, 'ledger_apns_channel_requests_total{operation="create",outcome="failed"}') == 0
    lines = [line for line in ledger.log.read_text().splitlines()
             if "may have created a channel the ledger does not know" in line]
    assert len(lines) == 1 and "match-7" in lines[0] and "all-channels" in lines[0], lines
    assert "bearer" not in lines[0].lower()
    # The next creation is answered and recorded as usual.
    assert _create(ledger, "match-7")["topic"] == "match-7"


def test_with_broadcasts_turned_off_a_channel_is_still_read_and_deleted_at_apple(world):
    standin, ledger, directory = world
    channel = _create(ledger, "match-9")
    ledger.stop()
    # The same data and credentials, `broadcast` now off.
    off = Ledger(standin, directory, data=ledger.data, apns={**_settings(standin), "broadcast": False})
    try:
        assert _call(off, "GET", "/topics/match-9:liveActivityChannel").json() == channel
        refused = _call(off, "POST", "/topics/other:createLiveActivityChannel", json={"messageStoragePolicy": 0})
        assert refused.status_code == 400 and refused.json()["error"]["status"] == "FAILED_PRECONDITION"
        deleted = _call(off, "DELETE", "/topics/match-9:liveActivityChannel")
        assert deleted.status_code == 200 and deleted.json() == {}, deleted.text
        assert httpx.get(standin.control + "/channels").json() == {}
        [deletion] = off.events("liveActivityChannelDeleted")
        assert deletion["channelId"] == channel["channelId"] and deletion["reason"] == "deleted"
    finally:
        off.stop()
    ledger.start()


def test_a_hostile_client_changes_nothing(world):
    standin, ledger, _ = world
    _create(ledger, "match-42")
    events, requests = len(ledger.events()), len(standin.requests())
    path = "/topics/other:createLiveActivityChannel"
    attempts = [
        # A body padded past the server's limit, an unknown field, a bad policy, not an object.
        dict(content=b'{"messageStoragePolicy":0' + b" " * (2 << 20) + b"}",
             headers={"Content-Type": "application/json"}),
        dict(json={"messageStoragePolicy": 0, "pushType": "LiveActivity"}),
        dict(json={"messageStoragePolicy": 2}),
        dict(json={"messageStoragePolicy": "1"}),
        dict(json=[0]),
    ]
    for attempt in attempts:
        response = httpx.post(ledger.url(path), headers={"Authorization": f"Bearer {ADMIN}",
                                                          **attempt.pop("headers", {})}, timeout=30, **attempt)
        assert response.status_code in (400, 413), response.text
        if response.status_code == 400:
            CONTRACT.check("POST", str(response.request.url), 400, response.headers, lambda: response.content)
    # A device's credential on the admin routes, a duplicate creation, a deletion by the auditor.
    device = ledger.register()
    assert _call(ledger, "POST", path, device=True, json={"messageStoragePolicy": 0}).status_code in (401, 403)
    assert _call(ledger, "POST", path, key=AUDITOR, json={"messageStoragePolicy": 0}).status_code in (401, 403)
    assert _call(ledger, "DELETE", "/topics/match-42:liveActivityChannel", key=AUDITOR).status_code in (401, 403)
    duplicate = _call(ledger, "POST", "/topics/match-42:createLiveActivityChannel", json={"messageStoragePolicy": 1})
    assert duplicate.status_code == 409 and duplicate.json()["error"]["status"] == "ALREADY_EXISTS"
    # A device reads only as a registered device.
    stranger = _call(ledger, "GET", "/registrations/nobody/liveActivityChannels/match-42", device=True)
    assert stranger.status_code == 404
    assert _call(ledger, "GET", f"/registrations/{device}/liveActivityChannels/match-42",
                 device=True).status_code == 200
    # A liveactivity send whose ActivityKit payload is bad is refused naming the field, whatever channels exist.
    refused = httpx.post(ledger.url("/messages:send"), headers={"Authorization": f"Bearer {ADMIN}"},
                         json={"message": {**_live("match-42"), "apns": {**_live("match-42")["apns"],
                                                                         "payload": {"aps": {"event": "update"}}}}})
    assert refused.status_code == 400, refused.text
    assert "message.apns.payload.aps" in refused.text
    time.sleep(0.3)
    assert len(ledger.events()) == events + 1  # the device's registration alone
    assert len(standin.requests()) == requests


def _follow(ledger, device, topic, token):
    response = httpx.put(ledger.url(f"/registrations/{device}/liveActivities/{topic}"),
                         headers={"x-goog-api-key": CLIENT}, json={"pushToken": token}, timeout=30)
    assert response.status_code == 200, response.text


def _device_pushes(requests):
    return [r for r in requests if r["path"].startswith("/3/device/")]


def test_whether_a_send_is_a_broadcast_is_decided_at_the_send_and_replayed_so(world):
    """The rule: a topic's Live Activity update or end is a broadcast iff the project broadcasts and the topic had a
    channel when the send was appended (recorded in the `sent` event); otherwise it goes to the followers' activity
    tokens. A start always goes to push-to-start tokens; an end broadcast retires no follower's token."""
    standin, ledger, _ = world
    fan = ledger.register(device_token(1))
    ledger.subscribe(fan, "match-42")
    token = "a1" * 40
    _follow(ledger, fan, "match-42", token)
    # Before the topic has a channel: the update goes to the follower's activity token.
    before = len(standin.requests())
    first = ledger.send(_live("match-42"))["name"].rsplit("/", 1)[1]
    pushed = standin.wait_for(lambda r: len(_device_pushes(r[before:])) >= 1)
    [push] = _device_pushes(pushed[before:])
    assert push["token"] == token and not _broadcasts(pushed[before:])
    [sent_first] = [e for e in ledger.events("sent") if e["messageId"] == first]
    assert "broadcastChannelId" not in sent_first
    # With a channel: one broadcast, nothing to the follower's token.
    channel = _create(ledger, "match-42", policy=0)
    before = len(standin.requests())
    second = ledger.send(_live("match-42"))["name"].rsplit("/", 1)[1]
    assert _audit_broadcast(ledger, second)["broadcast"]["state"] == "accepted"
    time.sleep(0.3)
    assert len(_broadcasts(standin.requests()[before:])) == 1 and not _device_pushes(standin.requests()[before:])
    [sent_second] = [e for e in ledger.events("sent") if e["messageId"] == second]
    assert sent_second["broadcastChannelId"] == channel["channelId"]
    # The first send still replays as it went out: to the follower, not a broadcast (the topic has a channel now).
    audit = ledger.audit_message(first)
    assert "broadcast" not in audit and audit["pushes"][0]["push"]["apnsToken"] == token
    assert "broadcast to channel" not in ledger.cli("replay", "--message", first)
    # An end on the channel is a broadcast, and the follower's own activity token is not retired.
    ended = ledger.send({**_live("match-42"), "apns": {**_live("match-42")["apns"], "payload": _update("end")}})
    assert _audit_broadcast(ledger, ended["name"].rsplit("/", 1)[1])["broadcast"]["state"] == "accepted"
    assert ledger.events("liveActivitiesEnded") == []
    # A start is never a broadcast: it goes to the push-to-start tokens of its type.
    starter = "5c" * 40
    response = httpx.put(ledger.url(f"/registrations/{fan}/pushToStartTokens/MatchAttributes"),
                         headers={"x-goog-api-key": CLIENT}, json={"pushToken": starter}, timeout=30)
    assert response.status_code == 200, response.text
    before = len(standin.requests())
    start = _update("start")
    start["aps"].update({"attributes-type": "MatchAttributes", "attributes": {"match": 42},
                         "alert": {"title": "Kick-off"}})
    ledger.send({**_live("match-42"), "apns": {**_live("match-42")["apns"], "payload": start}})
    pushed = standin.wait_for(lambda r: len(_device_pushes(r[before:])) >= 1)
    assert [r["token"] for r in _device_pushes(pushed[before:])] == [starter]
    assert not _broadcasts(standin.requests()[before:])
    # Deleted: later updates go to the follower again; a send recorded on the channel is not re-routed.
    assert _call(ledger, "DELETE", "/topics/match-42:liveActivityChannel").status_code == 200
    before = len(standin.requests())
    ledger.send(_live("match-42"))
    pushed = standin.wait_for(lambda r: len(_device_pushes(r[before:])) >= 1)
    assert [r["token"] for r in _device_pushes(pushed[before:])] == [token]
    assert not _broadcasts(standin.requests()[before:])


def test_a_restart_keeps_the_channels_and_broadcasts_go_on(world):
    standin, ledger, _ = world
    channel = _create(ledger, "match-42", policy=0)
    ledger.subscribe(ledger.register(device_token(4)), "match-42")
    ledger.kill()
    ledger.start()
    assert _call(ledger, "GET", "/topics/match-42:liveActivityChannel").json() == channel
    assert _call(ledger, "GET", "/liveActivityChannels").json() == {"liveActivityChannels": [channel]}
    message_id = ledger.send(_live("match-42"))["name"].rsplit("/", 1)[1]
    assert _audit_broadcast(ledger, message_id)["broadcast"]["state"] == "accepted"
    assert len(_broadcasts(standin.requests())) == 1


def test_a_project_that_does_not_broadcast_refuses_channels(world):
    standin, _, directory = world
    plain = Ledger(standin, directory)
    try:
        refused = _call(plain, "POST", "/topics/x:createLiveActivityChannel", json={"messageStoragePolicy": 0})
        assert refused.status_code == 400 and refused.json()["error"]["status"] == "FAILED_PRECONDITION"
        assert "apns.broadcast" in refused.json()["error"]["message"]
        assert not [r for r in standin.requests() if r["path"] == CHANNELS_PATH]
    finally:
        plain.stop()


def _readyz(ledger):
    response = httpx.get(ledger.base + "/readyz")
    return response.status_code, response.json().get("reasons") or []


def _wait(predicate, what, timeout=30):
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, what
        time.sleep(0.1)


def _fans(ledger, count, topics):
    tokens = [ledger.register(device_token(100 + i)) for i in range(count)]
    for topic in topics:
        ledger.batch_add(tokens, topic)
    return tokens


def test_a_failing_broadcast_holds_back_no_push_and_is_made_once_when_apns_answers_again(world):
    """No answer, 429 and 5xx: the broadcast is tried again with backoff (Retry-After honoured) in a lane of its own,
    while later sends' pushes go out; /readyz, the metrics and one log line say so; once APNs answers it is made once,
    with the same apns-request-id on every try, and recorded."""
    standin, ledger, _ = world
    _fans(ledger, 3, ["match-42", "news"])
    _create(ledger, "match-42", policy=0)
    standin.script_broadcasts([{"drop": True}, {"status": 429, "reason": "TooManyRequests", "retryAfter": 1},
                               {"status": 500, "reason": "InternalServerError"}], sticky=True)
    stuck = ledger.send(_live("match-42"))["name"].rsplit("/", 1)[1]
    standin.wait_for(lambda r: len(_broadcasts(r)) >= 2, what="the broadcast's first tries")
    # A later send's pushes are not held back by the broadcast waiting on APNs.
    before = len(standin.requests())
    ordinary = ledger.send({"topic": "news", "notification": {"title": "Kick-off"}})["name"].rsplit("/", 1)[1]
    pushed = standin.wait_for(lambda r: len(_device_pushes(r[before:])) >= 3, timeout=10,
                              what="the pushes of a send after a stuck broadcast")
    assert all(r["status"] == 200 for r in _device_pushes(pushed[before:]))
    _wait(lambda: ledger.audit_message(ordinary)["pushes"] and all(
        p["push"].get("outcome") == "accepted" for p in ledger.audit_message(ordinary)["pushes"]),
        "the later send's pushes were never recorded")
    assert ledger.audit_message(stuck)["broadcast"]["state"] == "pending"
    # Said in /readyz as the broadcasts' problem, not the pushes'.
    _wait(lambda: _readyz(ledger)[0] == 503, "readyz never said the broadcasts fail")
    status, reasons = _readyz(ledger)
    assert any("broadcasts fail at APNs" in r for r in reasons), reasons
    assert not any("cannot push to APNs" in r for r in reasons), reasons
    # Every try is counted; backoff: 1 s after no answer, Retry-After's 1 s after the 429, then 2 s, 4 s (doubling).
    standin.wait_for(lambda r: len(_broadcasts(r)) >= 4, timeout=20, what="the broadcast's tries with backoff")
    tries = _broadcasts(standin.requests())
    assert [t["status"] for t in tries[:4]] == [0, 429, 500, 500]
    gaps = [b["time"] - a["time"] for a, b in zip(tries, tries[1:4])]
    assert 0.9 <= gaps[0] < 1.8 and 0.9 <= gaps[1] < 1.8 and gaps[2] >= 3.5, gaps
    assert _metric(ledger, 'ledger_apns_broadcast_attempts_total{outcome="retry"}') >= 4
    assert _metric(ledger, 'ledger_apns_broadcast_attempts_total{outcome="accepted"}') == 0
    # APNs answers again: the broadcast is made once, recorded; /readyz is ready again.
    standin.script_broadcasts([])
    assert _audit_broadcast(ledger, stuck, timeout=40)["broadcast"]["state"] == "accepted"
    time.sleep(0.5)
    tries = _broadcasts(standin.requests())
    assert [t["status"] for t in tries].count(200) == 1 and tries[-1]["status"] == 200
    assert len({t["requestId"] for t in tries}) == 1, "the same apns-request-id on every try"
    assert _metric(ledger, 'ledger_apns_broadcast_attempts_total{outcome="accepted"}') == 1
    assert _metric(ledger, 'ledger_apns_broadcasts_total{outcome="accepted"}') == 1
    _wait(lambda: _readyz(ledger)[0] == 200, "readyz never recovered")
    # One error line when the failing started, one notice when it ended: not one per try.
    log = ledger.log.read_text()
    assert log.count("APNs broadcasts fail") == 1 and log.count("APNs answers broadcasts again") == 1, log
    line = next(l for l in log.splitlines() if "APNs broadcasts fail" in l)
    assert "apns.channel_id" in line and "ledger.send_seq" in line and "bearer" not in line, line


def test_a_restart_while_a_broadcast_is_stuck_loses_nothing(world):
    """The settled seq the pusher records stays before a broadcast not recorded finished, however far later sends got:
    after a kill the broadcast is tried again and made once; the sends finished before the kill are not pushed again."""
    standin, ledger, _ = world
    _fans(ledger, 3, ["match-42", "news"])
    _create(ledger, "match-42", policy=0)
    standin.script_broadcasts([{"status": 503, "reason": "ServiceUnavailable"}], sticky=True)
    stuck = ledger.send(_live("match-42"))
    stuck_id = stuck["name"].rsplit("/", 1)[1]
    before = len(standin.requests())
    later = [ledger.send({"topic": "news", "notification": {"title": f"#{i}"}})["name"].rsplit("/", 1)[1]
             for i in range(2)]
    standin.wait_for(lambda r: len(_device_pushes(r[before:])) >= 6, timeout=10, what="the later sends' pushes")
    seq = ledger.audit_message(stuck_id)["seq"]
    _wait(lambda: all(any(e["sendSeq"] == ledger.audit_message(m)["seq"] and e["finished"]
                          for e in ledger.events("pushProgress")) for m in later),
          "the later sends were never recorded finished")
    progress = ledger.events("pushProgress")
    assert all(e["settledThrough"] < seq for e in progress), progress
    time.sleep(1.5)  # the depth is counted every second: the broadcast owes one push, the later sends none
    assert _metric(ledger, "ledger_apns_outbox_depth") == 1
    ledger.kill()
    tries = len(_broadcasts(standin.requests()))
    pushes = len(_device_pushes(standin.requests()))
    ledger.start()
    # The restarted pusher takes the broadcast up again; the finished sends are not pushed again.
    standin.wait_for(lambda r: len(_broadcasts(r)) > tries, what="the broadcast tried again after the restart")
    before = len(standin.requests())
    after_restart = ledger.send({"topic": "news", "notification": {"title": "after"}})["name"].rsplit("/", 1)[1]
    standin.wait_for(lambda r: len(_device_pushes(r[before:])) >= 3, timeout=10, what="a send after the restart")
    standin.script_broadcasts([])
    assert _audit_broadcast(ledger, stuck_id, timeout=40)["broadcast"]["state"] == "accepted"
    time.sleep(0.5)
    assert len(_device_pushes(standin.requests())) == pushes + 3
    assert [t["status"] for t in _broadcasts(standin.requests())].count(200) == 1
    _wait(lambda: any(e["settledThrough"] >= ledger.audit_message(after_restart)["seq"]
                      for e in ledger.events("pushProgress")), "the settled seq never passed the broadcast")
