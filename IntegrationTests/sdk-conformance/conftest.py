"""Fixtures: the built `ledger serve` on a free port with a fresh data directory, and firebase-admin
apps pointed at it (patched URLs, a credential that sends `Bearer owner`)."""

import os
import subprocess
import tempfile
from urllib.parse import urlsplit

import firebase_admin
import google.oauth2.credentials
import pytest
import requests
from firebase_admin import credentials, messaging

from ledger_server import _server_ports, make_certificates, restart_server, start_server, stop_and_verify  # noqa: F401 (tests import these from here)
from openapi_contract import Contract, checking_responses

PROJECT = "demo-project"
CLIENT_KEY = "dev-client-key"


class BearerCredential(credentials.Base):
    """A credential that sends a fixed bearer token (`owner` is the dev admin key)."""

    def __init__(self, token):
        self._token = token

    def get_credential(self):
        return google.oauth2.credentials.Credentials(token=self._token)


@pytest.fixture(scope="session", autouse=True)
def contract():
    """Every response of a server started here, whether to the SDK or to a raw request, is checked against
    docs/openapi.yaml; at the end, every documented operation must have been exercised."""
    with checking_responses(Contract(), lambda url: urlsplit(url).port in _server_ports) as checker:
        yield checker
    if os.environ.get("LEDGER_CONTRACT_COVERAGE") == "0":
        return  # a pass over some files only (run.sh's HTTPS pass): the full pass checks the coverage
    # A single node answers the cluster's routes 404: their 2xx is the cluster suite's to exercise (IntegrationTests/cluster
    # checks its responses against the same contract). The broadcast channel routes need a project with APNs: the
    # APNs stand-in's suite exercises them (IntegrationTests/apns-standin/test_ledger_broadcast.py, same contract).
    elsewhere = {"cluster", "broadcast"}
    missing_success = sorted(
        (template, method) for template, method in checker.operations()
        if not elsewhere & set(checker.spec["paths"][template][method].get("tags", []))
        and not any(seen[:2] == (template, method) and seen[2].startswith("2") for seen in checker.seen))
    assert not missing_success, f"documented operations never answered 2xx in the suite: {missing_success}"
    operations = checker.spec["paths"]
    missing_errors = sorted(
        (template, method) for template, method in checker.operations()
        if "broadcast" not in operations[template][method].get("tags", [])
        and any(code.startswith("4") for code in operations[template][method]["responses"])
        and not any(seen[:2] == (template, method) and seen[2].startswith("4") for seen in checker.seen))
    assert not missing_errors, f"documented operations never answered 4xx in the suite: {missing_errors}"


@pytest.fixture(scope="session")
def server(contract):
    """The suite's dev-mode server; over HTTPS with a test CA when LEDGER_TLS=1 (run.sh's second pass runs the
    SDK and delivery tests so), every client here then trusting that CA through REQUESTS_CA_BUNDLE."""
    tls = None
    if os.environ.get("LEDGER_TLS") == "1":
        tls = make_certificates(tempfile.mkdtemp(prefix="ledger-tls-"))
        os.environ["REQUESTS_CA_BUNDLE"] = tls["ca"]
    process, base, data, binary = start_server(tls=tls)
    yield {"base": base, "data": data, "binary": binary}
    stop_and_verify(process, data, binary)


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
