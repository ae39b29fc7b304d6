"""Topics that update every follower's Live Activity (issue #66 item 2), through `ledger serve` against the
stand-in: a device follows a topic's Live Activity with the activity's push token
(`PUT …/registrations/{token}/liveActivities/{topic}`) and holds push-to-start tokens by attributes type
(`PUT …/pushToStartTokens/{type}`); a topic send whose `apns-push-type` is `liveactivity` is pushed to each
subscribed follower's activity token (`update`, `end`) or push-to-start token (`start`) with Apple's ActivityKit
headers, recorded per push as every APNs push is; an `end` retires the followers' tokens; hostile input changes
nothing; an erasure forgets the tokens."""

import json
import tempfile
import time

import httpx
import pytest

from apns_harness import ADMIN, AUDITOR, CLIENT, TOPIC, Ledger, StandIn, device_token, files_holding

LIVE_TOPIC = TOPIC + ".push-type.liveactivity"


def activity(index):
    """An activity's push token (hex, 40 bytes), distinct from the devices' own 32-byte tokens."""
    return f"{0xA0 + index:02x}" * 40


START = "5b" * 40


@pytest.fixture
def world():
    directory = tempfile.mkdtemp(prefix="ledger-live-topics-")
    standin = StandIn(directory, max_streams=100)
    ledger = Ledger(standin, directory, limits={"registrationsPerSecond": 100000})
    yield standin, ledger
    ledger.stop()
    standin.stop()
    ledger.verify()


def _follow(ledger, device, topic, token, key=CLIENT):
    return httpx.put(ledger.url(f"/registrations/{device}/liveActivities/{topic}"), headers={"x-goog-api-key": key},
                     json={"pushToken": token}, timeout=30)


def _unfollow(ledger, device, topic):
    return httpx.delete(ledger.url(f"/registrations/{device}/liveActivities/{topic}"),
                        headers={"x-goog-api-key": CLIENT}, timeout=30)


def _push_to_start(ledger, device, attributes_type, token):
    return httpx.put(ledger.url(f"/registrations/{device}/pushToStartTokens/{attributes_type}"),
                     headers={"x-goog-api-key": CLIENT}, json={"pushToken": token}, timeout=30)


def _held(ledger, device):
    response = httpx.get(ledger.url(f"/registrations/{device}/liveActivities"),
                         headers={"Authorization": f"Bearer {AUDITOR}"}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def _message(event, topic="scores", priority="5", **aps):
    body = {"timestamp": int(time.time()), "event": event, "content-state": {"home": 1, "away": 0}}
    body.update(aps)
    return {"topic": topic, "apns": {"headers": {"apns-push-type": "liveactivity", "apns-priority": priority},
                                     "payload": {"aps": body}}}


def _settled(ledger, message_id, count, timeout=30):
    """The audit of `message_id` once `count` of its pushes are no longer pending."""
    deadline = time.time() + timeout
    while True:
        audit = ledger.audit_message(message_id)
        done = [p for p in audit.get("pushes", []) if p["push"]["outcome"] != "pending"]
        if len(done) >= count:
            return audit
        assert time.time() < deadline, f"the pushes never settled: {audit.get('pushCounts')}"
        time.sleep(0.1)


def _message_id(sent):
    return sent["name"].rsplit("/", 1)[1]


def test_an_update_reaches_each_followers_activity_token_and_an_end_retires_them(world):
    standin, ledger = world
    fans = [ledger.register(device_token(index)) for index in range(3)]
    bystander = ledger.register(device_token(9))
    for fan in fans:
        ledger.subscribe(fan, "scores")
    ledger.subscribe(bystander, "scores")
    for index, fan in enumerate(fans[:2]):
        assert _follow(ledger, fan, "scores", activity(index)).status_code == 200
    # The third fan follows, then replaces its token (a new activity): only the newer one is pushed to.
    assert _follow(ledger, fans[2], "scores", activity(7)).status_code == 200
    assert _follow(ledger, fans[2], "scores", activity(2)).status_code == 200

    sent = ledger.send(_message("update"))
    requests = standin.wait_for(lambda r: len(r) >= 3)
    time.sleep(0.3)
    requests = standin.requests()
    assert sorted(r["token"] for r in requests) == sorted(activity(index) for index in range(3))
    for request in requests:
        headers = request["headers"]
        assert request["status"] == 200, request
        assert headers["apns-topic"] == LIVE_TOPIC and headers["apns-push-type"] == "liveactivity"
        assert headers["apns-priority"] == "5"
        assert json.loads(request["body"])["aps"]["event"] == "update"
    # Nothing to the devices' own tokens: neither the followers' nor the bystander's (it follows nothing).
    assert not {device_token(index) for index in (0, 1, 2, 9)} & {r["token"] for r in requests}
    # Recorded per push: which activity token each follower's push reached, with its apns-id.
    audit = _settled(ledger, _message_id(sent), 3)
    pushes = {entry["token"]: entry["push"] for entry in audit["pushes"]}
    assert set(pushes) == set(fans)
    for index, fan in enumerate(fans):
        assert pushes[fan]["outcome"] == "accepted" and pushes[fan]["liveActivity"] is True
        assert pushes[fan]["apnsToken"] == activity(index)
    assert audit["recipientCount"] == 4 and audit["pushCounts"]["accepted"] == 3
    by_id = {r["headers"]["apns-id"]: r["token"] for r in requests}
    assert {p["apnsId"]: p["apnsToken"] for p in pushes.values()} == by_id
    replay = ledger.cli("replay", "--message", _message_id(sent), "--format", "json")
    assert activity(0) in replay and "liveActivity" in replay

    # An end goes to the same tokens, then retires them: the next update reaches nobody.
    standin.reset()
    ended = ledger.send(_message("end", priority="10", **{"dismissal-date": int(time.time()) + 60}))
    standin.wait_for(lambda r: len(r) >= 3)
    assert sorted(r["token"] for r in standin.requests()) == sorted(activity(index) for index in range(3))
    [retired] = ledger.events("liveActivitiesEnded")
    assert retired["topic"] == "scores" and retired["messageId"] == _message_id(ended)
    assert all(_held(ledger, fan)["liveActivities"] == [] for fan in fans)
    _settled(ledger, _message_id(ended), 3)
    standin.reset()
    later = ledger.send(_message("update"))
    time.sleep(1.0)
    assert standin.requests() == []
    assert ledger.audit_message(_message_id(later))["pushes"] == []


def test_a_start_goes_to_the_push_to_start_tokens_of_its_type(world):
    standin, ledger = world
    fan, other, unsubscribed = (ledger.register(device_token(index)) for index in range(3))
    ledger.subscribe(fan, "scores")
    ledger.subscribe(other, "scores")
    assert _push_to_start(ledger, fan, "MatchAttributes", START).status_code == 200
    assert _push_to_start(ledger, other, "WeatherAttributes", activity(5)).status_code == 200
    # Not subscribed to the topic: not in the send's audience, so not started.
    assert _push_to_start(ledger, unsubscribed, "MatchAttributes", activity(6)).status_code == 200
    start = _message("start", priority="10", **{"attributes-type": "MatchAttributes",
                                                "attributes": {"match": "A v B"},
                                                "alert": {"title": "Kick-off", "body": "A v B"}})
    sent = ledger.send(start)
    [request] = standin.wait_for(lambda r: len(r) >= 1)
    time.sleep(0.5)
    assert len(standin.requests()) == 1
    assert request["token"] == START and request["status"] == 200
    assert request["headers"]["apns-topic"] == LIVE_TOPIC and request["headers"]["apns-push-type"] == "liveactivity"
    assert json.loads(request["body"])["aps"]["attributes-type"] == "MatchAttributes"
    audit = _settled(ledger, _message_id(sent), 1)
    assert [(e["token"], e["push"]["apnsToken"]) for e in audit["pushes"]] == [(fan, START)]
    # A start retires nothing.
    assert ledger.events("liveActivitiesEnded") == []


def test_unfollow_stops_the_pushes_and_a_condition_send_is_still_refused(world):
    standin, ledger = world
    fan = ledger.register(device_token(0))
    ledger.subscribe(fan, "scores")
    assert _follow(ledger, fan, "scores", activity(0)).status_code == 200
    assert _held(ledger, fan)["liveActivities"] == [{"topic": "scores", "pushToken": activity(0)}]
    removed = _unfollow(ledger, fan, "scores")
    assert removed.status_code == 200 and removed.json() == {}
    assert _held(ledger, fan)["liveActivities"] == []
    sent = ledger.send(_message("update"))
    time.sleep(1.0)
    assert standin.requests() == []
    assert ledger.audit_message(_message_id(sent))["pushes"] == []
    before = len(ledger.events())
    condition = {**_message("update"), "condition": "'scores' in topics"}
    del condition["topic"]
    response = httpx.post(ledger.url("/messages:send"), headers={"Authorization": f"Bearer {ADMIN}"},
                          json={"message": condition}, timeout=30)
    assert response.status_code == 400
    assert len(ledger.events()) == before


@pytest.mark.parametrize("path,body,field", [
    ("liveActivities/scores", {}, "pushToken"),
    ("liveActivities/scores", {"pushToken": "abc"}, "pushToken"),
    ("liveActivities/scores", {"pushToken": "ab" * 201}, "pushToken"),
    ("liveActivities/scores", {"pushToken": " " + "ab" * 32}, "pushToken"),
    ("liveActivities/scores", {"pushToken": "ab" * 32, "apnsSandbox": True}, "apnsSandbox"),
    ("liveActivities/scores", {"pushToken": None}, "pushToken"),
    ("liveActivities/bad%20topic", {"pushToken": "ab" * 32}, "topic"),
    ("pushToStartTokens/Match%20Attributes", {"pushToken": "ab" * 32}, "attributesType"),
    ("pushToStartTokens/MatchAttributes", {"pushToken": "xyz"}, "pushToken"),
])
def test_hostile_input_is_refused_naming_the_field_and_changes_nothing(world, path, body, field):
    standin, ledger = world
    fan = ledger.register(device_token(0))
    before = len(ledger.events())
    response = httpx.put(ledger.url(f"/registrations/{fan}/{path}"), headers={"x-goog-api-key": CLIENT},
                         json=body, timeout=30)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert [v["field"] for d in error["details"] for v in d.get("fieldViolations", [])] == [field]
    assert len(ledger.events()) == before


def test_other_credentials_and_registrations_are_refused(world):
    standin, ledger = world
    fan = ledger.register(device_token(0))
    android = ledger.register(platform="android")
    before = len(ledger.events())
    assert _follow(ledger, fan, "scores", activity(0), key="not-the-key").status_code in (401, 403)
    auditor = httpx.put(ledger.url(f"/registrations/{fan}/liveActivities/scores"),
                        headers={"Authorization": f"Bearer {AUDITOR}"}, json={"pushToken": activity(0)})
    assert auditor.status_code == 403
    assert _follow(ledger, "cNOTREGISTERED:APA91b-x", "scores", activity(0)).status_code == 404
    refused = _follow(ledger, android, "scores", activity(0))
    assert refused.status_code == 400 and "ios" in refused.json()["error"]["message"]
    assert len(ledger.events()) == before


def test_an_erasure_forgets_the_devices_activity_and_push_to_start_tokens(world):
    standin, ledger = world
    fan = ledger.register(device_token(0))
    ledger.subscribe(fan, "scores")
    assert _follow(ledger, fan, "scores", activity(0)).status_code == 200
    assert _push_to_start(ledger, fan, "MatchAttributes", START).status_code == 200
    sent = ledger.send(_message("update"))
    _settled(ledger, _message_id(sent), 1)
    assert files_holding(ledger.data, activity(0)) and files_holding(ledger.data, START)
    response = httpx.post(ledger.url(f"/registrations/{fan}:erase"), headers={"Authorization": f"Bearer {ADMIN}"},
                          json={"reason": "GDPR Art. 17"}, timeout=60)
    assert response.status_code == 200, response.text
    assert files_holding(ledger.data, activity(0)) == [] and files_holding(ledger.data, START) == []
    audit = ledger.audit_message(_message_id(sent))
    assert activity(0) not in json.dumps(audit) and audit["recipientCount"] == 1 and audit["matchesRecord"]


def test_a_410_for_a_followers_activity_token_ends_that_follow_only(world):
    """APNs' 410 (or 400 BadDeviceToken) for an activity token is that token's end: the device stops following the
    topic's Live Activity (a `liveActivityUnfollowed` event, reason APNs'), keeps its registration and its own APNs
    token, and the next update pushes nothing to the dead token."""
    standin, ledger = world
    fan, other = ledger.register(device_token(0)), ledger.register(device_token(1))
    for device in (fan, other):
        ledger.subscribe(device, "scores")
    assert _follow(ledger, fan, "scores", activity(0)).status_code == 200
    assert _follow(ledger, other, "scores", activity(1)).status_code == 200
    standin.script(activity(0), [{"status": 410, "reason": "Unregistered", "timestamp": int(time.time() * 1000)}],
                   sticky=True)
    first = ledger.send(_message("update"))
    _settled(ledger, _message_id(first), 2)
    [ended] = ledger.events("liveActivityUnfollowed")
    assert ended["token"] == fan and ended["topic"] == "scores" and "Unregistered" in ended["reason"]
    assert _held(ledger, fan)["liveActivities"] == []
    assert _held(ledger, other)["liveActivities"] == [{"topic": "scores", "pushToken": activity(1)}]
    assert ledger.events("unregistered") == [] and ledger.events("apnsTokenCleared") == []
    standin.reset()
    second = ledger.send(_message("update"))
    _settled(ledger, _message_id(second), 1)
    time.sleep(0.3)
    assert [r["token"] for r in standin.requests()] == [activity(1)]


def test_follows_and_push_to_start_types_are_bounded_per_device(world):
    """A device (the client key ships in every app) cannot hold unbounded follows: past the topics' limit a new follow
    is 400 TOO_MANY_TOPICS and appends nothing; replacing the token of a topic it follows is still taken."""
    standin, _ = world
    directory = tempfile.mkdtemp(prefix="ledger-live-limits-")
    ledger = Ledger(standin, directory, limits={"registrationsPerSecond": 100000, "topicsPerInstance": 3})
    try:
        fan = ledger.register(device_token(0))
        for index in range(3):
            assert _follow(ledger, fan, f"t{index}", activity(index)).status_code == 200
        before = len(ledger.events())
        refused = _follow(ledger, fan, "t3", activity(3))
        assert refused.status_code == 400 and "TOO_MANY_TOPICS" in refused.text, refused.text
        assert len(ledger.events()) == before
        assert _follow(ledger, fan, "t0", activity(9)).status_code == 200
    finally:
        ledger.stop()


def test_where_a_send_went_outlives_its_forgotten_content(world):
    """contentRetention forgets a topic's Live Activity update: the audit still shows its one push to the follower's
    activity token, not a push to every member's own APNs token."""
    standin, _ = world
    directory = tempfile.mkdtemp(prefix="ledger-live-retention-")
    ledger = Ledger(standin, directory, limits={"registrationsPerSecond": 100000},
                    project={"contentRetention": "2s"})
    try:
        fan, bystander = ledger.register(device_token(0)), ledger.register(device_token(5))
        for device in (fan, bystander):
            ledger.subscribe(device, "scores")
        assert _follow(ledger, fan, "scores", activity(0)).status_code == 200
        sent = ledger.send(_message("update"))
        _settled(ledger, _message_id(sent), 1)
        deadline = time.time() + 60
        while not ledger.events("retention"):
            assert time.time() < deadline, "contentRetention never swept"
            time.sleep(0.5)
        audit = ledger.audit_message(_message_id(sent))
        assert [(e["token"], e["push"]["apnsToken"], e["push"]["liveActivity"]) for e in audit["pushes"]] == [
            (fan, activity(0), True)]
        [recorded] = [e for e in ledger.events("sent") if e["messageId"] == _message_id(sent)]
        assert recorded["message"] == {} and recorded["topicActivity"] == "followers"
    finally:
        ledger.stop()
