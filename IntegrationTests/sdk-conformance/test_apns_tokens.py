"""APNs through `ledger serve`, the ledger's side: a registration's APNs device token set at registration, replaced
and cleared (each an event, in the instance audit with when it was held), refused on registrations that are not
ios and in every malformed shape (nothing appended), and the config's per-project `apns` read strictly at start."""

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from conftest import CLIENT_KEY, PROJECT, start_server, stop_and_verify

ADMIN = {"Authorization": "Bearer owner"}
AUDITOR = {"Authorization": "Bearer auditor"}
CLIENT = {"x-goog-api-key": CLIENT_KEY}
APNS_TOKEN = "a1" * 32
OTHER_TOKEN = "B2" * 32


@pytest.fixture(scope="module")
def served():
    process, base, data, binary = start_server()
    yield {"base": base, "data": data, "binary": binary}
    stop_and_verify(process, data, binary)


def _url(base, path=""):
    return f"{base}/v1/projects/{PROJECT}/registrations{path}"


def _register(base, body):
    return requests.post(_url(base), headers=CLIENT, json=body, timeout=10)


def _events(served, kind=None):
    """The project's log as `ledger log --format json` lines, decoded (read beside the running server)."""
    result = subprocess.run(
        [served["binary"], "log", "--data", served["data"], "--project", PROJECT, "--format", "json"],
        capture_output=True, text=True, check=True)
    events = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    return [event for event in events if kind is None or event["kind"] == kind]


def _audit(base, token):
    response = requests.get(f"{base}/v1/projects/{PROJECT}/audit/instances/{token}", headers=AUDITOR, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_token_given_at_registration_is_an_event_in_the_same_commit_and_in_the_audit(served):
    response = _register(served["base"], {"platform": "ios", "apnsToken": APNS_TOKEN})
    assert response.status_code == 200, response.text
    token = response.json()["token"]
    registered = [e for e in _events(served, "registered") if e["token"] == token]
    set_events = [e for e in _events(served, "apnsTokenSet") if e["token"] == token]
    assert len(registered) == 1 and len(set_events) == 1
    assert set_events[0]["apnsToken"] == APNS_TOKEN and set_events[0]["apnsSandbox"] is False
    assert set_events[0]["seq"] == registered[0]["seq"] + 1
    assert set_events[0]["requestId"] == registered[0]["requestId"]
    held = _audit(served["base"], token)["apnsTokens"]
    assert held == [{"apnsToken": APNS_TOKEN, "sandbox": False, "fromSeq": set_events[0]["seq"],
                     "fromTime": held[0]["fromTime"]}]


def test_put_replaces_delete_clears_and_the_audit_shows_which_token_when(served):
    base = served["base"]
    token = _register(base, {"platform": "ios", "apnsToken": APNS_TOKEN}).json()["token"]
    put = requests.put(_url(base, f"/{token}/apnsToken"), headers=CLIENT,
                       json={"apnsToken": OTHER_TOKEN, "apnsSandbox": True}, timeout=10)
    assert put.status_code == 200, put.text
    assert put.json() == {"apnsToken": OTHER_TOKEN.lower(), "apnsSandbox": True}
    before = len(_events(served))
    # The token it holds already: accepted, nothing appended.
    again = requests.put(_url(base, f"/{token}/apnsToken"), headers=ADMIN,
                         json={"apnsToken": OTHER_TOKEN.lower(), "apnsSandbox": True}, timeout=10)
    assert again.status_code == 200 and len(_events(served)) == before
    cleared = requests.delete(_url(base, f"/{token}/apnsToken"), headers=CLIENT, timeout=10)
    assert cleared.status_code == 200 and cleared.json() == {}
    assert requests.delete(_url(base, f"/{token}/apnsToken"), headers=CLIENT, timeout=10).status_code == 200
    assert len(_events(served)) == before + 1
    clear_event = [e for e in _events(served, "apnsTokenCleared") if e["token"] == token]
    assert [e["reason"] for e in clear_event] == ["deleted by the device"]
    held = _audit(base, token)["apnsTokens"]
    assert [(h["apnsToken"], h["sandbox"]) for h in held] == [(APNS_TOKEN, False), (OTHER_TOKEN.lower(), True)]
    assert held[0]["untilSeq"] == held[1]["fromSeq"]
    assert held[1]["untilSeq"] == clear_event[0]["seq"]
    # The admin may set it too; its clearing says the server did it.
    assert requests.put(_url(base, f"/{token}/apnsToken"), headers=ADMIN, json={"apnsToken": APNS_TOKEN},
                        timeout=10).status_code == 200
    assert requests.delete(_url(base, f"/{token}/apnsToken"), headers=ADMIN, timeout=10).status_code == 200
    assert [e["reason"] for e in _events(served, "apnsTokenCleared") if e["token"] == token][-1] == \
        "deleted by the server"
    # At a seq in the past, the audit still lists every token with its interval: what it held then is there.
    at = held[0]["fromSeq"]
    past = requests.get(f"{base}/v1/projects/{PROJECT}/audit/instances/{token}", params={"atSeq": at},
                        headers=AUDITOR, timeout=10).json()
    assert any(h["fromSeq"] <= at < h.get("untilSeq", 1 << 62) and h["apnsToken"] == APNS_TOKEN
               for h in past["apnsTokens"])


def test_unregistering_ends_the_apns_token_with_the_registration(served):
    base = served["base"]
    token = _register(base, {"platform": "ios", "apnsToken": APNS_TOKEN}).json()["token"]
    assert requests.delete(_url(base, f"/{token}"), headers=CLIENT, timeout=10).status_code == 200
    audit = _audit(base, token)
    assert audit["apnsTokens"][0]["untilSeq"] == audit["registrations"][0]["untilSeq"]
    # Gone with the registration: setting one now is 404 and appends nothing.
    before = len(_events(served))
    response = requests.put(_url(base, f"/{token}/apnsToken"), headers=CLIENT, json={"apnsToken": APNS_TOKEN},
                            timeout=10)
    assert response.status_code == 404 and response.json()["error"]["status"] == "NOT_FOUND"
    assert len(_events(served)) == before


@pytest.mark.parametrize("body, field", [
    ({"platform": "android", "apnsToken": APNS_TOKEN}, "apnsToken"),
    ({"apnsToken": APNS_TOKEN}, "apnsToken"),
    ({"platform": "ios", "apnsToken": "a1" * 15}, "apnsToken"),
    ({"platform": "ios", "apnsToken": "a1" * 201}, "apnsToken"),
    ({"platform": "ios", "apnsToken": "a1" * 32 + "a"}, "apnsToken"),
    ({"platform": "ios", "apnsToken": "zz" * 32}, "apnsToken"),
    ({"platform": "ios", "apnsToken": 12345}, "apnsToken"),
    ({"platform": "ios", "apnsToken": None}, "apnsToken"),
    ({"platform": "ios", "apnsToken": APNS_TOKEN, "apnsSandbox": "yes"}, "apnsSandbox"),
    ({"platform": "ios", "apnsSandbox": True}, "apnsSandbox"),
    ({"platform": "ios", "apnsToken": APNS_TOKEN, "apnsTokens": APNS_TOKEN}, "apnsTokens"),
])
def test_a_malformed_or_misplaced_token_at_registration_is_400_and_appends_nothing(served, body, field):
    before = len(_events(served))
    response = _register(served["base"], body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert field in error["message"], error
    assert len(_events(served)) == before


@pytest.mark.parametrize("platform", ["android", "web", None])
def test_setting_a_token_on_a_registration_that_is_not_ios_is_400_and_appends_nothing(served, platform):
    base = served["base"]
    token = _register(base, {"platform": platform} if platform else {}).json()["token"]
    before = len(_events(served))
    response = requests.put(_url(base, f"/{token}/apnsToken"), headers=CLIENT, json={"apnsToken": APNS_TOKEN},
                            timeout=10)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert "ios" in response.json()["error"]["message"]
    assert len(_events(served)) == before


@pytest.mark.parametrize("body", [
    {}, {"apnsSandbox": True}, {"apnsToken": "a1" * 8}, {"apnsToken": APNS_TOKEN, "extra": 1},
    {"apnsToken": APNS_TOKEN, "apnsSandbox": 1}, [APNS_TOKEN],
])
def test_a_malformed_put_is_400_and_changes_nothing(served, body):
    base = served["base"]
    token = _register(base, {"platform": "ios", "apnsToken": APNS_TOKEN}).json()["token"]
    before = len(_events(served))
    response = requests.put(_url(base, f"/{token}/apnsToken"), headers=CLIENT, json=body, timeout=10)
    assert response.status_code == 400, response.text
    assert len(_events(served)) == before
    assert [h["apnsToken"] for h in _audit(base, token)["apnsTokens"]] == [APNS_TOKEN]


def test_the_apns_token_routes_need_the_registration_and_a_key(served):
    base = served["base"]
    unknown = "c" + "x" * 40 + ":APA91b" + "y" * 100
    assert requests.put(_url(base, f"/{unknown}/apnsToken"), headers=CLIENT, json={"apnsToken": APNS_TOKEN},
                        timeout=10).status_code == 404
    assert requests.delete(_url(base, f"/{unknown}/apnsToken"), headers=CLIENT, timeout=10).status_code == 404
    token = _register(base, {"platform": "ios"}).json()["token"]
    assert requests.put(_url(base, f"/{token}/apnsToken"), json={"apnsToken": APNS_TOKEN},
                        timeout=10).status_code == 401
    assert requests.put(_url(base, f"/{token}/apnsToken"), headers=AUDITOR, json={"apnsToken": APNS_TOKEN},
                        timeout=10).status_code == 403


# The config's `apns`, read strictly at start.

def _p256_key(directory, mode=0o600, pkcs8=True, curve=None):
    key = ec.generate_private_key(curve or ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM,
                            serialization.PrivateFormat.PKCS8 if pkcs8 else serialization.PrivateFormat.TraditionalOpenSSL,
                            serialization.NoEncryption())
    path = Path(directory) / f"AuthKey_{os.urandom(4).hex()}.p8"
    path.write_bytes(pem)
    path.chmod(mode)
    return str(path)


def _config(directory, apns):
    project = {"adminKeys": ["sha256:" + "1" * 64], "clientApiKeys": ["sha256:" + "2" * 64]}
    if apns is not None:
        project["apns"] = apns
    path = Path(directory) / "config.json"
    path.write_text(json.dumps({"projects": {"shop": project}}))
    return str(path)


def _serve(config):
    binary = os.environ["LEDGER_BIN"]
    data = tempfile.mkdtemp(prefix="ledger-apns-config-")
    return subprocess.run([binary, "serve", "--data", data, "--port", "0", "--config", config],
                          capture_output=True, text=True, timeout=10)


def _apns(directory, **changes):
    settings = {"teamId": "ABCDE12345", "keyId": "KEY1234567", "keyFile": _p256_key(directory),
                "topic": "com.example.app"}
    settings.update(changes)
    return {key: value for key, value in settings.items() if value is not None}


def _refused(directory, apns, expected):
    result = _serve(_config(directory, apns))
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    for part in expected:
        assert part in output, output
    return output


def test_a_good_apns_section_starts_the_server(tmp_path):
    config = _config(tmp_path, _apns(tmp_path, endpoint="https://127.0.0.1:9", caFile=None))
    process, base, data, binary = start_server(["--config", config])
    try:
        assert requests.get(f"{base}/healthz", timeout=5).status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.parametrize("changes, expected", [
    ({"teamID": "ABCDE12345"}, ["projects.shop.apns.teamID", "unknown key"]),
    ({"teamId": None}, ["projects.shop.apns.teamId", "required"]),
    ({"keyId": None}, ["projects.shop.apns.keyId", "required"]),
    ({"topic": None}, ["projects.shop.apns.topic", "required"]),
    ({"keyFile": None}, ["projects.shop.apns.keyFile", "required"]),
    ({"teamId": "abcde12345"}, ["projects.shop.apns.teamId"]),
    ({"keyId": "KEY123"}, ["projects.shop.apns.keyId"]),
    ({"topic": "com.example app"}, ["projects.shop.apns.topic"]),
    ({"endpoint": "http://api.push.apple.com"}, ["projects.shop.apns.endpoint", "https"]),
    ({"sandboxEndpoint": "https://host/3/device"}, ["projects.shop.apns.sandboxEndpoint"]),
    ({"keyFile": "/nonexistent/AuthKey.p8"}, ["projects.shop.apns.keyFile", "/nonexistent/AuthKey.p8"]),
    ({"teamId": 12345}, ["projects.shop.apns.teamId"]),
])
def test_a_bad_apns_section_refuses_the_start_naming_the_key(tmp_path, changes, expected):
    _refused(tmp_path, _apns(tmp_path, **changes), expected)


def test_a_key_file_others_can_read_or_that_is_not_a_p256_pkcs8_key_refuses_the_start(tmp_path):
    readable = _p256_key(tmp_path, mode=0o644)
    _refused(tmp_path, _apns(tmp_path, keyFile=readable), ["projects.shop.apns.keyFile", "read by others"])
    for key in (_p256_key(tmp_path, pkcs8=False), _p256_key(tmp_path, curve=ec.SECP384R1())):
        _refused(tmp_path, _apns(tmp_path, keyFile=key), ["projects.shop.apns.keyFile", "P-256"])
    garbage = Path(tmp_path) / "garbage.p8"
    garbage.write_text("-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n")
    garbage.chmod(0o600)
    _refused(tmp_path, _apns(tmp_path, keyFile=str(garbage)), ["projects.shop.apns.keyFile", "P-256"])
    # Not a regular file: a directory, and a FIFO (whose read would block the start), refused before any read.
    unreadable = Path(tmp_path) / "AuthKey_dir.p8"
    unreadable.mkdir(mode=0o700)
    _refused(tmp_path, _apns(tmp_path, keyFile=str(unreadable)), ["projects.shop.apns.keyFile", "not a regular file"])
    fifo = Path(tmp_path) / "AuthKey_fifo.p8"
    os.mkfifo(fifo, 0o600)
    _refused(tmp_path, _apns(tmp_path, keyFile=str(fifo)), ["projects.shop.apns.keyFile", "not a regular file"])
    missing = Path(tmp_path) / "AuthKey_missing.p8"
    _refused(tmp_path, _apns(tmp_path, keyFile=str(missing)), ["projects.shop.apns.keyFile", "cannot be read"])


def test_a_ca_file_that_holds_no_certificate_refuses_the_start(tmp_path):
    bogus = Path(tmp_path) / "roots.pem"
    bogus.write_text("not a certificate\n")
    _refused(tmp_path, _apns(tmp_path, caFile=str(bogus)), ["projects.shop.apns.caFile"])


def test_a_devices_own_apns_token_changes_share_its_budget_of_changes(served):
    """Every change is an event, and the client key ships in every app: a device that keeps swapping its APNs
    token is held to its changes per minute (60), as its subscriptions are; the admin is not."""
    base = served["base"]
    token = _register(base, {"platform": "ios"}).json()["token"]
    tokens = [APNS_TOKEN, OTHER_TOKEN]
    # The budget refills at one a second: changes until the first refusal number 60 plus about one for every
    # second the loop took (a loaded machine may take several), never unlimited.
    started = time.monotonic()
    accepted = 0
    while True:
        response = requests.put(_url(base, f"/{token}/apnsToken"), headers=CLIENT,
                                json={"apnsToken": tokens[accepted % 2]}, timeout=10)
        if response.status_code != 200:
            break
        accepted += 1
        assert accepted <= 200, "a device's changes were never refused"
    refused = response
    assert 60 <= accepted <= 60 + int(time.monotonic() - started) + 1, accepted
    # One event per accepted change (the tokens alternate), none for the refused one.
    assert len([e for e in _events(served, "apnsTokenSet") if e["token"] == token]) == accepted
    before = len(_events(served))
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert refused.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert requests.delete(_url(base, f"/{token}/apnsToken"), headers=CLIENT, timeout=10).status_code == 429
    assert len(_events(served)) == before
    assert requests.put(_url(base, f"/{token}/apnsToken"), headers=ADMIN, json={"apnsToken": APNS_TOKEN},
                        timeout=10).status_code == 200
