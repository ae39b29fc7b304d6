"""Fixtures: the built `ledger serve` on a free port with a fresh data directory, and firebase-admin
apps pointed at it (patched URLs, a credential that sends `Bearer owner`)."""

import os
import socket
import subprocess
import tempfile
import time

import firebase_admin
import google.oauth2.credentials
import pytest
import requests
from firebase_admin import credentials, messaging

PROJECT = "demo-project"
CLIENT_KEY = "dev-client-key"


class BearerCredential(credentials.Base):
    """A credential that sends a fixed bearer token (`owner` is the dev admin key)."""

    def __init__(self, token):
        self._token = token

    def get_credential(self):
        return google.oauth2.credentials.Credentials(token=self._token)


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def server():
    binary = os.environ.get("LEDGER_BIN")
    assert binary and os.path.exists(binary), "set LEDGER_BIN to the built ledger executable"
    data = tempfile.mkdtemp(prefix="ledger-sdk-")
    port = _free_port()
    process = subprocess.Popen(
        [binary, "serve", "--data", data, "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while True:
        try:
            if requests.get(f"{base}/healthz", timeout=1).status_code == 200:
                break
        except requests.ConnectionError:
            pass
        assert time.time() < deadline, "the server did not start"
        assert process.poll() is None, process.stdout.read().decode()
        time.sleep(0.1)
    yield {"base": base, "data": data, "binary": binary}
    process.terminate()
    process.wait(timeout=10)
    # After the whole suite, the server's ledger must be sound: chain intact, projections equal a rebuild.
    verify = subprocess.run([binary, "verify", "--data", data], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def _app(server, token, name):
    messaging._MessagingService.FCM_URL = server["base"] + "/v1/projects/{0}/messages:send"
    messaging._MessagingService.IID_URL = server["base"]
    app = firebase_admin.initialize_app(BearerCredential(token), {"projectId": PROJECT}, name=name)
    service = messaging._get_messaging_service(app)
    service._fcm_topic_url = f"{server['base']}/v1/projects/{PROJECT}/registrations"
    return app


@pytest.fixture(scope="session")
def app(server):
    return _app(server, "owner", "conformance")


@pytest.fixture(scope="session")
def wrong_app(server):
    return _app(server, "not-a-key", "wrong-credential")


@pytest.fixture(scope="session")
def auditor_app(server):
    return _app(server, "auditor", "auditor-credential")


@pytest.fixture
def register(server):
    """Registers a device through the device API and returns its token."""

    def register_device(platform="ios"):
        reply = requests.post(
            f"{server['base']}/v1/projects/{PROJECT}/registrations",
            headers={"x-goog-api-key": CLIENT_KEY}, json={"platform": platform, "appId": "com.example"})
        assert reply.status_code == 200, reply.text
        return reply.json()["token"]

    return register_device


@pytest.fixture
def log_lines(server):
    """The ledger's events so far, read with `ledger log` while the server runs."""

    def read():
        out = subprocess.run(
            [server["binary"], "log", "--data", server["data"]], check=True, capture_output=True, text=True).stdout
        return [line for line in out.splitlines() if line]

    return read
