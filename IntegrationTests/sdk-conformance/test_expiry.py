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
