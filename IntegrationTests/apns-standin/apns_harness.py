"""A stand-in APNs and a `ledger serve` whose project pushes to it, for the provider's end-to-end tests."""

import base64
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sdk-conformance"))
from ledger_server import _free_port, make_certificates  # noqa: E402

TEAM, KEY_ID, TOPIC = "ABCDE12345", "KEY1234567", "com.example.app"
PROJECT = "shop"
ADMIN, AUDITOR, CLIENT = "admin-secret", "auditor-secret", "client-secret"
HERE = Path(__file__).resolve().parent


def _b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def provider_token(key, iat=None, kid=KEY_ID, team=TEAM):
    """An ES256 JWT as APNs wants it: header {alg, kid}, claims {iss, iat}, signature r ‖ s."""
    header = _b64url(json.dumps({"alg": "ES256", "kid": kid}).encode())
    claims = _b64url(json.dumps({"iss": team, "iat": int(iat if iat is not None else time.time())}).encode())
    r, s = decode_dss_signature(key.sign(f"{header}.{claims}".encode(), ec.ECDSA(hashes.SHA256())))
    return f"{header}.{claims}.{_b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def _hash(secret):
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()


class StandIn:
    """IntegrationTests/apns-standin/standin.py on free ports, with its own CA and team key."""

    def __init__(self, directory, max_streams=1000, token_update_interval=1200, team_key=None, summary_only=False,
                 delay=0, max_channels=10000):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.tls = make_certificates(self.directory, name="apns")
        self.team_key = team_key or ec.generate_private_key(ec.SECP256R1())
        public = self.directory / "team.pub.pem"
        public.write_bytes(self.team_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        self.port, control = _free_port(), _free_port()
        self.base, self.control = f"https://127.0.0.1:{self.port}", f"http://127.0.0.1:{control}"
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "standin.py"), "--cert", self.tls["cert"], "--key", self.tls["key"],
             "--team-key", str(public), "--team-id", TEAM, "--key-id", KEY_ID, "--topic", TOPIC,
             "--port", str(self.port), "--control-port", str(control), "--max-streams", str(max_streams),
             "--token-update-interval", str(token_update_interval), "--delay", str(delay), "--max-channels", str(max_channels),
             "--exit-with-parent"]
            + (["--summary-only"] if summary_only else []),
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while True:
            try:
                if httpx.get(self.control + "/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert self.process.poll() is None and time.time() < deadline, "the stand-in did not start"
            time.sleep(0.1)

    def key_file(self, key=None):
        """The team key as Apple issues it (PKCS#8 PEM, mode 0600), or `key` in its place."""
        path = self.directory / f"AuthKey_{os.urandom(3).hex()}.p8"
        path.write_bytes((key or self.team_key).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        path.chmod(0o600)
        return str(path)

    def requests(self):
        return httpx.get(self.control + "/requests").json()

    def stats(self):
        return httpx.get(self.control + "/stats").json()

    def script(self, token, replies, sticky=False):
        response = httpx.post(self.control + "/script", json={"token": token, "replies": replies, "sticky": sticky})
        assert response.status_code == 200, response.text

    def script_broadcasts(self, replies, sticky=False):
        """The next broadcasts get `replies` in order (the last for ever when sticky): `{"status", "reason",
        "retryAfter"}`, or `{"drop": True}` for no answer; `[]` ends the script."""
        response = httpx.post(self.control + "/script", json={"broadcast": True, "replies": replies, "sticky": sticky})
        assert response.status_code == 200, response.text

    def goaway(self):
        httpx.post(self.control + "/goaway", json={})

    def leave_channel_requests_unanswered(self, count):
        """The next `count` channel-management requests are carried out and never answered."""
        response = httpx.post(self.control + "/unanswered-channel-requests", json={"count": count})
        assert response.status_code == 200, response.text

    def reset(self):
        httpx.post(self.control + "/reset", json={})

    def wait_for(self, predicate, timeout=30, what="the stand-in's requests"):
        """The recorded requests once `predicate(requests)` holds."""
        deadline = time.time() + timeout
        while True:
            requests = self.requests()
            if predicate(requests):
                return requests
            assert time.time() < deadline, f"{what}: timed out with {len(requests)} requests"
            time.sleep(0.05)

    def stop(self):
        self.process.kill()
        self.process.wait(timeout=10)


class Ledger:
    """`ledger serve` with project `shop` pushing to the stand-in (its CA as the APNs `caFile`)."""

    def __init__(self, standin, directory, key_file=None, data=None, apns=None, limits=None, project=None):
        self.binary = os.environ["LEDGER_BIN"]
        self.directory = Path(directory)
        self.data = data or tempfile.mkdtemp(prefix="ledger-apns-")
        settings = {"teamId": TEAM, "keyId": KEY_ID, "keyFile": key_file or standin.key_file(), "topic": TOPIC,
                    "endpoint": standin.base, "sandboxEndpoint": standin.base, "caFile": standin.tls["ca"]}
        settings.update(apns or {})
        self.config = self.directory / f"config-{os.urandom(3).hex()}.json"
        config = {"projects": {PROJECT: {
            "adminKeys": [_hash(ADMIN)], "auditorKeys": [_hash(AUDITOR)], "clientApiKeys": [_hash(CLIENT)],
            "apns": settings, **(project or {})}}}
        if limits:
            config["limits"] = limits
        self.config.write_text(json.dumps(config))
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.start()

    def start(self):
        self.log = self.directory / f"serve-{os.urandom(3).hex()}.log"
        self.process = subprocess.Popen(
            [self.binary, "serve", "--config", str(self.config), "--data", self.data, "--port", str(self.port)],
            stdout=open(self.log, "wb"), stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while True:
            try:
                if httpx.get(self.base + "/healthz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert self.process.poll() is None, self.log.read_text()
            assert time.time() < deadline, "the server did not start"
            time.sleep(0.1)

    def kill(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)

    def verify(self):
        result = subprocess.run([self.binary, "verify", "--data", self.data, "--project", PROJECT],
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr

    def url(self, path):
        return f"{self.base}/v1/projects/{PROJECT}{path}"

    def register(self, apns_token=None, sandbox=False, platform="ios", client=httpx):
        body = {"platform": platform}
        if apns_token:
            body["apnsToken"] = apns_token
            body["apnsSandbox"] = sandbox
        response = client.post(self.url("/registrations"), headers={"x-goog-api-key": CLIENT}, json=body)
        assert response.status_code == 200, response.text
        return response.json()["token"]

    def subscribe(self, token, topic):
        response = httpx.post(self.url(f"/registrations/{token}/topicSubscriptions"), params={"topicName": topic},
                              headers={"x-goog-api-key": CLIENT})
        assert response.status_code == 200, response.text

    def batch_add(self, tokens, topic):
        for start in range(0, len(tokens), 1000):
            response = httpx.post(f"{self.base}/iid/v1:batchAdd", headers={"Authorization": f"Bearer {ADMIN}",
                                                                        "project_id": PROJECT},
                                  json={"to": f"/topics/{topic}", "registration_tokens": tokens[start:start + 1000]},
                                  timeout=60)
            assert response.status_code == 200, response.text

    def send(self, message, expect=200):
        response = httpx.post(self.url("/messages:send"), headers={"Authorization": f"Bearer {ADMIN}"},
                              json={"message": message}, timeout=30)
        assert response.status_code == expect, response.text
        return response.json()

    def audit_instance(self, token):
        response = httpx.get(self.url(f"/audit/instances/{token}"), headers={"Authorization": f"Bearer {AUDITOR}"})
        assert response.status_code == 200, response.text
        return response.json()

    def audit_message(self, message_id, **params):
        response = httpx.get(self.url(f"/audit/messages/{message_id}"), params=params,
                             headers={"Authorization": f"Bearer {AUDITOR}"})
        assert response.status_code == 200, response.text
        return response.json()

    def poll(self, token):
        """The device's inbox (the stream's payloads), by long poll without waiting."""
        response = httpx.get(self.url(f"/registrations/{token}/messages"), params={"waitSeconds": "0"},
                             headers={"x-goog-api-key": CLIENT})
        assert response.status_code == 200, response.text
        return response.json()

    def cli(self, *args):
        """A `ledger` subcommand on this ledger's data (read-only ones work while it serves): its stdout."""
        result = subprocess.run([self.binary, *args, "--data", self.data, "--project", PROJECT],
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    def events(self, kind=None):
        result = subprocess.run([self.binary, "log", "--data", self.data, "--project", PROJECT],
                                capture_output=True, text=True, check=True)
        events = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
        return [e for e in events if kind is None or e["kind"] == kind]


def device_token(index):
    return f"{index + 1:064x}"


def files_holding(directory, token_hex):
    """The files under `directory` holding the token (an APNs or ActivityKit token) in any of its forms: hex in either
    case, the raw bytes, base64 and base64url without padding."""
    raw = bytes.fromhex(token_hex)
    needles = [token_hex.lower().encode(), token_hex.upper().encode(), raw, base64.b64encode(raw).rstrip(b"="),
               base64.urlsafe_b64encode(raw).rstrip(b"=")]
    found = []
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                data = handle.read()
            if any(needle in data for needle in needles):
                found.append(path)
    return found
