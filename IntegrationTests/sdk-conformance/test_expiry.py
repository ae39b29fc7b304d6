"""Registration expiry through `ledger serve`: with `registrationExpiry` of a few seconds, a silent registration is
expired by an `unregistered` event (actor `expiry`, reason `expired: no activity since …`) and its token then gets
404 `UNREGISTERED`; a device that keeps polling survives; a send before the expiry still counts the expired device
in its replay; the audit of erasures lists the expiry; a malformed `registrationExpiry` stops the server at start,
naming the key."""

import hashlib
import json
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests

from conftest import CLIENT_KEY, PROJECT, start_server, stop_and_verify

ADMIN = {"Authorization": "Bearer owner"}
AUDITOR = {"Authorization": "Bearer auditor"}
CLIENT = {"x-goog-api-key": CLIENT_KEY}


def _hash(secret):
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()


def _config(expiry):
    path = Path(tempfile.mkdtemp(prefix="ledger-expiry-")) / "config.json"
    path.write_text(json.dumps({"projects": {PROJECT: {
        "adminKeys": [_hash("owner")], "auditorKeys": [_hash("auditor")], "clientApiKeys": [_hash(CLIENT_KEY)],
        "registrationExpiry": expiry}}}))
    return path


def url(base, path):
    return f"{base}/v1/projects/{PROJECT}{path}"


def register(base):
    reply = requests.post(url(base, "/registrations"), headers=CLIENT, json={"platform": "android"}, timeout=10)
    assert reply.status_code == 200, reply.text
    return reply.json()["token"]


@pytest.fixture(scope="module")
def served():
    process, base, data, binary = start_server(extra_args=["--config", str(_config("3s"))])
    yield {"base": base, "data": data, "binary": binary}
    stop_and_verify(process, data, binary)


def test_a_silent_registration_expires_and_an_active_one_survives(served):
    base = served["base"]
    silent, active = register(base), register(base)
    for token in (silent, active):
        reply = requests.post(url(base, f"/registrations/{token}/topicSubscriptions?topicName=news"), headers=CLIENT,
                              timeout=10)
        assert reply.status_code == 200, reply.text
    sent = requests.post(url(base, "/messages:send"), headers=ADMIN, timeout=10,
                         json={"message": {"topic": "news", "data": {"k": "v"}}}).json()["name"].rsplit("/", 1)[1]
    # The active device polls (a request with its own token) every half second; the silent one does nothing (the
    # admin's look at it is not its activity).
    deadline = time.time() + 20
    while time.time() < deadline:
        assert requests.get(url(base, f"/registrations/{active}/messages?waitSeconds=0"), headers=CLIENT,
                            timeout=10).status_code == 200
        if requests.get(f"{base}/iid/info/{silent}", headers=ADMIN, timeout=10).status_code == 404:
            break
        time.sleep(0.5)
    gone = requests.get(url(base, f"/registrations/{silent}/messages?waitSeconds=0"), headers=CLIENT, timeout=10)
    assert gone.status_code == 404 and gone.json()["error"]["details"][0]["errorCode"] == "UNREGISTERED"
    assert requests.get(url(base, f"/registrations/{active}/messages?waitSeconds=0"), headers=CLIENT,
                        timeout=10).status_code == 200

    # The expiry is an event with its reason and last activity; it is listed with the erasures.
    entries = requests.get(url(base, "/audit/erasures"), headers=AUDITOR, timeout=10).json()["erasures"]
    assert [(e["kind"], e["device"], e["actor"]) for e in entries] == [("expired", silent, "expiry")]
    assert entries[0]["reason"].startswith("expired: no activity since ")
    # Later sends skip it; the replay of the send before the expiry still counts it.
    later = requests.post(url(base, "/messages:send"), headers=ADMIN, timeout=10,
                          json={"message": {"topic": "news", "data": {"k": "v"}}}).json()["name"].rsplit("/", 1)[1]
    replays = {message: requests.get(url(base, f"/audit/messages/{message}"), headers=AUDITOR, timeout=10).json()
               for message in (sent, later)}
    assert sorted(replays[sent]["recipients"]) == sorted([silent, active]) and replays[sent]["matchesRecord"]
    assert replays[later]["recipients"] == [active]
    metrics = requests.get(f"{base}/metrics", timeout=10).text
    assert 'ledger_erasures_total{kind="expired"} 1' in metrics


@pytest.mark.parametrize("expiry", ["3w", "0s", "-1d", "12", "d", "1.5h", "", "999999999999d"])
def test_a_malformed_registration_expiry_stops_the_server_naming_the_key(expiry):
    result = subprocess.run(
        [served_binary(), "serve", "--config", str(_config(expiry)), "--data", tempfile.mkdtemp(), "--port", "0"],
        capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert f"projects.{PROJECT}.registrationExpiry" in result.stdout + result.stderr


def served_binary():
    import os
    return os.environ["LEDGER_BIN"]


def registered(base, token):
    return requests.get(f"{base}/iid/info/{token}", headers=ADMIN, timeout=10).status_code == 200


def test_an_open_stream_or_long_poll_is_activity_for_as_long_as_it_stays_open(served):
    base = served["base"]
    streaming, polling, silent = register(base), register(base), register(base)
    stream = requests.get(url(base, f"/registrations/{streaming}/messages:stream"), headers=CLIENT, stream=True,
                          timeout=30)
    assert stream.status_code == 200
    poll = {}

    def long_poll():
        poll["reply"] = requests.get(url(base, f"/registrations/{polling}/messages?waitSeconds=14"), headers=CLIENT,
                                     timeout=30)

    import threading
    waiting = threading.Thread(target=long_poll)
    waiting.start()
    try:
        # The silent device expires (3 s, a sweep a second); the two whose connection is open outlive it by sweeps.
        deadline = time.time() + 10
        while registered(base, silent):
            assert time.time() < deadline, "the silent device was never expired"
            time.sleep(0.2)
        time.sleep(4)
        assert waiting.is_alive(), "the long poll is still open"
        assert registered(base, streaming) and registered(base, polling)
    finally:
        stream.close()
        waiting.join(timeout=30)
    assert poll["reply"].status_code == 200 and poll["reply"].json()["messages"] == []


DEVICE_ROUTES = [
    ("GET", "/topicSubscriptions", None), ("GET", "/topicSubscriptions/news", None),
    ("POST", "/topicSubscriptions?topicName=news", None), ("DELETE", "/topicSubscriptions/news", None),
    ("DELETE", "/topicSubscriptions/news?allowMissing=true", None), ("PUT", "/apnsToken", {"apnsToken": "ab" * 32}),
    ("DELETE", "/apnsToken", None), ("GET", "/messages?waitSeconds=0", None), ("GET", "/messages:stream", None),
    ("POST", "/messages:ack", {"through": "1"}), ("DELETE", "", None),
]


def test_every_device_route_answers_unregistered_for_an_expired_or_erased_token(served):
    base = served["base"]
    reply = requests.post(url(base, "/registrations"), headers=CLIENT, json={"platform": "ios"}, timeout=10)
    expired, erased = reply.json()["token"], register(base)
    for token in (expired, erased):
        assert requests.post(url(base, f"/registrations/{token}/topicSubscriptions?topicName=news"), headers=CLIENT,
                             timeout=10).status_code == 200
    reply = requests.post(url(base, f"/registrations/{erased}:erase"), headers=ADMIN, json={"reason": "ticket 65"},
                          timeout=60)
    assert reply.status_code == 200, reply.text
    deadline = time.time() + 10
    while registered(base, expired):
        assert time.time() < deadline, "the device was never expired"
        time.sleep(0.2)
    for token in (expired, erased):
        for method, path, body in DEVICE_ROUTES:
            reply = requests.request(method, url(base, f"/registrations/{token}{path}"), headers=CLIENT, json=body,
                                     timeout=10)
            assert reply.status_code == 404, (method, path, reply.text)
            error = reply.json()["error"]
            assert (error["status"], error["details"][0]["errorCode"]) == ("NOT_FOUND", "UNREGISTERED"), (
                method, path, token == erased, reply.text)
