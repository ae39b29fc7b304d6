"""The APNs provider through `ledger serve`, against the stand-in: every topic and condition send reaches the iOS
devices that hold an APNs token, with Apple's headers, the payload the stream delivers and a provider token the
stand-in verified; every documented reply changes the ledger as it should; pushes survive kill -9 and stop at the
message's expiry; the audits show each device's outcome."""

import base64
import json
import tempfile
import time

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from apns_harness import ADMIN, PROJECT, TOPIC, Ledger, StandIn, device_token, make_certificates


@pytest.fixture
def world():
    directory = tempfile.mkdtemp(prefix="ledger-apns-")
    standin = StandIn(directory, max_streams=100)
    ledger = Ledger(standin, directory, limits={"registrationsPerSecond": 100000})
    yield standin, ledger, directory
    ledger.stop()
    standin.stop()
    ledger.verify()


def _message_id(sent):
    return sent["name"].rsplit("/", 1)[1]


def _pushes_to(requests, apns_token):
    return [r for r in requests if r["token"] == apns_token]


def _outcomes(ledger, message_id):
    audit = ledger.audit_message(message_id)
    return {entry["token"]: entry["push"] for entry in audit["pushes"]}, audit.get("pushCounts")


def _wait_outcomes(ledger, message_id, predicate, timeout=30):
    deadline = time.time() + timeout
    while True:
        outcomes, counts = _outcomes(ledger, message_id)
        if predicate(outcomes, counts):
            return outcomes, counts
        assert time.time() < deadline, f"outcomes never settled: {counts}"
        time.sleep(0.1)


def _settled(outcomes, counts):
    return counts is not None and counts["pending"] == 0


def test_topic_and_condition_sends_reach_every_apns_device_once_with_apples_headers_and_the_stream_payload(world):
    standin, ledger, _ = world
    ios = [ledger.register(device_token(i)) for i in range(3)]
    plain_ios = ledger.register()  # no APNs token: stream and poll only
    android = ledger.register(platform="android")
    for token in ios + [plain_ios, android]:
        ledger.subscribe(token, "weather")
    ledger.subscribe(ios[0], "alerts")
    sent = ledger.send({"topic": "weather", "notification": {"title": "Storm", "body": "at 14:00"},
                        "apns": {"headers": {"apns-collapse-id": "storm-1"}}})
    requests = standin.wait_for(lambda r: len(r) >= 3)
    message_id = _message_id(sent)
    time.sleep(0.3)
    requests = standin.requests()
    assert sorted(r["token"] for r in requests) == sorted(device_token(i) for i in range(3))
    outcomes, counts = _wait_outcomes(ledger, message_id, _settled)
    assert counts == {"accepted": 3, "unregistered": 0, "failed": 0, "pending": 0, "expired": 0}
    for index, token in enumerate(ios):
        [request] = _pushes_to(requests, device_token(index))
        headers = request["headers"]
        assert request["status"] == 200, request  # the stand-in verified the provider token first
        assert headers["apns-topic"] == TOPIC and headers["apns-push-type"] == "alert"
        assert headers["apns-priority"] == "10" and headers["apns-collapse-id"] == "storm-1"
        # FCM's default lifetime: 4 weeks after the send.
        sent_at = ledger.audit_instance(token)["deliveries"][-1]["time"]
        assert abs(int(headers["apns-expiration"]) - (_epoch(sent_at) + 28 * 24 * 3600)) <= 1
        assert headers["apns-id"] == outcomes[token]["apnsId"]
        assert outcomes[token]["outcome"] == "accepted" and outcomes[token]["apnsToken"] == device_token(index)
        # The body is exactly what the device's stream or poll delivers.
        [delivery] = [m for m in ledger.poll(token)["messages"] if m["messageId"] == message_id]
        assert json.loads(request["body"]) == delivery["payload"]
        claims = json.loads(base64.urlsafe_b64decode(headers["authorization"].split(".")[1] + "=="))
        assert set(claims) == {"iss", "iat"} and claims["iss"] == "ABCDE12345"
    # One provider token for all of them: reused, not minted per push.
    assert len({r["headers"]["authorization"] for r in requests}) == 1
    # A condition send: only the instance in both topics.
    standin.reset()
    condition = ledger.send({"condition": "'weather' in topics && 'alerts' in topics", "data": {"k": "v"},
                             "apns": {"payload": {"aps": {"content-available": 1}}}})
    [request] = standin.wait_for(lambda r: len(r) >= 1)
    assert request["token"] == device_token(0)
    assert request["headers"]["apns-push-type"] == "background" and request["headers"]["apns-priority"] == "5"
    _wait_outcomes(ledger, _message_id(condition), _settled)
    # The instance audit shows the push beside the delivery; the device without a token has none.
    deliveries = ledger.audit_instance(ios[0])["deliveries"]
    assert [d["push"]["outcome"] for d in deliveries] == ["accepted", "accepted"]
    assert all("push" not in d for d in ledger.audit_instance(plain_ios)["deliveries"])
    time.sleep(0.3)
    assert len(standin.requests()) == 1


def _epoch(rfc3339):
    from datetime import datetime
    return int(datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp())


def test_sandbox_tokens_go_to_the_sandbox_endpoint(tmp_path):
    production = StandIn(tmp_path, max_streams=10)
    # One team key for both environments, as Apple issues it; one directory, so one test CA signs both.
    sandbox = StandIn(tmp_path, max_streams=10, team_key=production.team_key)
    ledger = Ledger(production, tmp_path, apns={"sandboxEndpoint": sandbox.base})
    try:
        production_device = ledger.register(device_token(1))
        development_device = ledger.register(device_token(2), sandbox=True)
        for token in (production_device, development_device):
            ledger.subscribe(token, "news")
        ledger.send({"topic": "news", "notification": {"title": "hi"}})
        production.wait_for(lambda r: len(r) >= 1)
        sandbox.wait_for(lambda r: len(r) >= 1)
        time.sleep(0.3)
        assert [r["token"] for r in production.requests()] == [device_token(1)]
        assert [r["token"] for r in sandbox.requests()] == [device_token(2)]
    finally:
        ledger.stop()
        production.stop()
        sandbox.stop()


def test_410_ends_the_registration_unless_the_token_was_replaced_after_it(world):
    standin, ledger, _ = world
    gone, replaced = ledger.register(device_token(1)), ledger.register(device_token(2))
    for token in (gone, replaced):
        ledger.subscribe(token, "news")
    # APNs says the token stopped at a moment before the device's app set a new one: the registration stays.
    standin.script(device_token(1), [{"status": 410, "reason": "Unregistered", "timestamp": int(time.time() * 1000)}])
    standin.script(device_token(2), [{"status": 410, "reason": "Unregistered", "timestamp": 1_600_000_000_000,
                                      "delay": 1.0}])
    sent = ledger.send({"topic": "news", "notification": {"title": "hi"}})
    time.sleep(0.3)
    response = httpx.put(ledger.url(f"/registrations/{replaced}/apnsToken"), headers={"x-goog-api-key": "client-secret"},
                         json={"apnsToken": device_token(3)})
    assert response.status_code == 200, response.text
    outcomes, counts = _wait_outcomes(ledger, _message_id(sent), _settled)
    assert outcomes[gone]["outcome"] == "unregistered" and outcomes[gone]["status"] == 410
    assert outcomes[replaced]["outcome"] == "unregistered"
    unregistered = [e["token"] for e in ledger.events("unregistered")]
    assert unregistered == [gone]
    [event] = ledger.events("unregistered")
    assert event["reason"] == "APNs: Unregistered" and event["actor"] == "apns"
    # Its topics are left: later sends skip it, and a direct send is 404 UNREGISTERED.
    assert ledger.audit_instance(gone)["topics"] == []
    standin.reset()
    ledger.send({"topic": "news", "notification": {"title": "again"}})
    requests = standin.wait_for(lambda r: len(r) >= 1)
    time.sleep(0.3)
    assert [r["token"] for r in standin.requests()] == [device_token(3)]
    response = httpx.post(ledger.url("/messages:send"), headers={"Authorization": f"Bearer {ADMIN}"},
                          json={"message": {"token": gone, "notification": {"title": "x"}}})
    assert response.status_code == 404
    assert response.json()["error"]["details"][0]["errorCode"] == "UNREGISTERED"


@pytest.mark.parametrize("reason", ["BadDeviceToken", "DeviceTokenNotForTopic"])
def test_a_bad_device_token_is_cleared_recorded_and_not_retried(world, reason):
    standin, ledger, _ = world
    token = ledger.register(device_token(7))
    ledger.subscribe(token, "news")
    standin.script(device_token(7), [{"status": 400, "reason": reason}], sticky=True)
    sent = ledger.send({"topic": "news", "notification": {"title": "hi"}})
    outcomes, _ = _wait_outcomes(ledger, _message_id(sent), _settled)
    assert (outcomes[token]["outcome"], outcomes[token]["status"], outcomes[token]["reason"]) == ("failed", 400, reason)
    assert len(standin.requests()) == 1
    [cleared] = ledger.events("apnsTokenCleared")
    assert cleared["token"] == token and cleared["reason"] == f"APNs: {reason}"
    held = ledger.audit_instance(token)["apnsTokens"]
    assert held[0]["untilSeq"] == cleared["seq"]
    # Still registered; the next send reaches it by stream only.
    standin.reset()
    ledger.send({"topic": "news", "notification": {"title": "again"}})
    time.sleep(1.0)
    assert standin.requests() == []
    assert len(ledger.poll(token)["messages"]) == 2


@pytest.mark.parametrize("status, reason", [(400, "BadTopic"), (400, "BadCollapseId"), (413, "PayloadTooLarge"),
                                            (404, "BadPath"), (405, "BadMethod")])
def test_other_refusals_are_recorded_failures_not_retried(world, status, reason):
    standin, ledger, _ = world
    token = ledger.register(device_token(9))
    ledger.subscribe(token, "news")
    standin.script(device_token(9), [{"status": status, "reason": reason}], sticky=True)
    sent = ledger.send({"topic": "news", "notification": {"title": "hi"}})
    outcomes, counts = _wait_outcomes(ledger, _message_id(sent), _settled)
    assert (outcomes[token]["outcome"], outcomes[token]["status"], outcomes[token]["reason"]) == ("failed", status, reason)
    assert counts["failed"] == 1
    assert len(standin.requests()) == 1
    assert ledger.events("apnsTokenCleared") == [] and ledger.events("unregistered") == []


@pytest.mark.parametrize("replies", [
    [{"status": 429, "reason": "TooManyRequests"}],
    [{"status": 500, "reason": "InternalServerError"}],
    [{"status": 503, "reason": "ServiceUnavailable"}, {"status": 503, "reason": "Shutdown"}],
    [{"status": 429, "reason": "TooManyProviderTokenUpdates"}],
])
def test_throttling_and_server_errors_are_retried_until_accepted(world, replies):
    standin, ledger, _ = world
    token = ledger.register(device_token(4))
    ledger.subscribe(token, "news")
    standin.script(device_token(4), replies)
    sent = ledger.send({"topic": "news", "notification": {"title": "hi"}})
    outcomes, _ = _wait_outcomes(ledger, _message_id(sent), _settled, timeout=60)
    assert outcomes[token]["outcome"] == "accepted"
    requests = standin.requests()
    assert [r["status"] for r in requests] == [reply["status"] for reply in replies] + [200]
    # The same apns-id on every attempt: a retry APNs can recognise.
    assert len({r["headers"]["apns-id"] for r in requests}) == 1
    assert requests[0]["headers"]["apns-id"] == outcomes[token]["apnsId"]


def test_an_expired_provider_token_is_renewed_on_a_new_connection_at_once(tmp_path):
    # A new token at once is allowed after ExpiredProviderToken; the stand-in's rule of 20 minutes is off here,
    # since its ExpiredProviderToken is scripted rather than earned by an hour-old token.
    standin = StandIn(tmp_path, max_streams=10, token_update_interval=0)
    ledger = Ledger(standin, tmp_path)
    try:
        token = ledger.register(device_token(5))
        ledger.subscribe(token, "news")
        standin.script(device_token(5), [{"status": 403, "reason": "ExpiredProviderToken"}])
        sent = ledger.send({"topic": "news", "notification": {"title": "hi"}})
        _wait_outcomes(ledger, _message_id(sent), _settled)
        first, second = standin.requests()
        assert (first["status"], first["reason"], second["status"]) == (403, "ExpiredProviderToken", 200)
        assert first["connection"] != second["connection"]
        assert first["headers"]["authorization"] != second["headers"]["authorization"]
        assert second["time"] - first["time"] < 1.0  # at once, not after a backoff
    finally:
        ledger.stop()
        standin.stop()


def test_after_goaway_pushes_go_out_on_a_new_connection(world):
    standin, ledger, _ = world
    token = ledger.register(device_token(6))
    ledger.subscribe(token, "news")
    ledger.send({"topic": "news", "notification": {"title": "one"}})
    standin.wait_for(lambda r: len(r) >= 1)
    standin.goaway()
    time.sleep(0.3)
    sent = ledger.send({"topic": "news", "notification": {"title": "two"}})
    requests = standin.wait_for(lambda r: len(r) >= 2)
    assert requests[0]["connection"] != requests[1]["connection"]
    assert all(r["status"] == 200 for r in requests)
    _wait_outcomes(ledger, _message_id(sent), _settled)


def test_each_push_stream_is_ended_by_the_answer_never_reset_and_one_connection_carries_the_fan_out(world):
    # A provider that resets its streams (RST_STREAM) after their answers is a rapid-reset client to a server that
    # limits resets (CVE-2023-44487): nghttpd ended the connection with GOAWAY after about a thousand, and every
    # push under way waited a second's backoff.
    standin, ledger, _ = world
    tokens = [ledger.register(device_token(100 + i)) for i in range(60)]
    ledger.batch_add(tokens, "resets")
    standin.reset()
    sent = ledger.send({"topic": "resets", "notification": {"title": "no resets"}})
    _, counts = _wait_outcomes(ledger, _message_id(sent), _settled)
    assert counts["accepted"] == 60
    time.sleep(0.3)  # a reset would follow the last answer
    stats = standin.stats()
    assert stats["resets"] == 0, stats
    assert stats["connectionsOpened"] <= 2, stats  # the production client's connections, at most


def test_answer_bodies_past_the_connections_receive_window_do_not_stall_the_fan_out(world):
    # The answers' bodies use up the connection's HTTP/2 receive window (65,535 bytes) unless the provider gives
    # it back: 60 answers of 3 KB each, on at most two connections, are more than a window each. A provider that
    # did not send WINDOW_UPDATE stalled here after about 64 KiB of answers, and its pushes timed out.
    standin, ledger, _ = world
    tokens = [ledger.register(device_token(300 + i)) for i in range(60)]
    ledger.batch_add(tokens, "bodies")
    standin.reset()
    for i in range(60):
        standin.script(device_token(300 + i), [{"status": 400, "reason": "BadTopic", "padding": "x" * 3000}],
                       sticky=True)
    sent = ledger.send({"topic": "bodies", "notification": {"title": "long answers"}})
    outcomes, counts = _wait_outcomes(ledger, _message_id(sent), _settled, timeout=20)
    assert counts["failed"] == 60, counts
    assert {o["reason"] for o in outcomes.values()} == {"BadTopic"}
    assert len(standin.requests()) == 60
    assert standin.stats()["connectionsOpened"] <= 2


def test_a_send_whose_ios_payload_is_over_4096_bytes_is_refused_and_appends_nothing(world):
    standin, ledger, _ = world
    token = ledger.register(device_token(8))
    ledger.subscribe(token, "news")
    before = len(ledger.events())
    # A message of under 4096 bytes whose iOS payload (with `from` and `gcm.message_id`) is over: APNs would
    # answer 413, so the send is refused as FCM refuses a message too big.
    for blob, words in (("x" * 4040, "too big"), ("x" * 4100, "4096")):
        response = httpx.post(ledger.url("/messages:send"), headers={"Authorization": f"Bearer {ADMIN}"},
                              json={"message": {"topic": "news", "data": {"blob": blob}}})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["status"] == "INVALID_ARGUMENT"
        assert words in response.json()["error"]["message"], response.text
    assert len(ledger.events()) == before
    # Just under the limit is accepted and pushed.
    ledger.send({"topic": "news", "data": {"blob": "x" * 3900}})
    [request] = standin.wait_for(lambda r: len(r) >= 1)
    assert request["status"] == 200 and len(request["body"]) <= 4096


def test_no_push_goes_out_past_the_messages_expiry(world):
    standin, ledger, _ = world
    token = ledger.register(device_token(10))
    ledger.subscribe(token, "news")
    standin.script(device_token(10), [{"status": 503, "reason": "ServiceUnavailable"}], sticky=True)
    expires = int(time.time()) + 3
    sent = ledger.send({"topic": "news", "notification": {"title": "soon stale"},
                        "apns": {"headers": {"apns-expiration": str(expires)}}})
    outcomes, counts = _wait_outcomes(ledger, _message_id(sent), lambda o, c: c and c["expired"] == 1, timeout=30)
    assert outcomes[token]["outcome"] == "expired"
    requests = standin.requests()
    assert requests and all(r["time"] < expires for r in requests)
    assert all(r["headers"]["apns-expiration"] == str(expires) for r in requests)
    [progress] = [e for e in ledger.events("pushProgress") if e["finished"]]
    assert progress["expired"] is True
    count = len(standin.requests())
    time.sleep(2)
    assert len(standin.requests()) == count


def test_no_push_goes_out_past_the_projects_content_retention(tmp_path):
    # docs/server.md, *Retention*: a send older than contentRetention is pushed no more (recorded as expired), and
    # its content is then forgotten.
    standin = StandIn(tmp_path, max_streams=10)
    ledger = Ledger(standin, tmp_path, project={"contentRetention": "3s"})
    try:
        token = ledger.register(device_token(11))
        ledger.subscribe(token, "news")
        standin.script(device_token(11), [{"status": 503, "reason": "ServiceUnavailable"}], sticky=True)
        started = time.time()
        sent = ledger.send({"topic": "news", "notification": {"title": "kept three seconds"}})
        outcomes, _ = _wait_outcomes(ledger, _message_id(sent), lambda o, c: c and c["expired"] == 1, timeout=30)
        assert outcomes[token]["outcome"] == "expired"
        requests = standin.requests()
        assert requests and all(r["time"] < started + 3.5 for r in requests)
        count = len(requests)
        time.sleep(2)
        assert len(standin.requests()) == count
        deadline = time.time() + 30
        while not ledger.audit_message(_message_id(sent)).get("contentForgotten"):
            assert time.time() < deadline, "the content was never forgotten"
            time.sleep(0.2)
        assert ledger.audit_message(_message_id(sent))["contentForgotten"].startswith(
            "content forgotten by retention at ")
    finally:
        ledger.stop()
        standin.stop()
    ledger.verify()


def test_a_refused_provider_token_shows_in_readyz_metrics_and_one_log_line_and_pushes_wait_for_a_good_key(tmp_path):
    standin = StandIn(tmp_path, max_streams=10)
    wrong = standin.key_file(ec.generate_private_key(ec.SECP256R1()))
    ledger = Ledger(standin, tmp_path, key_file=wrong)
    try:
        tokens = [ledger.register(device_token(i)) for i in range(3)]
        for token in tokens:
            ledger.subscribe(token, "news")
        sent = ledger.send({"topic": "news", "notification": {"title": "kept"}})
        deadline = time.time() + 20
        while httpx.get(ledger.base + "/readyz").status_code == 200:
            assert time.time() < deadline, "readyz never reported the refused provider token"
            time.sleep(0.1)
        readiness = httpx.get(ledger.base + "/readyz").json()
        assert any("cannot push to APNs" in reason and "InvalidProviderToken" in reason
                   for reason in readiness["reasons"]), readiness
        assert "ledger_apns_failing_projects 1" in httpx.get(ledger.base + "/metrics").text
        _, counts = _outcomes(ledger, _message_id(sent))
        assert counts["pending"] == 3
        time.sleep(0.5)
        log = ledger.log.read_text()
        assert log.count("APNs pushes wait") == 1, log
        assert "eyJ" not in log and device_token(0) not in log and tokens[0] not in log
        # The operator mends the key and restarts: the kept pushes go out.
        ledger.stop()
        assert all(r["reason"] == "InvalidProviderToken" for r in standin.requests())
        ledger.config.write_text(ledger.config.read_text().replace(wrong, standin.key_file()))
        ledger.start()
        outcomes, counts = _wait_outcomes(ledger, _message_id(sent), _settled)
        assert counts["accepted"] == 3
        assert httpx.get(ledger.base + "/readyz").status_code == 200
    finally:
        ledger.stop()
        standin.stop()


def test_kill_9_mid_fan_out_resumes_every_device_gets_a_push_duplicates_stay_in_the_window(tmp_path):
    standin = StandIn(tmp_path, max_streams=50)
    ledger = Ledger(standin, tmp_path, limits={"registrationsPerSecond": 100000})
    try:
        devices = 3000
        tokens = []
        for start in range(0, devices, 500):
            tokens += [ledger.register(device_token(i)) for i in range(start, min(devices, start + 500))]
        ledger.batch_add(tokens, "everyone")
        sent = ledger.send({"topic": "everyone", "notification": {"title": "fan-out"}})
        standin.wait_for(lambda r: len(r) >= 400, timeout=60)
        ledger.kill()
        before = len(standin.requests())
        assert before < devices, "the fan-out finished before the kill: nothing resumed"
        ledger.start()
        requests = standin.wait_for(lambda r: len({x["token"] for x in r}) >= devices, timeout=120)
        outcomes, counts = _wait_outcomes(ledger, _message_id(sent), _settled, timeout=60)
        assert counts["accepted"] == devices
        time.sleep(0.5)
        requests = standin.requests()
        duplicates = len(requests) - devices
        # At most the pushes in flight (256) and those done since the last recorded progress (1,000).
        assert 0 <= duplicates <= 256 + 1000, duplicates
        by_token = {}
        for request in requests:
            by_token.setdefault(request["token"], set()).add(request["headers"]["apns-id"])
        assert all(len(ids) == 1 for ids in by_token.values()), "a retried push kept its apns-id"
    finally:
        ledger.stop()
        standin.stop()
    ledger.verify()


def test_kill_9_behind_a_slow_push_repeats_at_most_the_open_window(tmp_path):
    """The 601st push answered after 25 s, the others in 50 ms: the pusher walks at most 1,256 recipients past the
    recorded progress (the pushes in flight and those answered behind the slow one), so a kill well after the
    first progress records repeats at most those — never a push a record before the kill passed, at any latency."""
    standin = StandIn(tmp_path, delay=0.05)
    ledger = Ledger(standin, tmp_path, limits={"registrationsPerSecond": 100000})
    try:
        devices, slow = 2500, 600
        with httpx.Client() as client:
            tokens = [ledger.register(device_token(i), client=client) for i in range(devices)]
        order = {token: index for index, token in enumerate(tokens)}  # registration order is instance order
        # Answered within APNsConnection's 30 s timeout: slow, not lost.
        standin.script(device_token(slow), [{"status": 200, "delay": 25}])
        ledger.batch_add(tokens, "everyone")
        sent = ledger.send({"topic": "everyone", "notification": {"title": "fan-out"}})
        standin.wait_for(lambda r: len(r) >= 1500, timeout=60)
        deadline = time.time() + 20
        while not [e for e in ledger.events("pushProgress") if e.get("throughToken")]:
            assert time.time() < deadline, "no progress was recorded"
            time.sleep(0.2)
        time.sleep(4)  # unbounded, the walk would have pushed to about every device by now
        ledger.kill()
        recorded = [order[e["throughToken"]] for e in ledger.events("pushProgress") if e.get("throughToken")]
        before = standin.requests()
        assert recorded and 0 < max(recorded) < slow, recorded
        assert 1500 <= len(before) <= max(recorded) + 1 + 256 + 1000, (len(before), max(recorded))
        ledger.start()
        standin.wait_for(lambda r: len({x["token"] for x in r}) >= devices, timeout=120)
        _, counts = _wait_outcomes(ledger, _message_id(sent), _settled, timeout=60)
        assert counts["accepted"] == devices
        time.sleep(0.5)
        requests = standin.requests()
        per_device = {}
        for request in requests:
            per_device[request["token"]] = per_device.get(request["token"], 0) + 1
        repeated = [index for index in range(devices) if per_device[device_token(index)] > 1]
        assert all(per_device[device_token(index)] == 2 for index in repeated)
        # Not one push that a record before the kill had passed was made again.
        assert all(index > max(recorded) for index in repeated), (recorded, repeated[:5])
        assert len(requests) - devices == len(repeated) <= 256 + 1000, len(repeated)
    finally:
        ledger.stop()
        standin.stop()
    ledger.verify()


def test_ledger_device_hands_its_apns_token_to_the_server_and_gets_the_push(world):
    """The app library's token path through `ledger serve`: samples/DeviceClient (TopicLedgerMessaging) registers
    with an APNs token, subscribes, and the send reaches the stand-in."""
    import os
    import subprocess
    from apns_harness import CLIENT, PROJECT
    standin, ledger, directory = world
    device = os.path.join(os.path.dirname(os.environ["LEDGER_BIN"]), "ledger-device")
    common = ["--server", ledger.base, "--project", PROJECT, "--key", CLIENT, "--store", f"{directory}/device.json"]
    registered = subprocess.run([device, "register", *common, "--apns-token", device_token(42).upper(),
                                 "--apns-sandbox"], capture_output=True, text=True, timeout=60)
    assert registered.returncode == 0, registered.stderr
    token = registered.stdout.strip()
    subscribed = subprocess.run([device, "subscribe", *common, "news"], capture_output=True, text=True, timeout=60)
    assert subscribed.returncode == 0, subscribed.stderr
    assert [(h["apnsToken"], h["sandbox"]) for h in ledger.audit_instance(token)["apnsTokens"]] == \
        [(device_token(42), True)]
    ledger.send({"topic": "news", "notification": {"title": "to the phone"}})
    [request] = standin.wait_for(lambda r: len(r) >= 1)
    assert request["token"] == device_token(42) and request["status"] == 200


def test_a_410_timestamp_at_the_end_of_the_range_does_not_stop_the_server(world):
    standin, ledger, _ = world
    token = ledger.register(device_token(11))
    ledger.subscribe(token, "news")
    # Milliseconds that overflow microseconds: read without trapping, as a time later than any token's.
    standin.script(device_token(11), [{"status": 410, "reason": "Unregistered", "timestamp": 9_000_000_000_000_000_000,
                                       "delay": 0.5}])
    sent = ledger.send({"topic": "news", "notification": {"title": "hi"}})
    time.sleep(0.2)
    httpx.put(ledger.url(f"/registrations/{token}/apnsToken"), headers={"x-goog-api-key": "client-secret"},
              json={"apnsToken": device_token(12)})
    outcomes, _ = _wait_outcomes(ledger, _message_id(sent), _settled)
    assert outcomes[token]["outcome"] == "unregistered"
    assert [e["token"] for e in ledger.events("unregistered")] == [token]
    assert httpx.get(ledger.base + "/healthz").status_code == 200


class SilentEndpoint:
    """An APNs endpoint that accepts connections, completes TLS (ALPN h2) and never says anything more."""

    def __init__(self, tls):
        import socket
        import ssl
        import threading
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(tls["cert"], tls["key"])
        self.context.set_alpn_protocols(["h2"])
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.base = f"https://127.0.0.1:{self.listener.getsockname()[1]}"
        self.held = []
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped:
            try:
                connection, _ = self.listener.accept()
                self.held.append(self.context.wrap_socket(connection, server_side=True))
            except OSError:
                continue

    def stop(self):
        self.stopped = True
        self.listener.close()
        for connection in self.held:
            connection.close()


def test_an_apns_endpoint_that_never_answers_shows_in_readyz_metrics_and_one_log_line(tmp_path):
    standin = StandIn(tmp_path, max_streams=10)
    silent = SilentEndpoint(make_certificates(tmp_path, name="silent"))
    ledger = Ledger(standin, tmp_path, apns={"endpoint": silent.base, "sandboxEndpoint": silent.base})
    try:
        tokens = [ledger.register(device_token(i)) for i in range(4)]
        for token in tokens:
            ledger.subscribe(token, "news")
        sends = [ledger.send({"topic": "news", "notification": {"title": f"storm {i}"}}) for i in range(3)]
        # Attempts time out and are retried; after 30 s without an answer, /readyz says so, naming no project.
        deadline = time.time() + 90
        while httpx.get(ledger.base + "/readyz").status_code == 200:
            assert time.time() < deadline, "readyz never reported that APNs does not answer"
            time.sleep(0.5)
        readiness = httpx.get(ledger.base + "/readyz").json()
        assert any("cannot push to APNs" in reason and "not answering" in reason
                   for reason in readiness["reasons"]), readiness
        assert not any(PROJECT in reason for reason in readiness["reasons"]), readiness
        metrics = httpx.get(ledger.base + "/metrics").text
        timeouts = [line for line in metrics.splitlines() if line.startswith('ledger_apns_pushes_total{outcome="timeout"}')]
        assert timeouts and float(timeouts[0].split()[-1]) >= 1, metrics
        assert "ledger_apns_failing_projects 1" in metrics
        # The outbox counts pushes: 3 sends to 4 devices, none pushed.
        assert "ledger_apns_outbox_depth 12" in metrics, [l for l in metrics.splitlines() if "outbox" in l]
        own = httpx.get(ledger.url("/metrics"), headers={"Authorization": f"Bearer {ADMIN}"}).text
        assert "ledger_project_apns_not_answering 1" in own and "ledger_project_apns_outbox_depth 12" in own, own
        for sent in sends:
            _, counts = _outcomes(ledger, _message_id(sent))
            assert counts["pending"] == 4
        log = ledger.log.read_text()
        assert log.count("APNs is not answering") == 1, log
        assert f"ledger.project={PROJECT}" in [line for line in log.splitlines() if "APNs is not answering" in line][0]
        # APNs answers again (the stand-in, after a restart on it): the pushes go out and readiness returns.
        ledger.stop()
        ledger.config.write_text(ledger.config.read_text().replace(silent.base, standin.base))
        ledger.start()
        for sent in sends:
            _, counts = _wait_outcomes(ledger, _message_id(sent), _settled)
            assert counts["accepted"] == 4
        assert httpx.get(ledger.base + "/readyz").status_code == 200
    finally:
        ledger.stop()
        silent.stop()
        standin.stop()
