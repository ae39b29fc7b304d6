"""Erasure through `ledger serve`: after `POST …/registrations/{token}:erase` no file under the data directory — nor
in a backup, nor the server's log — holds the registration token or its APNs token in any form (text, hex,
base64), after a restart and further writes too; the token is then unknown everywhere; the erasure is an event with
who, when and why; the device is one pseudonym in replays and audits; every checkpoint signed before stays
consistent with every later one and both proof verifiers accept the proofs of messages sent to it."""

import base64
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import requests

from conftest import CLIENT_KEY, PROJECT, restart_server, start_server, stop_and_verify

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "merkle"))
import verify_proof  # noqa: E402

ADMIN = {"Authorization": "Bearer owner"}
AUDITOR = {"Authorization": "Bearer auditor"}
CLIENT = {"x-goog-api-key": CLIENT_KEY}
APNS_TOKEN = "c4" * 16 + "5e" * 16


def forms(identifier: bytes):
    """The identifier as bytes, hex (both cases) and base64 (standard and URL-safe, unpadded)."""
    standard = base64.b64encode(identifier).rstrip(b"=")
    return {identifier, identifier.hex().encode(), identifier.hex().upper().encode(), standard,
            standard.replace(b"+", b"-").replace(b"/", b"_")}


def holders(directory, identifier: bytes):
    """Every file under `directory` holding a form of `identifier`."""
    found = []
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            content = Path(path).read_bytes()
            found += [f"{path}: {form[:24]!r}" for form in forms(identifier) if form in content]
    return found


def url(base, path):
    return f"{base}/v1/projects/{PROJECT}{path}"


def register(base, platform="ios", apns=None):
    body = {"platform": platform, "appId": "com.example"}
    if apns:
        body["apnsToken"] = apns
    reply = requests.post(url(base, "/registrations"), headers=CLIENT, json=body, timeout=10)
    assert reply.status_code == 200, reply.text
    return reply.json()["token"]


def subscribe(base, token, topic):
    reply = requests.post(url(base, f"/registrations/{token}/topicSubscriptions?topicName={topic}"), headers=CLIENT,
                          timeout=10)
    assert reply.status_code == 200, reply.text


def send(base, message):
    reply = requests.post(url(base, "/messages:send"), headers=ADMIN, json={"message": message}, timeout=10)
    assert reply.status_code == 200, reply.text
    return reply.json()["name"].rsplit("/", 1)[1]


def cli(served, *args):
    result = subprocess.run([served["binary"], *args, "--data", served["data"], "--project", PROJECT],
                            capture_output=True, text=True)
    return result


@pytest.fixture(scope="module")
def served():
    process, base, data, binary = start_server()
    state = {"process": process, "base": base, "data": data, "binary": binary}
    yield state
    stop_and_verify(state["process"], data, binary)


def test_an_erased_device_leaves_no_identifier_and_every_proof_still_verifies(served):
    base = served["base"]
    erased, kept = register(base, apns=APNS_TOKEN), register(base, platform="android")
    for topic in ("news", "sports"):
        subscribe(base, erased, topic)
    subscribe(base, kept, "news")
    by_token = send(base, {"token": erased, "data": {"who": erased}})
    by_topic = send(base, {"topic": "news", "notification": {"title": "t", "body": "b"}})
    inbox = requests.get(url(base, f"/registrations/{erased}/messages"), headers=CLIENT, timeout=10).json()
    cursor = inbox["messages"][-1]["cursor"]
    assert requests.post(url(base, f"/registrations/{erased}/messages:ack"), headers=CLIENT,
                         json={"through": cursor}, timeout=10).status_code == 200
    before = requests.get(url(base, "/ledger:checkpoint"), headers=AUDITOR, timeout=10).text
    old_size = int(before.split("\n")[1])
    key = cli(served, "checkpoint", "--public-key").stdout.strip()
    assert holders(served["data"], erased.encode()), "the token is in the files before the erasure"

    # Only the admin key erases; a reason is required and may not quote the token; unknown tokens are 404.
    erase = url(base, f"/registrations/{erased}:erase")
    for headers in (CLIENT, AUDITOR):
        assert requests.post(erase, headers=headers, json={"reason": "r"}, timeout=10).status_code == 403
    assert requests.post(erase, headers=ADMIN, json={}, timeout=10).status_code == 400
    assert requests.post(erase, headers=ADMIN, json={"reason": f"asked by {erased}"}, timeout=10).status_code == 400
    unknown = requests.post(url(base, "/registrations/never-registered:erase"), headers=ADMIN,
                            json={"reason": "r"}, timeout=10)
    assert unknown.status_code == 404 and unknown.json()["error"]["details"][0]["errorCode"] == "UNREGISTERED"

    reply = requests.post(erase, headers=ADMIN, json={"reason": "GDPR Art. 17, ticket 4711"}, timeout=60)
    assert reply.status_code == 200, reply.text
    result = reply.json()
    pseudonym = result["pseudonym"]
    assert pseudonym.startswith("erased-") and int(result["redactedEvents"]) == 6

    # No file holds the token or the APNs token; the other device's token is still there.
    assert holders(served["data"], erased.encode()) == []
    assert holders(served["data"], bytes.fromhex(APNS_TOKEN)) == []
    assert holders(served["data"], kept.encode())

    # The token is unknown everywhere.
    assert requests.get(url(base, f"/registrations/{erased}/messages"), headers=CLIENT,
                        timeout=10).status_code == 404
    again = requests.post(url(base, f"/registrations/{erased}/topicSubscriptions?topicName=weather"),
                          headers=CLIENT, timeout=10)
    assert again.status_code == 404
    assert requests.post(erase, headers=ADMIN, json={"reason": "twice"}, timeout=10).status_code == 404
    later = send(base, {"topic": "news", "data": {"k": "v"}})
    replay = requests.get(url(base, f"/audit/messages/{later}"), headers=AUDITOR, timeout=10).json()
    assert replay["recipients"] == [kept]

    # The erasure is an event and an audit entry: who, when, why, the pseudonym.
    assert requests.get(url(base, "/audit/erasures"), headers=CLIENT, timeout=10).status_code == 403
    assert requests.get(url(base, "/audit/erasures"), timeout=10).status_code == 401
    erasures = requests.get(url(base, "/audit/erasures"), headers=AUDITOR, timeout=10).json()["erasures"]
    assert [(e["kind"], e["device"], e["actor"], e["reason"], e["redactedEvents"]) for e in erasures] == [
        ("erased", pseudonym, "admin", "GDPR Art. 17, ticket 4711", 6)]
    listed = cli(served, "audit", "erasures", "--format", "json")
    assert listed.returncode == 0 and json.loads(listed.stdout)["erasures"][0]["device"] == pseudonym

    # The replays of the sends before it keep their counts and name the pseudonym.
    for message, count in ((by_token, 1), (by_topic, 2)):
        replay = requests.get(url(base, f"/audit/messages/{message}"), headers=AUDITOR, timeout=10).json()
        assert replay["recipientCount"] == count and pseudonym in replay["recipients"]
        assert replay["erasedRecipients"] == 1 and replay["matchesRecord"]
        # The recorded digest re-proves: it is over device numbers, which the erasure kept.
        assert replay["digestVersion"] == 2 and replay["digestRecomputable"]
        assert replay["recipientDigest"] == replay["recordedDigest"]
        assert hashlib.sha256("".join(f"{device}\n" for device in sorted(replay["recipientDevices"])).encode()
                              ).hexdigest() == replay["recordedDigest"]
    audit = requests.get(url(base, f"/audit/instances/{pseudonym}"), headers=AUDITOR, timeout=10)
    assert audit.status_code == 200 and audit.json()["registrations"][0]["untilSeq"] is not None

    # Every proof survives: the old checkpoint is a prefix of the new tree, and the token send's proof (whose
    # sent event was rewritten) verifies with both verifiers.
    consistency = requests.get(url(base, f"/ledger:consistency?from={old_size}"), headers=AUDITOR, timeout=10).json()
    assert consistency["fromRoot"] == before.split("\n")[2]
    verify_proof.verify_consistency_proof(consistency, key)
    proof = requests.get(url(base, f"/messages/{by_token}:proof"), headers=AUDITOR, timeout=10).json()
    assert "rewritten by an erasure" in verify_proof.verify_message_proof(proof, key)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
        json.dump(proof, file)
    checked = subprocess.run([served["binary"], "verify-proof", file.name, "--public-key", key],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    verified = cli(served, "verify", "--format", "json")
    assert verified.returncode == 0, verified.stdout
    report = json.loads(verified.stdout)
    assert report["erasures"] == 1 and report["redactedEvents"] == 6

    # A backup holds none of it; nor does the server's log.
    backups = tempfile.mkdtemp(prefix="ledger-erasure-backup-")
    backup = cli(served, "backup", backups)
    assert backup.returncode == 0, backup.stdout + backup.stderr
    assert holders(backups, erased.encode()) == [] and holders(backups, kept.encode())

    # After a restart and more writes, still none.
    served["process"].terminate()
    log = served["process"].stdout.read()
    served["process"].wait(timeout=10)
    for form in forms(erased.encode()) | forms(bytes.fromhex(APNS_TOKEN)):
        assert form not in log
    served["process"] = restart_server(served["binary"], served["data"], base)
    subscribe(base, kept, "weather")
    send(base, {"topic": "weather", "data": {"k": "v"}})
    assert holders(served["data"], erased.encode()) == []


def test_a_batch_erases_each_known_token_and_says_why_not_for_the_others(served):
    base = served["base"]
    first, second = register(base, platform="web"), register(base, platform="android")
    subscribe(base, first, "batch")
    reply = requests.post(url(base, "/registrations:batchErase"), headers=ADMIN, timeout=60, json={
        "registrationTokens": [first, "never-registered", "bad token", second, first], "reason": "account closed"})
    assert reply.status_code == 200, reply.text
    results = reply.json()["results"]
    assert [sorted(r) for r in results] == [["erasedAtSeq", "pseudonym", "redactedEvents"], ["error"], ["error"],
                                           ["erasedAtSeq", "pseudonym", "redactedEvents"], ["error"]]
    assert [r.get("error") for r in results] == [None, "NOT_FOUND", "INVALID_ARGUMENT", None, "NOT_FOUND"]
    for token in (first, second):
        assert holders(served["data"], token.encode()) == []
    too_many = requests.post(url(base, "/registrations:batchErase"), headers=ADMIN, timeout=10,
                             json={"registrationTokens": ["t"] * 1001, "reason": "r"})
    assert too_many.status_code == 400
    metrics = requests.get(f"{base}/metrics", timeout=10).text
    # (The first test's erasure was counted by the process it restarted.)
    assert 'ledger_erasures_total{kind="erased"} 2' in metrics and "ledger_erasure_duration_seconds_count" in metrics


def test_a_compaction_that_cannot_be_made_is_a_readiness_reason_until_it_is(served):
    base = served["base"]
    device = register(base, platform="android")
    # A file where the compacting copy's directory goes: the copy of the file cannot be made.
    blocker = Path(served["data"]) / PROJECT / ".compacting"
    blocker.write_text("in the way")
    try:
        reply = requests.post(url(base, f"/registrations/{device}:erase"), headers=ADMIN, json={"reason": "r"},
                              timeout=60)
        assert reply.status_code == 503 and reply.json()["error"]["status"] == "UNAVAILABLE", reply.text
        assert "erasure is recorded" in reply.json()["error"]["message"]
        ready = requests.get(f"{base}/readyz", timeout=10)
        assert ready.status_code == 503
        assert any("could not be compacted after an erasure" in reason for reason in ready.json()["reasons"])
        assert str(blocker) not in ready.text and served["data"] not in ready.text
        # Writes wait for the compaction; the erasure itself stands.
        assert requests.post(url(base, "/registrations"), headers=CLIENT, json={"platform": "web"},
                             timeout=10).status_code == 503
        assert requests.get(url(base, f"/registrations/{device}/messages"), headers=CLIENT,
                            timeout=10).status_code == 404
    finally:
        blocker.unlink()
    register(base, platform="web")
    assert requests.get(f"{base}/readyz", timeout=10).status_code == 200
    assert holders(served["data"], device.encode()) == []
