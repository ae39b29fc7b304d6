"""The APNs stand-in answers as Apple documents: provider-token checks, header and payload checks, scripted
replies per device token (410 with its timestamp among them), one stream until a request has gone through,
GOAWAY on demand, and a record of every request."""

import base64
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h2.connection
import h2.events
import httpx
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sdk-conformance"))
from ledger_server import _free_port, make_certificates  # noqa: E402
from apns_harness import StandIn, _b64url, provider_token  # noqa: E402

TEAM, KEY_ID, TOPIC = "ABCDE12345", "KEY1234567", "com.example.app"
DEVICE = "a1" * 32


@pytest.fixture(scope="module")
def standin():
    running = StandIn(tempfile.mkdtemp(prefix="apns-standin-"), max_streams=500)
    yield {"base": running.base, "control": running.control, "ca": running.tls["ca"], "key": running.team_key,
           "token": provider_token(running.team_key), "port": running.port}
    running.stop()


@pytest.fixture
def client(standin):
    httpx.post(standin["control"] + "/reset")
    with httpx.Client(http2=True, verify=standin["ca"]) as client:
        yield client


def push(standin, client, device=DEVICE, token=None, body=b'{"aps":{"alert":"hi"}}', **headers):
    sent = {"authorization": f"bearer {token or standin['token']}", "apns-topic": TOPIC, "apns-push-type": "alert"}
    sent.update({name.replace("_", "-"): value for name, value in headers.items()})
    sent = {name: value for name, value in sent.items() if value is not None}
    return client.post(f"{standin['base']}/3/device/{device}", content=body, headers=sent)


def test_a_good_push_is_200_with_its_apns_id_and_recorded(standin, client):
    reply = push(standin, client, apns_id="123E4567-E89B-12D3-A456-426614174000", apns_priority="10",
                 apns_expiration="0", apns_collapse_id="score")
    assert reply.http_version == "HTTP/2" and reply.status_code == 200
    assert reply.headers["apns-id"] == "123E4567-E89B-12D3-A456-426614174000"
    record = httpx.get(standin["control"] + "/requests").json()[-1]
    assert record["token"] == DEVICE and record["body"] == '{"aps":{"alert":"hi"}}'
    assert record["headers"]["apns-collapse-id"] == "score" and record["status"] == 200


@pytest.mark.parametrize("change,status,reason", [
    ({"apns_topic": None}, 400, "MissingTopic"),
    ({"apns_topic": "com.example.other"}, 400, "TopicDisallowed"),
    ({"apns_push_type": "shout"}, 400, "InvalidPushType"),
    ({"apns_priority": "7"}, 400, "BadPriority"),
    ({"apns_expiration": "soon"}, 400, "BadExpirationDate"),
    ({"apns_collapse_id": "c" * 65}, 400, "BadCollapseId"),
    ({"apns_id": "not-a-uuid"}, 400, "BadMessageId"),
    ({"device": "abc"}, 400, "BadDeviceToken"),
    ({"device": "ab" * 201}, 400, "BadDeviceToken"),
    ({"body": b""}, 400, "PayloadEmpty"),
    ({"body": b'{"aps":{"alert":"' + b"x" * 4100 + b'"}}'}, 413, "PayloadTooLarge"),
])
def test_every_documented_refusal(standin, client, change, status, reason):
    reply = push(standin, client, **change)
    assert reply.status_code == status and reply.json() == {"reason": reason}


LIVE_TOPIC = TOPIC + ".push-type.liveactivity"
LIVE_UPDATE = {"aps": {"timestamp": 1764201600, "event": "update", "content-state": {"score": "1-0"}}}
LIVE_START = {"aps": {"timestamp": 1764201600, "event": "start", "content-state": {"score": "0-0"},
                      "attributes-type": "MatchAttributes", "attributes": {"home": "A", "away": "B"},
                      "alert": {"title": "Kick-off", "body": "A v B"}}}


def live(payload, **changes):
    """An ActivityKit payload with `aps` keys changed (None removes one)."""
    aps = dict(payload["aps"])
    for key, value in changes.items():
        key = key.replace("_", "-")
        if value is None:
            aps.pop(key, None)
        else:
            aps[key] = value
    return json.dumps({"aps": aps}).encode()


@pytest.mark.parametrize("payload", [LIVE_UPDATE, LIVE_START, {"aps": {"timestamp": 1, "event": "end"}}])
@pytest.mark.parametrize("priority", ["5", "10", None])
def test_a_live_activity_push_on_its_topic_is_200(standin, client, payload, priority):
    reply = push(standin, client, body=json.dumps(payload).encode(), apns_topic=LIVE_TOPIC,
                 apns_push_type="liveactivity", apns_priority=priority)
    assert reply.status_code == 200, reply.text
    record = httpx.get(standin["control"] + "/requests").json()[-1]
    assert record["headers"]["apns-topic"] == LIVE_TOPIC and record["headers"]["apns-push-type"] == "liveactivity"


@pytest.mark.parametrize("change,status,reason", [
    # Apple: a liveactivity push's topic is the bundle id with .push-type.liveactivity appended.
    ({"apns_topic": TOPIC}, 400, "TopicDisallowed"),
    ({"apns_topic": TOPIC + ".push-type.voip"}, 400, "TopicDisallowed"),
    # The .push-type.liveactivity topic takes liveactivity pushes only.
    ({"apns_push_type": "alert"}, 400, "InvalidPushType"),
    ({"apns_push_type": "background"}, 400, "InvalidPushType"),
    ({"apns_push_type": None}, 400, "InvalidPushType"),
    # Apple: "Set the value for the apns-priority header field to 5 or 10."
    ({"apns_priority": "1"}, 400, "BadPriority"),
])
def test_a_live_activity_push_with_the_wrong_topic_push_type_or_priority_is_refused(standin, client, change, status,
                                                                                     reason):
    headers = {"apns_topic": LIVE_TOPIC, "apns_push_type": "liveactivity", "body": json.dumps(LIVE_UPDATE).encode()}
    headers.update(change)
    reply = push(standin, client, **headers)
    assert reply.status_code == status and reply.json() == {"reason": reason}


@pytest.mark.parametrize("body,field", [
    (live(LIVE_UPDATE, timestamp=None), "aps.timestamp"),
    (live(LIVE_UPDATE, timestamp="1764201600"), "aps.timestamp"),
    (live(LIVE_UPDATE, timestamp=1.5), "aps.timestamp"),
    (live(LIVE_UPDATE, timestamp=True), "aps.timestamp"),
    (live(LIVE_UPDATE, event=None), "aps.event"),
    (live(LIVE_UPDATE, event="pause"), "aps.event"),
    (live(LIVE_UPDATE, event="Update"), "aps.event"),
    (live(LIVE_UPDATE, content_state=[1]), "aps.content-state"),
    (live(LIVE_START, attributes_type=None), "aps.attributes-type"),
    (live(LIVE_START, attributes=None), "aps.attributes"),
    (live(LIVE_START, alert=None), "aps.alert"),
    (b'{"aps":"update"}', "aps"),
    (b"not json", "aps"),
])
def test_a_live_activity_payload_without_a_timestamp_or_with_a_bad_event_is_refused(standin, client, body, field):
    reply = push(standin, client, body=body, apns_topic=LIVE_TOPIC, apns_push_type="liveactivity")
    assert reply.status_code == 400
    assert reply.json() == {"reason": "StandInBadLiveActivityPayload", "field": field}


def test_an_ordinary_push_is_not_held_to_the_live_activity_rules(standin, client):
    # No timestamp or event: an alert's payload, on the bundle id's own topic.
    assert push(standin, client, body=b'{"aps":{"alert":"hi"}}', apns_priority="1").status_code == 200


def test_provider_tokens_are_verified_with_the_team_key(standin, client):
    other_key = ec.generate_private_key(ec.SECP256R1())
    for token in (provider_token(other_key), provider_token(standin["key"], kid="OTHERKEY00"),
                  provider_token(standin["key"], team="ZZZZZ99999"), "not.a.jwt"):
        reply = push(standin, client, token=token)
        assert reply.status_code == 403 and reply.json() == {"reason": "InvalidProviderToken"}
    missing = client.post(f"{standin['base']}/3/device/{DEVICE}", content=b"{}",
                          headers={"apns-topic": TOPIC, "apns-push-type": "alert"})
    assert missing.status_code == 403 and missing.json() == {"reason": "MissingProviderToken"}


def test_a_new_token_within_20_minutes_is_429_and_an_expired_one_spoils_the_connection(standin, client):
    assert push(standin, client).status_code == 200
    fresher = provider_token(standin["key"], iat=time.time() + 1)
    reply = push(standin, client, token=fresher)
    assert reply.status_code == 429 and reply.json() == {"reason": "TooManyProviderTokenUpdates"}
    expired = provider_token(standin["key"], iat=time.time() - 3700)
    assert push(standin, client, token=expired).json() == {"reason": "ExpiredProviderToken"}
    # That connection now answers nothing else, whatever the token; a new connection is fine.
    assert push(standin, client).json() == {"reason": "ExpiredProviderToken"}
    with httpx.Client(http2=True, verify=standin["ca"]) as fresh:
        assert push(standin, fresh).status_code == 200


def test_scripted_replies_per_device(standin, client):
    httpx.post(standin["control"] + "/script", json={"token": DEVICE, "replies": [
        {"status": 429, "reason": "TooManyRequests"}, {"status": 503, "reason": "ServiceUnavailable"}]})
    assert push(standin, client).json() == {"reason": "TooManyRequests"}
    assert push(standin, client).status_code == 503
    assert push(standin, client).status_code == 200
    gone = "b2" * 32
    httpx.post(standin["control"] + "/script", json={"token": gone, "sticky": True, "replies": [
        {"status": 410, "reason": "Unregistered", "timestamp": 1764201600000}]})
    for _ in range(2):
        reply = push(standin, client, device=gone)
        assert reply.status_code == 410 and reply.json() == {"reason": "Unregistered", "timestamp": 1764201600000}
    assert [r["status"] for r in httpx.get(standin["control"] + "/requests").json()] == [429, 503, 200, 410, 410]


def _h2_connection(standin):
    context = ssl.create_default_context(cafile=standin["ca"])
    context.set_alpn_protocols(["h2"])
    sock = context.wrap_socket(socket.create_connection(("127.0.0.1", standin["port"]), timeout=10),
                               server_hostname="localhost")
    assert sock.selected_alpn_protocol() == "h2"
    connection = h2.connection.H2Connection()
    connection.initiate_connection()
    sock.sendall(connection.data_to_send())
    return sock, connection


def _read_until(sock, connection, wanted):
    events = []
    deadline = time.time() + 10
    while not any(isinstance(event, wanted) for event in events):
        assert time.time() < deadline, events
        data = sock.recv(65536)
        if not data:
            break
        events += connection.receive_data(data)
        sock.sendall(connection.data_to_send())
    return events


def test_one_stream_until_a_request_goes_through_then_the_announced_limit(standin):
    httpx.post(standin["control"] + "/reset")
    sock, connection = _h2_connection(standin)
    _read_until(sock, connection, h2.events.RemoteSettingsChanged)
    assert connection.remote_settings.max_concurrent_streams == 1
    connection.send_headers(1, [(":method", "POST"), (":scheme", "https"), (":authority", "localhost"),
                                (":path", f"/3/device/{DEVICE}"), ("authorization", f"bearer {standin['token']}"),
                                ("apns-topic", TOPIC), ("apns-push-type", "alert")])
    connection.send_data(1, b'{"aps":{}}', end_stream=True)
    sock.sendall(connection.data_to_send())
    events = _read_until(sock, connection, h2.events.StreamEnded)
    response = next(event for event in events if isinstance(event, h2.events.ResponseReceived))
    assert dict(response.headers)[b":status"] == b"200"
    if connection.remote_settings.max_concurrent_streams != 500:
        _read_until(sock, connection, h2.events.RemoteSettingsChanged)
    assert connection.remote_settings.max_concurrent_streams == 500
    sock.close()


def test_goaway_on_demand(standin):
    sock, connection = _h2_connection(standin)
    _read_until(sock, connection, h2.events.RemoteSettingsChanged)
    assert httpx.post(standin["control"] + "/goaway").json()["connections"] >= 1
    events = _read_until(sock, connection, h2.events.ConnectionTerminated)
    assert any(isinstance(event, h2.events.ConnectionTerminated) for event in events)
    sock.close()


# Broadcast channels (iOS 18): Apple's channel management API and broadcast endpoint.

CHANNELS = f"/1/apps/{TOPIC}/channels"
BROADCAST = f"/4/broadcasts/apps/{TOPIC}"
UPDATE = json.dumps({"aps": {"timestamp": 1764201600, "event": "update", "content-state": {"home": 1}}}).encode()


def manage(standin, client, method, path=CHANNELS, body=None, **headers):
    sent = {"authorization": f"bearer {standin['token']}"}
    sent.update({name.replace("_", "-"): value for name, value in headers.items() if value is not None})
    return client.request(method, standin["base"] + path, content=body, headers=sent)


def create_channel(standin, client, policy=0):
    reply = manage(standin, client, "POST", body=json.dumps({"message-storage-policy": policy,
                                                             "push-type": "LiveActivity"}).encode())
    assert reply.status_code == 201, reply.text
    return reply.headers["apns-channel-id"]


def broadcast(standin, client, channel, body=UPDATE, **headers):
    sent = {"apns_channel_id": channel, "apns_push_type": "liveactivity", "apns_priority": "10",
            "apns_expiration": "0"}
    sent.update(headers)
    return manage(standin, client, "POST", BROADCAST, body, **sent)


def test_a_channel_is_created_read_listed_and_deleted(standin, client):
    channel = create_channel(standin, client, policy=1)
    assert base64.b64decode(channel) and len(base64.b64decode(channel)) == 16
    read = manage(standin, client, "GET", apns_channel_id=channel)
    assert read.status_code == 200 and read.json() == {"message-storage-policy": 1, "push-type": "LiveActivity"}
    assert "apns-request-id" in read.headers
    listed = manage(standin, client, "GET", f"/1/apps/{TOPIC}/all-channels")
    assert listed.status_code == 200 and listed.json() == {"channels": [channel]}
    assert manage(standin, client, "DELETE", apns_channel_id=channel).status_code == 204
    gone = manage(standin, client, "GET", apns_channel_id=channel)
    assert gone.status_code == 404 and gone.json() == {"reason": "ChannelNotRegistered"}


def test_an_unanswered_channel_request_is_carried_out_and_never_answered(standin, client):
    assert httpx.post(standin["control"] + "/unanswered-channel-requests", json={"count": 1}).status_code == 200
    body = json.dumps({"message-storage-policy": 0, "push-type": "LiveActivity"}).encode()
    with pytest.raises(httpx.TimeoutException):
        client.request("POST", standin["base"] + CHANNELS, content=body, timeout=1,
                       headers={"authorization": f"bearer {standin['token']}"})
    # Carried out all the same, and recorded without an answer; the next request is answered.
    held = httpx.get(standin["control"] + "/channels").json()
    assert len(held) == 1
    [record] = [r for r in httpx.get(standin["control"] + "/requests").json() if r["path"] == CHANNELS]
    assert record["status"] is None and record["channelId"] in held
    assert create_channel(standin, client) not in held


@pytest.mark.parametrize("document,status,reason", [
    ({"message-storage-policy": 2, "push-type": "LiveActivity"}, 400, "InvalidPolicy"),
    ({"message-storage-policy": True, "push-type": "LiveActivity"}, 400, "InvalidPolicy"),
    ({"push-type": "LiveActivity"}, 400, "InvalidPolicy"),
    ({"message-storage-policy": 0, "push-type": "alert"}, 400, "InvalidPushType"),
])
def test_a_bad_channel_creation_is_refused_with_apples_reason(standin, client, document, status, reason):
    reply = manage(standin, client, "POST", body=json.dumps(document).encode())
    assert reply.status_code == status and reply.json() == {"reason": reason}


def test_channel_requests_name_the_app_and_a_known_channel(standin, client):
    other = manage(standin, client, "GET", "/1/apps/com.example.other/all-channels")
    assert other.status_code == 400 and other.json() == {"reason": "TopicDisallowed"}
    assert manage(standin, client, "GET").json() == {"reason": "MissingChannelId"}
    assert manage(standin, client, "GET", apns_channel_id="not base64!").json() == {"reason": "BadChannelId"}
    assert manage(standin, client, "DELETE", apns_channel_id="AAAAAAAAAAAAAAAAAAAAAA==").status_code == 404
    assert manage(standin, client, "PUT", body=b"{}").status_code == 405
    unsigned = client.get(standin["base"] + f"/1/apps/{TOPIC}/all-channels")
    assert unsigned.status_code == 403 and unsigned.json() == {"reason": "MissingProviderToken"}


def test_the_channel_limit_is_apples_per_app(tmp_path):
    running = StandIn(tmp_path, max_channels=2)
    try:
        standin = {"base": running.base, "token": provider_token(running.team_key)}
        with httpx.Client(http2=True, verify=running.tls["ca"]) as client:
            create_channel(standin, client)
            create_channel(standin, client)
            third = manage(standin, client, "POST", body=b'{"message-storage-policy":0,"push-type":"LiveActivity"}')
            assert third.status_code == 400 and third.json() == {"reason": "CannotCreateChannelConfig"}
    finally:
        running.stop()


def test_a_broadcast_to_a_channel_is_200_with_its_request_id_and_recorded(standin, client):
    channel = create_channel(standin, client, policy=0)
    reply = broadcast(standin, client, channel, apns_request_id="123e4567-e89b-12d3-a456-426614174000")
    assert reply.http_version == "HTTP/2" and reply.status_code == 200
    assert reply.headers["apns-request-id"] == "123e4567-e89b-12d3-a456-426614174000"
    record = httpx.get(standin["control"] + "/requests").json()[-1]
    assert record["path"] == BROADCAST and record["channelId"] == channel and record["status"] == 200
    stored = create_channel(standin, client, policy=1)
    assert broadcast(standin, client, stored, apns_expiration=str(int(time.time()) + 3600)).status_code == 200


@pytest.mark.parametrize("change,status,reason", [
    ({"apns_channel_id": None}, 400, "MissingChannelId"),
    ({"apns_channel_id": "AAAAAAAAAAAAAAAAAAAAAA=="}, 404, "ChannelNotRegistered"),
    ({"apns_push_type": None}, 400, "MissingPushType"),
    ({"apns_push_type": "alert"}, 400, "InvalidPushType"),
    ({"apns_priority": "1"}, 400, "BadPriority"),
    ({"apns_expiration": "1900000000"}, 400, "BadExpirationDate"),
    ({"body": b""}, 400, "PayloadEmpty"),
    ({"body": json.dumps({"aps": {"event": "update", "content-state": {}}}).encode()}, 400,
     "StandInBadLiveActivityPayload"),
    ({"body": json.dumps({"aps": {"timestamp": 1, "event": "update", "x": "y" * 4100}}).encode()}, 413,
     "PayloadTooLarge"),
])
def test_a_broadcast_apple_refuses_is_refused(standin, client, change, status, reason):
    channel = create_channel(standin, client, policy=0)  # stores nothing: apns-expiration must be 0
    change = dict(change)
    body = change.pop("body", UPDATE)
    headers = {"apns_channel_id": channel, **change}
    reply = broadcast(standin, client, headers.pop("apns_channel_id"), body=body, **headers)
    assert reply.status_code == status and reply.json()["reason"] == reason


def test_scripted_broadcast_replies_answer_5xx_429_with_retry_after_or_nothing(standin, client):
    channel = create_channel(standin, client, policy=0)
    httpx.post(standin["control"] + "/script", json={"broadcast": True, "replies": [
        {"status": 500, "reason": "InternalServerError"}, {"status": 429, "reason": "TooManyRequests", "retryAfter": 7},
        {"drop": True}, {"status": 503, "reason": "ServiceUnavailable"}], "sticky": True})
    first = broadcast(standin, client, channel)
    assert first.status_code == 500 and first.json() == {"reason": "InternalServerError"}
    second = broadcast(standin, client, channel)
    assert second.status_code == 429 and second.headers["retry-after"] == "7"
    with pytest.raises(httpx.RemoteProtocolError):
        broadcast(standin, client, channel)
    # The last reply for ever (sticky), until the script ends; a push per device is not scripted by it.
    assert [broadcast(standin, client, channel).status_code for _ in range(2)] == [503, 503]
    assert push(standin, client).status_code == 200
    httpx.post(standin["control"] + "/script", json={"broadcast": True, "replies": []})
    assert broadcast(standin, client, channel).status_code == 200
    records = [r for r in httpx.get(standin["control"] + "/requests").json() if r["path"] == BROADCAST]
    assert [r["status"] for r in records] == [500, 429, 0, 503, 503, 200]
