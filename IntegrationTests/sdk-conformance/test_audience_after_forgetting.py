"""The audience of a send after a device was forgotten, through `ledger serve` (issue #65): 1,100 devices on topic
`big` (over the writer's inline limit of 1,024 recipients, so the audience recorder records the audiences and may
reuse the digest of the topic's last one), a send, one device erased or expired, and a second send. The second
send's `audience` event must count the devices left, and `ledger replay --message` of it must say it matches
(`matchesRecord`), as `ledger verify --audiences` must for every recorded audience. (The bug was a recorded
audience of 1,100 with the first send's digest, which the replay of 1,099 contradicted.)"""

import json
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests

from conftest import CLIENT_KEY, PROJECT, start_server, stop_and_verify

ADMIN = {"Authorization": "Bearer owner"}
CLIENT = {"x-goog-api-key": CLIENT_KEY}
DEVICES = 1_100


def url(base, path):
    return f"{base}/v1/projects/{PROJECT}{path}"


def register(session, base, count):
    tokens = []
    for _ in range(count):
        reply = session.post(url(base, "/registrations"), headers=CLIENT, json={"platform": "android"}, timeout=10)
        assert reply.status_code == 200, reply.text
        tokens.append(reply.json()["token"])
    return tokens


def subscribe_all(session, base, tokens, topic):
    """`/iid/v1:batchAdd` in requests of 1,000 tokens."""
    for start in range(0, len(tokens), 1000):
        reply = session.post(f"{base}/iid/v1:batchAdd", headers=ADMIN, timeout=30,
                             json={"to": f"/topics/{topic}", "registration_tokens": tokens[start:start + 1000]})
        assert reply.status_code == 200, reply.text
        assert all(result == {} for result in reply.json()["results"]), reply.text


def send(session, base, topic):
    reply = session.post(url(base, "/messages:send"), headers=ADMIN, timeout=30,
                         json={"message": {"topic": topic, "data": {"k": "v"}}})
    assert reply.status_code == 200, reply.text
    return reply.json()["name"].rsplit("/", 1)[1]


def replay(binary, data, message):
    """`ledger replay --message ID --format json` once the audience is recorded (the recorder records it shortly
    after the send): the parsed report and the exit status."""
    deadline = time.time() + 30
    while True:
        result = subprocess.run([binary, "replay", "--message", message, "--format", "json", "--data", data,
                                 "--project", PROJECT], capture_output=True, text=True, timeout=60)
        if "no audience event is recorded" not in result.stderr or time.time() > deadline:
            return json.loads(result.stdout), result.returncode, result.stderr
        time.sleep(0.2)


def expect_sound_audiences(binary, data, first, second, devices_left):
    """The first send reached every device; the second the devices left, recorded as replay reconstructs it."""
    report, status, _ = replay(binary, data, first)
    assert status == 0 and report["matchesRecord"] and report["recipientCount"] == devices_left + 1
    report, status, stderr = replay(binary, data, second)
    assert (report["recipientCount"], report["recordedCount"]) == (devices_left, devices_left), stderr
    assert report["recordedDigest"] == report["recipientDigest"], stderr
    assert status == 0 and report["matchesRecord"], stderr
    verified = subprocess.run([binary, "verify", "--audiences", "--format", "json", "--data", data, "--project",
                               PROJECT], capture_output=True, text=True, timeout=120)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    checked = json.loads(verified.stdout)
    assert checked["sound"] and checked["problems"] == [] and checked["audiencesChecked"] == 2, checked


def test_the_send_after_an_erasure_records_the_audience_replay_reconstructs():
    process, base, data, binary = start_server(extra_args=["--registration-rate", "100000"])
    try:
        with requests.Session() as session:
            tokens = register(session, base, DEVICES)
            subscribe_all(session, base, tokens, "big")
            first = send(session, base, "big")
            # The first audience is recorded (and its digest remembered) before the erasure.
            replay(binary, data, first)
            erased = session.post(url(base, f"/registrations/{tokens[7]}:erase"), headers=ADMIN, timeout=60,
                                  json={"reason": "GDPR Art. 17, ticket 65"})
            assert erased.status_code == 200, erased.text
            second = send(session, base, "big")
        expect_sound_audiences(binary, data, first, second, DEVICES - 1)
    finally:
        stop_and_verify(process, data, binary)


def _config(expiry):
    import hashlib

    def hashed(secret):
        return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()

    path = Path(tempfile.mkdtemp(prefix="ledger-audience-expiry-")) / "config.json"
    path.write_text(json.dumps({
        "limits": {"registrationsPerSecond": 100000},
        "projects": {PROJECT: {"adminKeys": [hashed("owner")], "auditorKeys": [hashed("auditor")],
                               "clientApiKeys": [hashed(CLIENT_KEY)], "registrationExpiry": expiry}}}))
    return path


def test_the_send_after_an_expiry_records_the_audience_replay_reconstructs():
    # `registrationExpiry` 20 s (a sweep every 2 s): the device registered first goes silent 6 s before the
    # others, so a sweep expires it alone; the second send follows at once, while the others are still registered.
    expiry, head_start = 20, 6
    process, base, data, binary = start_server(extra_args=["--config", str(_config(f"{expiry}s"))])
    try:
        with requests.Session() as session:
            (silent,) = register(session, base, 1)
            time.sleep(head_start)
            others_from = time.time()
            tokens = [silent] + register(session, base, DEVICES - 1)
            subscribe_all(session, base, tokens, "big")
            first = send(session, base, "big")
            replay(binary, data, first)
            assert time.time() < others_from + expiry - head_start, "too slow: the silent device expired already"
            deadline = time.time() + expiry + 10
            while session.get(f"{base}/iid/info/{silent}", headers=ADMIN, timeout=10).status_code != 404:
                assert time.time() < deadline, "the silent device was never expired"
                time.sleep(0.1)
            second = send(session, base, "big")
            assert time.time() < others_from + expiry, "too slow: the other devices may have expired already"
        expect_sound_audiences(binary, data, first, second, DEVICES - 1)
    finally:
        stop_and_verify(process, data, binary)
