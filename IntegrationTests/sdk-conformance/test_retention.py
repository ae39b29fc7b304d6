"""Retention through `ledger serve`: with a `contentRetention` and an `identifierRetention` of a few seconds, the
content of a send is forgotten by the server's sweep — `ledger replay --message` and the audit API say "content
forgotten by retention at <time>", no file under the data directory holds it, its recipients and proof stay — a
device that had not fetched it by then is not given it (the cursor moves past it); a device unregistered longer ago
than `identifierRetention` is erased by the actor `retention` with the reason `identifierRetention`; a malformed
value stops the server at start, naming the key."""

import hashlib
import json
import os
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import requests

from conftest import CLIENT_KEY, PROJECT, start_server, stop_and_verify

ADMIN = {"Authorization": "Bearer owner"}
AUDITOR = {"Authorization": "Bearer auditor"}
CLIENT = {"x-goog-api-key": CLIENT_KEY}


def _hash(secret):
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()


def _config(**retention):
    path = Path(tempfile.mkdtemp(prefix="ledger-retention-")) / "config.json"
    path.write_text(json.dumps({"projects": {PROJECT: {
        "adminKeys": [_hash("owner")], "auditorKeys": [_hash("auditor")], "clientApiKeys": [_hash(CLIENT_KEY)],
        **retention}}}))
    return path


def url(base, path):
    return f"{base}/v1/projects/{PROJECT}{path}"


def register(base):
    reply = requests.post(url(base, "/registrations"), headers=CLIENT, json={"platform": "android"}, timeout=10)
    assert reply.status_code == 200, reply.text
    return reply.json()["token"]


def holders(directory, needle: bytes):
    found = []
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            if needle in Path(path).read_bytes():
                found.append(path)
    return found


@pytest.fixture(scope="module")
def served():
    process, base, data, binary = start_server(
        extra_args=["--config", str(_config(contentRetention="3s", identifierRetention="3s"))])
    yield {"base": base, "data": data, "binary": binary}
    stop_and_verify(process, data, binary)


def test_a_content_is_forgotten_and_a_waiting_device_is_not_given_it(served):
    base, data, binary = served["base"], served["data"], served["binary"]
    early, late = register(base), register(base)
    for token in (early, late):
        assert requests.post(url(base, f"/registrations/{token}/topicSubscriptions?topicName=health"),
                             headers=CLIENT, timeout=10).status_code == 200
    secret = f"Your test result is ready, Anna {uuid.uuid4()}"
    reply = requests.post(url(base, "/messages:send"), headers=ADMIN, timeout=10,
                          json={"message": {"topic": "health", "data": {"note": secret}}})
    assert reply.status_code == 200, reply.text
    message = reply.json()["name"].rsplit("/", 1)[1]
    # Fetched before the sweep: delivered with its content.
    got = requests.get(url(base, f"/registrations/{early}/messages?waitSeconds=0"), headers=CLIENT, timeout=10).json()
    assert [m["messageId"] for m in got["messages"]] == [message] and secret in json.dumps(got)

    deadline, out = time.time() + 30, ""
    while time.time() < deadline:
        result = subprocess.run([binary, "replay", "--message", message, "--data", data, "--project", PROJECT],
                                capture_output=True, text=True, timeout=60)
        out = result.stdout
        if "forgotten by retention at " in out:
            break
        time.sleep(0.5)
    assert "content:    forgotten by retention at " in out, out + result.stderr
    # The fact and its audience stay: both recipients, matching the recorded audience.
    reply = requests.get(url(base, f"/audit/messages/{message}"), headers=AUDITOR, timeout=10)
    assert reply.status_code == 200, reply.text
    audit = reply.json()
    assert audit.get("contentForgotten", "").startswith("content forgotten by retention at "), json.dumps(audit)
    assert audit["contentForgotten"].startswith("content forgotten by retention at ")
    assert sorted(audit["recipients"]) == sorted([early, late]) and audit["matchesRecord"]
    assert secret not in json.dumps(audit)
    # The file was compacted: no file under the data directory holds the content.
    assert holders(data, secret.encode()) == []
    # A device that had not fetched it is not given it: its cursor moves past it.
    waiting = requests.get(url(base, f"/registrations/{late}/messages?waitSeconds=0"), headers=CLIENT,
                           timeout=10).json()
    assert waiting["messages"] == [] and secret not in json.dumps(waiting)
    # The log says what the sweep did, and its record verifies (stop_and_verify runs `ledger verify`).
    log = subprocess.run([binary, "log", "--data", data, "--project", PROJECT], check=True, capture_output=True,
                         text=True).stdout
    events = [json.loads(line) for line in log.splitlines() if line]
    sweeps = [e for e in events if e["kind"] == "retention"]
    assert sweeps and sweeps[0]["actor"] == "retention" and sweeps[0]["forgottenContents"] == 1, sweeps
    sent = next(e for e in events if e["kind"] == "sent" and e["messageId"] == message)
    assert sent["contentForgotten"].startswith("content forgotten by retention at ") and secret not in log


def test_a_device_unregistered_longer_than_identifier_retention_is_erased(served):
    base = served["base"]
    gone, staying = register(base), register(base)
    assert requests.delete(url(base, f"/registrations/{gone}"), headers=CLIENT, timeout=10).status_code == 200
    deadline, entries = time.time() + 30, []
    while time.time() < deadline:
        entries = requests.get(url(base, "/audit/erasures"), headers=AUDITOR, timeout=10).json()["erasures"]
        if any(e["kind"] == "erased" and e["actor"] == "retention" for e in entries):
            break
        time.sleep(0.5)
    erased = [e for e in entries if e["kind"] == "erased" and e["actor"] == "retention"]
    assert len(erased) == 1 and erased[0]["reason"] == "identifierRetention", entries
    assert erased[0]["device"].startswith("erased-")
    assert holders(served["data"], gone.encode()) == []
    # The registered device stays, with its token.
    assert requests.get(url(base, f"/registrations/{staying}/messages?waitSeconds=0"), headers=CLIENT,
                        timeout=10).status_code == 200


@pytest.mark.parametrize("key", ["contentRetention", "identifierRetention"])
def test_a_malformed_retention_stops_the_server_naming_the_key(served, key):
    result = subprocess.run(
        [served["binary"], "serve", "--config", str(_config(**{key: "3 days"})), "--data", tempfile.mkdtemp(),
         "--port", "0"], capture_output=True, text=True, timeout=30)
    assert result.returncode != 0 and key in result.stderr, result.stderr
