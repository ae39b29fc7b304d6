"""The console's browser tests: a server loaded with a scenario, and a headless chromium per test that
fails the test on any console error (a CSP violation included) and saves a screenshot."""

import os
import pathlib
import subprocess
import sys
import tempfile
import time

import pytest
import requests
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "sdk-conformance"))
from ledger_server import start_server, stop_and_verify  # noqa: E402

PROJECT = "demo-project"
ADMIN = {"Authorization": "Bearer owner"}
CLIENT = {"x-goog-api-key": "dev-client-key"}
HOSTILE = "<script>alert(1)</script>"
# Where each test's screenshot goes: IntegrationTests/console-browser/screenshots/ (ignored by git), or the directory
# CONSOLE_SCREENSHOTS names (`make screenshots` refreshes the ones docs/compliance.md shows, in docs/console/).
SCREENSHOTS = pathlib.Path(
    os.environ.get("CONSOLE_SCREENSHOTS") or pathlib.Path(__file__).resolve().parent / "screenshots")


def _post(base, path, body, headers):
    reply = requests.post(f"{base}{path}", json=body, headers=headers, timeout=10)
    assert reply.status_code == 200, reply.text
    return reply.json()


def _register(base, app_id="com.example.weather"):
    return _post(base, f"/v1/projects/{PROJECT}/registrations", {"platform": "ios", "appId": app_id}, CLIENT)["token"]


def _batch(base, action, topic, tokens):
    _post(base, f"/iid/v1:{action}", {"to": f"/topics/{topic}", "registration_tokens": tokens}, ADMIN)


def _send(base, message):
    return _post(base, f"/v1/projects/{PROJECT}/messages:send", {"message": message}, ADMIN)["name"].rsplit("/", 1)[1]


def _head_time(base):
    """The time of the newest event, from the audit log (the last JSON line)."""
    reply = requests.get(f"{base}/v1/projects/{PROJECT}/audit/events?limit=10000", headers=ADMIN, timeout=10)
    return reply.text.strip().splitlines()[-1].split('"time":"')[1].split('"')[0]


@pytest.fixture(scope="session")
def scenario():
    """The guide's scenario and a few more: four devices on TopicA/B/C and weather, a condition message, then
    subscription changes after it; a device with a hostile app id; acknowledgements."""
    process, base, data, binary = start_server()
    alice, bob, carol, dave = (_register(base) for _ in range(4))
    mallory = _register(base, app_id=HOSTILE)
    _batch(base, "batchAdd", "weather", [alice, bob, dave])
    _batch(base, "batchAdd", "TopicA", [alice, bob, carol])
    _batch(base, "batchAdd", "TopicB", [alice])
    _batch(base, "batchAdd", "TopicC", [carol])
    weather = _send(base, {"topic": "weather", "notification": {"title": "Storm", "body": HOSTILE}})
    condition = _send(base, {
        "condition": "'TopicA' in topics && ('TopicB' in topics || 'TopicC' in topics)",
        "data": {"score": "5x1"}})
    time.sleep(0.05)
    at_send = _head_time(base)
    time.sleep(0.05)
    # Later: bob joins TopicB (he would match now), carol leaves TopicA (she would not).
    _batch(base, "batchAdd", "TopicB", [bob])
    _batch(base, "batchRemove", "TopicA", [carol])
    _batch(base, "batchAdd", "weather", [mallory])
    # Alice acknowledges what she has.
    inbox = requests.get(f"{base}/v1/projects/{PROJECT}/registrations/{alice}/messages", headers=CLIENT, timeout=10)
    _post(base, f"/v1/projects/{PROJECT}/registrations/{alice}/messages:ack", {"through": inbox.json()["cursor"]},
          CLIENT)
    yield {
        "base": base, "data": data, "binary": binary, "alice": alice, "bob": bob, "carol": carol, "dave": dave,
        "mallory": mallory, "weather": weather, "condition": condition, "at_send": at_send,
    }
    stop_and_verify(process, data, binary)


@pytest.fixture
def browser(request):
    downloads = tempfile.mkdtemp(prefix="console-downloads-")
    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(argument)
    options.binary_location = "/usr/bin/chromium"
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    options.add_experimental_option("prefs", {
        "download.default_directory": downloads, "download.prompt_for_download": False})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.downloads = downloads
    yield driver
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SCREENSHOTS / f"{request.node.name}.png"))
    errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    driver.quit()
    assert not errors, f"console errors: {errors}"


def ledger(scenario, *arguments):
    return subprocess.run(
        [scenario["binary"], *arguments, "--data", scenario["data"]], capture_output=True, text=True, check=False)
