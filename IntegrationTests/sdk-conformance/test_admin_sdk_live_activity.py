"""FCM's Live Activity messages sent by firebase-admin 7.7.0, unchanged (`messaging.APNSConfig(live_activity_token=…)`,
the ActivityKit keys in `Aps(custom_data=…)`, as FCM's "Get started with Live Activity" and the SDK's own change
for it show), through `ledger serve` to the APNs stand-in of IntegrationTests/apns-standin: start, update and end
each reach the activity's token with Apple's headers; a payload Apple's rules refuse is the SDK's
InvalidArgumentError; a dry run pushes nothing."""

import json
import sys
import tempfile
import time
from pathlib import Path

import firebase_admin
import pytest
from firebase_admin import exceptions, messaging

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "apns-standin"))
from apns_harness import ADMIN, PROJECT, TOPIC, Ledger, StandIn, device_token  # noqa: E402
from conftest import BearerCredential  # noqa: E402

PUSH_TO_START = "5a" * 40
ACTIVITY = "a7" * 40


@pytest.fixture(scope="module")
def world():
    directory = tempfile.mkdtemp(prefix="ledger-sdk-live-")
    standin = StandIn(directory, max_streams=100)
    ledger = Ledger(standin, directory)
    app = firebase_admin.initialize_app(BearerCredential(ADMIN), {"projectId": PROJECT}, name="live-activity")
    # This app's service only: the class's FCM_URL stays the conformance server's.
    messaging._get_messaging_service(app)._fcm_url = ledger.url("/messages:send")
    yield standin, ledger, app
    firebase_admin.delete_app(app)
    ledger.stop()
    standin.stop()
    ledger.verify()


def _live(token, activity_token, aps, priority=None, alert=None):
    return messaging.Message(
        token=token,
        apns=messaging.APNSConfig(
            live_activity_token=activity_token,
            headers={"apns-priority": priority} if priority else None,
            payload=messaging.APNSPayload(aps=messaging.Aps(alert=alert, custom_data=aps))))


def test_start_update_and_end_sent_through_the_sdk_reach_the_activity_token(world):
    standin, ledger, app = world
    device = ledger.register(device_token(1))
    now = int(time.time())
    sends = [
        (_live(device, PUSH_TO_START, {"timestamp": now, "event": "start", "content-state": {"demo": 1},
                                       "attributes-type": "DemoAttributes", "attributes": {"demoAttribute": 1}},
               priority="10", alert=messaging.ApsAlert(title="test title", body="test body")), PUSH_TO_START, "10"),
        (_live(device, ACTIVITY, {"timestamp": now + 1, "event": "update", "content-state": {"demo": 2}},
               priority="5"), ACTIVITY, "5"),
        (_live(device, ACTIVITY, {"timestamp": now + 2, "event": "end", "content-state": {"demo": 3},
                                  "dismissal-date": now + 60}), ACTIVITY, "10"),
    ]
    for index, (message, token, priority) in enumerate(sends):
        name = messaging.send(message, app=app)
        assert name.startswith(f"projects/{PROJECT}/messages/") and not name.endswith("fake_message_id")
        request = standin.wait_for(lambda r: len(r) >= index + 1)[index]
        assert request["status"] == 200, request
        assert request["token"] == token
        assert request["headers"]["apns-topic"] == TOPIC + ".push-type.liveactivity"
        assert request["headers"]["apns-push-type"] == "liveactivity"
        assert request["headers"]["apns-priority"] == priority
    events = [json.loads(r["body"])["aps"]["event"] for r in standin.requests()]
    assert events == ["start", "update", "end"]
    assert device_token(1) not in {r["token"] for r in standin.requests()}


def test_a_payload_apple_refuses_is_the_sdks_invalid_argument_error_and_a_dry_run_pushes_nothing(world):
    standin, ledger, app = world
    device = ledger.register(device_token(2))
    standin.reset()
    missing_timestamp = _live(device, ACTIVITY, {"event": "update", "content-state": {"demo": 1}})
    with pytest.raises(exceptions.InvalidArgumentError) as refused:
        messaging.send(missing_timestamp, app=app)
    assert "timestamp" in str(refused.value)
    start_without_attributes = _live(device, PUSH_TO_START, {"timestamp": 1, "event": "start", "content-state": {"demo": 0}},
                                     alert=messaging.ApsAlert(title="t"))
    with pytest.raises(exceptions.InvalidArgumentError) as refused:
        messaging.send(start_without_attributes, app=app)
    assert "attributes-type" in str(refused.value)
    good = _live(device, ACTIVITY, {"timestamp": int(time.time()), "event": "update", "content-state": {"demo": 1}})
    assert messaging.send(good, app=app, dry_run=True).endswith("/messages/fake_message_id")
    time.sleep(0.5)
    assert standin.requests() == []
