"""FCM's Live Activity messages through `ledger serve`, against the stand-in: a token send with
`apns.live_activity_token` is pushed to that token with Apple's ActivityKit headers (`apns-push-type: liveactivity`,
`apns-topic: <bundle id>.push-type.liveactivity`, `apns-priority` 5 or 10); a bad payload is refused naming its
field, appending nothing; `validate_only` checks it all; Apple's answer is recorded per push, and a 410 for the
activity's token ends neither the registration nor the device's own pushes; an erasure of the device forgets the
activity token with the message."""

import json
import tempfile
import time

import httpx
import pytest

from apns_harness import ADMIN, TOPIC, Ledger, StandIn, device_token, files_holding

LIVE_TOPIC = TOPIC + ".push-type.liveactivity"
# An ActivityKit token as the app hands it over: hex (the harness's device tokens are 32 bytes; these are 40).
PUSH_TO_START = "5a" * 40
ACTIVITY = "a7" * 40
DEVICE = device_token(1)


@pytest.fixture
def world():
    directory = tempfile.mkdtemp(prefix="ledger-live-")
    standin = StandIn(directory, max_streams=100)
    ledger = Ledger(standin, directory, limits={"registrationsPerSecond": 100000})
    yield standin, ledger, directory
    ledger.stop()
    standin.stop()
    ledger.verify()


def _message_id(sent):
    return sent["name"].rsplit("/", 1)[1]


def _push_of(ledger, message_id, token, timeout=30):
    """The audited push of `message_id` to registration `token`, once it is no longer pending."""
    deadline = time.time() + timeout
    while True:
        audit = ledger.audit_message(message_id)
        pushes = {entry["token"]: entry["push"] for entry in audit["pushes"]}
        if token in pushes and pushes[token]["outcome"] != "pending":
            return pushes[token], audit
        assert time.time() < deadline, f"the push never settled: {audit.get('pushCounts')}"
        time.sleep(0.1)


def _start(timestamp=None):
    return {"aps": {"timestamp": timestamp or int(time.time()), "event": "start",
                    "content-state": {"home": 0, "away": 0},
                    "attributes-type": "MatchAttributes", "attributes": {"match": "A v B"},
                    "alert": {"title": "Kick-off", "body": "A v B"}}}


def _update(event="update", **extra):
    aps = {"timestamp": int(time.time()), "event": event, "content-state": {"home": 1, "away": 0}}
    aps.update(extra)
    return {"aps": aps}


def _send_raw(ledger, body):
    return httpx.post(ledger.url("/messages:send"), headers={"Authorization": f"Bearer {ADMIN}"}, json=body,
                      timeout=30)


def _field(response):
    details = response.json()["error"]["details"]
    return [v["field"] for d in details for v in d.get("fieldViolations", [])]


def test_start_update_and_end_reach_the_activity_token_with_apples_headers(world):
    standin, ledger, _ = world
    device = ledger.register(DEVICE)
    sends = [
        # FCM's own example: the push-to-start token, priority 10.
        ({"apns": {"live_activity_token": PUSH_TO_START, "headers": {"apns-priority": "10"}, "payload": _start()}},
         PUSH_TO_START, "10"),
        # An update at priority 5 (no budget spent), with the push type said outright.
        ({"apns": {"live_activity_token": ACTIVITY, "payload": _update(),
                   "headers": {"apns-priority": "5", "apns-push-type": "liveactivity"}}}, ACTIVITY, "5"),
        # An end with no priority: APNs' default for an ActivityKit push, 10.
        ({"apns": {"liveActivityToken": ACTIVITY.upper(),
                   "payload": _update("end", **{"dismissal-date": int(time.time()) + 60})}}, ACTIVITY, "10"),
    ]
    for index, (message, activity_token, priority) in enumerate(sends):
        message["token"] = device
        sent = ledger.send(message)
        requests = standin.wait_for(lambda r: len(r) >= index + 1)
        request = requests[index]
        headers = request["headers"]
        assert request["status"] == 200, request
        assert request["token"] == activity_token
        assert headers["apns-topic"] == LIVE_TOPIC and headers["apns-push-type"] == "liveactivity"
        assert headers["apns-priority"] == priority
        body = json.loads(request["body"])
        assert body["aps"] == message["apns"]["payload"]["aps"]
        # Recorded per push as every APNs push is: accepted, with its apns-id, to the activity's token.
        push, audit = _push_of(ledger, _message_id(sent), device)
        assert push["outcome"] == "accepted" and push["liveActivity"] is True
        assert push["apnsToken"] == activity_token and push["apnsId"] == headers["apns-id"]
        assert audit["pushCounts"]["accepted"] == 1
    # The device's own APNs token got none of them.
    assert DEVICE not in {r["token"] for r in standin.requests()}
    # An ordinary send still goes to the device's own token, on the bundle id's topic.
    standin.reset()
    ledger.send({"token": device, "notification": {"title": "Full time"}})
    [request] = standin.wait_for(lambda r: len(r) >= 1)
    assert request["token"] == DEVICE and request["headers"]["apns-topic"] == TOPIC
    assert request["headers"]["apns-push-type"] == "alert"


@pytest.mark.parametrize("apns,field", [
    ({"live_activity_token": ACTIVITY, "payload": {"aps": {"event": "update", "content-state": {}}}},
     "message.apns.payload.aps.timestamp"),
    ({"live_activity_token": ACTIVITY, "payload": {"aps": {"timestamp": 1.5, "event": "update",
                                                            "content-state": {}}}},
     "message.apns.payload.aps.timestamp"),
    ({"live_activity_token": ACTIVITY, "payload": {"aps": {"timestamp": 18446744073709551616, "event": "update",
                                                            "content-state": {}}}},
     "message.apns.payload.aps.timestamp"),
    ({"live_activity_token": ACTIVITY, "payload": {"aps": {"timestamp": 1, "event": "pause",
                                                            "content-state": {}}}},
     "message.apns.payload.aps.event"),
    ({"live_activity_token": ACTIVITY, "payload": {"aps": {"timestamp": 1, "event": "update",
                                                            "content-state": "1-0"}}},
     "message.apns.payload.aps.content-state"),
    ({"live_activity_token": ACTIVITY, "payload": {"aps": {k: v for k, v in _start(1)["aps"].items()
                                                            if k != "attributes-type"}}},
     "message.apns.payload.aps.attributes-type"),
    ({"live_activity_token": ACTIVITY, "payload": {"aps": {"timestamp": 1, "event": "end", "stale-date": "soon"}}},
     "message.apns.payload.aps.stale-date"),
    ({"live_activity_token": ACTIVITY, "payload": {"aps": {"timestamp": 1, "event": "end",
                                                            "relevance-score": "high"}}},
     "message.apns.payload.aps.relevance-score"),
    ({"live_activity_token": ACTIVITY, "headers": {"apns-priority": "1"}, "payload": _update()},
     "message.apns.headers.apns-priority"),
    ({"live_activity_token": "not-hex", "payload": _update()}, "message.apns.live_activity_token"),
    ({"live_activity_token": ACTIVITY, "headers": {"apns-push-type": "alert"}, "payload": _update()},
     "message.apns.headers.apns-push-type"),
    # The device's own APNs token cannot take a liveactivity push: refused, not pushed there.
    ({"headers": {"apns-push-type": "liveactivity"}, "payload": _update()}, "message.apns.live_activity_token"),
    ({"live_activity_token": ACTIVITY, "payload": {"aps": _update()["aps"], "pad": "x" * 4100}},
     "message.apns.payload"),
])
@pytest.mark.parametrize("validate_only", [False, True])
def test_a_bad_live_activity_message_is_refused_naming_the_field_and_changes_nothing(world, apns, field,
                                                                                     validate_only):
    standin, ledger, _ = world
    device = ledger.register(DEVICE)
    before = len(ledger.events())
    response = _send_raw(ledger, {"message": {"token": device, "apns": apns}, "validate_only": validate_only})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert _field(response) == [field], response.text
    time.sleep(0.3)
    assert len(ledger.events()) == before
    assert standin.requests() == []


@pytest.mark.parametrize("target", [{"topic": "scores"}, {"condition": "'scores' in topics"}])
def test_a_topic_or_condition_send_cannot_carry_a_live_activity_token(world, target):
    standin, ledger, _ = world
    device = ledger.register(DEVICE)
    ledger.subscribe(device, "scores")
    before = len(ledger.events())
    with_token = _send_raw(ledger, {"message": {**target, "apns": {"live_activity_token": ACTIVITY,
                                                                    "payload": _update()}}})
    assert with_token.status_code == 400 and _field(with_token) == ["message.apns.live_activity_token"]
    # A liveactivity push type on a condition send is refused; on a topic send it goes to the followers' activity
    # tokens (test_ledger_live_activity_topics.py).
    if "condition" in target:
        by_header = _send_raw(ledger, {"message": {**target, "apns": {"headers": {"apns-push-type": "liveactivity"},
                                                                       "payload": _update()}}})
        assert by_header.status_code == 400 and _field(by_header) == ["message.apns.headers.apns-push-type"]
    time.sleep(0.3)
    assert len(ledger.events()) == before and standin.requests() == []


def test_validate_only_checks_a_good_live_activity_message_and_changes_nothing(world):
    standin, ledger, _ = world
    device = ledger.register(DEVICE)
    before = len(ledger.events())
    response = _send_raw(ledger, {"message": {"token": device, "apns": {"live_activity_token": PUSH_TO_START,
                                                                         "payload": _start()}},
                                  "validate_only": True})
    assert response.status_code == 200, response.text
    assert response.json()["name"].endswith("/messages/fake_message_id")
    time.sleep(0.5)
    assert len(ledger.events()) == before and standin.requests() == []


@pytest.mark.parametrize("reply", [{"status": 410, "reason": "Unregistered", "timestamp": 1_600_000_000_000},
                                   {"status": 410, "reason": "ExpiredToken"},
                                   {"status": 400, "reason": "BadDeviceToken"}])
def test_a_refused_activity_token_ends_that_token_only_and_the_devices_own_pushes_go_on(world, reply):
    standin, ledger, _ = world
    device = ledger.register(DEVICE)
    ledger.subscribe(device, "scores")
    standin.script(ACTIVITY, [reply], sticky=True)
    sent = ledger.send({"token": device, "apns": {"live_activity_token": ACTIVITY, "payload": _update()}})
    push, audit = _push_of(ledger, _message_id(sent), device)
    # Recorded as a refusal of this push, to the activity's token; not as the registration's end.
    expected_reason = "Unregistered" if reply["status"] == 410 else reply["reason"]
    assert (push["outcome"], push["status"], push["reason"]) == ("failed", reply["status"], expected_reason)
    assert push["liveActivity"] is True and push["apnsToken"] == ACTIVITY
    assert audit["pushCounts"]["unregistered"] == 0 and audit["pushCounts"]["failed"] == 1
    [progress] = [e for e in ledger.events("pushProgress") if e["sendSeq"] == audit["seq"]]
    assert [f["kind"] for f in progress["failures"]] == ["rejected"]
    assert ledger.events("unregistered") == [] and ledger.events("apnsTokenCleared") == []
    # Asked once: a refusal is final, as for every push.
    time.sleep(0.3)
    assert [r["token"] for r in standin.requests()] == [ACTIVITY]
    # The registration, its topics and its own APNs token stand: topic and token sends still reach the device.
    instance = ledger.audit_instance(device)
    assert instance["topics"] == ["scores"] and instance["apnsTokens"][-1].get("untilSeq") is None
    standin.reset()
    ledger.send({"topic": "scores", "notification": {"title": "Goal"}})
    ledger.send({"token": device, "notification": {"title": "Half time"}})
    requests = standin.wait_for(lambda r: len(r) >= 2)
    assert [r["token"] for r in requests] == [DEVICE, DEVICE]
    assert all(r["status"] == 200 and r["headers"]["apns-topic"] == TOPIC for r in requests)
    # A later send to the same activity token is pushed again (Apple answers for it; nothing here remembers it).
    standin.reset()
    standin.script(ACTIVITY, [reply], sticky=True)
    again = ledger.send({"token": device, "apns": {"live_activity_token": ACTIVITY, "payload": _update()}})
    push, _ = _push_of(ledger, _message_id(again), device)
    assert push["outcome"] == "failed" and [r["token"] for r in standin.requests()] == [ACTIVITY]


def test_a_device_without_an_apns_token_gets_no_live_activity_push(world):
    standin, ledger, _ = world
    device = ledger.register()  # stream and poll only: no environment to push the activity's token to
    sent = ledger.send({"token": device, "apns": {"live_activity_token": ACTIVITY, "payload": _update()}})
    time.sleep(1.0)
    assert standin.requests() == []
    audit = ledger.audit_message(_message_id(sent))
    assert audit["pushes"] == [] and "pushCounts" not in audit


def test_replay_names_the_activity_push_and_an_erasure_forgets_the_activity_token(world):
    standin, ledger, _ = world
    device = ledger.register(DEVICE)
    sent = ledger.send({"token": device, "apns": {"live_activity_token": ACTIVITY, "payload": _update()}})
    _push_of(ledger, _message_id(sent), device)
    replay = ledger.cli("replay", "--message", _message_id(sent))
    assert "apns live activity accepted" in replay, replay
    assert files_holding(ledger.data, ACTIVITY), "the activity token is in the message before the erasure"
    response = httpx.post(ledger.url(f"/registrations/{device}:erase"), headers={"Authorization": f"Bearer {ADMIN}"},
                          json={"reason": "GDPR Art. 17"}, timeout=60)
    assert response.status_code == 200, response.text
    # The message was the device's (a token send): its content, the activity token with it, is forgotten.
    assert files_holding(ledger.data, ACTIVITY) == []
    audit = ledger.audit_message(_message_id(sent))
    assert ACTIVITY not in json.dumps(audit) and ACTIVITY.upper() not in json.dumps(audit)
    assert audit["recipientCount"] == 1 and audit["matchesRecord"]
