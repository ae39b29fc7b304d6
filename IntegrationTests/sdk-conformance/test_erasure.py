"""Erasure through `ledger serve`: after `POST …/registrations/{token}:erase` no file under the data directory — nor
in a backup, nor the server's log — holds the registration token or its APNs token in any form (text, hex,
base64), after a restart and further writes too; the token is then unknown everywhere; the erasure is an event with
who, when and why; the device is one pseudonym in replays and audits; every checkpoint signed before stays
consistent with every later one and both proof verifiers accept the proofs of messages sent to it."""

import base64
import hashlib
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import quote

import pytest
import requests

from conftest import CLIENT_KEY, PROJECT, _server_ports, restart_server, start_server, stop_and_verify
from ledger_server import _free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "merkle"))
import sealed_form  # noqa: E402
import verify_proof  # noqa: E402

ADMIN = {"Authorization": "Bearer owner"}
AUDITOR = {"Authorization": "Bearer auditor"}
CLIENT = {"x-goog-api-key": CLIENT_KEY}
APNS_TOKEN = "c4" * 16 + "5e" * 16


def percent(value: bytes, lower=False):
    """`value` percent-encoded as in a URL query (RFC 3986: all but A-Z a-z 0-9 - . _ ~), %XX in either case."""
    quoted = quote(value, safe="")
    return (re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), quoted) if lower else quoted).encode()


def encodings(identifier: bytes):
    """The identifier in each encoding a message's content may carry it in, in the order of
    IdentifierEncodings.encodings(of:) (Sources/LedgerCore/IdentifierEncodings.swift)."""
    standard, url_safe = base64.b64encode(identifier), base64.urlsafe_b64encode(identifier)
    return {"raw": identifier, "hex": identifier.hex().encode(), "HEX": identifier.hex().upper().encode(),
            "base64": standard, "base64-unpadded": standard.rstrip(b"="),
            "base64url": url_safe, "base64url-unpadded": url_safe.rstrip(b"="),
            "percent": percent(identifier), "percent-lower": percent(identifier, lower=True),
            "percent-base64": percent(standard), "percent-base64-lower": percent(standard, lower=True),
            "percent-base64-unpadded": percent(standard.rstrip(b"=")),
            "percent-base64-unpadded-lower": percent(standard.rstrip(b"="), lower=True)}


def digests(identifier: bytes):
    """The SHA-1 and SHA-256 of the identifier in hex (both cases) and base64 (standard and URL-safe, padded or
    not): a hash over an identifier is not forgetting it."""
    found = set()
    for digest in (hashlib.sha1(identifier).digest(), hashlib.sha256(identifier).digest()):
        standard, url_safe = base64.b64encode(digest), base64.urlsafe_b64encode(digest)
        found |= {digest.hex().encode(), digest.hex().upper().encode(), standard, standard.rstrip(b"="),
                  url_safe, url_safe.rstrip(b"=")}
    return found


def forms(identifier: bytes):
    """Every form searched for: each encoding of `encodings`, and each form of its digests."""
    return set(encodings(identifier).values()) | digests(identifier)


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
    assert [(e["kind"], e["device"], e["actor"], e["reason"], e["redactedEvents"], e["linkable"]) for e in erasures] == [
        ("erased", pseudonym, "admin", "GDPR Art. 17, ticket 4711", 6, 0)]
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
    # sent event was rewritten, its content forgotten) verifies with both verifiers — its hash recomputed from the
    # commitments that replaced its values (sealed_form.py, outside Swift), not merely vouched for by the tree.
    consistency = requests.get(url(base, f"/ledger:consistency?from={old_size}"), headers=AUDITOR, timeout=10).json()
    assert consistency["fromRoot"] == before.split("\n")[2]
    verify_proof.verify_consistency_proof(consistency, key)
    proof = requests.get(url(base, f"/messages/{by_token}:proof"), headers=AUDITOR, timeout=10).json()
    checked = verify_proof.verify_message_proof(proof, key)
    assert "rewritten by an erasure" not in checked, checked
    sent = next(entry for entry in proof["entries"] if entry["kind"] == "sent")
    event = base64.b64decode(sent["event"])
    assert event[0] == 3 and erased.encode() not in event
    assert sealed_form.record_hash(bytes.fromhex(sent["prevHash"]), event) == bytes.fromhex(sent["hash"])
    replayed = requests.get(url(base, f"/audit/messages/{by_token}"), headers=AUDITOR, timeout=10).json()
    assert replayed["contentForgotten"] == "content forgotten by erasure" and replayed.get("message") in (None, {})
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
        json.dump(proof, file)
    checked = subprocess.run([served["binary"], "verify-proof", file.name, "--public-key", key],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    verified = cli(served, "verify", "--format", "json")
    assert verified.returncode == 0, verified.stdout
    report = json.loads(verified.stdout)
    assert report["erasures"] == 1 and report["redactedEvents"] == 6 and report["linkable"] == 0

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


class LoggedServer:
    """`ledger serve` on a fresh data directory, its output appended to a file outside it across restarts, so that
    the server's log is searched too."""

    def __init__(self, binary):
        self.binary, self.data = binary, tempfile.mkdtemp(prefix="ledger-erasure-forms-")
        self.log = Path(tempfile.mkdtemp(prefix="ledger-erasure-log-")) / "serve.log"
        port = _free_port()
        _server_ports.add(port)
        self.base = f"http://127.0.0.1:{port}"
        self.start()

    def start(self):
        with open(self.log, "ab") as output:
            self.process = subprocess.Popen(
                [self.binary, "serve", "--data", self.data, "--port", self.base.rsplit(":", 1)[1]],
                stdout=output, stderr=subprocess.STDOUT, preexec_fn=lambda: os.umask(0o022))
        deadline = time.time() + 30
        while time.time() < deadline and self.process.poll() is None:
            try:
                if requests.get(f"{self.base}/healthz", timeout=1).status_code == 200:
                    return
            except requests.ConnectionError:
                time.sleep(0.1)
        raise AssertionError(f"the server did not start on {self.data}")

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)

    def restart(self):
        self.stop()
        self.start()


@pytest.fixture(scope="module")
def logged():
    server = LoggedServer(os.environ["LEDGER_BIN"])
    yield server
    stop_and_verify(server.process, server.data, server.binary)


def status(reply):
    return reply.json()["error"]["status"] if reply.status_code >= 400 else None


def test_a_reason_that_holds_an_identifier_is_refused_and_changes_nothing(logged):
    base = logged.base
    apns = secrets.token_bytes(32)
    device, other = register(base, apns=apns.hex()), register(base, apns=secrets.token_bytes(32).hex())
    # A 16-byte APNs token (the shortest accepted) is 22 base64 digits, shorter than a token-shaped run: the
    # lookup of the project's APNs tokens refuses it.
    short_apns = secrets.token_bytes(16)
    register(base, apns=short_apns.hex())
    subscribe(base, device, "reasons")
    erase = url(base, f"/registrations/{device}:erase")
    batch = url(base, "/registrations:batchErase")
    before = requests.get(url(base, "/audit/erasures"), headers=AUDITOR, timeout=10).json()["erasures"]
    shaped_rule = "token-shaped string: 32 or more characters in a row from A-Z a-z 0-9 + / _ -"
    refused = {
        "its own token": (f"asked by {device}", "token being erased"),
        "its own token, base64": (f"asked by {base64.b64encode(device.encode()).decode()}", "token being erased"),
        "its own token, percent-encoded": (f"see /open?t={percent(device.encode()).decode()}", "token being erased"),
        "another live device's token": (f"duplicate of {other}", shaped_rule),
        "an APNs token in hex": (f"phone {apns.hex().upper()}", shaped_rule),
        "another token in base64": (f"see {base64.urlsafe_b64encode(other.encode()).decode()}", shaped_rule),
        "a token-shaped string": ("ref " + "Zm9vYmFyYmF6cXV4" * 2 + "!", shaped_rule),
        "a short APNs token of the project in base64": (
            f"phone {base64.b64encode(short_apns).decode()}", "registration token or APNs token of this project"),
    }
    for case, (reason, rule) in refused.items():
        for reply in (requests.post(erase, headers=ADMIN, json={"reason": reason}, timeout=10),
                      requests.post(batch, headers=ADMIN, json={"registrationTokens": [device], "reason": reason},
                                    timeout=10)):
            assert reply.status_code == 400 and status(reply) == "INVALID_ARGUMENT", f"{case}: {reply.text}"
            error = reply.json()["error"]
            assert error["message"].startswith("reason: reason must not hold") and rule in error["message"], case
            assert error["details"][0]["errorCode"] == "INVALID_ARGUMENT"
            # The refusal names the rule, never the text.
            assert device not in reply.text and other not in reply.text and apns.hex().upper() not in reply.text
    # `ledger erase --reason` (no server holding the ledger) refuses by the same rules.
    logged.stop()
    try:
        for reason, rule in (refused["its own token, base64"], refused["another live device's token"],
                             refused["an APNs token in hex"]):
            erased = cli({"binary": logged.binary, "data": logged.data}, "erase", "--token", device, "--reason", reason)
            assert erased.returncode != 0 and "--reason: reason must not hold" in erased.stderr, erased.stderr
            assert rule in erased.stderr and device not in erased.stderr + erased.stdout
    finally:
        logged.start()
    # Nothing changed: the device is still there, no erasure was recorded.
    assert requests.get(url(base, f"/registrations/{device}/messages"), headers=CLIENT, timeout=10).status_code == 200
    subscribe(base, device, "still-here")
    assert requests.get(url(base, "/audit/erasures"), headers=AUDITOR, timeout=10).json()["erasures"] == before
    # A prose reason is accepted.
    prose = "user request 2026-12-01 ticket #4411, see https://support.example.com/tickets/4411"
    reply = requests.post(erase, headers=ADMIN, json={"reason": prose}, timeout=60)
    assert reply.status_code == 200, reply.text
    erasures = requests.get(url(base, "/audit/erasures"), headers=AUDITOR, timeout=10).json()["erasures"]
    assert [e["reason"] for e in erasures[len(before):]] == [prose]


def test_every_encoding_of_the_identifiers_is_forgotten_everywhere(logged):
    base = logged.base
    apns = secrets.token_bytes(32)
    erased, kept = register(base, apns=apns.hex()), register(base, platform="android")
    subscribe(base, erased, "forms")
    subscribe(base, kept, "forms")
    tokens, apns_forms = encodings(erased.encode()), encodings(apns)
    # Raw APNs bytes are not UTF-8 text: a message cannot carry them; every other form it can.
    sent = {}
    for name, form in tokens.items():
        data = {"token": form.decode(), "link": f"https://app.example/open?device={form.decode()}&x=1"}
        if name != "raw":
            data["apns"] = apns_forms[name].decode()
        sent[name] = [send(base, {"topic": "forms", "data": data}), send(base, {"token": erased, "data": data})]
    # A message naming only the APNs token: its rewrite must still name the device (by its pseudonym), or verify
    # cannot account for the rewritten record.
    only_apns = send(base, {"topic": "forms", "data": {"apns": apns.hex()}})
    # Before the erasure, every form sent is in the ledger's file.
    stored = (Path(logged.data) / PROJECT / "data.mdb").read_bytes()
    missing = [name for name, form in tokens.items() if form not in stored]
    missing += [f"apns {name}" for name, form in apns_forms.items() if name != "raw" and form not in stored]
    assert missing == [], "forms sent but not stored"

    reply = requests.post(url(base, f"/registrations/{erased}:erase"), headers=ADMIN,
                          json={"reason": "user request 2026-12-01 ticket #4411"}, timeout=60)
    assert reply.status_code == 200, reply.text
    pseudonym = reply.json()["pseudonym"]
    verified = cli({"binary": logged.binary, "data": logged.data}, "verify", "--format", "json")
    assert verified.returncode == 0, verified.stdout + verified.stderr

    def nothing_left(where):
        assert holders(where, erased.encode()) == [] and holders(where, apns) == []
        assert holders(where, kept.encode())

    # Forgotten from every file under the data directory.
    nothing_left(logged.data)
    # Each form of an identifier in a message became the same form of the pseudonym (the first form in the order
    # of `encodings` with the same bytes decides), and the messages still replay to their recipients.
    replacements = encodings(pseudonym.encode())
    first = {name: next(n for n, f in tokens.items() if f == tokens[name]) for name in tokens}
    first_apns = {name: next(n for n, f in apns_forms.items() if f == apns_forms[name]) for name in apns_forms}
    every_form = forms(erased.encode()) | forms(apns)
    for name, (by_topic, by_token) in sent.items():
        for message in (by_topic, by_token):
            replay = requests.get(url(base, f"/audit/messages/{message}"), headers=AUDITOR, timeout=10)
            assert replay.status_code == 200 and pseudonym in replay.json()["recipients"], name
            text = json.dumps(replay.json()).encode()
            assert replay.json()["matchesRecord"] and not [f for f in every_form if f in text], name
        # The topic's message keeps its content, the identifiers in it renamed (what a message addressed to the
        # device keeps of its content is the sealed-fields rule's to say; above: none of the identifiers).
        data = requests.get(url(base, f"/audit/messages/{by_topic}"), headers=AUDITOR, timeout=10).json()[
            "message"]["data"]
        assert data["token"] == replacements[first[name]].decode(), name
        assert data["link"] == f"https://app.example/open?device={replacements[first[name]].decode()}&x=1", name
        if name != "raw":
            assert data["apns"] == replacements[first_apns[name]].decode(), name

    data = requests.get(url(base, f"/audit/messages/{only_apns}"), headers=AUDITOR, timeout=10).json()["message"]
    assert data["data"]["apns"] == replacements["hex"].decode()

    # A backup taken after holds none of it; nor does the server's log.
    backups = tempfile.mkdtemp(prefix="ledger-erasure-forms-backup-")
    backup = cli({"binary": logged.binary, "data": logged.data}, "backup", backups)
    assert backup.returncode == 0, backup.stdout + backup.stderr
    nothing_left(backups)
    log = logged.log.read_bytes()
    assert [f for f in forms(erased.encode()) | forms(apns) if f in log] == []

    # After a restart, and after more writes (sends naming the pseudonym's device's topic), still none.
    logged.restart()
    nothing_left(logged.data)
    subscribe(base, kept, "more")
    send(base, {"topic": "forms", "data": {"k": "v"}})
    send(base, {"token": kept, "data": {"k": "v"}})
    nothing_left(logged.data)
    logged.stop()
    log = logged.log.read_bytes()
    assert [f for f in forms(erased.encode()) | forms(apns) if f in log] == []
    logged.start()
